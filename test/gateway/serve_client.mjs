// Drives a real `exo-node serve` with the official OpenAI client (npm
// `openai`, from the test-only tools): lists the models, completes on a
// model without a chat template, streams a chat on one with Llama 3's
// template, checks the texts against `exo-model run`'s (given by the test),
// the same prompt as token ids (and a token outside the vocabulary: 400),
// echo (of a text and of token ids; with logprobs, the prompt's tokens
// scored, against llama.cpp's logits for the same file; several prompts in
// one request; vLLM's prompt_logprobs, also on a chat),
// a chat and a completion with log-probabilities, a logit bias, JSON
// mode,
// asks for n = 3 sampled choices (each the engine's run with seed + i;
// streamed with a stop string, each choice cut on its own),
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

// The prompt as its token ids (OpenAI's token array): the same text.
const byIds = await client.completions.create({
  model: p.model, prompt: p.prompt_ids, max_tokens: p.max_tokens,
  temperature: 0,
});
check(byIds.choices[0].text === p.text
        && byIds.usage.prompt_tokens === p.prompt_tokens
        && byIds.usage.completion_tokens === p.tokens,
      `the prompt as token ids ${JSON.stringify(p.prompt_ids)}: the same `
        + `text and usage ${JSON.stringify(byIds.usage)}`);
try {
  await client.completions.create({
    model: p.model, prompt: [...p.prompt_ids, 1 << 30], max_tokens: 1 });
  check(false, "a token outside the vocabulary refused");
} catch (e) {
  check(e instanceof OpenAI.BadRequestError && e.error?.param === "prompt"
          && /outside the vocabulary/.test(e.message),
        `a token outside the vocabulary: 400 (${e.message})`);
}

// echo: each choice's text is the prompt's, then the same completion; a
// prompt of token ids echoes their text as /detokenize gives it.
const echoed = await client.completions.create({
  model: p.model, prompt: p.prompt, max_tokens: p.max_tokens,
  temperature: 0, echo: true,
});
check(echoed.choices[0].text === p.prompt + p.text
        && echoed.usage.completion_tokens === p.tokens,
      `echo: ${JSON.stringify(echoed.choices[0].text)} is the prompt, then `
        + `the completion (usage ${JSON.stringify(echoed.usage)})`);
const detokenized = await (await fetch(
  `http://127.0.0.1:${port}/detokenize`, {
    method: "POST",
    headers: { "Content-Type": "application/json",
               Authorization: `Bearer ${apiKey}` },
    body: JSON.stringify({ model: p.model, tokens: p.prompt_ids }),
  })).json();
const echoedIds = await client.completions.create({
  model: p.model, prompt: p.prompt_ids, max_tokens: p.max_tokens,
  temperature: 0, echo: true,
});
check(typeof detokenized.prompt === "string"
        && detokenized.prompt.endsWith(p.prompt)
        && echoedIds.choices[0].text === detokenized.prompt + p.text,
      `echo of token ids: ${JSON.stringify(echoedIds.choices[0].text)} is `
        + `their text ${JSON.stringify(detokenized.prompt)}, then the `
        + `completion`);
// echo with logprobs: the prompt's tokens scored, as lm-evaluation-
// harness's loglikelihood requests read them (token ids, max_tokens 1,
// logprobs 1, echo): each the log-softmax of llama.cpp's logits (the same
// file, node-llama-cpp) at that token, the first null; then the one
// generated token, as without echo.
const { getLlama, LlamaLogLevel } = await import(pathToFileURL(
  path.join(toolsDir, "node_modules/node-llama-cpp/dist/index.js")).href);
const llama = await getLlama({ gpu: false, build: "never",
                               logLevel: LlamaLogLevel.error });
const oracleModel = await llama.loadModel({ modelPath: p.path });
const oracleContext = await oracleModel.createContext({
  contextSize: 512, batchSize: 512, threads: 1, sequences: 1 });
const rows = await oracleContext.getSequence().controlledEvaluate(
  p.prompt_ids.map((t) => [t, { generateNext: { logits: true } }]));
const oracle = []; // oracle[i]: prompt token i's, and row i - 1's best
for (let i = 1; i < p.prompt_ids.length; ++i) {
  const logits = rows[i - 1].next.logits;
  let max = -Infinity;
  for (const v of logits.values())
    max = Math.max(max, v);
  let sum = 0;
  for (const v of logits.values())
    sum += Math.exp(v - max);
  const lse = max + Math.log(sum);
  // The token's rank (vLLM's: tokens at least as likely), as bounds that
  // allow for logits within 1e-4 of its own (exo's and llama.cpp's kernels
  // round differently), and the row's two best log-probabilities.
  const own = logits.get(p.prompt_ids[i]);
  let above = 0, near = 0;
  const sorted = [];
  for (const v of logits.values()) {
    if (v > own + 1e-4)
      ++above;
    else if (v >= own - 1e-4)
      ++near;
    sorted.push(v);
  }
  sorted.sort((a, b) => b - a);
  oracle[i] = { logprob: own - lse, best: max - lse,
                rankLo: above + 1, rankHi: above + near,
                top: [sorted[0] - lse, sorted[1] - lse] };
}
await oracleContext.dispose();
await oracleModel.dispose();
const scoredReq = {
  model: p.model, prompt: p.prompt_ids, max_tokens: 1, echo: true,
  logprobs: 1, temperature: 0,
};
const echoScored = await client.completions.create(scoredReq);
const slp = echoScored.choices[0].logprobs;
check(slp.tokens.length === p.prompt_ids.length + 1
        && slp.token_logprobs.length === slp.tokens.length
        && slp.token_logprobs[0] === null && slp.top_logprobs[0] === null,
      `echo with logprobs: ${slp.tokens.length} tokens, the prompt's `
        + `${p.prompt_ids.length} first (the first one's null)`);
let worst = 0;
for (let i = 1; i < p.prompt_ids.length; ++i) {
  const best = Math.max(...Object.values(slp.top_logprobs[i]));
  worst = Math.max(worst, Math.abs(slp.token_logprobs[i] - oracle[i].logprob),
                   Math.abs(best - oracle[i].best));
}
console.log(`prompt log-probabilities against llama.cpp's: worst `
            + `difference ${worst}`);
check(worst < 1e-3,
      `each prompt token's log-probability and its row's best equal `
        + `llama.cpp's (worst difference ${worst})`);
const plainLp = await client.completions.create({
  model: p.model, prompt: p.prompt_ids, max_tokens: 1, logprobs: 1,
  temperature: 0,
});
const last = p.prompt_ids.length;
check(slp.tokens[last] === plainLp.choices[0].logprobs.tokens[0]
        && slp.token_logprobs[last]
             === plainLp.choices[0].logprobs.token_logprobs[0]
        && slp.text_offset[last] === echoScored.choices[0].text.length
                                      - plainLp.choices[0].text.length,
      `the generated token after the prompt's: ${JSON.stringify(
        slp.tokens[last])}, as without echo, its offset after the prompt`);
// Streamed: the same tokens and numbers, the prompt's in the first chunk.
const scoredStream = await client.completions.create({
  ...scoredReq, stream: true });
const streamedTokens = [], streamedLps = [];
for await (const chunk of scoredStream)
  for (const ch of chunk.choices)
    if (ch.logprobs) {
      streamedTokens.push(...ch.logprobs.tokens);
      streamedLps.push(...ch.logprobs.token_logprobs);
    }
check(JSON.stringify(streamedTokens) === JSON.stringify(slp.tokens)
        && JSON.stringify(streamedLps) === JSON.stringify(slp.token_logprobs),
      "streamed echo with logprobs: the same tokens and numbers");
// Several prompts in one request (lm-evaluation-harness's batches): each
// prompt's choices in order, each what it gets alone.
const shortIds = p.prompt_ids.slice(0, 5);
const shortAlone = await client.completions.create({
  ...scoredReq, prompt: shortIds });
const batch = await client.completions.create({
  ...scoredReq, prompt: [p.prompt_ids, shortIds] });
check(batch.choices.length === 2
        && batch.choices[0].index === 0 && batch.choices[1].index === 1
        && JSON.stringify(batch.choices[0].logprobs)
             === JSON.stringify(echoScored.choices[0].logprobs)
        && JSON.stringify(batch.choices[1].logprobs)
             === JSON.stringify(shortAlone.choices[0].logprobs)
        && batch.choices[1].text === shortAlone.choices[0].text
        && batch.usage.prompt_tokens === p.prompt_ids.length + 5,
      `two prompts in one request: each choice is its prompt's alone `
        + `(usage ${JSON.stringify(batch.usage)})`);
// vLLM's prompt_logprobs: each prompt token after the first keyed by its
// id with its log-probability (echo's numbers), its rank in the
// vocabulary and its row's best alternatives ranked 1, 2; no generated
// token's log-probabilities where logprobs was not asked for.
const vllmScored = await client.completions.create({
  model: p.model, prompt: p.prompt_ids, max_tokens: 1, prompt_logprobs: 2,
  temperature: 0,
});
const plp = vllmScored.choices[0].prompt_logprobs;
check(Array.isArray(plp) && plp.length === p.prompt_ids.length
        && plp[0] === null && vllmScored.choices[0].logprobs === null
        && vllmScored.choices[0].text === echoScored.choices[0].text
                                            .slice(-plainLp.choices[0]
                                                     .text.length),
      `prompt_logprobs: one entry per prompt token, the first null, `
        + `no generated token's logprobs (${JSON.stringify(plp?.[1])})`);
let rankWrong = "";
for (let i = 1; i < p.prompt_ids.length && !rankWrong; ++i) {
  const row = plp[i];
  const own = row[String(p.prompt_ids[i])];
  const alts = Object.entries(row).filter(
    ([id]) => id !== String(p.prompt_ids[i]));
  if (!own || own.logprob !== slp.token_logprobs[i]
      || own.rank < oracle[i].rankLo || own.rank > oracle[i].rankHi
      || typeof own.decoded_token !== "string")
    rankWrong = `token ${i}: ${JSON.stringify(own)}, llama.cpp's rank `
                + `${oracle[i].rankLo}..${oracle[i].rankHi}`;
  else if (alts.length !== (own.rank <= 2 ? 1 : 2)
           || alts.some(([, a]) => a.rank < 1 || a.rank > 2
                        || Math.abs(a.logprob - oracle[i].top[a.rank - 1])
                             > 1e-3))
    rankWrong = `token ${i}'s alternatives: ${JSON.stringify(row)}`;
}
check(rankWrong === "",
      `prompt_logprobs: echo's numbers, llama.cpp's ranks and best `
        + `alternatives ${rankWrong}`);
// Chat: the answer's prompt_logprobs, the rendered template's tokens;
// max_tokens 0: the prompt scored, nothing generated.
const chatScored = await client.chat.completions.create({
  model: expected.chat.model,
  messages: [{ role: "user", content: expected.chat.user }],
  max_tokens: 0, temperature: 0, prompt_logprobs: 0,
});
const cplp = chatScored.prompt_logprobs;
check(Array.isArray(cplp)
        && cplp.length === chatScored.usage.prompt_tokens
        && chatScored.usage.completion_tokens === 0
        && chatScored.choices[0].message.content === ""
        && cplp[0] === null
        && cplp.slice(1).every((r) => Object.keys(r).length === 1
                                      && Object.values(r)[0].rank >= 1),
      `chat prompt_logprobs: the template's ${cplp?.length} tokens `
        + `(usage ${JSON.stringify(chatScored.usage)})`);
// Not with stream (vLLM's rule): refused, by name.
let streamRefused = "";
try {
  await client.completions.create({
    model: p.model, prompt: p.prompt, max_tokens: 1, prompt_logprobs: 1,
    stream: true });
} catch (e) {
  streamRefused = `${e.status} ${e.param ?? e.error?.param}`;
}
check(streamRefused === "400 prompt_logprobs",
      `prompt_logprobs with stream is refused (${streamRefused})`);
// max_tokens 0: the prompt alone, scored.
const promptOnly = await client.completions.create({
  model: p.model, prompt: p.prompt, max_tokens: 0, echo: true, logprobs: 0,
});
check(promptOnly.choices[0].text === p.prompt
        && promptOnly.choices[0].logprobs.tokens.length === p.prompt_tokens
        && promptOnly.choices[0].logprobs.token_logprobs[0] === null
        && promptOnly.usage.completion_tokens === 0
        && promptOnly.choices[0].finish_reason === "length",
      `max_tokens 0 with echo: the prompt's ${p.prompt_tokens} tokens `
        + `scored, nothing generated (${JSON.stringify(promptOnly.usage)})`);

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

// The same chat with each token's log-probability and 3 alternatives':
// the engine's text, a token per answer token whose bytes make the text,
// the greedy token the best of its alternatives, probabilities that add
// up to at most one; streamed, the same numbers.
const withLogprobs = {
  model: c.model,
  messages: [{ role: "system", content: c.system },
             { role: "user", content: c.user }],
  max_tokens: c.max_tokens, temperature: 0, logprobs: true, top_logprobs: 3,
};
const scored = await client.chat.completions.create(withLogprobs);
const lp = scored.choices[0].logprobs?.content ?? [];
check(scored.choices[0].message.content === c.text
        && lp.length === c.tokens,
      `chat with logprobs: the same text, ${lp.length} tokens listed`);
const joinedBytes = Buffer.from(lp.flatMap((e) => e.bytes));
check(joinedBytes.toString("utf8") === c.text,
      "the listed tokens' bytes make the text");
check(lp.every((e) => e.top_logprobs.length === 3
                 && e.top_logprobs[0].token === e.token
                 && e.top_logprobs[0].logprob === e.logprob
                 && e.logprob <= 0
                 && e.top_logprobs[1].logprob <= e.top_logprobs[0].logprob
                 && e.top_logprobs[2].logprob <= e.top_logprobs[1].logprob
                 && e.top_logprobs.reduce((a, t) => a + Math.exp(t.logprob),
                                          0) <= 1 + 1e-6),
      "each greedy token is the best of its 3 alternatives, probabilities " +
        "at most one");
const streamedLp = [];
for await (const chunk of await client.chat.completions.create(
                 { ...withLogprobs, stream: true }))
  for (const ch of chunk.choices)
    streamedLp.push(...(ch.logprobs?.content ?? []));
check(JSON.stringify(streamedLp) === JSON.stringify(lp),
      "streamed, the same log-probabilities");
// A completion's shape: tokens, their logprobs, alternatives by text.
const scoredText = await client.completions.create({
  model: p.model, prompt: p.prompt, max_tokens: p.max_tokens,
  temperature: 0, logprobs: 2,
});
const tl = scoredText.choices[0].logprobs;
check(scoredText.choices[0].text === p.text
        && tl.tokens.length === p.tokens
        && tl.token_logprobs.length === p.tokens
        && tl.top_logprobs.every((t) => Object.keys(t).length >= 1)
        && tl.text_offset[0] === 0,
      `completion with logprobs: ${tl.tokens.length} tokens, offsets ` +
        JSON.stringify(tl.text_offset.slice(0, 4)));

// A logit bias of 100 on one token (the prompt's last): greedy picks it
// every time; its log-probabilities stay the model's own (below 0). Out of
// range penalties are a 400 naming them.
const favoured = p.prompt_ids[p.prompt_ids.length - 1];
const biased = await client.completions.create({
  model: p.model, prompt: p.prompt, max_tokens: 4, temperature: 0,
  logprobs: 0, logit_bias: { [String(favoured)]: 100 },
  frequency_penalty: 0.5, presence_penalty: 0.5,
});
const bt = biased.choices[0].logprobs;
check(bt.tokens.length === 4 && bt.tokens.every((t) => t === bt.tokens[0])
        && biased.choices[0].text === bt.tokens[0].repeat(4)
        && bt.token_logprobs.every((l) => l < 0),
      `logit_bias {${favoured}: 100}: ${JSON.stringify(bt.tokens)} `
        + JSON.stringify(bt.token_logprobs));
// vLLM's sampling extras (the openai client passes them through): at a
// high temperature, top_k 1 or min_p 1 leave only the best token, so the
// text is greedy's; top_k -1 is accepted (every token).
for (const extra of [{ top_k: 1 }, { min_p: 1 }, { top_k: -1, min_p: 1 }]) {
  const r = await client.completions.create({
    model: p.model, prompt: p.prompt, max_tokens: p.max_tokens,
    temperature: 1.5, seed: 9, ...extra,
  });
  check(r.choices[0].text === p.text,
        `temperature 1.5 with ${JSON.stringify(extra)}: greedy's text `
          + JSON.stringify(r.choices[0].text));
}
try {
  await client.completions.create({
    model: p.model, prompt: p.prompt, max_tokens: 1, presence_penalty: 2.5 });
  check(false, "a presence_penalty of 2.5 refused");
} catch (e) {
  check(e instanceof OpenAI.BadRequestError
          && e.error?.param === "presence_penalty",
        `presence_penalty 2.5: 400 (${e.message})`);
}

// JSON mode: each of 4 sampled choices is a prefix of one JSON object, and
// a choice that stopped parses as one; json_schema is a 400 naming it.
const jsonChat = await client.chat.completions.create({
  model: c.model, messages: [{ role: "user", content: c.user }],
  max_tokens: 48, temperature: 0.9, seed: 4, n: 4,
  response_format: { type: "json_object" },
});
for (const ch of jsonChat.choices) {
  const t = ch.message.content;
  let parsed = null;
  try { parsed = JSON.parse(t); } catch (e) { parsed = null; }
  check(/^\s*\{/.test(t) && (ch.finish_reason !== "stop"
                               || (parsed !== null && typeof parsed
                                   === "object" && !Array.isArray(parsed))),
        `json_object choice ${ch.index} (${ch.finish_reason}): `
          + JSON.stringify(t));
}
try {
  await client.chat.completions.create({
    model: c.model, messages: [{ role: "user", content: c.user }],
    max_tokens: 4, response_format: { type: "json_schema",
      json_schema: { name: "x", schema: { type: "object" } } } });
  check(false, "json_schema refused");
} catch (e) {
  check(e instanceof OpenAI.BadRequestError
          && e.error?.param === "response_format.type",
        `json_schema: 400 (${e.message})`);
}

// n = 3 sampled choices: choice i is the engine's run with seed + i.
const s = expected.sampled;
const n = s.texts.length;
const many = await client.completions.create({
  model: s.model, prompt: s.prompt, max_tokens: s.max_tokens,
  temperature: s.temperature, top_p: 1, seed: s.seed, n,
});
check(many.choices.length === n, `n = ${n}: ${many.choices.length} choices`);
for (const ch of many.choices)
  check(ch.text === s.texts[ch.index]
          && ch.finish_reason === s.finish[ch.index],
        `choice ${ch.index}: ${JSON.stringify(ch.text)} (${ch.finish_reason})`
          + ` is the engine's with seed ${s.seed + ch.index}`);
const sum = s.tokens.reduce((a, b) => a + b, 0);
check(many.usage.prompt_tokens === s.prompt_tokens
        && many.usage.completion_tokens === sum,
      `n = ${n} usage ${JSON.stringify(many.usage)}: the prompt once, `
        + `${sum} completion tokens`);
// Streamed, with a stop string taken from choice 1's text: each choice is
// cut where the string first appears in it, the others run on.
const source = s.texts[1];
let stop = null;
for (let i = Math.floor(source.length / 2); i + 3 <= source.length && !stop;
     ++i)
  if (/^[A-Za-z]{3}$/.test(source.slice(i, i + 3)))
    stop = source.slice(i, i + 3);
for (const from of [Math.floor(source.length / 2), 0])
  for (let i = from; i + 2 <= source.length && !stop; ++i)
    if (/^[ -~]{2}$/.test(source.slice(i, i + 2)))
      stop = source.slice(i, i + 2);
check(stop !== null, `a stop string from choice 1's text: `
        + JSON.stringify(stop));
const cut = await client.completions.create({
  model: s.model, prompt: s.prompt, max_tokens: s.max_tokens,
  temperature: s.temperature, top_p: 1, seed: s.seed, n, stop,
  stream: true,
});
const texts = new Array(n).fill("");
const finishes = new Array(n).fill(null);
let late = 0; // text of a choice after its finish
for await (const chunk of cut)
  for (const ch of chunk.choices) {
    if (finishes[ch.index] !== null && ch.text !== "")
      ++late;
    texts[ch.index] += ch.text;
    if (ch.finish_reason)
      finishes[ch.index] = ch.finish_reason;
  }
check(late === 0, `no text of a choice after its finish (${late})`);
let cutSome = false;
for (let i = 0; i < n; ++i) {
  const at = s.texts[i].indexOf(stop);
  const want = at >= 0 ? s.texts[i].slice(0, at) : s.texts[i];
  const reason = at >= 0 ? "stop" : s.finish[i];
  cutSome = cutSome || (at >= 0 && i !== 1);
  check(texts[i] === want && finishes[i] === reason,
        `streamed choice ${i} with stop ${JSON.stringify(stop)}: `
          + `${JSON.stringify(texts[i])} (${finishes[i]})`);
}
console.log(`ok: the stop string cut ${cutSome ? "other choices too"
                                                : "choice 1 only"}`);

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

// A client that goes away mid-stream. Its long system prompt stays on the
// stage (the prefix cache) while it runs: a chat that starts alike copies
// those rows and answers what the engine answers alone.
const k = expected.cached;
const long = await client.chat.completions.create({
  model: c.model,
  messages: [{ role: "system", content: k.system },
             { role: "user", content: c.user }],
  max_tokens: expected.long_tokens, temperature: 0, stream: true,
});
let chunks = 0;
for await (const chunk of long) {
  if (++chunks === 3) {
    const again = await client.chat.completions.create({
      model: c.model,
      messages: [{ role: "system", content: k.system },
                 { role: "user", content: k.user }],
      max_tokens: k.max_tokens, temperature: 0,
    });
    check(again.choices[0].message.content === k.text,
          `beside the long stream, ${JSON.stringify(again.choices[0]
            .message.content)} is the engine's alone`);
    const details = again.usage.prompt_tokens_details;
    check(again.usage.prompt_tokens === k.prompt_tokens && details
            && details.cached_tokens === k.cached_tokens,
          `its usage ${JSON.stringify(again.usage)}: ${k.cached_tokens} `
            + `of ${k.prompt_tokens} prompt tokens from the prefix cache`);
    console.log("streaming");
    while (!fs.existsSync(abortFlag))
      await new Promise((r) => setTimeout(r, 50));
    long.controller.abort();
    break;
  }
}
check(chunks === 3, "the long stream gave chunks before the disconnect");
console.log("all checks passed");
