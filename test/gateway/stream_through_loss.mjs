// One streaming completion with the official OpenAI client through exo's
// gateway, for a test that kills a node while it streams: prints
// "streaming" when the first text arrives (the test's cue), then checks that
// the whole text equals the engine's (temperature 0) and that the stream
// ended with a finish_reason.
//
//   node stream_through_loss.mjs TOOLS_DIR BASE_URL EXPECTED_JSON
//
// EXPECTED_JSON: {"model", "prompt", "max_tokens", "text"}. Exit 0 and
// "stream right" when it holds, 1 with the reason otherwise.
import path from "node:path";
import { pathToFileURL } from "node:url";

const [toolsDir, baseURL, expectedJson] = process.argv.slice(2);
const expected = JSON.parse(expectedJson);
const { default: OpenAI } = await import(
  pathToFileURL(path.join(toolsDir, "node_modules/openai/index.mjs")).href);

const client = new OpenAI({ baseURL, apiKey: "none", maxRetries: 0,
                            timeout: 300000 });
let text = "", finish = null, cued = false;
try {
  const stream = await client.completions.create({
    model: expected.model, prompt: expected.prompt,
    max_tokens: expected.max_tokens, temperature: 0, stream: true,
  });
  for await (const chunk of stream) {
    const ch = chunk.choices?.[0];
    if (ch?.text) {
      text += ch.text;
      if (!cued) {
        cued = true;
        console.log("streaming");
      }
    }
    if (ch?.finish_reason)
      finish = ch.finish_reason;
  }
} catch (e) {
  console.error(`FAILED: the stream broke after ${text.length} characters: ` +
                `${e?.status ?? ""} ${e?.message ?? e}`);
  process.exit(1);
}
if (text !== expected.text) {
  console.error(`FAILED: got ${JSON.stringify(text)}, expected ` +
                JSON.stringify(expected.text));
  process.exit(1);
}
if (!finish) {
  console.error("FAILED: no finish_reason");
  process.exit(1);
}
console.log(`stream right: ${text.length} characters, finish ${finish}`);
