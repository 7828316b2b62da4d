#include "core/workload/run_options.hpp"

#include "core/cli/program.hpp"
#include "core/text/number.hpp"
#include "core/workload/job_request.hpp"

#include <limits>
#include <map>

#include <stdexcept>

namespace exo::workload {

namespace {

// Every number goes through the one strict parser (core/text/number.hpp):
// "-1" is refused rather than wrapped, "1e3" or "0x10" rather than cut.
std::uint64_t to_uint(const std::string& key, const std::string& v) {
  return text::parse_integer<std::uint64_t>(
    v, 0, std::numeric_limits<std::uint64_t>::max(), key);
}

/// Finite; the sampling rules (job_request) check the range.
float to_float(const std::string& key, const std::string& v) {
  return static_cast<float>(
    text::parse_real(v, -std::numeric_limits<float>::max(),
                     std::numeric_limits<float>::max(), key));
}

std::uint32_t to_u32(const std::string& key, const std::string& v,
                     std::uint32_t lo, std::uint32_t hi) {
  return text::parse_integer<std::uint32_t>(v, lo, hi, key);
}

} // namespace

namespace {

/// The text of each option, converted and checked after parsing.
struct run_words {
  std::string n, seed, temperature, top_k, top_p, stages, sequences, ctx;
  std::string batch, draft_tokens;
  std::string frequency_penalty, presence_penalty, logit_bias;
  std::string min_p, repetition_penalty;
  std::string llama_threads;
};

/// --logit-bias "ID=BIAS,ID=BIAS,...": the sampler's bias, ids ascending
/// (a repeated id is refused; ranges and the vocabulary are the job's
/// checks).
void parse_logit_bias(const std::string& v, model::sampler_params& p) {
  std::map<std::int32_t, float> bias;
  std::size_t at = 0;
  while (at <= v.size()) {
    auto end = v.find(',', at);
    if (end == std::string::npos)
      end = v.size();
    const auto item = v.substr(at, end - at);
    const auto eq = item.find('=');
    if (eq == std::string::npos)
      throw std::invalid_argument("--logit-bias wants ID=BIAS[,ID=BIAS...], "
                                  "not '" + item + "'");
    const auto id = text::parse_integer<std::int32_t>(
      item.substr(0, eq), 0, std::numeric_limits<std::int32_t>::max(),
      "--logit-bias's token id");
    if (!bias.emplace(id, to_float("--logit-bias", item.substr(eq + 1)))
           .second)
      throw std::invalid_argument("--logit-bias names token "
                                  + std::to_string(id) + " twice");
    at = end + 1;
  }
  for (const auto& [id, b] : bias) {
    p.bias_ids.push_back(id);
    p.bias_values.push_back(b);
  }
}

/// The options of a run on `app`; `local` adds exo-node run's own.
void describe(CLI::App& app, run_options& o, run_words& w, bool local) {
  cli::configure(app);
  app.add_option("--model", o.model, "the model (GGUF)")->type_name("FILE");
  app.add_option("--prompt", o.prompt, "the prompt")->type_name("TEXT");
  app.add_option("-n,--n", w.n, "tokens to generate (16)")->type_name("N");
  app.add_option("--seed", w.seed, "sampling seed")->type_name("S");
  app.add_option("--temperature", w.temperature, "0: greedy")
    ->type_name("T");
  app.add_option("--top-k", w.top_k, "sample from the K most likely")
    ->type_name("K");
  app.add_option("--top-p", w.top_p, "nucleus sampling")->type_name("P");
  app.add_option("--min-p", w.min_p,
                 "keep the tokens at least P times as likely as the best "
                 "(after top-k and top-p; 0: off)")
    ->type_name("P");
  app.add_option("--repetition-penalty", w.repetition_penalty,
                 "divide the logits of the prompt's and generated tokens by "
                 "R (multiply the negative ones; 1: off, at most 2)")
    ->type_name("R");
  app.add_option("--frequency-penalty", w.frequency_penalty,
                 "subtract F from a token's logit per time it was generated "
                 "(-2 to 2, OpenAI's frequency_penalty)")
    ->type_name("F");
  app.add_option("--presence-penalty", w.presence_penalty,
                 "subtract F from the logit of a token generated before "
                 "(-2 to 2)")
    ->type_name("F");
  app.add_option("--logit-bias", w.logit_bias,
                 "add BIAS (-100 to 100) to token ID's logit, "
                 "ID=BIAS[,ID=BIAS...]")
    ->type_name("LIST");
  app.add_flag("--json", o.sampling.json,
               "JSON mode: the text is one JSON object (every token that "
               "would break it is masked; it ends with the object)");
  app.add_option("--stages", w.stages,
                 "split evenly into K stages (default: the solver's plan)")
    ->type_name("K");
  app.add_option("--sequences", w.sequences,
                 "M copies of the prompt in flight at once")
    ->type_name("M");
  app.add_option("--batch", w.batch,
                 "at most B of the sequences in one step (batched decoding; "
                 "default: as many as a step carries, 1: each alone)")
    ->type_name("B");
  app.add_flag("--no-prompt-sharing", o.no_prompt_sharing,
               "compute each sequence's copy of the prompt (by default "
               "the stages compute it once and copy its KV rows: the same "
               "tokens)");
  app.add_flag("--no-prefix-cache", o.no_prefix_cache,
               "compute the whole prompt (by default the rows of its start "
               "that an earlier job read on the same stages are copied: "
               "the same tokens)");
  app.add_option("--draft", o.draft,
                 "speculative decoding with this draft model (same "
                 "vocabulary): it proposes, the model checks its proposals "
                 "in one step; greedy, the tokens are the same, sampling "
                 "(--temperature), their distribution")
    ->type_name("FILE");
  app.add_option("--draft-tokens", w.draft_tokens,
                 "tokens the draft proposes a round (4)")
    ->type_name("K");
  app.add_option("--ctx", w.ctx, "context length (default: prompt + n)")
    ->type_name("C");
  app.add_option("--kv-type", o.kv_type,
                 "the KV cache's type: f16 (default), q8_0 (llama.cpp's "
                 "--cache-type-k/-v q8_0: 53% of the memory) or f32")
    ->type_name("TYPE");
  app.add_flag("--chat", o.chat,
               "the prompt is a user message, rendered with the model's "
               "chat template; stops at its end of turn");
  app.add_option("--system", o.system, "with --chat: a system message")
    ->type_name("TEXT");
  app.add_option("--id", o.name,
                 "name the job (letters, digits, . _ -): attach NAME finds "
                 "it from any node, also after its node died")
    ->type_name("NAME");
  if (!local)
    return;
  app.add_option("--logits-out", o.logits_out,
                 "write sequence 0's last logits, one per line")
    ->type_name("FILE");
  app.add_option("--config", o.config, "node settings (JSON)")
    ->type_name("FILE");
  app.add_option("--state-dir", o.state_dir, "override node.state_dir")
    ->type_name("DIR");
  app.add_option("--llama-threads", w.llama_threads,
                 "the cpu device runs llama.cpp's bits with N threads")
    ->type_name("N");
}

constexpr const char* run_description
  = "Runs one job: places the model (the solver's plan, or an even split "
    "with --stages), streams sequence 0's text and prints tokens/s.";

} // namespace

run_options parse_run_options(const std::vector<std::string>& words,
                              bool local) {
  run_options o;
  run_words w;
  CLI::App app{run_description, "run"};
  describe(app, o, w, local);
  if (cli::parse_or_throw(app, words)) {
    o.help = true;
    return o;
  }
  auto given = [&](const char* name) { return app.count(name) > 0; };
  if (given("-n"))
    o.n_gen = to_u32("-n", w.n, 0, 1u << 20);
  if (given("--seed"))
    o.sampling.seed = to_uint("--seed", w.seed);
  if (given("--temperature"))
    o.sampling.temperature = to_float("--temperature", w.temperature);
  if (given("--top-k"))
    o.sampling.top_k = to_u32("--top-k", w.top_k, 0, 1u << 30);
  if (given("--top-p"))
    o.sampling.top_p = to_float("--top-p", w.top_p);
  if (given("--min-p"))
    o.sampling.min_p = to_float("--min-p", w.min_p);
  if (given("--repetition-penalty"))
    o.sampling.repetition_penalty =
      to_float("--repetition-penalty", w.repetition_penalty);
  if (given("--frequency-penalty"))
    o.sampling.frequency_penalty =
      to_float("--frequency-penalty", w.frequency_penalty);
  if (given("--presence-penalty"))
    o.sampling.presence_penalty =
      to_float("--presence-penalty", w.presence_penalty);
  if (given("--logit-bias"))
    parse_logit_bias(w.logit_bias, o.sampling);
  if (given("--stages"))
    o.stages = to_u32("--stages", w.stages, 1, 1024);
  if (given("--sequences"))
    o.sequences = to_u32("--sequences", w.sequences, 1, 256);
  if (given("--batch"))
    o.batch = to_u32("--batch", w.batch, 1, 256);
  if (given("--draft-tokens"))
    o.draft_tokens = to_u32("--draft-tokens", w.draft_tokens, 1,
                             max_draft_tokens);
  if (given("--draft-tokens") && o.draft.empty())
    throw std::invalid_argument("--draft-tokens goes with --draft");
  if (given("--ctx"))
    o.n_ctx = to_u32("--ctx", w.ctx, 1, 1u << 24);
  if (local && given("--llama-threads"))
    o.llama_threads = to_u32("--llama-threads", w.llama_threads, 1, 1024);
  if (o.model.empty())
    throw std::invalid_argument("run needs --model FILE");
  if (given("--system") && !o.chat)
    throw std::invalid_argument("--system goes with --chat");
  if (given("--id"))
    check_job_name(o.name); // a job_error is an invalid_argument
  if (given("--kv-type") && !backend::parse_kv_type(o.kv_type))
    throw std::invalid_argument("--kv-type must be f16, q8_0 or f32, not '"
                                + o.kv_type + "'");
  return o;
}

std::string run_options_help(bool local) {
  run_options o;
  run_words w;
  CLI::App app{run_description, local ? "exo-node run" : "run"};
  describe(app, o, w, local);
  app.footer("Exit status: 0, 2 on bad arguments or model, 1 when the job "
             "fails.");
  return app.help();
}

} // namespace exo::workload
