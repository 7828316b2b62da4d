// Scoring a prompt in llama.cpp (the node-llama-cpp package, CPU only):
// the prompt read with the logits of its last row only, then with every
// row's (llama.cpp's logits for each token, what lm-evaluation-harness's
// loglikelihood reads), RUNS times each, alternating, the sequence cleared
// each time. Prints one line per run: "plain MS scored MS values MS". Not a
// dependency of exo: the script finds the package in $LLAMA_NODE_DIR.
//   node llama_cpp_score_probe.mjs MODEL.gguf IDS_JSON RUNS THREADS
import {createRequire} from "node:module";
import fs from "node:fs";
import path from "node:path";

const dir = process.env.LLAMA_NODE_DIR;
const require = createRequire(path.join(dir, "package.json"));
const {getLlama, LlamaLogLevel} =
  await import(require.resolve("node-llama-cpp"));

const [, , modelPath, idsPath, runsText, threadsText] = process.argv;
const ids = JSON.parse(fs.readFileSync(idsPath, "utf8"));
const llama = await getLlama({gpu: false, build: "never",
                              logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath});
const context = await model.createContext({
  contextSize: ids.length + 16, sequences: 1,
  threads: Number(threadsText), batchSize: 512});
const seq = context.getSequence();
// mode "plain": the last row's logits only; "rows": every row's logits
// computed and a token picked from each by llama.cpp's sampler (native: the
// compute of scoring); "values": every row's logits read into JavaScript,
// filtered to the next prompt token and the best one (what a client of
// node-llama-cpp gets; its per-row copying included).
async function timed(mode) {
  await seq.clearHistory();
  const input = ids.map((t, i) =>
    mode === "plain" && i + 1 < ids.length ? t
      : mode === "values"
        ? [t, {generateNext: {logits: {filter: {
            tokens: i + 1 < ids.length ? [ids[i + 1]] : [], includeTop: 1}}}}]
        : [t, {generateNext: {token: true}}]);
  const t0 = performance.now();
  await seq.controlledEvaluate(input);
  return performance.now() - t0;
}
await timed("plain"); // warm
for (let r = 0; r < Number(runsText); ++r) {
  const plain = await timed("plain");
  const rows = await timed("rows");
  const values = await timed("values");
  console.log(`plain ${plain.toFixed(1)} scored ${rows.toFixed(1)} `
              + `values ${values.toFixed(1)}`);
}
