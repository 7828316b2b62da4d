#include "core/workload/job_request.hpp"

#include "core/gguf/gguf.hpp"
#include "core/model/llama_model.hpp"
#include "core/workload/chat_prompt.hpp"
#include "core/tokenizer/tokenizer.hpp"
#include "core/workload/run_options.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <mutex>
#include <sstream>

namespace exo::workload {

namespace {

std::string number(float x) {
  std::ostringstream out;
  out << x;
  return out.str();
}

/// A model file loaded for jobs, with its tokenizer, and the version of the
/// file it was loaded from.
struct loaded_model {
  std::string path;
  /// inode, size and modification time (the identity file_sha256's memo
  /// uses, and the inode: a file replaced by another is another).
  std::int64_t ino = 0, size = 0, mtime_s = 0, mtime_ns = 0;
  std::shared_ptr<const model::llama_model> model;
  std::shared_ptr<const model::tokenizer> tokenizer;
  std::uint64_t used = 0;
};

/// How many model files stay loaded for the next job (a server's models).
constexpr std::size_t loaded_models_kept = 4;

/// The model at `path` and its tokenizer, loaded once per version of the
/// file: a server prepares a job per request, and loading a 128K-word
/// vocabulary (the GGUF's metadata and the tokenizer's tables) cost
/// ~0.1 s of the node's time each. A file that changed (another inode,
/// size or modification time) is loaded again; the least recently used
/// of more than loaded_models_kept goes.
loaded_model load_model_once(const std::string& path) {
  loaded_model want;
  auto load = [&] {
    want.model = model::llama_model::load(path);
    want.tokenizer = std::make_shared<const model::tokenizer>(
      model::tokenizer::from_gguf(want.model->file()));
  };
  struct stat sb {};
  if (::stat(path.c_str(), &sb) != 0) { // the loader says why
    load();
    return want;
  }
  want.path = path;
  want.ino = static_cast<std::int64_t>(sb.st_ino);
  want.size = static_cast<std::int64_t>(sb.st_size);
  want.mtime_s = static_cast<std::int64_t>(sb.st_mtim.tv_sec);
  want.mtime_ns = static_cast<std::int64_t>(sb.st_mtim.tv_nsec);
  auto same = [&](const loaded_model& m) {
    return m.path == want.path && m.ino == want.ino && m.size == want.size
           && m.mtime_s == want.mtime_s && m.mtime_ns == want.mtime_ns;
  };
  static std::mutex mx;
  static std::vector<loaded_model> kept;
  static std::uint64_t tick = 0;
  {
    std::lock_guard<std::mutex> guard{mx};
    for (auto& m : kept)
      if (same(m)) {
        m.used = ++tick;
        return m;
      }
  }
  load(); // outside the lock: another model's jobs do not wait for it
  std::lock_guard<std::mutex> guard{mx};
  want.used = ++tick;
  // Another version of the same path goes now (its mapping with it, once
  // no job holds it).
  kept.erase(std::remove_if(kept.begin(), kept.end(),
                            [&](const loaded_model& m) {
                              return m.path == path;
                            }),
             kept.end());
  kept.push_back(want);
  if (kept.size() > loaded_models_kept)
    kept.erase(std::min_element(kept.begin(), kept.end(),
                                [](const loaded_model& a,
                                   const loaded_model& b) {
                                  return a.used < b.used;
                                }));
  return want;
}

} // namespace

job_request make_job_request(const run_options& o) {
  job_request r;
  r.model = o.model;
  r.prompt = o.prompt;
  r.n_gen = o.n_gen;
  r.sampling = o.sampling;
  r.stages = o.stages;
  r.sequences = o.sequences;
  r.n_ctx = o.n_ctx;
  r.batch = o.batch;
  r.share_prompt = !o.no_prompt_sharing;
  r.prefix_cache = !o.no_prefix_cache;
  r.draft = o.draft;
  r.draft_tokens = o.draft_tokens;
  r.kv_type = o.kv_type;
  r.keep_logits = !o.logits_out.empty();
  r.name = o.name;
  if (o.chat) {
    chat_prompt chat;
    try {
      auto file = model::gguf_file::open(o.model);
      auto tok = model::tokenizer::from_gguf(*file);
      chat = render_chat(*file, tok, chat_messages(o.system, o.prompt));
    } catch (const job_error& e) {
      throw job_error("model " + o.model + ": " + e.what());
    } catch (const std::exception& e) {
      throw job_error("model " + o.model + ": " + e.what());
    }
    r.prompt = std::move(chat.text);
    r.special = true;
    r.stop_tokens = std::move(chat.stop_tokens);
  }
  return r;
}

std::uint32_t context_for(std::size_t prompt_tokens, std::uint32_t n_gen,
                          std::uint32_t n_ctx, const model_limits& limits) {
  auto train = limits.n_ctx_train;
  if (n_ctx != 0 && train != 0 && n_ctx > train)
    throw job_error("--ctx " + std::to_string(n_ctx)
                    + " exceeds the model's training context of "
                    + std::to_string(train) + " tokens");
  auto need = static_cast<std::uint64_t>(prompt_tokens) + n_gen;
  std::uint64_t limit = n_ctx != 0 ? n_ctx : train;
  if (limit == 0) // no --ctx and no stated training context
    limit = UINT32_MAX;
  if (need > limit)
    throw job_error(
      "prompt (" + std::to_string(prompt_tokens) + " tokens) plus -n "
      + std::to_string(n_gen) + " need a context of " + std::to_string(need)
      + " tokens, more than "
      + (n_ctx != 0 ? "--ctx " + std::to_string(n_ctx)
                    : "the model's training context of "
                        + std::to_string(train)));
  return n_ctx != 0 ? n_ctx : static_cast<std::uint32_t>(need);
}

void check_sampling(const model::sampler_params& p) {
  if (!std::isfinite(p.temperature) || p.temperature < 0.0f
      || p.temperature > max_temperature)
    throw job_error("--temperature must be a finite number in [0, "
                    + number(max_temperature) + "], not "
                    + number(p.temperature));
  if (!std::isfinite(p.top_p) || p.top_p < 0.0f || p.top_p > 1.0f)
    throw job_error("--top-p must be a number in [0, 1], not "
                    + number(p.top_p));
  auto penalty = [](float v, const char* name) {
    if (!std::isfinite(v) || v < -model::max_penalty
        || v > model::max_penalty)
      throw job_error(std::string{name} + " must be a number in ["
                      + number(-model::max_penalty) + ", "
                      + number(model::max_penalty) + "], not " + number(v));
  };
  penalty(p.frequency_penalty, "--frequency-penalty");
  penalty(p.presence_penalty, "--presence-penalty");
  if (!std::isfinite(p.min_p) || p.min_p < 0.0f || p.min_p > 1.0f)
    throw job_error("--min-p must be a number in [0, 1], not "
                    + number(p.min_p));
  if (!std::isfinite(p.repetition_penalty) || p.repetition_penalty <= 0.0f
      || p.repetition_penalty > model::max_repetition_penalty)
    throw job_error("--repetition-penalty must be a number in (0, "
                    + number(model::max_repetition_penalty) + "], not "
                    + number(p.repetition_penalty));
  if (p.bias_ids.size() != p.bias_values.size())
    throw job_error("the logit bias names " + std::to_string(p.bias_ids.size())
                    + " tokens but has " + std::to_string(p.bias_values.size())
                    + " values");
  if (p.bias_ids.size() > model::max_logit_bias)
    throw job_error("the logit bias names " + std::to_string(p.bias_ids.size())
                    + " tokens, more than "
                    + std::to_string(model::max_logit_bias));
  for (std::size_t i = 0; i < p.bias_ids.size(); ++i) {
    const auto id = p.bias_ids[i];
    const auto v = p.bias_values[i];
    if (id < 0 || (i > 0 && id <= p.bias_ids[i - 1]))
      throw job_error("the logit bias's token ids must be distinct, "
                      "ascending and not negative; " + std::to_string(id)
                      + " is not");
    if (!std::isfinite(v) || v < -model::max_logit_bias_value
        || v > model::max_logit_bias_value)
      throw job_error("the logit bias of token " + std::to_string(id)
                      + " must be a number in ["
                      + number(-model::max_logit_bias_value) + ", "
                      + number(model::max_logit_bias_value) + "], not "
                      + number(v));
  }
}

std::uint64_t max_draws(std::uint64_t tokens, std::uint32_t draft_tokens) {
  const std::uint64_t k = std::min(draft_tokens, max_draft_tokens);
  return tokens * (2 * k + 1);
}

std::vector<std::string> extend_lineage(std::vector<std::string> lineage,
                                        const std::string& key) {
  lineage.push_back(key);
  if (lineage.size() > max_job_lineage)
    lineage.erase(lineage.begin() + 1,
                  lineage.end() - static_cast<std::ptrdiff_t>(max_job_lineage - 1));
  return lineage;
}

std::string job_key_problem(const std::string& key) {
  auto colon = key.rfind(':');
  if (colon == std::string::npos)
    return "the job's key has no ':' (NODE:ID)";
  if (colon == 0 || colon > max_key_node)
    return "the job's key names no node, or one longer than "
           + std::to_string(max_key_node) + " bytes";
  auto id = key.substr(colon + 1);
  if (id.empty() || id.size() > 20
      || id.find_first_not_of("0123456789") != std::string::npos)
    return "the job's key has no decimal id after its ':'";
  if (id.size() == 20 && id > "18446744073709551615")
    return "the job's key's id does not fit 64 bits";
  return {};
}

std::string logprobs_problem(
  const std::vector<std::vector<std::int32_t>>& tokens,
  const std::vector<std::vector<model::token_logprobs>>& lp,
  std::int32_t logprobs) {
  if (logprobs < 0)
    return lp.empty() ? std::string{}
                      : "log-probabilities of a job that asked for none";
  if (lp.size() != tokens.size())
    return "log-probabilities of " + std::to_string(lp.size())
           + " sequences, not " + std::to_string(tokens.size());
  const auto top = static_cast<std::size_t>(logprobs);
  for (std::size_t j = 0; j < lp.size(); ++j) {
    if (lp[j].size() != tokens[j].size())
      return "sequence " + std::to_string(j) + " has "
             + std::to_string(lp[j].size()) + " log-probabilities for "
             + std::to_string(tokens[j].size()) + " tokens";
    for (auto& t : lp[j]) {
      bool finite = std::isfinite(t.logprob);
      for (auto v : t.top_logprobs)
        finite = finite && std::isfinite(v);
      if (!finite || t.top_ids.size() > top
          || t.top_logprobs.size() != t.top_ids.size()
          || std::any_of(t.top_ids.begin(), t.top_ids.end(),
                         [](std::int32_t id) { return id < 0; }))
        return "sequence " + std::to_string(j)
               + " has a malformed log-probability (more than "
               + std::to_string(top) + " alternatives, or not a number)";
    }
  }
  return {};
}

void check_job_name(const std::string& name) {
  if (name.empty() || name.size() > max_job_name)
    throw job_error("--id must be 1 to " + std::to_string(max_job_name)
                    + " characters, not " + std::to_string(name.size()));
  for (unsigned char c : name)
    if (!std::isalnum(c) && c != '.' && c != '_' && c != '-')
      throw job_error("--id may hold letters, digits, '.', '_' and '-' "
                      "only (it names the job for attach)");
}

backend::kv_type kv_type_of(const job_request& r) {
  if (r.kv_type.empty())
    return backend::kv_type::f16;
  if (auto t = backend::parse_kv_type(r.kv_type))
    return *t;
  std::string shown = r.kv_type.substr(0, 32);
  for (auto& c : shown)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      c = '?';
  throw job_error("--kv-type must be f16, q8_0 or f32, not '" + shown
                  + (r.kv_type.size() > 32 ? "...'" : "'"));
}

std::uint32_t validate(const job_request& r, std::size_t prompt_tokens,
                       const model_limits& limits) {
  kv_type_of(r); // throws for an unknown type
  if (prompt_tokens == 0)
    throw job_error("the prompt gives no tokens");
  if (r.sequences < 1 || r.sequences > max_job_sequences)
    throw job_error("--sequences must be in [1, "
                    + std::to_string(max_job_sequences) + "], not "
                    + std::to_string(r.sequences));
  if (r.batch > max_job_sequences)
    throw job_error("--batch must be in [1, "
                    + std::to_string(max_job_sequences) + "], not "
                    + std::to_string(r.batch));
  if (r.stages > limits.n_layer)
    throw job_error("--stages " + std::to_string(r.stages)
                    + " exceeds the model's "
                    + std::to_string(limits.n_layer) + " layers");
  check_sampling(r.sampling);
  if (!r.sampling.bias_ids.empty()
      && static_cast<std::uint32_t>(r.sampling.bias_ids.back())
           >= limits.n_vocab)
    throw job_error("the logit bias names token "
                    + std::to_string(r.sampling.bias_ids.back())
                    + ", outside the model's vocabulary of "
                    + std::to_string(limits.n_vocab) + " tokens");
  if (r.logprobs < -1
      || r.logprobs > static_cast<std::int32_t>(model::max_top_logprobs))
    throw job_error("logprobs must be -1 (none) or in [0, "
                    + std::to_string(model::max_top_logprobs) + "], not "
                    + std::to_string(r.logprobs));
  if (r.prompt_logprobs && r.logprobs < 0)
    throw job_error("the prompt's log-probabilities need logprobs (0 to "
                    + std::to_string(model::max_top_logprobs) + ")");
  if (!r.name.empty())
    check_job_name(r.name);
  return context_for(prompt_tokens, r.n_gen, r.n_ctx, limits);
}

std::shared_ptr<const model::llama_model>
load_draft(const std::string& path, const model::llama_model& m,
           const model::tokenizer& tok, std::uint32_t n_ctx) {
  std::shared_ptr<const model::llama_model> draft;
  model::tokenizer dtok;
  try {
    draft = model::llama_model::load(path);
    dtok = model::tokenizer::from_gguf(draft->file());
  } catch (const std::exception& e) {
    throw job_error("draft model " + path + ": " + e.what());
  }
  // Its proposals are token ids of the model's vocabulary.
  const auto n_vocab = m.hparams().n_vocab;
  if (dtok.size() != tok.size() || draft->hparams().n_vocab != n_vocab)
    throw job_error("draft model " + path + " has a vocabulary of "
                    + std::to_string(draft->hparams().n_vocab)
                    + " tokens, the model " + std::to_string(n_vocab));
  for (std::size_t i = 0; i < dtok.size(); ++i) {
    const auto id = static_cast<std::int32_t>(i);
    if (dtok.raw_piece(id) != tok.raw_piece(id))
      throw job_error("draft model " + path + ": token " + std::to_string(i)
                      + " is '" + dtok.raw_piece(id) + "', the model's '"
                      + tok.raw_piece(id) + "' (not the same vocabulary)");
  }
  if (draft->hparams().n_ctx_train != 0
      && n_ctx > draft->hparams().n_ctx_train)
    throw job_error("draft model " + path + ": its training context of "
                    + std::to_string(draft->hparams().n_ctx_train)
                    + " tokens is shorter than the job's "
                    + std::to_string(n_ctx));
  return draft;
}

std::string prompt_identity(const job_request& r) {
  if (r.prompt_ids.empty())
    return r.prompt;
  std::string s{'\0'};
  s += "tokens:";
  for (std::size_t i = 0; i < r.prompt_ids.size(); ++i)
    s += (i ? "," : "") + std::to_string(r.prompt_ids[i]);
  return s;
}

prepared_job prepare_job(job_request r) {
  prepared_job p;
  if (r.model.empty())
    throw job_error("a job needs a model file (--model FILE)");
  try {
    auto m = load_model_once(r.model);
    p.model = std::move(m.model);
    p.tokenizer = std::move(m.tokenizer);
  } catch (const std::exception& e) {
    throw job_error("model " + r.model + ": " + e.what());
  }
  auto& hp = p.model->hparams();
  if (!r.prompt_ids.empty()) {
    if (!r.prompt.empty())
      throw job_error("a job's prompt is text or token ids, not both");
    for (std::size_t i = 0; i < r.prompt_ids.size(); ++i)
      if (r.prompt_ids[i] < 0
          || static_cast<std::uint32_t>(r.prompt_ids[i]) >= hp.n_vocab)
        throw job_error("prompt token " + std::to_string(i) + " ("
                        + std::to_string(r.prompt_ids[i])
                        + ") is outside the model's vocabulary of "
                        + std::to_string(hp.n_vocab) + " tokens");
    p.prompt = r.prompt_ids;
  } else {
    try {
      p.prompt = prompt_tokens(*p.tokenizer, r.prompt, r.special);
    } catch (const std::exception& e) {
      throw job_error(std::string{"the prompt cannot be tokenized: "}
                      + e.what());
    }
  }
  model_limits limits;
  limits.n_layer = hp.n_layer;
  limits.n_vocab = hp.n_vocab;
  limits.n_ctx_train = hp.n_ctx_train;
  p.n_ctx = validate(r, p.prompt.size(), limits);
  if (!backend::kv_holds_heads(kv_type_of(r), hp.head_dim))
    throw job_error("--kv-type q8_0 needs the model's heads to be a "
                    "multiple of 32 wide (whole Q8_0 blocks); "
                    + r.model + "'s are " + std::to_string(hp.head_dim));
  for (auto t : r.stop_tokens)
    if (t < 0 || static_cast<std::uint32_t>(t) >= limits.n_vocab)
      throw job_error("stop token " + std::to_string(t)
                      + " is outside the model's vocabulary of "
                      + std::to_string(limits.n_vocab));
  if (!r.draft.empty()) {
    if (r.draft_tokens < 1 || r.draft_tokens > max_draft_tokens)
      throw job_error("--draft-tokens must be in [1, "
                      + std::to_string(max_draft_tokens) + "], not "
                      + std::to_string(r.draft_tokens));
    p.draft = load_draft(r.draft, *p.model, *p.tokenizer, p.n_ctx);
  }
  p.request = std::move(r);
  return p;
}

} // namespace exo::workload
