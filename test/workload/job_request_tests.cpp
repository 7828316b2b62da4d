// A job request's rules (core/workload/job_request.hpp): each rule refuses
// what breaks it with a message naming the problem, and accepts the limit.

#include "core/model/llama_model.hpp"
#include "core/model/test_model.hpp"
#include "core/tokenizer/tokenizer.hpp"
#include "core/workload/job_numbers.hpp"
#include "core/workload/job_request.hpp"
#include "core/workload/run_options.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <unistd.h>

using namespace exo::workload;

namespace {

model_limits limits() {
  model_limits l;
  l.n_layer = 6;
  l.n_vocab = 512;
  l.n_ctx_train = 256;
  return l;
}

/// The message a call throws as job_error ("" when it does not throw).
template <class F>
std::string refusal(F f) {
  try {
    f();
  } catch (const job_error& e) {
    return e.what();
  }
  return "";
}

} // namespace

TEST_CASE("the context is prompt plus n_gen unless --ctx is given",
          "[workload][job_request]") {
  CHECK(context_for(10, 20, 0, limits()) == 30);
  CHECK(context_for(10, 20, 100, limits()) == 100);
  // Exactly the training context is allowed, with or without --ctx.
  CHECK(context_for(200, 56, 0, limits()) == 256);
  CHECK(context_for(200, 56, 256, limits()) == 256);
  // A model that states no training context limits nothing.
  auto none = limits();
  none.n_ctx_train = 0;
  CHECK(context_for(5000, 5000, 0, none) == 10000);
}

TEST_CASE("prompt plus n_gen beyond the training context is refused with "
          "both numbers named",
          "[workload][job_request]") {
  auto why = refusal([] { context_for(200, 57, 0, limits()); });
  CHECK(why
        == "prompt (200 tokens) plus -n 57 need a context of 257 tokens, "
           "more than the model's training context of 256");
}

TEST_CASE("prompt plus n_gen beyond --ctx is refused naming --ctx",
          "[workload][job_request]") {
  auto why = refusal([] { context_for(10, 91, 100, limits()); });
  CHECK(why
        == "prompt (10 tokens) plus -n 91 need a context of 101 tokens, "
           "more than --ctx 100");
}

TEST_CASE("a --ctx beyond the training context is refused even when the "
          "prompt fits",
          "[workload][job_request]") {
  auto why = refusal([] { context_for(4, 4, 257, limits()); });
  CHECK(why == "--ctx 257 exceeds the model's training context of 256 "
               "tokens");
}

TEST_CASE("a huge n_gen does not wrap the context arithmetic",
          "[workload][job_request]") {
  auto none = limits();
  none.n_ctx_train = 0;
  auto why = refusal(
    [&] { context_for(UINT32_MAX, UINT32_MAX, 0, none); });
  CHECK(why.find("need a context of 8589934590 tokens") != std::string::npos);
}

TEST_CASE("sampling parameters out of range are refused by name",
          "[workload][job_request]") {
  exo::model::sampler_params p;
  CHECK(refusal([&] { check_sampling(p); }).empty());
  p.temperature = 100.0f;
  p.top_p = 0.0f;
  CHECK(refusal([&] { check_sampling(p); }).empty());
  p.top_p = 1.0f;
  CHECK(refusal([&] { check_sampling(p); }).empty());
  p.temperature = -0.5f;
  CHECK(refusal([&] { check_sampling(p); })
        == "--temperature must be a finite number in [0, 100], not -0.5");
  p.temperature = std::numeric_limits<float>::quiet_NaN();
  CHECK(refusal([&] { check_sampling(p); }).find("--temperature must be")
        == 0);
  p.temperature = std::numeric_limits<float>::infinity();
  CHECK(refusal([&] { check_sampling(p); }).find("--temperature must be")
        == 0);
  p.temperature = 0.8f;
  p.top_p = 1.5f;
  CHECK(refusal([&] { check_sampling(p); })
        == "--top-p must be a number in [0, 1], not 1.5");
  p.top_p = -0.1f;
  CHECK(refusal([&] { check_sampling(p); }).find("--top-p must be") == 0);
}

TEST_CASE("penalties and a logit bias out of range are refused by name",
          "[workload][job_request]") {
  exo::model::sampler_params p;
  p.frequency_penalty = -2.0f;
  p.presence_penalty = 2.0f;
  p.bias_ids = {0, 7, 100};
  p.bias_values = {-100.0f, 0.5f, 100.0f};
  CHECK(refusal([&] { check_sampling(p); }).empty());
  auto q = p;
  q.frequency_penalty = 2.5f;
  CHECK(refusal([&] { check_sampling(q); })
        == "--frequency-penalty must be a number in [-2, 2], not 2.5");
  q = p;
  q.presence_penalty = std::numeric_limits<float>::quiet_NaN();
  CHECK(refusal([&] { check_sampling(q); }).find("--presence-penalty must")
        == 0);
  q = p;
  q.min_p = 1.5f;
  CHECK(refusal([&] { check_sampling(q); })
        == "--min-p must be a number in [0, 1], not 1.5");
  q = p;
  q.repetition_penalty = 0.0f;
  CHECK(refusal([&] { check_sampling(q); })
        == "--repetition-penalty must be a number in (0, 2], not 0");
  q.repetition_penalty = 2.0f;
  CHECK(refusal([&] { check_sampling(q); }).empty());
  q.repetition_penalty = 2.5f;
  CHECK(!refusal([&] { check_sampling(q); }).empty());
  q = p;
  q.bias_values[1] = 101.0f;
  CHECK(refusal([&] { check_sampling(q); })
        == "the logit bias of token 7 must be a number in [-100, 100], not "
           "101");
  q = p;
  q.bias_ids = {0, 100, 7}; // not ascending
  CHECK(refusal([&] { check_sampling(q); }).find("distinct, ascending")
        != std::string::npos);
  q.bias_ids = {0, 7, 7};
  CHECK(!refusal([&] { check_sampling(q); }).empty());
  q.bias_ids = {-1, 7, 100};
  CHECK(!refusal([&] { check_sampling(q); }).empty());
  q = p;
  q.bias_values.pop_back();
  CHECK(refusal([&] { check_sampling(q); })
        == "the logit bias names 3 tokens but has 2 values");
  q = p;
  q.bias_ids.clear();
  q.bias_values.clear();
  for (std::int32_t i = 0; i <= 1024; ++i) {
    q.bias_ids.push_back(i);
    q.bias_values.push_back(1.0f);
  }
  CHECK(refusal([&] { check_sampling(q); })
        == "the logit bias names 1025 tokens, more than 1024");
  // The vocabulary: validate() knows it.
  job_request r;
  r.n_gen = 8;
  r.sampling = p;
  auto lim = limits();
  lim.n_vocab = 101;
  CHECK(refusal([&] { validate(r, 4, lim); }).empty());
  lim.n_vocab = 100;
  CHECK(refusal([&] { validate(r, 4, lim); })
        == "the logit bias names token 100, outside the model's vocabulary "
           "of 100 tokens");
}

TEST_CASE("a request's sequences, stages and prompt are checked against the "
          "model",
          "[workload][job_request]") {
  job_request r;
  r.n_gen = 8;
  CHECK(validate(r, 4, limits()) == 12);
  CHECK(refusal([&] { validate(r, 0, limits()); })
        == "the prompt gives no tokens");
  r.sequences = 0;
  CHECK(refusal([&] { validate(r, 4, limits()); })
        == "--sequences must be in [1, 256], not 0");
  r.sequences = 257;
  CHECK(refusal([&] { validate(r, 4, limits()); })
        == "--sequences must be in [1, 256], not 257");
  r.sequences = 256;
  r.stages = 6;
  CHECK(refusal([&] { validate(r, 4, limits()); }).empty());
  r.stages = 7;
  CHECK(refusal([&] { validate(r, 4, limits()); })
        == "--stages 7 exceeds the model's 6 layers");
  r.stages = 0;
  r.sampling.temperature = -1.0f;
  CHECK(refusal([&] { validate(r, 4, limits()); }).find("--temperature")
        == 0);
  r.sampling.temperature = 0.0f;
  r.n_gen = 300;
  CHECK(refusal([&] { validate(r, 4, limits()); })
          .find("more than the model's training context of 256")
        != std::string::npos);
}

TEST_CASE("a request's logprobs are -1 or 0 to 20, and a peer's "
          "log-probabilities must fit its tokens",
          "[workload][job_request]") {
  job_request r;
  r.n_gen = 8;
  for (std::int32_t n : {-1, 0, 20}) {
    r.logprobs = n;
    CHECK(refusal([&] { validate(r, 4, limits()); }).empty());
  }
  for (std::int32_t n : {-2, 21}) {
    r.logprobs = n;
    CHECK(refusal([&] { validate(r, 4, limits()); })
          == "logprobs must be -1 (none) or in [0, 20], not "
               + std::to_string(n));
  }
  // The prompt's scores come with logprobs only; max_tokens 0 (the
  // prompt alone, scored) is a request like any other.
  r.prompt_logprobs = true;
  r.logprobs = -1;
  CHECK(refusal([&] { validate(r, 4, limits()); })
        == "the prompt's log-probabilities need logprobs (0 to 20)");
  r.logprobs = 1;
  r.n_gen = 0;
  CHECK(refusal([&] { validate(r, 4, limits()); }).empty());
  r.prompt_logprobs = false;
  r.n_gen = 8;
  const std::vector<std::vector<std::int32_t>> tokens{{5, 6}, {}};
  exo::model::token_logprobs one;
  one.logprob = -0.5f;
  one.top_ids = {5, 9};
  one.top_logprobs = {-0.5f, -1.5f};
  using lps = std::vector<std::vector<exo::model::token_logprobs>>;
  CHECK(logprobs_problem(tokens, {}, -1).empty());
  CHECK(logprobs_problem(tokens, lps{{one, one}, {}}, 2).empty());
  CHECK(logprobs_problem(tokens, lps{{one, one}, {}}, -1)
        == "log-probabilities of a job that asked for none");
  CHECK(logprobs_problem(tokens, lps{{one, one}}, 2)
        == "log-probabilities of 1 sequences, not 2");
  CHECK(logprobs_problem(tokens, lps{{one}, {}}, 2)
        == "sequence 0 has 1 log-probabilities for 2 tokens");
  CHECK(logprobs_problem(tokens, lps{{one, one}, {}}, 1).find("more than 1")
        != std::string::npos); // two alternatives where one was asked
  auto bad = one;
  bad.top_logprobs.pop_back(); // ids and values disagree
  CHECK(!logprobs_problem(tokens, lps{{one, bad}, {}}, 2).empty());
  bad = one;
  bad.logprob = std::numeric_limits<float>::quiet_NaN();
  CHECK(!logprobs_problem(tokens, lps{{bad, one}, {}}, 2).empty());
  bad = one;
  bad.top_ids[1] = -3;
  CHECK(!logprobs_problem(tokens, lps{{bad, one}, {}}, 2).empty());
}

TEST_CASE("a job request takes the job part of the run options",
          "[workload][job_request]") {
  auto o = parse_run_options({"--model", "m.gguf", "--prompt", "hi", "-n",
                              "7", "--seed", "3", "--temperature", "0.5",
                              "--stages", "2", "--sequences", "4", "--ctx",
                              "64", "--logits-out", "l.txt", "--kv-type",
                              "q8_0"},
                             true);
  auto r = make_job_request(o);
  CHECK(r.kv_type == "q8_0");
  CHECK(kv_type_of(r) == exo::backend::kv_type::q8_0);
  CHECK(r.model == "m.gguf");
  CHECK(r.prompt == "hi");
  CHECK(r.n_gen == 7);
  CHECK(r.sampling.seed == 3);
  CHECK(r.sampling.temperature == 0.5f);
  CHECK(r.stages == 2);
  CHECK(r.sequences == 4);
  CHECK(r.n_ctx == 64);
  CHECK(r.keep_logits);
  // Penalties and a logit bias (ids sorted, as the sampler wants them).
  o = parse_run_options({"--model", "m.gguf", "--frequency-penalty", "0.5",
                         "--presence-penalty", "-1.25", "--logit-bias",
                         "9=-100,3=2.5", "--min-p", "0.05",
                         "--repetition-penalty", "1.1"},
                        false);
  r = make_job_request(o);
  CHECK(r.sampling.min_p == 0.05f);
  CHECK(r.sampling.repetition_penalty == 1.1f);
  CHECK_FALSE(r.sampling.json);
  CHECK(make_job_request(parse_run_options({"--model", "m", "--json"}, false))
          .sampling.json);
  CHECK(r.sampling.frequency_penalty == 0.5f);
  CHECK(r.sampling.presence_penalty == -1.25f);
  CHECK(r.sampling.bias_ids == std::vector<std::int32_t>{3, 9});
  CHECK(r.sampling.bias_values == std::vector<float>{2.5f, -100.0f});
}

TEST_CASE("run options parse numbers strictly", "[workload][job_request]") {
  auto message = [](std::vector<std::string> extra) -> std::string {
    std::vector<std::string> words{"--model", "m.gguf"};
    words.insert(words.end(), extra.begin(), extra.end());
    try {
      parse_run_options(words, true);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "(accepted)";
  };
  // std::stoull and std::stof took each of these.
  CHECK(message({"--seed", "+3"}) == "--seed: '+3' is not an integer "
                                     "(digits only)");
  CHECK(message({"-n", " 7"}) == "-n: ' 7' is not an integer (digits only)");
  CHECK(message({"--temperature", "0x1p-1"})
        == "--temperature: '0x1p-1' is not a number (digits with an optional "
           "'-', '.' and exponent, e.g. 0.25 or 1e-3)");
  CHECK(message({"--top-p", "nan"})
        == "--top-p: 'nan' is not a number (digits with an optional '-', '.' "
           "and exponent, e.g. 0.25 or 1e-3)");
  CHECK(message({"--temperature", "1e39"})
        == "--temperature: '1e39' is larger than 3.4028234663852886e+38");
  CHECK(message({"--seed", "18446744073709551616"})
        == "--seed: '18446744073709551616' is larger than "
           "18446744073709551615");
  CHECK(message({"--stages", "0"}) == "--stages: '0' must be >= 1");
  CHECK(message({"--llama-threads", "1025"})
        == "--llama-threads: '1025' is larger than 1024");
  CHECK(message({"-n", "-1"}) == "-n: '-1' must be >= 0");
  CHECK(message({"--kv-type", "q4_0"})
        == "--kv-type must be f16, q8_0 or f32, not 'q4_0'");
  CHECK(message({"--logit-bias", "3"})
        == "--logit-bias wants ID=BIAS[,ID=BIAS...], not '3'");
  CHECK(message({"--logit-bias", "3=1,3=2"})
        == "--logit-bias names token 3 twice");
  CHECK(message({"--logit-bias", "-3=1"}).find("--logit-bias's token id")
        == 0);
  CHECK(message({"--logit-bias", "3=1,"})
        == "--logit-bias wants ID=BIAS[,ID=BIAS...], not ''");
  auto o = parse_run_options({"--model", "m", "--seed", "007", "--top-p",
                              ".5", "--temperature", "1e-1"},
                             true);
  CHECK(o.sampling.seed == 7);
  CHECK(o.sampling.top_p == 0.5f);
  CHECK(o.sampling.temperature == 0.1f);
}

namespace {

/// A scratch folder (removed with it) holding model.gguf, a small test
/// model (3 layers, 32 wide, a 512-word vocabulary, a 64-token context),
/// and a request of 5 tokens after "once upon a time" for it.
struct model_dir {
  std::filesystem::path dir;
  std::string path;
  exo::model::test_model_options opts;
  job_request request;

  explicit model_dir(const std::string& name)
    : dir(std::filesystem::temp_directory_path()
          / (name + "-" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(dir);
    path = (dir / "model.gguf").string();
    opts.layers = 3;
    opts.dim = 32;
    opts.ff = 64;
    opts.vocab = 512;
    opts.ctx = 64;
    exo::model::make_test_model(opts, path);
    request.model = path;
    request.prompt = "once upon a time";
    request.n_gen = 5;
  }
  ~model_dir() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

} // namespace

TEST_CASE("preparing a job loads the model, tokenizes the prompt and applies "
          "the rules",
          "[workload][job_request]") {
  model_dir m("exo-job-request");
  const auto& dir = m.dir;
  const auto& path = m.path;
  auto r = m.request;
  auto p = prepare_job(r);
  REQUIRE(p.model);
  REQUIRE(p.tokenizer);
  CHECK(!p.prompt.empty());
  CHECK(p.n_ctx == p.prompt.size() + 5);
  CHECK(p.request.prompt == r.prompt);
  // The same request with more tokens than the model's 64 of context.
  r.n_gen = 64;
  auto why = refusal([&] { prepare_job(r); });
  CHECK(why.find("more than the model's training context of 64")
        != std::string::npos);
  r.n_gen = 5;
  r.stages = 4;
  CHECK(refusal([&] { prepare_job(r); })
        == "--stages 4 exceeds the model's 3 layers");
  r.stages = 0;
  // KV cache types: by name (a peer's request too), and Q8_0 blocks need
  // heads a multiple of 32 wide (this model's are 8).
  r.kv_type = "int4\n";
  CHECK(refusal([&] { prepare_job(r); })
        == "--kv-type must be f16, q8_0 or f32, not 'int4?'");
  r.kv_type = "q8_0";
  CHECK(refusal([&] { prepare_job(r); })
        == "--kv-type q8_0 needs the model's heads to be a multiple of 32 "
           "wide (whole Q8_0 blocks); "
             + path + "'s are 8");
  r.kv_type = "f32";
  CHECK(prepare_job(r).request.kv_type == "f32");
  r.kv_type = "";
  // The prompt as token ids (a client's token array) is read as given:
  // the text's tokens give the same prompt; ids outside the vocabulary,
  // or ids beside a text, are refused. Its identity (what a client that
  // resumes the job names) is not any text's.
  {
    auto ids = r;
    ids.prompt.clear();
    ids.prompt_ids = p.prompt;
    auto q = prepare_job(ids);
    CHECK(q.prompt == p.prompt);
    CHECK(q.n_ctx == p.n_ctx);
    CHECK(prompt_identity(r) == r.prompt);
    CHECK(prompt_identity(ids) != prompt_identity(r));
    CHECK(prompt_identity(ids).find('\0') == 0);
    auto other = ids;
    other.prompt_ids.push_back(1);
    CHECK(prompt_identity(other) != prompt_identity(ids));
    const auto n_vocab = p.model->hparams().n_vocab;
    other.prompt_ids.back() = static_cast<std::int32_t>(n_vocab);
    CHECK(refusal([&] { prepare_job(other); })
          == "prompt token " + std::to_string(p.prompt.size()) + " ("
               + std::to_string(n_vocab)
               + ") is outside the model's vocabulary of "
               + std::to_string(n_vocab) + " tokens");
    other.prompt_ids.back() = -1;
    CHECK(refusal([&] { prepare_job(other); }).find("(-1) is outside")
          != std::string::npos);
    auto both = ids;
    both.prompt = "x";
    CHECK(refusal([&] { prepare_job(both); })
          == "a job's prompt is text or token ids, not both");
  }
  // A file that is no model names the file.
  r.model = (dir / "missing.gguf").string();
  why = refusal([&] { prepare_job(r); });
  CHECK(why.find("model " + r.model + ": ") == 0);
  r.model = "";
  CHECK(refusal([&] { prepare_job(r); }).find("needs a model file")
        != std::string::npos);
}

TEST_CASE("jobs prepared from one model file share one load of it until "
          "the file changes",
          "[workload][job_request]") {
  namespace fs = std::filesystem;
  model_dir m("exo-job-load-once");
  const auto& path = m.path;
  auto& o = m.opts;
  auto r = m.request;
  auto a = prepare_job(r);
  auto b = prepare_job(r);
  CHECK(a.model == b.model); // the same load, not an equal one
  CHECK(a.tokenizer == b.tokenizer);
  CHECK(a.prompt == b.prompt);
  // Another model written over the file: loaded again, whatever the
  // clock's resolution (its time set a second on).
  const auto when = fs::last_write_time(path);
  o.vocab = 450;
  o.seed = 9;
  exo::model::make_test_model(o, path);
  fs::last_write_time(path, when + std::chrono::seconds(1));
  auto c = prepare_job(r);
  CHECK(c.model != a.model);
  CHECK(c.tokenizer != a.tokenizer);
  CHECK(c.model->hparams().n_vocab == 450);
  CHECK(c.tokenizer->size() == 450);
  CHECK(a.model->hparams().n_vocab == 512); // a job holding the old one
  // Another file of the same model, copied: its own load.
  auto copy = (m.dir / "copy.gguf").string();
  fs::copy_file(path, copy);
  r.model = copy;
  auto d = prepare_job(r);
  CHECK(d.model != c.model);
  CHECK(prepare_job(r).model == d.model);
}

TEST_CASE("a draft model must share the model's vocabulary",
          "[workload][job_request]") {
  auto dir = std::filesystem::temp_directory_path()
             / ("exo-draft-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto make = [&](const char* name, std::uint32_t layers, std::uint32_t vocab,
                  const char* tokenizer) {
    exo::model::test_model_options o;
    o.layers = layers;
    o.vocab = vocab;
    o.tokenizer = tokenizer;
    auto path = (dir / name).string();
    exo::model::make_test_model(o, path);
    return path;
  };
  auto target = make("target.gguf", 4, 512, "llama");
  auto same = make("same-vocab.gguf", 1, 512, "llama");
  auto other = make("other-vocab.gguf", 1, 512, "gpt2"); // other pieces
  auto small = make("small-vocab.gguf", 1, 400, "llama");
  auto request = [&](const std::string& draft, std::vector<std::string> more
                                               = {}) {
    std::vector<std::string> words{"--model", target, "--prompt", "hi",
                                   "--draft", draft};
    words.insert(words.end(), more.begin(), more.end());
    return make_job_request(parse_run_options(words, true));
  };
  auto ok = prepare_job(request(same, {"--draft-tokens", "6"}));
  REQUIRE(ok.draft != nullptr);
  CHECK(ok.draft->hparams().n_layer == 1);
  CHECK(ok.request.draft_tokens == 6);
  CHECK(refusal([&] { prepare_job(request(small)); })
          .find("has a vocabulary of 400 tokens, the model 512")
        != std::string::npos);
  CHECK(refusal([&] { prepare_job(request(other)); })
          .find("not the same vocabulary")
        != std::string::npos);
  CHECK(refusal([&] { prepare_job(request((dir / "none.gguf").string())); })
          .find("draft model")
        != std::string::npos);
  // --draft-tokens alone, or out of range, is a usage error.
  CHECK_THROWS_WITH(parse_run_options({"--model", target, "--draft-tokens",
                                       "3"},
                                      true),
                    "--draft-tokens goes with --draft");
  CHECK_THROWS(parse_run_options({"--model", target, "--draft", same,
                                  "--draft-tokens", "32"},
                                 true));
  std::filesystem::remove_all(dir);
}

TEST_CASE("a job's key from a peer is NODE:ID and its line of copies is "
          "bounded") {
  CHECK(job_key_problem("coord:1").empty());
  CHECK(job_key_problem("n-1.a:18446744073709551615").empty());
  CHECK(job_key_problem("a:b:7").empty()); // the id follows the last ':'
  CHECK(job_key_problem("coord") == "the job's key has no ':' (NODE:ID)");
  CHECK(job_key_problem(":1").find("names no node") != std::string::npos);
  CHECK(job_key_problem(std::string(65, 'n') + ":1").find("64 bytes")
        != std::string::npos);
  CHECK_FALSE(job_key_problem(std::string(64, 'n') + ":1").find("64 bytes")
              != std::string::npos);
  CHECK(job_key_problem("coord:").find("no decimal id") != std::string::npos);
  CHECK(job_key_problem("coord:-1").find("no decimal id") != std::string::npos);
  CHECK(job_key_problem("coord:1x").find("no decimal id") != std::string::npos);
  CHECK(job_key_problem("coord:" + std::string(21, '1')).find("no decimal id")
        != std::string::npos);
  CHECK(job_key_problem("coord:18446744073709551616").find("64 bits")
        != std::string::npos);
  // The line of copies keeps its first (the job's key) and its last ones.
  std::vector<std::string> l;
  for (int i = 0; i < 40; ++i)
    l = extend_lineage(l, "n" + std::to_string(i) + ":1");
  REQUIRE(l.size() == max_job_lineage);
  CHECK(l.front() == "n0:1");
  CHECK(l.back() == "n39:1");
  CHECK(l[1] == "n" + std::to_string(40 - max_job_lineage + 1) + ":1");
  CHECK(extend_lineage({}, "coord:1") == std::vector<std::string>{"coord:1"});
  CHECK(extend_lineage({"coord:1"}, "peer:1")
        == std::vector<std::string>{"coord:1", "peer:1"});
}

TEST_CASE("a node's job numbers go on across its restarts and a bad or "
          "unwritable numbers file is said and set aside",
          "[workload][job_numbers]") {
  namespace fs = std::filesystem;
  auto dir = fs::temp_directory_path()
             / ("exo-job-numbers-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto file = (dir / "job-numbers").string();
  auto write = [&](const std::string& text) {
    std::ofstream{file, std::ios::trunc} << text;
  };
  auto read = [&] {
    std::ifstream in{file};
    return std::string{std::istreambuf_iterator<char>{in}, {}};
  };

  // In memory (a node alone): from 1, nothing written.
  job_numbers mem;
  CHECK(mem.next() == 1);
  CHECK(mem.next() == 2);
  CHECK(mem.take_note().empty());

  // Kept: a second life of the node goes on where the first stopped.
  {
    job_numbers first{file};
    CHECK(first.take_note().empty());
    CHECK(first.last() == 0);
    CHECK(first.next() == 1);
    CHECK(first.next() == 2);
    CHECK(read() == "exo job numbers: last 2\n");
  }
  job_numbers second{file};
  CHECK(second.take_note().empty());
  CHECK(second.last() == 2);
  CHECK(second.next() == 3);
  CHECK(read() == job_numbers::file_text(3));
  CHECK_FALSE(fs::exists(file + ".tmp"));

  // A file that is not ours is set aside with a note naming it and why;
  // the numbers start from 1 and the file is written right again.
  for (auto bad : {std::string{}, std::string{"42\n"},
                   std::string{"exo job numbers: last x\n"},
                   std::string{"exo job numbers: last -3\n"},
                   std::string{"exo job numbers: last 99999999999999999999\n"},
                   std::string{"exo job numbers: last 9223372036854775808\n"},
                   std::string(300, '7')}) {
    write(bad);
    job_numbers n{file};
    auto note = n.take_note();
    INFO(bad << " -> " << note);
    CHECK(note.find("set aside the job numbers file " + file) == 0);
    CHECK(note.find("start from 1 again") != std::string::npos);
    CHECK(n.take_note().empty()); // said once
    CHECK(n.next() == 1);
    CHECK(read() == job_numbers::file_text(1));
  }
  // The largest it takes.
  write("exo job numbers: last 9223372036854775807\n");
  CHECK(job_numbers{file}.last() == 9223372036854775807ull);
  CHECK(job_numbers::parse("exo job numbers: last 17") == 17);
  CHECK_THROWS_WITH(job_numbers::parse("exo job numbers: last 1x"),
                    Catch::Contains("the last job number"));

  // A folder in its place, and a folder that is gone: the numbers are given
  // all the same and the note says they are not kept, once.
  fs::remove(file);
  fs::create_directories(file);
  {
    job_numbers n{file};
    auto note = n.take_note();
    CHECK(note.find("set aside the job numbers file " + file) == 0);
    CHECK(n.next() == 1);
    note = n.take_note();
    CHECK(note.find("job numbers are not kept (cannot rename") == 0);
    CHECK(n.next() == 2);
    CHECK(n.take_note().empty());
  }
  job_numbers gone{(dir / "no" / "such" / "dir" / "job-numbers").string()};
  CHECK(gone.take_note().empty());
  CHECK(gone.next() == 1);
  CHECK(gone.take_note().find("job numbers are not kept (cannot write ")
        == 0);
  fs::remove_all(dir);
}
