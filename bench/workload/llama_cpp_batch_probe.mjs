// Batched decoding in llama.cpp (the node-llama-cpp package, CPU only):
// B sequences of one context decode greedily at once (node-llama-cpp puts
// the tokens of every sequence that waits into one llama_decode per
// step: llama.cpp's batched decoding), each with its own prompt. Prints
// the aggregate generation tokens/s from the moment every prompt was
// read, in the format batch_compare.sh reads, and the time until every
// prompt was read (prompt_share.sh). Not a dependency of exo: the script
// finds the package in $LLAMA_NODE_DIR.
//   node llama_cpp_batch_probe.mjs MODEL.gguf B N_GEN THREADS [LEN [same]]
// LEN: tokens of each prompt (16); "same": every sequence has sequence 0's
// prompt (each sequence still reads its own copy: node-llama-cpp does not
// copy one sequence's cache into another).
import {createRequire} from "node:module";
import path from "node:path";

const dir = process.env.LLAMA_NODE_DIR;
const require = createRequire(path.join(dir, "package.json"));
const {getLlama, LlamaLogLevel} =
  await import(require.resolve("node-llama-cpp"));

const [, , modelPath, bText, nGenText, threadsText, lenText, same] =
  process.argv;
const B = Number(bText), nGen = Number(nGenText);
const len = Number(lenText || 16);
const llama = await getLlama({gpu: false, build: "never",
                              logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath});
const context = await model.createContext({
  contextSize: B * Math.max(256, len + nGen + 16), sequences: B,
  threads: Number(threadsText), batchSize: 512});
const prompts = [];
for (let s = 0; s < B; ++s) {
  const ids = [];
  const k = same === "same" ? 0 : s;
  for (let i = 0; i < len; ++i)
    ids.push((7 * i + 13 * k + 1) % model.tokens.vocabularySize || 1);
  prompts.push(ids);
}
let prompted = 0, tGen = null, generated = 0;
const t0 = performance.now();
const run = async (s) => {
  const seq = context.getSequence();
  let n = 0;
  // No end of generation: every sequence makes nGen tokens.
  for await (const t of seq.evaluate(prompts[s], {temperature: 0,
                                                    yieldEogToken: true})) {
    void t;
    if (n === 0 && ++prompted === B)
      tGen = performance.now(); // every prompt has been read
    if (n > 0 && tGen !== null)
      ++generated;
    if (++n > nGen)
      break;
  }
};
await Promise.all(prompts.map((_, s) => run(s)));
const t1 = performance.now();
console.log(`sequences ${B} gen_tokens ${generated} gen_s ${(t1 - tGen) / 1000}`
            + ` prompt_s ${(tGen - t0) / 1000}`);
await context.dispose();
await model.dispose();
await llama.dispose();
