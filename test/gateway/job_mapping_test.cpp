// The gateway's mapping of OpenAI requests to jobs (core/gateway/
// job_mapping.hpp) and the chat prompts of core/workload/chat_prompt.hpp,
// on generated models with small chat templates: no actor system, no
// sockets.

#include "core/config/node_config.hpp"
#include "core/gateway/job_mapping.hpp"
#include "core/gguf/gguf.hpp"
#include "core/gguf/gguf_writer.hpp"
#include "core/model/test_model.hpp"
#include "core/tokenizer/tokenizer.hpp"
#include "core/workload/chat_prompt.hpp"
#include "core/workload/job_request.hpp"
#include "core/workload/run_options.hpp"
#include "test/support/process.hpp"

#include <nlohmann/json.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>

using namespace exo;
using namespace exo::gateway;

namespace {

/// Ends each turn with the EOS token's text, opens the assistant's turn.
const char* eos_template
  = "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}"
    "{{ eos_token }}{% endfor %}{% if add_generation_prompt %}[assistant] "
    "{% endif %}";

/// Ends each turn with a marker that is no token of the vocabulary.
const char* text_marker_template
  = "{% for m in messages %}{{ m.role }}: {{ m.content }}<END>\n"
    "{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}";

/// A generated llama model (SPM vocabulary) with `tmpl` as its chat
/// template ("" for none), written to a temporary file.
std::string make_model(const std::string& dir, const std::string& name,
                       const std::string& tmpl) {
  model::test_model_options o;
  auto w = model::build_test_model(o);
  if (!tmpl.empty())
    w.set_string("tokenizer.chat_template", tmpl);
  auto path = dir + "/" + name + ".gguf";
  w.write(path);
  return path;
}

completion_request chat_request(const std::string& model,
                                std::vector<chat_message> messages) {
  completion_request r;
  r.kind = endpoint_kind::chat_completions;
  r.model = model;
  r.messages = std::move(messages);
  return r;
}

} // namespace

TEST_CASE("a chat is rendered with the model's template, one BOS, stopping "
          "at its end of turn") {
  auto dir = test::temp_dir("exo-job-mapping");
  auto src = load_model_source("m", make_model(dir, "m", eos_template));
  auto& tok = *src.tokenizer;
  REQUIRE(tok.bos() >= 0);
  REQUIRE(tok.eos() >= 0);
  auto chat = workload::render_chat(
    *src.file, tok, workload::chat_messages("be brief", "hello"));
  auto bos = tok.piece(tok.bos(), true);
  auto eos = tok.piece(tok.eos(), true);
  // The template's BOS is left to the tokenizer (llama.cpp's rule).
  CHECK(chat.text
        == (tok.add_bos() ? "" : bos) + "[system] be brief" + eos
             + "[user] hello" + eos + "[assistant] ");
  CHECK(chat.stop_strings.empty());
  CHECK(std::find(chat.stop_tokens.begin(), chat.stop_tokens.end(),
                  tok.eos())
        != chat.stop_tokens.end());
  auto ids = workload::prompt_tokens(tok, chat.text, true);
  CHECK(std::count(ids.begin(), ids.end(), tok.bos()) == 1);
  CHECK(ids.front() == tok.bos());
  // The EOS text in the prompt is the EOS token (parse_special).
  CHECK(std::count(ids.begin(), ids.end(), tok.eos()) == 2);

  auto m = map_request(src, chat_request("m", {{"system", "be brief", ""},
                                               {"user", "hello", ""}}),
                       {}, 7);
  REQUIRE_FALSE(m.error);
  CHECK(m.job.special);
  CHECK(m.job.prompt == chat.text);
  CHECK(m.prompt_tokens == static_cast<std::int64_t>(ids.size()));
  CHECK(m.stop_ids.count(tok.eos()) == 1);
  // No max_tokens: the rest of the context (the model's 256 < 4096).
  CHECK(m.job.n_gen == 256 - ids.size());
  CHECK(m.job.sampling.seed == 7);
  // /tokenize of the messages: the chat's prompt as the job reads it.
  tokenize_request t;
  t.model = "m";
  t.kind = endpoint_kind::chat_completions;
  t.messages = {{"system", "be brief", ""}, {"user", "hello", ""}};
  auto a = answer_tokenize(src, t, {});
  REQUIRE_FALSE(a.error);
  CHECK(nlohmann::json::parse(a.body)["tokens"].get<std::vector<std::int32_t>>()
        == ids);
  std::system(("rm -rf " + dir).c_str());
}

TEST_CASE("a generated Llama 3 vocabulary chats in Llama 3's format and "
          "stops at <|eot_id|>") {
  // exo-model make-test --tokenizer llama3 (what `make run` chats with):
  // byte-level BPE with the llama-bpe pre-tokenizer, Llama 3's special
  // tokens and a chat template in its format.
  auto dir = test::temp_dir("exo-job-mapping");
  model::test_model_options o;
  o.tokenizer = "llama3";
  o.vocab = 700;
  auto path = dir + "/l3.gguf";
  model::make_test_model(o, path);
  auto src = load_model_source("l3", path);
  auto& tok = *src.tokenizer;
  REQUIRE(tok.piece(tok.bos(), true) == "<|begin_of_text|>");
  REQUIRE(tok.piece(tok.eos(), true) == "<|end_of_text|>");
  CHECK(tok.add_bos());
  auto chat = workload::render_chat(
    *src.file, tok, workload::chat_messages("be brief", "hello"));
  CHECK(chat.text
        == "<|start_header_id|>system<|end_header_id|>\n\nbe brief<|eot_id|>"
           "<|start_header_id|>user<|end_header_id|>\n\nhello<|eot_id|>"
           "<|start_header_id|>assistant<|end_header_id|>\n\n");
  auto ids = workload::prompt_tokens(tok, chat.text, true);
  REQUIRE(!ids.empty());
  CHECK(ids.front() == tok.bos());
  CHECK(std::count(ids.begin(), ids.end(), tok.bos()) == 1);
  // Each header and end of turn is one special token.
  auto id_of = [&](const std::string& text) {
    for (std::int32_t i = 0; i < static_cast<std::int32_t>(o.vocab); ++i)
      if (tok.piece(i, true) == text)
        return i;
    return -1;
  };
  const auto start = id_of("<|start_header_id|>"), eot = id_of("<|eot_id|>");
  REQUIRE(start >= 0);
  REQUIRE(eot >= 0);
  CHECK(std::count(ids.begin(), ids.end(), start) == 3);
  CHECK(std::count(ids.begin(), ids.end(), eot) == 2);
  // Generation stops at the end of turn.
  auto m = map_request(src, chat_request("l3", {{"user", "hello", ""}}), {},
                       1);
  REQUIRE_FALSE(m.error);
  CHECK(m.stop_ids.count(eot) == 1);
  std::system(("rm -rf " + dir).c_str());
}

TEST_CASE("a text end of turn becomes a stop string") {
  auto dir = test::temp_dir("exo-job-mapping");
  auto src = load_model_source("t", make_model(dir, "t",
                                               text_marker_template));
  auto m = map_request(src, chat_request("t", {{"user", "hi", ""}}), {}, 1);
  REQUIRE_FALSE(m.error);
  CHECK(m.job.prompt == "user: hi<END>\nassistant: ");
  CHECK(m.stop_strings == std::vector<std::string>{"<END>"});
  std::system(("rm -rf " + dir).c_str());
}

TEST_CASE("completions map prompt, max_tokens and sampling, refusals are "
          "OpenAI errors") {
  auto dir = test::temp_dir("exo-job-mapping");
  auto src = load_model_source("plain", make_model(dir, "plain", ""));
  CHECK(model_id_of(dir + "/plain.gguf") == "plain");
  CHECK_FALSE(src.has_chat_template);
  completion_request r;
  r.model = "plain";
  r.prompt = "Once upon a time";
  r.temperature = 0;
  r.top_p = 0.5;
  r.seed = 42;
  auto m = map_request(src, r, {}, 1);
  REQUIRE_FALSE(m.error);
  CHECK_FALSE(m.job.special);
  CHECK(m.job.prompt == "Once upon a time");
  CHECK(m.job.n_gen == 16); // OpenAI's default for completions
  CHECK(m.job.sampling.temperature == 0.0f);
  CHECK(m.job.sampling.top_p == 0.5f);
  CHECK(m.job.sampling.seed == 42);
  CHECK(m.prompt_tokens
        == static_cast<std::int64_t>(
          src.tokenizer->encode(r.prompt, src.tokenizer->add_bos()).size()));
  // The same rules as the coordinator's.
  CHECK(workload::prepare_job(m.job).prompt.size()
        == static_cast<std::size_t>(m.prompt_tokens));
  CHECK(m.job.sequences == 1);
  CHECK_FALSE(m.job.prompt_logprobs);
  // echo with logprobs scores the prompt; echo alone does not; max_tokens
  // 0 (with echo) generates nothing, a job like any other.
  auto scored = r;
  scored.echo = true;
  CHECK_FALSE(map_request(src, scored, {}, 1).job.prompt_logprobs);
  scored.logprobs = 1;
  scored.max_tokens = 0;
  auto ms = map_request(src, scored, {}, 1);
  REQUIRE_FALSE(ms.error);
  CHECK(ms.job.prompt_logprobs);
  CHECK(ms.job.logprobs == 1);
  CHECK(ms.job.n_gen == 0);
  CHECK(workload::prepare_job(ms.job).prompt.size()
        == static_cast<std::size_t>(m.prompt_tokens));
  // vLLM's prompt_logprobs scores it too, with or without logprobs: the
  // job's count of alternatives is the larger one.
  auto vllm = r;
  vllm.prompt_logprobs = 3;
  auto mv = map_request(src, vllm, {}, 1);
  REQUIRE_FALSE(mv.error);
  CHECK(mv.job.prompt_logprobs);
  CHECK(mv.job.logprobs == 3);
  vllm.logprobs = 5;
  CHECK(map_request(src, vllm, {}, 1).job.logprobs == 5);
  vllm.prompt_logprobs = 0;
  vllm.logprobs = -1;
  CHECK(map_request(src, vllm, {}, 1).job.logprobs == 0);
  // The prompt as token ids: read as given, the same prompt as the text's
  // tokens; an id outside the vocabulary is a 400 naming it.
  auto by_ids = r;
  by_ids.prompt.clear();
  by_ids.prompt_ids =
    src.tokenizer->encode(r.prompt, src.tokenizer->add_bos());
  auto mi = map_request(src, by_ids, {}, 1);
  REQUIRE_FALSE(mi.error);
  CHECK(mi.job.prompt.empty());
  CHECK(mi.job.prompt_ids == by_ids.prompt_ids);
  CHECK(mi.prompt_tokens == m.prompt_tokens);
  CHECK(workload::prepare_job(mi.job).prompt
        == workload::prepare_job(m.job).prompt);
  by_ids.prompt_ids.push_back(
    static_cast<std::int32_t>(src.tokenizer->size()));
  auto outside = map_request(src, by_ids, {}, 1);
  REQUIRE(outside.error);
  CHECK(outside.error->status == 400);
  CHECK(outside.error->param == "prompt");
  CHECK(outside.error->message.find(
          "'prompt[" + std::to_string(by_ids.prompt_ids.size() - 1)
          + "]': token " + std::to_string(src.tokenizer->size())
          + " is outside the vocabulary of model plain")
        != std::string::npos);
  // /tokenize: the tokens a completion of the prompt reads (its count is
  // the usage's), or the text's alone; /detokenize: llama.cpp's text.
  {
    tokenize_request t;
    t.model = "plain";
    t.prompt = r.prompt;
    auto a = answer_tokenize(src, t, {});
    REQUIRE_FALSE(a.error);
    auto j = nlohmann::json::parse(a.body);
    CHECK(j["tokens"].get<std::vector<std::int32_t>>()
          == src.tokenizer->encode(r.prompt, src.tokenizer->add_bos()));
    CHECK(j["count"] == m.prompt_tokens);
    CHECK(j["max_model_len"] == 256);
    t.add_special = false;
    auto bare = nlohmann::json::parse(answer_tokenize(src, t, {}).body);
    CHECK(bare["tokens"].get<std::vector<std::int32_t>>()
          == src.tokenizer->encode(r.prompt, false));
    tokenize_request d;
    d.model = "plain";
    d.detokenize = true;
    d.tokens = bare["tokens"].get<std::vector<std::int32_t>>();
    auto back = nlohmann::json::parse(answer_tokenize(src, d, {}).body);
    CHECK(back["prompt"] == r.prompt);
    d.tokens.push_back(static_cast<std::int32_t>(src.tokenizer->size()));
    auto outside_vocab = answer_tokenize(src, d, {});
    REQUIRE(outside_vocab.error);
    CHECK(outside_vocab.error->status == 400);
    CHECK(outside_vocab.error->param == "tokens");
    t.kind = endpoint_kind::chat_completions;
    t.messages = {{"user", "x", ""}};
    auto no_template = answer_tokenize(src, t, {});
    REQUIRE(no_template.error);
    CHECK(no_template.error->code == "no_chat_template");
  }
  // n choices are n sequences of one job, the prompt read once.
  auto three = r;
  three.n = 3;
  auto m3 = map_request(src, three, {}, 1);
  REQUIRE_FALSE(m3.error);
  CHECK(m3.job.sequences == 3);
  CHECK(m3.job.share_prompt);
  CHECK(m3.prompt_tokens == m.prompt_tokens); // usage counts it once
  CHECK(workload::prepare_job(m3.job).request.sequences == 3);
  CHECK(m.job.draft.empty());
  // A served model's draft goes with every request: greedy ones keep their
  // tokens, sampled ones their distribution (speculative sampling).
  auto with_draft = src;
  with_draft.draft = dir + "/plain.gguf";
  CHECK(map_request(with_draft, r, {}, 1).job.draft == with_draft.draft);
  auto sampled = r;
  sampled.temperature = 0.7;
  const auto sampled_job = map_request(with_draft, sampled, {}, 1).job;
  CHECK(sampled_job.draft == with_draft.draft);
  CHECK(sampled_job.sampling.temperature == 0.7f);
  // Penalties and a logit bias go to the job's sampler (ids ascending);
  // a token outside the vocabulary is a 400 naming logit_bias.
  CHECK(m.job.sampling.bias_ids.empty());
  auto penalized = r;
  penalized.frequency_penalty = 0.5;
  penalized.presence_penalty = -1.0;
  penalized.logit_bias = {{9, -100.0}, {2, 1.5}};
  auto mp = map_request(src, penalized, {}, 1);
  REQUIRE_FALSE(mp.error);
  CHECK(mp.job.sampling.frequency_penalty == 0.5f);
  CHECK(mp.job.sampling.presence_penalty == -1.0f);
  CHECK(mp.job.sampling.bias_ids == std::vector<std::int32_t>{2, 9});
  CHECK(mp.job.sampling.bias_values == std::vector<float>{1.5f, -100.0f});
  CHECK(workload::prepare_job(mp.job).request.sampling.bias_ids.size() == 2);
  // vLLM's top_k, min_p and repetition_penalty: absent, the sampler's
  // top-k of 40 (as llama-server); -1 or 0, every token.
  CHECK(mp.job.sampling.top_k == 40);
  CHECK(mp.job.sampling.min_p == 0.0f);
  CHECK(mp.job.sampling.repetition_penalty == 1.0f);
  auto extras = r;
  extras.top_k = 20;
  extras.min_p = 0.05;
  extras.repetition_penalty = 1.25;
  auto me = map_request(src, extras, {}, 1);
  REQUIRE_FALSE(me.error);
  CHECK(me.job.sampling.top_k == 20);
  CHECK(me.job.sampling.min_p == 0.05f);
  CHECK(me.job.sampling.repetition_penalty == 1.25f);
  extras.top_k = -1;
  CHECK(map_request(src, extras, {}, 1).job.sampling.top_k == 0);
  CHECK_FALSE(me.job.sampling.json);
  extras.json_object = true;
  CHECK(map_request(src, extras, {}, 1).job.sampling.json);
  penalized.logit_bias[static_cast<std::int32_t>(src.tokenizer->size())] = 1;
  auto bad_bias = map_request(src, penalized, {}, 1);
  REQUIRE(bad_bias.error);
  CHECK(bad_bias.error->status == 400);
  CHECK(bad_bias.error->param == "logit_bias");
  CHECK(bad_bias.error->message.find(
          "token " + std::to_string(src.tokenizer->size())
          + " is outside the vocabulary of model plain")
        != std::string::npos);
  // The gateway's KV cache type goes with every job.
  CHECK(m.job.kv_type.empty());
  mapping_limits q8;
  q8.kv_type = "q8_0";
  CHECK(map_request(src, r, q8, 1).job.kv_type == "q8_0");

  r.max_tokens = 1000; // more than the model's context of 256
  auto big = map_request(src, r, {}, 1);
  REQUIRE(big.error);
  CHECK(big.error->status == 400);
  CHECK(big.error->code == "context_length_exceeded");
  CHECK(big.error->message.find("maximum context length is 256")
        != std::string::npos);

  auto chat = map_request(src, chat_request("plain", {{"user", "x", ""}}),
                          {}, 1);
  REQUIRE(chat.error);
  CHECK(chat.error->status == 400);
  CHECK(chat.error->code == "no_chat_template");
  CHECK(chat.error->message.find("no chat template") != std::string::npos);

  // A model without a template refuses --chat as a job error too.
  workload::run_options o;
  o.model = dir + "/plain.gguf";
  o.prompt = "x";
  o.chat = true;
  CHECK_THROWS_WITH(workload::make_job_request(o),
                    Catch::Contains("no chat template"));
  std::system(("rm -rf " + dir).c_str());
}

TEST_CASE("the finish reason: stop at an end token or when stopped early, "
          "length otherwise") {
  std::set<std::int32_t> stops{2};
  CHECK(finish_of({5, 6, 2}, stops, false) == finish_reason::stop);
  CHECK(finish_of({5, 6, 7}, stops, false) == finish_reason::length);
  CHECK(finish_of({5}, stops, true) == finish_reason::stop);
  CHECK(finish_of({}, stops, false) == finish_reason::length);
}

TEST_CASE("a gateway beyond loopback needs HTTPS and exo's access tokens") {
  config::gateway_section g;
  CHECK(config::gateway_exposure_problem(g).empty());
  g.host = "127.0.0.2";
  CHECK(config::gateway_exposure_problem(g).empty());
  g.host = "::1";
  CHECK(config::gateway_exposure_problem(g).empty());
  g.host = "0.0.0.0";
  CHECK(config::gateway_exposure_problem(g).find("HTTPS")
        != std::string::npos);
  g.host = "127.evil.example";
  CHECK_FALSE(config::gateway_exposure_problem(g).empty());
  CHECK_THROWS_WITH(config::parse(R"({"gateway": {"host": "10.0.0.1",
                      "models": [{"path": "m.gguf"}]}})", "t"),
                    Catch::Contains("gateway.host"));
  auto cfg = config::parse(R"({"gateway": {"port": 0, "api_key": "k",
                 "models": [{"id": "a", "path": "m.gguf"}]}})", "t");
  CHECK(cfg.gateway.enabled());
  CHECK(cfg.gateway.models[0].id == "a");
  CHECK(cfg.gateway.api_key == "k");
  CHECK(cfg.gateway.auth == config::gateway_auth::api_key);
  CHECK_FALSE(cfg.gateway.https);
  CHECK_THROWS_WITH(config::parse(R"({"gateway": {"models": [{"id": "a"}]}})",
                                  "t"),
                    Catch::Contains("gateway.models[0].path"));
  // The KV cache type of every request's job.
  CHECK(cfg.gateway.kv_type.empty());
  CHECK(config::parse(R"({"gateway": {"kv_type": "q8_0",
                 "models": [{"path": "m.gguf"}]}})", "t").gateway.kv_type
        == "q8_0");
  CHECK_THROWS_WITH(config::parse(R"({"gateway": {"kv_type": "q4",
                      "models": [{"path": "m.gguf"}]}})", "t"),
                    Catch::Contains("gateway.kv_type: must be one of f16, "
                                    "q8_0, f32"));
  // Beyond loopback: HTTPS alone, or tokens alone, are not enough.
  g.host = "0.0.0.0";
  g.https = true;
  CHECK(config::gateway_exposure_problem(g).find("access_token")
        != std::string::npos);
  CHECK(config::gateway_exposure_problem(g).find("HTTPS")
        == std::string::npos);
  g.auth = config::gateway_auth::api_key;
  g.api_key = "k";
  CHECK_FALSE(config::gateway_exposure_problem(g).empty());
  g.auth = config::gateway_auth::access_token;
  CHECK(config::gateway_exposure_problem(g).empty());
  g.https = false;
  CHECK(config::gateway_exposure_problem(g).find("HTTPS")
        != std::string::npos);
  auto open = config::parse(R"({"gateway": {"host": "0.0.0.0",
                 "https": true, "auth": "access_token",
                 "models": [{"path": "m.gguf"}]}})", "t");
  CHECK(open.gateway.https);
  CHECK(open.gateway.auth == config::gateway_auth::access_token);
  CHECK_THROWS_WITH(config::parse(R"({"gateway": {"auth": "password",
                      "models": [{"path": "m.gguf"}]}})", "t"),
                    Catch::Contains("gateway.auth"));
  CHECK_THROWS_WITH(config::parse(R"({"gateway": {"auth": "api_key",
                      "models": [{"path": "m.gguf"}]}})", "t"),
                    Catch::Contains("api_key"));
}
