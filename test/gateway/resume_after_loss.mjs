// One streaming completion with the official OpenAI client through exo's
// gateway on one node, for a test that kills that node mid-stream: prints
// "streaming" when the first text arrives (the test's cue); when the
// stream breaks, sends the same request to another node's gateway with the
// completion's id (X-Exo-Resume) and the bytes of text it has
// (Last-Event-ID), goes on with that stream and checks that the whole text
// equals the uninterrupted run's, nothing repeated, nothing missing.
//
//   node resume_after_loss.mjs TOOLS_DIR FIRST_URL OTHER_URL EXPECTED_JSON
//
// EXPECTED_JSON: {"model", "prompt", "max_tokens", "text"} ("text" left
// out: the stream read again from its start must equal what the client
// put together, a sampled request without a seed) and optionally
// "temperature" (0 unless given), "seed" (a sampled request's),
// "logit_bias" and
// "logprobs" (the request asks for them) with the uninterrupted run's
// "logprob_tokens" and "token_logprobs", which the streams' must equal,
// each token once. Exit 0 and "stream right" when it holds, 1 with the
// reason otherwise.
import path from "node:path";
import { pathToFileURL } from "node:url";

const [toolsDir, firstURL, otherURL, expectedJson] = process.argv.slice(2);
const expected = JSON.parse(expectedJson);
const { default: OpenAI } = await import(
  pathToFileURL(path.join(toolsDir, "node_modules/openai/index.mjs")).href);

const body = {
  model: expected.model, prompt: expected.prompt,
  max_tokens: expected.max_tokens, temperature: expected.temperature ?? 0,
  stream: true,
};
if (expected.seed !== undefined)
  body.seed = expected.seed;
if (expected.logprobs !== undefined)
  body.logprobs = expected.logprobs;
if (expected.logit_bias !== undefined)
  body.logit_bias = expected.logit_bias;
const names = [], values = []; // the tokens' log-probabilities received
let text = "", id = null, finish = null, cued = false;
let resumedAt = null, firstAgain = null; // when the resume went, its text came

// Reads `stream` into text; returns the error that broke it (null when it
// ended with a finish_reason).
async function read(stream) {
  try {
    for await (const chunk of stream) {
      id = chunk.id ?? id;
      const ch = chunk.choices?.[0];
      if (ch?.logprobs) {
        names.push(...ch.logprobs.tokens);
        values.push(...ch.logprobs.token_logprobs);
      }
      if (ch?.text) {
        text += ch.text;
        if (resumedAt !== null && firstAgain === null)
          firstAgain = Date.now();
        if (!cued) {
          cued = true;
          console.log("streaming");
        }
      }
      if (ch?.finish_reason)
        finish = ch.finish_reason;
    }
  } catch (e) {
    return e;
  }
  return finish ? null : new Error("the stream ended without a finish_reason");
}

const first = new OpenAI({ baseURL: firstURL, apiKey: "none", maxRetries: 0,
                           timeout: 300000 });
let broke = await read(await first.completions.create(body));
if (!broke) {
  console.error("FAILED: the stream was not broken (the node was not killed " +
                "mid-stream)");
  process.exit(1);
}
if (!id) {
  console.error(`FAILED: the stream broke before its first chunk: ${broke}`);
  process.exit(1);
}
const had = Buffer.byteLength(text, "utf8");
console.log(`broke after ${had} bytes (${broke?.message ?? broke}); ` +
            `resuming ${id}`);
const other = new OpenAI({ baseURL: otherURL, apiKey: "none", maxRetries: 0,
                           timeout: 300000 });
resumedAt = Date.now();
let again;
try {
  again = await other.completions.create(body, {
    headers: { "X-Exo-Resume": id, "Last-Event-ID": String(had) },
  });
} catch (e) {
  console.error(`FAILED: the resume was refused: ${e?.status ?? ""} ` +
                `${e?.message ?? e}`);
  process.exit(1);
}
broke = await read(again);
if (broke) {
  console.error(`FAILED: the resumed stream broke too: ${broke?.message}`);
  process.exit(1);
}
if (expected.text === undefined) {
  // No reference (a sampled request without a seed: its text is its id's):
  // the whole stream read again from its first byte must be the text this
  // client put together from the two streams.
  const joined = text;
  text = "";
  finish = null;
  broke = await read(await other.completions.create(body, {
    headers: { "X-Exo-Resume": id, "Last-Event-ID": "0" },
  }));
  if (broke || text !== joined) {
    console.error(`FAILED: read again from its start the stream is ` +
                  `${JSON.stringify(text)}, the client put together ` +
                  `${JSON.stringify(joined)} ${broke?.message ?? ""}`);
    process.exit(1);
  }
  console.log(`read again from the start: the same ` +
              `${Buffer.byteLength(text, "utf8")} bytes`);
} else if (text !== expected.text) {
  console.error(`FAILED: got ${JSON.stringify(text)}, expected ` +
                JSON.stringify(expected.text));
  process.exit(1);
}
if (expected.logprobs !== undefined) {
  const want = expected.token_logprobs;
  const bad = values.findIndex((v, i) => Math.abs(v - want[i]) > 1e-5);
  if (names.length !== want.length
      || JSON.stringify(names) !== JSON.stringify(expected.logprob_tokens)
      || bad >= 0) {
    console.error(`FAILED: log-probabilities of ${names.length} tokens, ` +
                  `expected ${want.length}; first difference at ` +
                  `${bad >= 0 ? bad : "a token's text"}`);
    process.exit(1);
  }
  console.log(`log-probabilities right: ${names.length} tokens`);
  // The whole stream again from its first byte: the tokens the replica
  // held come with the log-probabilities replicated beside them.
  names.length = 0;
  values.length = 0;
  text = "";
  finish = null;
  broke = await read(await other.completions.create(body, {
    headers: { "X-Exo-Resume": id, "Last-Event-ID": "0" },
  }));
  const again = values.findIndex((v, i) => Math.abs(v - want[i]) > 1e-5);
  if (broke || text !== expected.text || names.length !== want.length
      || again >= 0) {
    console.error(`FAILED: the stream read again from its start has ` +
                  `${names.length} log-probabilities (first difference at ` +
                  `${again}), its text ${text === expected.text ? "right" :
                                         "wrong"}: ${broke?.message ?? ""}`);
    process.exit(1);
  }
  console.log(`read again from the start: ${names.length} log-probabilities`);
}
console.log(`re-attached: first text ${(firstAgain ?? Date.now()) - resumedAt} ms ` +
            `after the resume was sent`);
console.log(`stream right: ${text.length} characters, finish ${finish}`);
