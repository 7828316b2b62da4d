#include "core/gateway/job_mapping.hpp"

#include "core/gateway/response.hpp"
#include "core/gguf/gguf.hpp"
#include "core/model/llama_hparams.hpp"
#include "core/tokenizer/tokenizer.hpp"
#include "core/text/json.hpp"
#include "core/workload/chat_prompt.hpp"

#include <algorithm>
#include <stdexcept>

namespace exo::gateway {

model_source load_model_source(const std::string& id,
                               const std::string& path) {
  model_source m;
  m.id = id;
  m.path = path;
  try {
    auto file = model::gguf_file::open(path);
    auto hp = model::llama_hparams::from_gguf(*file);
    m.n_ctx_train = hp.n_ctx_train;
    m.tokenizer = std::make_shared<const model::tokenizer>(
      model::tokenizer::from_gguf(*file));
    m.has_chat_template = file->find("tokenizer.chat_template") != nullptr;
    m.file = std::move(file);
  } catch (const std::exception& e) {
    throw std::runtime_error("model " + id + " (" + path + "): " + e.what());
  }
  return m;
}

std::string model_id_of(const std::string& path) {
  auto slash = path.find_last_of('/');
  auto name = slash == std::string::npos ? path : path.substr(slash + 1);
  const std::string ext = ".gguf";
  if (name.size() > ext.size()
      && name.compare(name.size() - ext.size(), ext.size(), ext) == 0)
    name.erase(name.size() - ext.size());
  return name;
}

namespace {

api_error context_exceeded(std::uint32_t ctx, std::int64_t prompt,
                           std::int64_t completion) {
  auto e = invalid_request(
    "This model's maximum context length is " + std::to_string(ctx)
      + " tokens. However, you requested "
      + std::to_string(prompt + completion) + " tokens ("
      + std::to_string(prompt) + " in the prompt, "
      + std::to_string(completion)
      + " in the completion). Please reduce the prompt or the completion "
        "length.",
    "max_tokens", "context_length_exceeded");
  return e;
}

} // namespace

namespace {

/// The 400 naming the first of `ids` (the request's field `field`) that is
/// outside the model's vocabulary, if one is.
std::optional<api_error> outside_vocabulary(const model_source& model,
                                            const std::vector<std::int32_t>& ids,
                                            const std::string& field) {
  const auto n = model.tokenizer->size();
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (static_cast<std::uint64_t>(ids[i]) >= n)
      return invalid_request("Invalid '" + field + "[" + std::to_string(i)
                               + "]': token " + std::to_string(ids[i])
                               + " is outside the vocabulary of model "
                               + model.id + " (" + std::to_string(n)
                               + " tokens).",
                             field);
  return std::nullopt;
}

/// The prompt's tokens as a job reads them, its fields set in `job` (the
/// text, or ids as given, or a chat rendered with the model's template and
/// its stop tokens; the template's textual stops into `stop_strings`), or
/// the error naming the request's field.
std::optional<api_error>
read_prompt(const model_source& model, endpoint_kind kind,
            const std::string& text, const std::vector<std::int32_t>& ids,
            const std::vector<chat_message>& messages,
            workload::job_request& job, std::vector<std::string>& stop_strings,
            std::vector<std::int32_t>& prompt) {
  auto& tok = *model.tokenizer;
  try {
    if (kind == endpoint_kind::chat_completions) {
      if (!model.has_chat_template)
        return invalid_request(
          "model " + model.id
            + " has no chat template (tokenizer.chat_template): use "
              "/v1/completions with a prompt",
          "model", "no_chat_template");
      std::vector<chat::message> chat_messages;
      for (auto& m : messages)
        chat_messages.push_back({m.role, m.content});
      auto chat = workload::render_chat(*model.file, tok, chat_messages);
      job.prompt = std::move(chat.text);
      job.special = true;
      job.stop_tokens = chat.stop_tokens;
      stop_strings = std::move(chat.stop_strings);
    } else if (!ids.empty()) {
      if (auto e = outside_vocabulary(model, ids, "prompt"))
        return e;
      job.prompt_ids = ids;
    } else {
      job.prompt = text;
    }
    prompt = job.prompt_ids.empty()
               ? workload::prompt_tokens(tok, job.prompt, job.special)
               : job.prompt_ids;
  } catch (const std::exception& e) {
    return invalid_request(e.what(), kind == endpoint_kind::chat_completions
                                       ? "messages"
                                       : "prompt");
  }
  return std::nullopt;
}

/// The context a request of `model` may use.
std::uint32_t context_of(const model_source& model,
                         const mapping_limits& limits) {
  std::uint32_t ctx = limits.ctx;
  if (model.n_ctx_train != 0)
    ctx = std::min(ctx, model.n_ctx_train);
  return ctx;
}

} // namespace

tokenize_answer answer_tokenize(const model_source& model,
                                const tokenize_request& req,
                                const mapping_limits& limits) {
  tokenize_answer out;
  auto& tok = *model.tokenizer;
  text::json body;
  if (req.detokenize) {
    if ((out.error = outside_vocabulary(model, req.tokens, "tokens")))
      return out;
    // llama.cpp's detokenize with special tokens as their text; bytes
    // that are not UTF-8 (a character cut between ids) become U+FFFD.
    body["prompt"] = valid_utf8(tok.detokenize(req.tokens, true));
  } else {
    workload::job_request job;
    std::vector<std::string> stops;
    std::vector<std::int32_t> prompt;
    if (req.kind == endpoint_kind::completions && !req.add_special) {
      prompt = tok.encode(req.prompt, false);
    } else if (auto e = read_prompt(model, req.kind, req.prompt, {},
                                    req.messages, job, stops, prompt)) {
      out.error = std::move(e);
      return out;
    }
    body["count"] = prompt.size();
    body["max_model_len"] = context_of(model, limits);
    body["tokens"] = prompt;
  }
  out.body = body.dump();
  return out;
}

std::uint64_t seed_of_id(std::string_view id) {
  // FNV-1a over the bytes, then splitmix64's finaliser: ids that differ in
  // their counter alone give unrelated seeds.
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : id) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

mapped_job map_request(const model_source& model,
                       const completion_request& req,
                       const mapping_limits& limits, std::uint64_t seed) {
  mapped_job out;
  auto& job = out.job;
  job.model = model.path;
  auto& tok = *model.tokenizer;
  std::vector<std::int32_t> prompt;
  if (auto e = read_prompt(model, req.kind, req.prompt, req.prompt_ids,
                           req.messages, job, out.stop_strings, prompt)) {
    out.error = std::move(e);
    return out;
  }
  if (prompt.empty()) {
    out.error = invalid_request("the prompt gives no tokens", "prompt");
    return out;
  }
  out.prompt_tokens = static_cast<std::int64_t>(prompt.size());
  const std::uint32_t ctx = context_of(model, limits);
  std::int64_t n_gen = 0;
  if (req.max_tokens) {
    n_gen = *req.max_tokens;
  } else if (req.kind == endpoint_kind::completions) {
    n_gen = limits.default_completion_tokens;
  } else {
    n_gen = static_cast<std::int64_t>(ctx) - out.prompt_tokens;
    if (n_gen < 1)
      n_gen = 1; // refused below
  }
  if (out.prompt_tokens + n_gen > ctx) {
    out.error = context_exceeded(ctx, out.prompt_tokens, n_gen);
    return out;
  }
  job.n_gen = static_cast<std::uint32_t>(n_gen);
  job.sampling.temperature = static_cast<float>(req.temperature);
  job.sampling.top_p = static_cast<float>(req.top_p);
  job.sampling.seed = req.seed ? static_cast<std::uint64_t>(*req.seed) : seed;
  if (req.top_k) // (else the sampler's 40, as llama-server)
    job.sampling.top_k =
      *req.top_k <= 0 ? 0u : static_cast<std::uint32_t>(*req.top_k);
  job.sampling.min_p = static_cast<float>(req.min_p);
  job.sampling.repetition_penalty =
    static_cast<float>(req.repetition_penalty);
  job.sampling.json = req.json_object;
  job.sampling.frequency_penalty = static_cast<float>(req.frequency_penalty);
  job.sampling.presence_penalty = static_cast<float>(req.presence_penalty);
  for (const auto& [id, bias] : req.logit_bias) { // ascending ids
    if (static_cast<std::uint64_t>(id) >= model.tokenizer->size()) {
      out.error = invalid_request(
        "Invalid 'logit_bias': token " + std::to_string(id)
          + " is outside the vocabulary of model " + model.id + " ("
          + std::to_string(model.tokenizer->size()) + " tokens).",
        "logit_bias");
      return out;
    }
    job.sampling.bias_ids.push_back(id);
    job.sampling.bias_values.push_back(static_cast<float>(bias));
  }
  job.sequences = req.n; // the choices; the prompt is read once
  job.share_prompt = true;
  job.stages = 0;
  // Speculation keeps greedy tokens, and sampled ones' distribution.
  job.draft = model.draft;
  job.n_ctx = 0; // prompt + n_gen
  job.kv_type = limits.kv_type;
  // echo with logprobs, or prompt_logprobs: the prompt's tokens are
  // scored too, with as many alternatives as either asks (the job has one
  // count; the bridge gives each part of the answer its own).
  job.prompt_logprobs = (req.echo && req.logprobs >= 0)
                        || req.prompt_logprobs >= 0;
  job.logprobs = std::max(req.logprobs, req.prompt_logprobs);
  out.stop_ids = tok.eog_ids();
  out.stop_ids.insert(job.stop_tokens.begin(), job.stop_tokens.end());
  return out;
}

static_assert(max_top_logprobs == model::max_top_logprobs,
              "the gateway's bound on top_logprobs is the jobs'");
static_assert(max_logit_bias == model::max_logit_bias,
              "the gateway's bound on logit_bias is the jobs'");

finish_reason finish_of(const std::vector<std::int32_t>& tokens,
                        const std::set<std::int32_t>& stop_ids,
                        bool cancelled) {
  if (cancelled)
    return finish_reason::stop;
  if (!tokens.empty() && stop_ids.count(tokens.back()) != 0)
    return finish_reason::stop;
  return finish_reason::length;
}

} // namespace exo::gateway
