// Drives a real `exo-node serve` with the official OpenAI client (npm
// `openai`, from the test-only tools): lists the models, completes on a
// model without a chat template, streams a chat on one with Llama 3's
// template, checks the texts against `exo-model run`'s (given by the test),
// the 404 of an unknown model and the 400 of a chat on a model without a
// template; then starts a long stream, says "streaming", waits until the
// file ABORT_FLAG exists and disconnects mid-stream.
//
//   node serve_client.mjs TOOLS_DIR PORT API_KEY EXPECTED_JSON ABORT_FLAG
//
// Exit 0 when every check holds, 1 with the reason otherwise.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [toolsDir, port, apiKey, expectedJson, abortFlag] =
  process.argv.slice(2);
const expected = JSON.parse(expectedJson);
const { default: OpenAI } = await import(
  pathToFileURL(path.join(toolsDir, "node_modules/openai/index.mjs")).href);

function check(cond, what) {
  if (!cond) {
    console.error("FAILED: " + what);
    process.exit(1);
  }
  console.log("ok: " + what);
}

const client = new OpenAI({
  baseURL: `http://127.0.0.1:${port}/v1`,
  apiKey,
  maxRetries: 0,
  timeout: 120000,
});

const models = [];
for await (const m of client.models.list())
  models.push(m.id);
check(JSON.stringify(models) === JSON.stringify(expected.models),
      `models.list() gives ${JSON.stringify(models)}`);

const p = expected.plain;
const completion = await client.completions.create({
  model: p.model, prompt: p.prompt, max_tokens: p.max_tokens,
  temperature: 0,
});
check(completion.object === "text_completion", "completion object");
check(completion.choices[0].text === p.text,
      `completion text ${JSON.stringify(completion.choices[0].text)} `
        + `equals exo-model run's ${JSON.stringify(p.text)}`);
check(completion.usage.completion_tokens === p.tokens
        && completion.usage.prompt_tokens === p.prompt_tokens,
      `completion usage ${JSON.stringify(completion.usage)}`);
check(completion.choices[0].finish_reason === p.finish,
      `completion finish_reason ${completion.choices[0].finish_reason}`);

const c = expected.chat;
const stream = await client.chat.completions.create({
  model: c.model,
  messages: [{ role: "system", content: c.system },
             { role: "user", content: c.user }],
  max_tokens: c.max_tokens, temperature: 0, stream: true,
  stream_options: { include_usage: true },
});
let text = "";
let finish = null;
let usage = null;
for await (const chunk of stream) {
  if (chunk.usage)
    usage = chunk.usage;
  for (const ch of chunk.choices) {
    if (ch.delta.content)
      text += ch.delta.content;
    if (ch.finish_reason)
      finish = ch.finish_reason;
  }
}
check(text === c.text, `streamed chat ${JSON.stringify(text)} equals `
        + `exo-model run --chat's ${JSON.stringify(c.text)}`);
check(finish === c.finish, `streamed finish_reason ${finish}`);
check(usage && usage.completion_tokens === c.tokens
        && usage.prompt_tokens === c.prompt_tokens,
      `streamed usage ${JSON.stringify(usage)}`);

try {
  await client.chat.completions.create({
    model: "no-such-model", messages: [{ role: "user", content: "x" }] });
  check(false, "unknown model refused");
} catch (e) {
  check(e instanceof OpenAI.NotFoundError && e.status === 404
          && e.error && e.error.type && e.error.message,
        `unknown model: 404 NotFoundError ${JSON.stringify(e.error)}`);
}
try {
  await client.chat.completions.create({
    model: p.model, messages: [{ role: "user", content: "x" }] });
  check(false, "chat without a template refused");
} catch (e) {
  check(e instanceof OpenAI.BadRequestError
          && /chat template/.test(e.message),
        `chat on a model without a template: 400 (${e.message})`);
}

// A client that goes away mid-stream.
const long = await client.chat.completions.create({
  model: c.model, messages: [{ role: "user", content: c.user }],
  max_tokens: expected.long_tokens, temperature: 0, stream: true,
});
let chunks = 0;
for await (const chunk of long) {
  if (++chunks === 3) {
    console.log("streaming");
    while (!fs.existsSync(abortFlag))
      await new Promise((r) => setTimeout(r, 50));
    long.controller.abort();
    break;
  }
}
check(chunks === 3, "the long stream gave chunks before the disconnect");
console.log("all checks passed");
