// exo-model: make, inspect and run llama GGUF files on the CPU.
//
//   exo-model make-test --out m.gguf --layers 2 --dim 64 --ff 128 --heads 4
//     ...
//   exo-model info m.gguf
//   exo-model quantize in-f32.gguf out.gguf q4_k_m
//   exo-model run --model m.gguf --prompt "hello world" -n 16 [--seed S]
//     [--temperature T] [--top-k K] [--top-p P] [--threads N]
//     [--llama-threads N] [--logits-out FILE] [--chat [--system TEXT]]
//     [--kv-type f16|q8_0|f32]
//   (--chat: the prompt is a user message in the model's chat template,
//   core/workload/chat_prompt.hpp; generation stops at its end of turn;
//   --kv-type: the node's engine, a device stage on the cpu device, with a
//   KV cache of that type, instead of the host engine's f16 cache)
//
// Exit status: 0 on success, 2 on bad arguments or a bad model file.

#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/factory/factory.hpp"
#include "core/cli/program.hpp"
#include "core/model/device_stage.hpp"
#include "core/gguf/gguf.hpp"
#include "core/model/llama_hparams.hpp"
#include "core/model/llama_model.hpp"
#include "core/model/model_info.hpp"
#include "core/model/ops.hpp"
#include "core/model/quantize.hpp"
#include "core/model/sampler.hpp"
#include "core/model/test_model.hpp"
#include "core/text/number.hpp"
#include "core/tokenizer/tokenizer.hpp"
#include "core/workload/chat_prompt.hpp"

#include <set>

using namespace exo::model;

namespace {

struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The node's engine on this machine: every layer as one device stage on
/// the cpu device (its kernels on `threads` threads), one sequence with a
/// KV cache of type `kv`. eval() gives the logits of the last token.
class device_engine {
public:
  device_engine(std::shared_ptr<const llama_model> model,
                exo::backend::kv_type kv, int threads, int llama_threads,
                std::uint32_t n_ctx)
    : model_(std::move(model)) {
    exo::backend::factory_options fo;
    fo.include = {"cpu"};
    fo.use_environment = false;
    fo.cpu.threads = threads;
    fo.cpu.llama_threads = llama_threads;
    auto reg = exo::backend::registry::create(fo);
    if (!reg || reg->devices().empty())
      throw model_error("no cpu device");
    reg_ = std::move(*reg);
    ops_ = std::make_unique<backend_ops>(*reg_.devices().front());
    device_stage_options so;
    so.kv = kv;
    so.max_tokens = 512; // llama.cpp's micro-batch
    auto st = device_stage::create(model_, 0, model_->hparams().n_layer,
                                   *ops_, so);
    if (!st)
      throw model_error(st.err().to_string());
    stage_ = std::move(*st);
    auto c = stage_->new_cache(n_ctx);
    if (!c)
      throw model_error(c.err().to_string());
    cache_ = *c;
  }

  std::vector<float> eval(const std::vector<int32_t>& toks) {
    const auto& hp = model_->hparams();
    std::vector<float> logits(hp.n_vocab);
    const std::size_t step = stage_->options().max_tokens;
    for (std::size_t i = 0; i < toks.size(); i += step) {
      const std::size_t n = std::min(step, toks.size() - i);
      std::vector<float> x(n * hp.n_embd);
      auto e = stage_->embed(toks.data() + i, n, x.data());
      if (e.ok())
        e = stage_->forward(cache_, pos_, x.data(), n, logits.data());
      if (!e.ok())
        throw model_error(e.err().to_string());
      pos_ += static_cast<std::uint32_t>(n);
    }
    return logits;
  }

private:
  std::shared_ptr<const llama_model> model_;
  exo::backend::registry reg_;
  std::unique_ptr<backend_ops> ops_;
  std::unique_ptr<device_stage> stage_;
  cache_id cache_ = 0;
  std::uint32_t pos_ = 0;
};

/// The values of every subcommand as text, converted after parsing (the
/// numbers with the checks and messages below). `given` says whether the
/// chosen subcommand got an option.
struct arguments {
  std::map<std::string, std::string> v;
  bool tied = false;
  bool llama3_rope = false;
  bool print_ids = false;
  bool chat = false;
  std::string file;
  std::string q_in, q_out, q_type;
  const CLI::App* cmd = nullptr;

  bool count(const std::string& key) const {
    auto* o = cmd->get_option_no_throw("--" + key);
    return o != nullptr && o->count() > 0;
  }
  std::string operator[](const std::string& key) const {
    auto it = v.find(key);
    return it == v.end() ? std::string{} : it->second;
  }
};

// Numbers go through the one strict parser (core/text/number.hpp): "-1",
// "+3", " 7" or "1e3" are refused, and a value past the field's type is an
// error, not a silent wrap ("--top-k 4294967297" was 1).
uint64_t to_uint(const std::string& key, const std::string& v,
                 uint64_t hi = std::numeric_limits<uint64_t>::max()) {
  try {
    return exo::text::parse_integer<uint64_t>(v, 0, hi, "--" + key);
  } catch (const exo::text::number_error& e) {
    throw usage_error(e.what());
  }
}

uint32_t to_u32(const std::string& key, const std::string& v) {
  return static_cast<uint32_t>(
    to_uint(key, v, std::numeric_limits<uint32_t>::max()));
}

float to_float(const std::string& key, const std::string& v) {
  try {
    return static_cast<float>(
      exo::text::parse_real(v, -std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::max(), "--" + key));
  } catch (const exo::text::number_error& e) {
    throw usage_error(e.what());
  }
}

const char* const type_names =
  "f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, q5_k, "
  "q6_k, q3_k_m, q4_k_m or q5_k_m";

file_type parse_type(const std::string& what, const std::string& s) {
  file_type ft;
  if (!parse_file_type(s, ft))
    throw usage_error(what + " must be one of " + type_names + ", not '" + s
                      + "'");
  return ft;
}

int cmd_make_test(const arguments& a) {
  test_model_options o;
  for (auto& [k, v] : a.v) {
    if (!a.count(k) || k == "out" || k == "vocab-from"
        || k == "tokenizer-config")
      continue;
    else if (k == "layers")
      o.layers = to_u32(k, v);
    else if (k == "dim")
      o.dim = to_u32(k, v);
    else if (k == "ff")
      o.ff = to_u32(k, v);
    else if (k == "heads")
      o.heads = to_u32(k, v);
    else if (k == "kv-heads")
      o.kv_heads = to_u32(k, v);
    else if (k == "vocab")
      o.vocab = to_u32(k, v);
    else if (k == "ctx")
      o.ctx = to_u32(k, v);
    else if (k == "seed")
      o.seed = to_uint(k, v);
    else if (k == "type") {
      auto ft = parse_type("--type", v);
      o.type = ft.base;
      o.mix = ft.kind;
    }
    else if (k == "tokenizer")
      o.tokenizer = v;
    else if (k == "arch")
      o.arch = v;
    else if (k == "head-dim")
      o.head_dim = to_u32(k, v);
    else
      throw usage_error("unknown option --" + k);
  }
  o.tied = a.tied;
  o.llama3_rope = a.llama3_rope;
  if (o.llama3_rope)
    o.rope_base = 500000.0f; // Llama 3's
  // --vocab-from tokenizer.json [--tokenizer-config tokenizer_config.json]:
  // the vocabulary converted as convert_hf_to_gguf.py does (--vocab, when
  // given, pads it to the embedding rows).
  if (a.count("vocab-from"))
    o.vocab_from = std::make_shared<hf_vocab>(load_hf_vocab(
      a["vocab-from"], a.count("tokenizer-config") ? a["tokenizer-config"] : "",
      a.count("vocab") ? o.vocab : 0));
  else if (a.count("tokenizer-config"))
    throw usage_error("--tokenizer-config needs --vocab-from");
  if (!a.count("out"))
    throw usage_error("make-test needs --out FILE");
  make_test_model(o, a["out"]);
  std::printf("wrote %s\n", a["out"].c_str());
  return 0;
}

int cmd_quantize(const arguments& a) {
  if (a.q_in.empty() || a.q_out.empty() || a.q_type.empty())
    throw usage_error("quantize needs IN OUT TYPE");
  auto ft = parse_type("TYPE", a.q_type);
  quantize_file(a.q_in, a.q_out, ft);
  std::printf("wrote %s (%s)\n", a.q_out.c_str(), to_string(ft).c_str());
  return 0;
}

int cmd_info(const arguments& a) {
  if (a.file.empty())
    throw usage_error("info needs exactly one FILE");
  auto f = gguf_file::open(a.file);
  for (auto& line : summary_lines(summarize(*f)))
    std::printf("%s\n", line.c_str());
  std::printf("\n");
  std::printf("GGUF v%u, %zu metadata keys, %zu tensors, alignment %llu, "
              "data at %llu, %llu bytes\n",
              f->version(), f->metadata().size(), f->tensors().size(),
              static_cast<unsigned long long>(f->alignment()),
              static_cast<unsigned long long>(f->data_offset()),
              static_cast<unsigned long long>(f->file_size()));
  std::printf("\nmetadata:\n");
  for (auto& kv : f->metadata())
    std::printf("  %-44s %-8s %s\n", kv.key.c_str(), to_string(kv.type),
                to_display_string(kv.value).c_str());
  std::printf("\ntensors:\n");
  for (auto& t : f->tensors()) {
    std::string shape;
    for (auto d : t.ne)
      shape += (shape.empty() ? "" : " x ") + std::to_string(d);
    std::printf("  %-28s %-5s %-16s %12llu bytes @ %llu\n", t.name.c_str(),
                to_string(t.type), shape.c_str(),
                static_cast<unsigned long long>(t.n_bytes),
                static_cast<unsigned long long>(t.offset));
  }
  auto hp = llama_hparams::from_gguf(*f);
  std::printf("\n%s: layers %u, embd %u, ff %u, heads %u, kv heads %u, "
              "head dim %u, rope %s dims %u base %g, eps %g, vocab %u, "
              "ctx %u%s\n",
              hp.traits.name, hp.n_layer, hp.n_embd, hp.n_ff, hp.n_head,
              hp.n_head_kv, hp.head_dim, hp.rope_neox() ? "neox" : "normal",
              hp.n_rot, hp.rope_freq_base, hp.rms_eps, hp.n_vocab,
              hp.n_ctx_train,
              hp.tied_output ? ", output tied to token_embd" : "");
  std::printf("\nper-layer costs (attention at ctx/2):\n");
  std::printf("  %5s %14s %14s %16s %12s\n", "layer", "weight bytes",
              "kv bytes/tok", "flops/tok", "act bytes");
  auto costs = layer_costs(*f, hp);
  for (size_t l = 0; l < costs.size(); ++l)
    std::printf("  %5zu %14llu %14llu %16llu %12llu\n", l,
                static_cast<unsigned long long>(costs[l].weight_bytes),
                static_cast<unsigned long long>(costs[l].kv_bytes_per_token),
                static_cast<unsigned long long>(costs[l].flops_per_token),
                static_cast<unsigned long long>(costs[l].activation_bytes));
  return 0;
}

int cmd_run(const arguments& a) {
  if (!a.count("model"))
    throw usage_error("run needs --model FILE");
  const uint64_t n_gen = a.count("n") ? to_uint("n", a["n"]) : 16;
  sampler_params sp;
  sp.seed = a.count("seed") ? to_uint("seed", a["seed"]) : 0;
  sp.temperature =
    a.count("temperature") ? to_float("temperature", a["temperature"]) : 0.0f;
  if (a.count("top-k"))
    sp.top_k = to_u32("top-k", a["top-k"]);
  if (a.count("top-p"))
    sp.top_p = to_float("top-p", a["top-p"]);
  const int threads = a.count("threads") ? static_cast<int>(
                                             to_uint("threads", a["threads"], 4096))
                                         : 1;
  ops::set_threads(threads);
  // One CPU per thread: exo-model runs the engine alone (unbound, the
  // second thread may start on the first's CPU and a prompt take twice as
  // long).
  ops::bind_threads();
  // The bits of llama.cpp run with this many threads (its split-KV decode
  // from position 256); 1 by default, whatever --threads is.
  if (a.count("llama-threads")) {
    const auto lt = to_uint("llama-threads", a["llama-threads"]);
    if (lt == 0 || lt > 1024)
      throw usage_error("--llama-threads must be 1 to 1024");
    ops::set_llama_threads(static_cast<int>(lt));
  }

  auto model = llama_model::load(a["model"]);
  auto& hp = model->hparams();
  auto tok = tokenizer::from_gguf(model->file());
  // --chat: the prompt as the model's chat template renders it.
  std::string text = a["prompt"];
  std::set<int32_t> stop_ids = tok.eog_ids();
  std::vector<std::string> stop_strings;
  if (a.chat) {
    exo::workload::chat_prompt cp;
    try {
      cp = exo::workload::render_chat(
        model->file(), tok, exo::workload::chat_messages(a["system"], text));
    } catch (const std::exception& e) {
      throw usage_error(a["model"] + ": " + e.what());
    }
    text = cp.text;
    stop_ids.insert(cp.stop_tokens.begin(), cp.stop_tokens.end());
    stop_strings = cp.stop_strings;
  } else if (a.count("system")) {
    throw usage_error("--system goes with --chat");
  }
  auto prompt = exo::workload::prompt_tokens(tok, text, a.chat);
  if (prompt.empty())
    throw usage_error("the prompt gives no tokens (and the model has no BOS)");
  const uint32_t n_ctx =
    a.count("ctx") ? to_u32("ctx", a["ctx"])
                   : hp.n_ctx_train;
  if (prompt.size() + n_gen > n_ctx)
    throw usage_error("prompt (" + std::to_string(prompt.size())
                      + " tokens) plus -n " + std::to_string(n_gen)
                      + " exceed the context of " + std::to_string(n_ctx));
  // The host engine (an f16 cache), or with --kv-type the node's.
  std::unique_ptr<device_engine> dev;
  if (a.count("kv-type")) {
    auto kv = exo::backend::parse_kv_type(a["kv-type"]);
    if (!kv)
      throw usage_error("--kv-type must be f16, q8_0 or f32, not '"
                        + a["kv-type"] + "'");
    if (!exo::backend::kv_holds_heads(*kv, hp.head_dim))
      throw usage_error("--kv-type q8_0 needs heads a multiple of 32 wide; "
                        "this model's are " + std::to_string(hp.head_dim));
    dev = std::make_unique<device_engine>(model, *kv, threads,
                                          ops::llama_threads(), n_ctx);
  }
  llama_pipeline pipe(model, {0, hp.n_layer});
  auto seq = pipe.new_sequence(dev ? 1 : n_ctx);
  auto eval = [&](const std::vector<int32_t>& toks) {
    return dev ? dev->eval(toks) : pipe.eval(seq, toks);
  };
  sampler smp(sp);

  using clock = std::chrono::steady_clock;
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
  auto t0 = clock::now();
  auto logits = eval(prompt);
  auto t1 = clock::now();
  std::vector<int32_t> out;
  std::string generated;
  for (uint64_t i = 0; i < n_gen; ++i) {
    if (auto bad = sampler::first_non_finite(logits.data(), hp.n_vocab);
        bad != hp.n_vocab)
      throw model_error("the model gave a non-finite logit (token "
                        + std::to_string(bad) + " at generated token "
                        + std::to_string(i)
                        + "): its weights hold NaN or infinity, or its "
                          "activations overflow");
    auto id = smp.sample(logits.data(), hp.n_vocab);
    out.push_back(id);
    auto piece = tok.piece(id);
    std::fputs(piece.c_str(), stdout);
    std::fflush(stdout);
    if (stop_ids.count(id) != 0)
      break;
    if (!stop_strings.empty()) { // a text end of turn
      generated += piece;
      if (exo::chat::find_stop(generated, stop_strings).first
          != std::string::npos)
        break;
    }
    if (i + 1 < n_gen)
      logits = eval({id});
  }
  auto t2 = clock::now();
  const double tp = std::chrono::duration<double>(t1 - t0).count();
  const double tg = std::chrono::duration<double>(t2 - t1).count();
  std::printf("\n\nprompt: %zu tokens in %.3f s (%.1f tokens/s)\n",
              prompt.size(), tp, prompt.size() / tp);
  std::printf("generation: %zu tokens in %.3f s (%.1f tokens/s), "
              "%d thread(s)\n",
              out.size(), tg, out.size() / (tg > 0 ? tg : 1e-9), threads);
  if (a.print_ids) {
    // Token ids for token-for-token comparisons (llama.cpp, the cluster).
    auto join = [](const std::vector<int32_t>& ids) {
      std::string s;
      for (auto id : ids)
        s += (s.empty() ? "" : " ") + std::to_string(id);
      return s;
    };
    std::printf("prompt ids: %s\n", join(prompt).c_str());
    std::printf("generated ids: %s\n", join(out).c_str());
  }
  if (a.count("logits-out")) {
    std::FILE* f = std::fopen(a["logits-out"].c_str(), "w");
    if (!f)
      throw usage_error("cannot write '" + a["logits-out"] + "'");
    for (auto v : logits)
      std::fprintf(f, "%.9g\n", v);
    std::fclose(f);
  }
  return 0;
}

constexpr const char* description
  = "Makes, inspects and runs llama GGUF files on the CPU.";

} // namespace

int main(int argc, char** argv) {
  CLI::App app{description, "exo-model"};
  exo::cli::configure(app);
  app.require_subcommand(1);
  app.footer("Each command answers --help. Exit status: 0 on success, 2 on "
             "bad arguments or a bad model file.");
  arguments a;
  auto opt = [&](CLI::App* c, const std::string& key, const char* what,
                 const char* type) {
    auto names = key == "n" ? std::string{"-n,--n"} : "--" + key;
    c->add_option(names, a.v[key], what)->type_name(type);
  };
  auto* make = app.add_subcommand("make-test",
                                  "write a generated llama, qwen2 or qwen3 model (GGUF)");
  opt(make, "out", "the file to write", "FILE");
  opt(make, "layers", "layers", "N");
  opt(make, "dim", "embedding size", "D");
  opt(make, "ff", "feed-forward size", "F");
  opt(make, "heads", "attention heads", "H");
  opt(make, "kv-heads", "key/value heads", "K");
  opt(make, "vocab", "vocabulary size", "V");
  opt(make, "ctx", "training context", "C");
  opt(make, "type",
      "matrix format: f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q2_k q3_k q4_k "
      "q5_k q6_k, or llama.cpp's mixes q3_k_m q4_k_m q5_k_m",
      "TYPE");
  opt(make, "tokenizer", "tokenizer kind", "llama|gpt2|llama3");
  opt(make, "arch", "architecture (llama)", "llama|qwen2|qwen3");
  opt(make, "head-dim", "attention head size (dim / heads)", "N");
  opt(make, "seed", "weights' seed", "S");
  make->add_flag("--tied", a.tied, "output tied to token_embd");
  make->add_flag("--llama3-rope", a.llama3_rope,
                 "Llama 3.1's rope_freqs.weight (and rope base 500000)");
  opt(make, "vocab-from",
      "the vocabulary of a Hugging Face tokenizer.json (as "
      "convert_hf_to_gguf.py converts it)",
      "tokenizer.json");
  opt(make, "tokenizer-config",
      "with --vocab-from: its tokenizer_config.json (BOS/EOS, chat template)",
      "tokenizer_config.json");
  auto* info = app.add_subcommand("info", "describe a GGUF file: metadata, "
                                          "tensors, per-layer costs");
  info->add_option("file", a.file, "the GGUF file")->type_name("FILE");
  auto* quant = app.add_subcommand(
    "quantize", "re-encode an F32/F16/BF16 GGUF as llama-quantize does "
                "(ggml's reference quantizers, llama.cpp's per-tensor mixes)");
  quant->add_option("in", a.q_in, "the F32, F16 or BF16 GGUF")
    ->type_name("IN");
  quant->add_option("out", a.q_out, "the file to write")->type_name("OUT");
  quant->add_option("type", a.q_type, type_names)->type_name("TYPE");
  auto* run = app.add_subcommand("run", "generate text on the CPU");
  opt(run, "model", "the model (GGUF)", "FILE");
  opt(run, "prompt", "the prompt", "TEXT");
  opt(run, "n", "tokens to generate (16)", "N");
  opt(run, "seed", "sampling seed", "S");
  opt(run, "temperature", "0: greedy", "T");
  opt(run, "top-k", "sample from the K most likely", "K");
  opt(run, "top-p", "nucleus sampling", "P");
  opt(run, "threads", "threads of the engine (1)", "N");
  opt(run, "ctx", "context length (default: the model's)", "C");
  opt(run, "logits-out", "write the last logits, one per line", "FILE");
  opt(run, "llama-threads", "give llama.cpp -t N's bits", "N");
  opt(run, "kv-type",
      "run the node's engine (the cpu device) with this KV cache: f16, "
      "q8_0 (llama.cpp's --cache-type-k/-v q8_0) or f32",
      "TYPE");
  run->add_flag("--print-ids", a.print_ids, "print prompt and output ids");
  run->add_flag("--chat", a.chat,
                "the prompt is a user message in the model's chat template");
  opt(run, "system", "with --chat: a system message", "TEXT");
  if (auto code = exo::cli::parse(app, argc, argv, std::cout, std::cerr,
                                  "exo-model: "))
    return *code;
  try {
    if (make->parsed()) {
      a.cmd = make;
      return cmd_make_test(a);
    }
    if (info->parsed()) {
      a.cmd = info;
      return cmd_info(a);
    }
    if (quant->parsed()) {
      a.cmd = quant;
      return cmd_quantize(a);
    }
    a.cmd = run;
    return cmd_run(a);
  } catch (const usage_error& e) {
    std::fprintf(stderr, "exo-model: %s (see --help)\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "exo-model: %s\n", e.what());
    return 2;
  }
}
