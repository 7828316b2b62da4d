// llama.cpp's perplexity of a text (the node-llama-cpp test tool, CPU, one
// thread), for gateway_serve_tests: the text tokenized as llama-perplexity
// tokenizes it (its BOS first when the vocabulary adds one), chunks of CTX
// tokens each starting with the BOS, the logits of rows CTX/2 .. CTX-2 of
// each (every logit: their log-sum-exp) scoring tokens CTX/2 + 1 .. CTX-1,
// exp of the mean negative log-likelihood. Prints {"ppl", "tokens",
// "scored"} as JSON.
//
//   node llama_perplexity.mjs TOOLS_DIR MODEL TEXT_FILE CTX CHUNKS
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [tools, modelPath, textPath, ctxText, chunksText] = process.argv.slice(2);
const ctx = Number(ctxText), maxChunks = Number(chunksText);
const { getLlama, LlamaLogLevel } = await import(pathToFileURL(
  path.join(tools, "node_modules/node-llama-cpp/dist/index.js")).href);
const llama = await getLlama({ gpu: false, build: "never",
                               logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath });
// A context of llama.cpp's default 512 (at least CTX): one of exactly 64
// positions runs other kernels and differs from exo's rows by up to 1e-3
// in a log-probability, 512 by 5e-7 (what exo matches).
const context = await model.createContext({
  contextSize: Math.max(512, ctx), batchSize: ctx, threads: 1,
  sequences: 1 });
const seq = context.getSequence();
const text = fs.readFileSync(textPath, "utf8");
const bos = model.tokens.shouldPrependBosToken ? Number(model.tokens.bos)
                                               : -1;
const tokens = [...(bos >= 0 ? [bos] : []),
                ...Array.from(model.tokenize(text, false), Number)];
const chunks = Math.min(Math.floor(tokens.length / ctx), maxChunks);
const first = Math.floor(ctx / 2);
let nll = 0, count = 0;
for (let c = 0; c < chunks; ++c) {
  const ids = tokens.slice(c * ctx, (c + 1) * ctx);
  if (bos >= 0)
    ids[0] = bos;
  await seq.clearHistory();
  const out = await seq.controlledEvaluate(ids.map((t, i) =>
    i >= first && i <= ctx - 2 ? [t, { generateNext: { logits: true } }]
                               : t));
  for (let i = first; i <= ctx - 2; ++i) {
    const logits = out[i].next.logits;
    let max = -Infinity;
    for (const v of logits.values())
      max = Math.max(max, v);
    let sum = 0;
    for (const v of logits.values())
      sum += Math.exp(v - max);
    nll -= logits.get(ids[i + 1]) - (max + Math.log(sum));
    ++count;
  }
}
console.log(JSON.stringify({ ppl: Math.exp(nll / count), tokens: tokens.length,
                             scored: count }));
await context.dispose();
await model.dispose();
