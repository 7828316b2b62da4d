// Tokenizes prompts with llama.cpp itself (the node-llama-cpp test tool),
// for tokenizer_oracle_tests: the ids with and without parse_special, the
// detokenized text, and the vocabulary's special tokens.
//
//   node llama_tokenize.mjs TOOLS_DIR MODEL.gguf PROMPTS.json OUT.json N_VOCAB
//
// PROMPTS.json is an array of strings; OUT.json gets one entry per prompt.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [tools, modelPath, promptsPath, outPath, nVocab] =
  process.argv.slice(2);
const { getLlama, LlamaLogLevel } = await import(pathToFileURL(
  path.join(tools, "node_modules/node-llama-cpp/dist/index.js")).href);

const llama = await getLlama({ gpu: false, build: "never",
                               logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath });
const prompts = JSON.parse(fs.readFileSync(promptsPath, "utf8"));
const ids = (a) => Array.from(a, Number);
const results = prompts.map((text) => {
  const plain = ids(model.tokenize(text, false));
  const special = ids(model.tokenize(text, true));
  return {
    plain,
    special,
    detok_plain: model.detokenize(plain, false),
    detok_special: model.detokenize(special, true),
    detok_special_hidden: model.detokenize(special, false),
  };
});
const eog = [];
const n = Number(nVocab);
for (let id = 0; id < n; ++id)
  if (model.isEogToken(id)) eog.push(id);
fs.writeFileSync(outPath, JSON.stringify({
  bos: model.tokens.bos ?? -1,
  eos: model.tokens.eos ?? -1,
  eot: model.tokens.eot ?? -1,
  add_bos: model.tokens.shouldPrependBosToken,
  add_eos: model.tokens.shouldAppendEosToken,
  eog,
  results,
}));
await model.dispose();
await llama.dispose();
