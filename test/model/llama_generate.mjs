// Greedy generation with llama.cpp itself (the node-llama-cpp test tool,
// CPU, one thread), for quant_oracle_generation_tests: for each job, the
// prompt's token ids as llama.cpp tokenizes it (BOS prepended when the
// vocabulary says so) and the first N greedy tokens after it.
//
//   node llama_generate.mjs TOOLS_DIR JOBS.json OUT.json
//
// JOBS.json: [{"model": PATH, "prompt": TEXT, "n": N, "batch": B,
// "kv": TYPE, "frequency_penalty": F, "presence_penalty": P,
// "repetition_penalty": R, "logit_bias": [[ID, BIAS], ...]}, ...] (batch:
// llama.cpp's batch size,
// 512 unless given; 1 evaluates the prompt a token at a time; kv: the KV
// cache's key and value type, e.g. "Q8_0" as llama.cpp's
// --cache-type-k/-v, F16 unless given; the penalties, llama.cpp's
// penalties sampler over every token generated so far (OpenAI's
// frequency_penalty and presence_penalty), or its repeat penalty over
// the prompt and every token generated so far (vLLM's
// repetition_penalty; not with the others, which would count the prompt
// too), and the logit bias, its logit-bias sampler, all before the greedy
// pick);
// OUT.json gets
// [{"prompt": [ids], "generated": [ids]}, ...] in the same order. The prompt
// is evaluated as one batch; generation does not stop at end-of-generation
// tokens (llama.cpp yields them like any other).
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [tools, jobsPath, outPath] = process.argv.slice(2);
const { getLlama, LlamaLogLevel, TokenBias } = await import(pathToFileURL(
  path.join(tools, "node_modules/node-llama-cpp/dist/index.js")).href);

const llama = await getLlama({ gpu: false, build: "never",
                               logLevel: LlamaLogLevel.error });
const jobs = JSON.parse(fs.readFileSync(jobsPath, "utf8"));
const out = [];
for (const job of jobs) {
  const model = await llama.loadModel({ modelPath: job.model });
  const context = await model.createContext({
    contextSize: 512, batchSize: job.batch ?? 512, threads: 1,
    sequences: 1,
    ...(job.kv ? { experimentalKvCacheKeyType: job.kv,
                   experimentalKvCacheValueType: job.kv } : {}) });
  const seq = context.getSequence();
  const body = Array.from(model.tokenize(job.prompt, false), Number);
  const prompt = model.tokens.shouldPrependBosToken
    ? [Number(model.tokens.bos), ...body] : body;
  const generated = [];
  const options = { temperature: 0, yieldEogToken: true };
  const repetition = job.repetition_penalty ?? 1;
  if (repetition !== 1) {
    if (job.frequency_penalty || job.presence_penalty)
      throw new Error("repetition_penalty goes alone: llama.cpp's window "
                      + "would count the prompt's tokens in the others");
    options.repeatPenalty = {
      punishTokens: () => [...prompt, ...generated],
      maxPunishTokens: prompt.length + job.n,
      penalty: repetition,
    };
  } else if (job.frequency_penalty || job.presence_penalty)
    options.repeatPenalty = {
      punishTokens: () => generated, // OpenAI's: the generated tokens
      maxPunishTokens: job.n,
      penalty: 1,
      frequencyPenalty: job.frequency_penalty ?? 0,
      presencePenalty: job.presence_penalty ?? 0,
    };
  if (job.logit_bias) {
    // By id, as given (TokenBias.set would tokenize text and skip
    // end-of-generation tokens).
    const bias = new TokenBias(model.tokenizer);
    for (const [id, b] of job.logit_bias)
      bias._biases.set(id, b);
    options.tokenBias = bias;
  }
  for await (const t of seq.evaluate(prompt, options)) {
    generated.push(Number(t));
    if (generated.length >= job.n)
      break;
  }
  out.push({ prompt, generated });
  await context.dispose();
  await model.dispose();
}
fs.writeFileSync(outPath, JSON.stringify(out));
await llama.dispose();
