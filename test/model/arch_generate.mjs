// Greedy generation by llama.cpp itself (the node-llama-cpp test tool) for
// arch_oracle_tests: for each job, the prompt's token ids (BOS prepended
// when the vocabulary asks for it) and up to N greedy tokens, stopping
// after an end-of-generation token as exo does. One thread, one batch for
// the prompt.
//
//   node arch_generate.mjs TOOLS_DIR JOBS.json OUT.json
//
// JOBS.json: [{"model": PATH, "prompt": TEXT, "n": N}, ...]; OUT.json gets
// [{"prompt": [ids], "generated": [ids]}, ...] in the same order.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [tools, jobsPath, outPath] = process.argv.slice(2);
const { getLlama, LlamaLogLevel } = await import(pathToFileURL(
  path.join(tools, "node_modules/node-llama-cpp/dist/index.js")).href);

const llama = await getLlama({ gpu: false, build: "never",
                               logLevel: LlamaLogLevel.error });
const jobs = JSON.parse(fs.readFileSync(jobsPath, "utf8"));
const out = [];
for (const job of jobs) {
  const model = await llama.loadModel({ modelPath: job.model });
  const context = await model.createContext({
    contextSize: 512, batchSize: 512, threads: 1 });
  const seq = context.getSequence();
  const body = Array.from(model.tokenize(job.prompt, false), Number);
  const prompt = model.tokens.shouldPrependBosToken
    ? [Number(model.tokens.bos), ...body] : body;
  const generated = [];
  for await (const t of seq.evaluate(prompt,
                                     { temperature: 0, yieldEogToken: true })) {
    generated.push(Number(t));
    if (generated.length >= job.n || model.isEogToken(t))
      break;
  }
  out.push({ prompt, generated });
  await context.dispose();
  await model.dispose();
}
fs.writeFileSync(outPath, JSON.stringify(out));
await llama.dispose();
