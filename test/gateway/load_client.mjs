// Load on a real `exo-node serve`: N concurrent streaming completions with
// the official OpenAI client, each checked against the text the engine
// alone gives for its prompt (temperature 0): none lost, none mixed up.
//
//   node load_client.mjs TOOLS_DIR BASE_URL N EXPECTED_JSON
//
// EXPECTED_JSON: {"model", "max_tokens", "cases": [{"prompt", "text"}]};
// client i uses case i % cases.length. Prints one line of figures; exit 0
// when every stream is right, 1 with the first reasons otherwise.
import path from "node:path";
import { pathToFileURL } from "node:url";

const [toolsDir, baseURL, nText, expectedJson] = process.argv.slice(2);
const n = Number(nText);
const expected = JSON.parse(expectedJson);
const { default: OpenAI } = await import(
  pathToFileURL(path.join(toolsDir, "node_modules/openai/index.mjs")).href);

const client = new OpenAI({ baseURL, apiKey: "none", maxRetries: 0,
                            timeout: 300000 });
const started = Date.now();
const firsts = [];

async function one(i) {
  const c = expected.cases[i % expected.cases.length];
  const t0 = Date.now();
  let text = "", first = 0, finish = null;
  const stream = await client.completions.create({
    model: expected.model, prompt: c.prompt, max_tokens: expected.max_tokens,
    temperature: 0, stream: true,
  });
  for await (const chunk of stream) {
    const ch = chunk.choices?.[0];
    if (ch?.text) {
      if (!first)
        first = Date.now() - t0;
      text += ch.text;
    }
    if (ch?.finish_reason)
      finish = ch.finish_reason;
  }
  firsts.push(first);
  if (text !== c.text)
    return `client ${i}: got ${JSON.stringify(text)}, expected ${JSON.stringify(c.text)}`;
  if (!finish)
    return `client ${i}: no finish_reason`;
  return null;
}

const results = await Promise.allSettled(
  Array.from({ length: n }, (_, i) => one(i)));
const errors = results.map((r, i) => r.status === "rejected"
  ? `client ${i}: ${r.reason?.status ?? ""} ${r.reason?.message ?? r.reason}`
  : r.value).filter(Boolean);
firsts.sort((a, b) => a - b);
const secs = (Date.now() - started) / 1000;
console.log(`load: ${n} streams, ${n - errors.length} right, ${secs.toFixed(1)} s, ` +
            `time to first token p50 ${firsts[Math.floor(firsts.length / 2)] ?? "-"} ms ` +
            `max ${firsts[firsts.length - 1] ?? "-"} ms`);
if (errors.length) {
  for (const e of errors.slice(0, 5))
    console.error("FAILED: " + e);
  process.exit(1);
}
console.log("all streams right");
