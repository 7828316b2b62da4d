// Runs one prompt through llama.cpp (the node-llama-cpp package, CPU only)
// greedily and prints the prompt's token ids, the generated ids and the
// timings, in the format compare_llama_cpp.sh reads. Not a dependency of
// exo: the script finds the package in $LLAMA_NODE_DIR.
//   node llama_cpp_probe.mjs MODEL.gguf PROMPT N_GEN THREADS [KV_TYPE]
// (KV_TYPE: the KV cache's key and value type, e.g. Q8_0 as llama.cpp's
// --cache-type-k/-v q8_0; F16 unless given)
import {createRequire} from "node:module";
import path from "node:path";

const dir = process.env.LLAMA_NODE_DIR;
const require = createRequire(path.join(dir, "package.json"));
const {getLlama, LlamaLogLevel} =
  await import(require.resolve("node-llama-cpp"));

const [, , modelPath, prompt, nGenText, threadsText, kvType] = process.argv;
const nGen = Number(nGenText);
const llama = await getLlama({gpu: false, build: "never",
                              logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath});
const context = await model.createContext({
  contextSize: 1024, threads: Number(threadsText), batchSize: 1024,
  ...(kvType ? {experimentalKvCacheKeyType: kvType,
                experimentalKvCacheValueType: kvType} : {})});
const seq = context.getSequence();
const body = model.tokenize(prompt, false);
const tokens = model.tokens.shouldPrependBosToken
  ? [model.tokens.bos, ...body] : body;
const out = [];
const t0 = performance.now();
let tFirst = null;
// evaluate() processes the prompt as one batch, then yields each token
// (the end-of-sequence token too, which exo prints before it stops).
const options = {temperature: 0, yieldEogToken: true};
for await (const t of seq.evaluate(tokens, options)) {
  if (tFirst === null)
    tFirst = performance.now();
  out.push(t);
  if (out.length >= nGen + 1 || model.isEogToken(t))
    break;
}
const t1 = performance.now();
console.log(`prompt ids: ${tokens.join(" ")}`);
console.log(`generated ids: ${out.slice(0, nGen).join(" ")}`);
// The first token's time is the prompt's; the rest is generation.
console.log(`prompt_s ${(tFirst - t0) / 1000}`);
console.log(`gen_tokens ${out.length - 1} gen_s ${(t1 - tFirst) / 1000}`);
await context.dispose();
await model.dispose();
await llama.dispose();
