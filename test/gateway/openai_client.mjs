// Drives exo's gateway with the official OpenAI client (npm `openai`, from
// the test-only tools): lists the models, completes, streams a chat, and
// checks that the text received equals the test backend's tokens.
//
//   node openai_client.mjs TOOLS_DIR PORT EXPECTED_JSON
//
// EXPECTED_JSON: {"models": [...], "text": "...", "prompt_tokens": N}.
// Exit 0 when every check holds, 1 with the reason otherwise.
import path from "node:path";
import { pathToFileURL } from "node:url";

const [toolsDir, port, expectedJson] = process.argv.slice(2);
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
  apiKey: "sk-exo-test",
  maxRetries: 0,
  timeout: 30000,
});

const models = [];
for await (const m of client.models.list())
  models.push(m.id);
check(JSON.stringify(models) === JSON.stringify(expected.models),
      `models.list() gives ${JSON.stringify(models)}`);

const completion = await client.completions.create({
  model: expected.models[0], prompt: "Once upon a time", max_tokens: 64,
  temperature: 0, seed: 42,
});
check(completion.object === "text_completion", "completion object");
check(completion.choices[0].text === expected.text,
      `completion text ${JSON.stringify(completion.choices[0].text)}`);
check(completion.choices[0].finish_reason === "stop", "finish_reason stop");
check(completion.usage.prompt_tokens === expected.prompt_tokens
        && completion.usage.completion_tokens === expected.tokens,
      `usage ${JSON.stringify(completion.usage)}`);

const chat = await client.chat.completions.create({
  model: expected.models[0],
  messages: [{ role: "user", content: "hello" }], temperature: 0,
});
check(chat.choices[0].message.role === "assistant"
        && chat.choices[0].message.content === expected.text,
      `chat message ${JSON.stringify(chat.choices[0].message)}`);

const stream = await client.chat.completions.create({
  model: expected.models[0],
  messages: [{ role: "system", content: "be brief" },
             { role: "user", content: "hello" }],
  stream: true, stream_options: { include_usage: true },
  max_completion_tokens: 64,
});
let text = "";
let finish = null;
let usage = null;
let chunks = 0;
for await (const chunk of stream) {
  ++chunks;
  check(chunk.object === "chat.completion.chunk", `chunk ${chunks} object`);
  if (chunk.usage)
    usage = chunk.usage;
  for (const c of chunk.choices) {
    if (c.delta.content)
      text += c.delta.content;
    if (c.finish_reason)
      finish = c.finish_reason;
  }
}
check(text === expected.text, `streamed text ${JSON.stringify(text)}`);
check(finish === "stop", "streamed finish_reason stop");
check(usage && usage.completion_tokens === expected.tokens,
      `streamed usage ${JSON.stringify(usage)}`);

let status = 0;
try {
  await client.chat.completions.create({
    model: "no-such-model", messages: [{ role: "user", content: "x" }] });
} catch (e) {
  status = e.status;
  check(e instanceof OpenAI.NotFoundError, "unknown model: NotFoundError");
}
check(status === 404, "unknown model: 404");
const two = await client.chat.completions.create({
  model: expected.models[0], messages: [{ role: "user", content: "x" }],
  n: 2 });
check(two.choices.length === 2
        && two.choices.every((c, i) => c.index === i)
        && two.choices[0].message.content === expected.text
        && two.choices[1].message.content === expected.second,
      `n = 2: ${JSON.stringify(two.choices.map((c) => c.message.content))}`);
check(two.usage.completion_tokens === 2 * expected.tokens,
      `n = 2 usage ${JSON.stringify(two.usage)}`);
try {
  await client.chat.completions.create({
    model: expected.models[0], messages: [{ role: "user", content: "x" }],
    n: 17 });
  check(false, "n = 17 refused");
} catch (e) {
  check(e instanceof OpenAI.BadRequestError && e.param === "n",
        `n = 17: BadRequestError on param ${e.param}`);
}
console.log("all checks passed");
