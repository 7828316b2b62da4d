#include "core/gateway/request.hpp"

#include <catch2/catch.hpp>

using namespace exo::gateway;

namespace {

const request_limits limits{};

model_filter only(std::string id) {
  return [id](const std::string& m) { return m == id; };
}

parsed_request chat(const std::string& body) {
  return parse_request(endpoint_kind::chat_completions, body, limits,
                       only("tiny"));
}

parsed_request completion(const std::string& body) {
  return parse_request(endpoint_kind::completions, body, limits,
                       only("tiny"));
}

} // namespace

TEST_CASE("a full chat request becomes a typed request") {
  auto r = chat(R"({"model":"tiny","messages":[
      {"role":"system","content":"be brief"},
      {"role":"user","content":[{"type":"text","text":"hel"},
                                {"type":"text","text":"lo"}],"name":"ann"}],
    "max_completion_tokens":16,"temperature":0,"top_p":0.5,"seed":-7,
    "stop":["\n","END"],"n":1,"stream":true,
    "stream_options":{"include_usage":true},"user":"u1",
    "frequency_penalty":0,"logprobs":false})");
  REQUIRE(r);
  auto& q = *r.request;
  CHECK(q.kind == endpoint_kind::chat_completions);
  CHECK(q.model == "tiny");
  REQUIRE(q.messages.size() == 2);
  CHECK(q.messages[0].role == "system");
  CHECK(q.messages[0].content == "be brief");
  CHECK(q.messages[1].content == "hello");
  CHECK(q.messages[1].name == "ann");
  CHECK(q.max_tokens == 16);
  CHECK(q.temperature == 0.0);
  CHECK(q.top_p == 0.5);
  CHECK(q.seed == -7);
  CHECK(q.stop == std::vector<std::string>{"\n", "END"});
  CHECK(q.stream);
  CHECK(q.include_usage);
  CHECK(q.user == "u1");
}

TEST_CASE("a completion request takes a prompt and a single stop string") {
  auto r = completion(
    R"({"model":"tiny","prompt":"once upon","max_tokens":8,"stop":"."})");
  REQUIRE(r);
  CHECK(r.request->prompt == "once upon");
  CHECK(r.request->max_tokens == 8);
  CHECK(r.request->stop == std::vector<std::string>{"."});
  CHECK_FALSE(r.request->stream);
  CHECK(r.request->temperature == 1.0);
  auto one = completion(R"({"model":"tiny","prompt":["just one"]})");
  REQUIRE(one);
  CHECK(one.request->prompt == "just one");
  CHECK_FALSE(one.request->max_tokens);
}

TEST_CASE("malformed JSON is a 400 invalid_json naming the position") {
  auto r = chat(R"({"model":"tiny","messages":[)");
  REQUIRE_FALSE(r);
  CHECK(r.error.status == 400);
  CHECK(r.error.code == "invalid_json");
  CHECK(r.error.message.find("parse error") != std::string::npos);
  auto not_object = chat("[1,2]");
  CHECK(not_object.error.status == 400);
  CHECK(not_object.error.code == "invalid_json");
  auto bad_utf8 = chat("{\"model\":\"\xff\"}");
  CHECK(bad_utf8.error.code == "invalid_json");
}

TEST_CASE("wrong types are refused with the field named") {
  struct c {
    const char* body;
    const char* param;
  };
  for (auto& t : {
         c{R"({"model":1,"messages":[{"role":"user","content":"x"}]})",
           "model"},
         c{R"({"model":"tiny","messages":"hi"})", "messages"},
         c{R"({"model":"tiny","messages":[{"role":"user","content":5}]})",
           "messages[0].content"},
         c{R"({"model":"tiny","messages":[{"role":7,"content":"x"}]})",
           "messages[0].role"},
         c{R"({"model":"tiny","messages":[{"role":"user","content":"x"}],
              "max_tokens":"5"})",
           "max_tokens"},
         c{R"({"model":"tiny","messages":[{"role":"user","content":"x"}],
              "max_tokens":2.5})",
           "max_tokens"},
         c{R"({"model":"tiny","messages":[{"role":"user","content":"x"}],
              "temperature":"hot"})",
           "temperature"},
         c{R"({"model":"tiny","messages":[{"role":"user","content":"x"}],
              "stream":1})",
           "stream"},
         c{R"({"model":"tiny","messages":[{"role":"user","content":"x"}],
              "stop":[1]})",
           "stop[0]"},
         c{R"({"model":"tiny","messages":[{"role":"user","content":"x"}],
              "stream":true,"stream_options":{"include_usage":"yes"}})",
           "stream_options.include_usage"},
       }) {
    INFO(t.body);
    auto r = chat(t.body);
    REQUIRE_FALSE(r);
    CHECK(r.error.status == 400);
    CHECK(r.error.type == "invalid_request_error");
    CHECK(r.error.param == t.param);
  }
}

TEST_CASE("out-of-range values are refused, n beyond its bounds too") {
  auto with = [](const std::string& extra) {
    return chat(R"({"model":"tiny","messages":[{"role":"user","content":"x"}],)"
                + extra + "}");
  };
  CHECK(with(R"("temperature":2.5)").error.param == "temperature");
  CHECK(with(R"("temperature":-0.1)").error.param == "temperature");
  CHECK(with(R"("top_p":0)").error.param == "top_p");
  CHECK(with(R"("top_p":1.5)").error.param == "top_p");
  CHECK(with(R"("max_tokens":0)").error.param == "max_tokens");
  auto huge = with(R"("max_tokens":1000000000000)");
  CHECK(huge.error.status == 400);
  CHECK(huge.error.message.find("larger than the limit") != std::string::npos);
  CHECK(with(R"("max_tokens":99999999999999999999)").error.param
        == "max_tokens");
  // n: 1 to max_choices (16) choices.
  for (const char* bad : {R"("n":0)", R"("n":17)", R"("n":-1)", R"("n":2.5)",
                          R"("n":"2")"}) {
    INFO(bad);
    auto n = with(bad);
    CHECK(n.error.status == 400);
    CHECK(n.error.param == "n");
  }
  CHECK(with(R"("n":17)").error.message.find("from 1 to 16")
        != std::string::npos);
  CHECK(with(R"("n":1)").request->n == 1);
  CHECK(with(R"("n":null)").request->n == 1);
  CHECK(with(R"("n":16)").request->n == 16);
  CHECK(with(R"("n":3)").request->n == 3);
  CHECK(with(R"("stop":["a","b","c","d","e"])").error.param == "stop");
  CHECK(with(R"("stop":"")").error.param == "stop");
  CHECK(with(R"("stream_options":{"include_usage":true})").error.param
        == "stream_options");
  CHECK(with(R"("max_tokens":4,"max_completion_tokens":5)").error.param
        == "max_tokens");
}

TEST_CASE("log-probabilities: chat's logprobs and top_logprobs, "
          "completions' count, refused by name out of range") {
  auto chat_with = [](const std::string& extra) {
    return chat(R"({"model":"tiny","messages":[{"role":"user","content":"x"}])"
                + extra + "}");
  };
  auto completion_with = [](const std::string& extra) {
    return completion(R"({"model":"tiny","prompt":"x")" + extra + "}");
  };
  CHECK(chat_with("").request->logprobs == -1);
  CHECK(chat_with(R"(,"logprobs":false)").request->logprobs == -1);
  CHECK(chat_with(R"(,"logprobs":true)").request->logprobs == 0);
  CHECK(chat_with(R"(,"logprobs":true,"top_logprobs":20)").request->logprobs
        == 20);
  CHECK(chat_with(R"(,"top_logprobs":null,"logprobs":true)").request->logprobs
        == 0);
  CHECK(chat_with(R"(,"top_logprobs":2)").error.param == "top_logprobs");
  CHECK(chat_with(R"(,"logprobs":false,"top_logprobs":2)").error.param
        == "top_logprobs");
  CHECK(chat_with(R"(,"logprobs":true,"top_logprobs":21)").error.param
        == "top_logprobs");
  CHECK(chat_with(R"(,"logprobs":3)").error.param == "logprobs");
  CHECK(completion_with("").request->logprobs == -1);
  CHECK(completion_with(R"(,"logprobs":null)").request->logprobs == -1);
  CHECK(completion_with(R"(,"logprobs":false)").request->logprobs == -1);
  CHECK(completion_with(R"(,"logprobs":0)").request->logprobs == 0);
  CHECK(completion_with(R"(,"logprobs":5)").request->logprobs == 5);
  CHECK(completion_with(R"(,"logprobs":-1)").error.param == "logprobs");
  CHECK(completion_with(R"(,"logprobs":true)").error.param == "logprobs");
  CHECK(completion_with(R"(,"top_logprobs":2)").error.param
        == "top_logprobs");
}

TEST_CASE("unknown fields and unsupported features are refused, not "
          "ignored") {
  auto with = [](const std::string& extra) {
    return chat(R"({"model":"tiny","messages":[{"role":"user","content":"x"}],)"
                + extra + "}");
  };
  auto unknown = with(R"("temprature":0.5)");
  CHECK(unknown.error.status == 400);
  CHECK(unknown.error.param == "temprature");
  CHECK(unknown.error.code == "unknown_parameter");
  CHECK(with(R"("echo":true)").error.param == "echo");
  CHECK(with(R"("best_of":2)").error.param == "best_of");
  auto image = chat(R"({"model":"tiny","messages":[{"role":"user","content":
      [{"type":"image_url","image_url":{"url":"x"}}]}]})");
  CHECK(image.error.param == "messages[0].content[0].type");
  auto tools = chat(R"({"model":"tiny","messages":[{"role":"user",
      "content":"x","tool_calls":[]}]})");
  CHECK(tools.error.param == "messages[0].tool_calls");
  // (Several prompts are requests of their own: see below.)
  CHECK(completion(R"({"model":"tiny","prompt":["a","b"]})"));
  CHECK(completion(R"({"model":"tiny","prompt":[[1],[2]]})"));
  CHECK(completion(R"({"model":"tiny","messages":[]})").error.param
        == "messages");
}

TEST_CASE("missing fields, empty messages and unknown models") {
  CHECK(chat(R"({"messages":[{"role":"user","content":"x"}]})").error.param
        == "model");
  CHECK(chat(R"({"model":"tiny"})").error.param == "messages");
  CHECK(chat(R"({"model":"tiny","messages":[]})").error.param == "messages");
  CHECK(completion(R"({"model":"tiny"})").error.param == "prompt");
  CHECK(chat(R"({"model":"tiny","messages":[{"role":"wizard","content":"x"}]})")
          .error.param
        == "messages[0].role");
  auto unknown = chat(R"({"model":"huge","messages":[{"role":"user","content":"x"}]})");
  CHECK(unknown.error.status == 404);
  CHECK(unknown.error.code == "model_not_found");
  CHECK(unknown.error.message.find("'huge'") != std::string::npos);
}

TEST_CASE("a body over the limit is a 413 before it is parsed") {
  request_limits small;
  small.max_body_bytes = 64;
  std::string body = R"({"model":"tiny","prompt":")" + std::string(100, 'a')
                     + "\"}";
  auto r = parse_request(endpoint_kind::completions, body, small);
  REQUIRE_FALSE(r);
  CHECK(r.error.status == 413);
  CHECK(r.error.message.find("64 bytes") != std::string::npos);
}

TEST_CASE("the error object has OpenAI's shape with null param and code") {
  auto e = invalid_request("bad", "max_tokens", "invalid_type");
  CHECK(to_json(e)
        == R"({"error":{"message":"bad","type":"invalid_request_error",)"
           R"("param":"max_tokens","code":"invalid_type"}})");
  api_error plain{500, "boom", "server_error", {}, {}};
  CHECK(to_json(plain)
        == R"({"error":{"message":"boom","type":"server_error",)"
           R"("param":null,"code":null}})");
  CHECK(queue_full(8).status == 429);
  CHECK(unavailable("no device").status == 503);
  CHECK(unauthorized("no token").status == 401);
}

TEST_CASE("a completion's prompt may be token ids, as OpenAI's API allows") {
  auto ids = completion(R"({"model":"tiny","prompt":[1, 259, 306]})");
  REQUIRE(ids);
  CHECK(ids.request->prompt.empty());
  CHECK(ids.request->prompt_ids == std::vector<std::int32_t>{1, 259, 306});
  auto nested = completion(R"({"model":"tiny","prompt":[[7, 2147483647]]})");
  REQUIRE(nested);
  CHECK(nested.request->prompt_ids
        == std::vector<std::int32_t>{7, 2147483647});
  auto one = completion(R"({"model":"tiny","prompt":["text"]})");
  REQUIRE(one);
  CHECK(one.request->prompt == "text");
  CHECK(one.request->prompt_ids.empty());
  // What is not a token id names the element.
  struct bad {
    const char* prompt;
    const char* param;
    const char* says;
  };
  for (auto b : {bad{"[]", "prompt", "empty array"},
                 bad{"[[]]", "prompt[0]", "empty array"},
                 bad{"[1, -2]", "prompt[1]", "-2 is not a token id"},
                 bad{"[2147483648]", "prompt[0]", "not a token id"},
                 bad{"[18446744073709551615]", "prompt[0]", "not a token id"},
                 bad{"[1.5]", "prompt[0]", "an integer"},
                 bad{"[1, \"a\"]", "prompt[1]", "an integer"},
                 bad{"[[1], 2]", "prompt[1]", "an array of token ids"},
                 bad{"[\"a\", [1]]", "prompt[1]", "a string"},
                 bad{"[[1], []]", "prompt[1]", "empty array"},
                 bad{"[[1, null]]", "prompt[0][1]", "an integer"}}) {
    auto r = completion(std::string{R"({"model":"tiny","prompt":)"} + b.prompt
                        + "}");
    INFO(b.prompt << ": " << r.error.message);
    REQUIRE_FALSE(r);
    CHECK(r.error.status == 400);
    CHECK(r.error.param == b.param);
    CHECK(r.error.message.find(b.says) != std::string::npos);
  }
}

TEST_CASE("a completion may carry several prompts, each with its n "
          "choices, up to 64 choices in all") {
  auto texts = completion(R"({"model":"tiny","prompt":["a","bc","d"]})");
  REQUIRE(texts);
  CHECK(texts.request->prompt == "a");
  CHECK(texts.request->more_prompts == std::vector<std::string>{"bc", "d"});
  CHECK(texts.request->prompt_count() == 3);
  CHECK(texts.request->total_choices() == 3);
  auto ids = completion(R"({"model":"tiny","prompt":[[1,2],[3]],"n":2})");
  REQUIRE(ids);
  CHECK(ids.request->prompt_ids == std::vector<std::int32_t>{1, 2});
  REQUIRE(ids.request->more_prompt_ids.size() == 1);
  CHECK(ids.request->more_prompt_ids[0] == std::vector<std::int32_t>{3});
  CHECK(ids.request->total_choices() == 4);
  // 65 prompts, or 33 prompts of 2 choices: over the bound, named.
  std::string many = "[";
  for (int i = 0; i < 65; ++i)
    many += std::string{i ? "," : ""} + "\"x\"";
  auto too_many = completion(R"({"model":"tiny","prompt":)" + many + "]}");
  CHECK(too_many.error.param == "prompt");
  CHECK_THAT(too_many.error.message, Catch::Contains("at most 64"));
  std::string some = "[";
  for (int i = 0; i < 33; ++i)
    some += std::string{i ? "," : ""} + "\"x\"";
  auto choices = completion(R"({"model":"tiny","n":2,"prompt":)" + some
                            + "]}");
  CHECK(choices.error.param == "n");
  CHECK_THAT(choices.error.message, Catch::Contains("are 66; at most 64"));
}

TEST_CASE("/tokenize and /detokenize bodies are parsed and refused by name") {
  auto tok = [](const std::string& body) {
    return parse_tokenize(false, body, {},
                          [](const std::string& id) { return id == "tiny"; });
  };
  auto detok = [](const std::string& body) {
    return parse_tokenize(true, body, {},
                          [](const std::string& id) { return id == "tiny"; });
  };
  auto text = tok(R"({"model":"tiny","prompt":"Once upon a time"})");
  REQUIRE(text);
  CHECK(text.request->kind == endpoint_kind::completions);
  CHECK(text.request->prompt == "Once upon a time");
  CHECK(text.request->add_special);
  CHECK_FALSE(text.request->detokenize);
  auto bare = tok(R"({"model":"tiny","prompt":"x","add_special_tokens":false})");
  REQUIRE(bare);
  CHECK_FALSE(bare.request->add_special);
  auto chat = tok(R"({"model":"tiny","messages":[{"role":"user","content":"hi"}]})");
  REQUIRE(chat);
  CHECK(chat.request->kind == endpoint_kind::chat_completions);
  REQUIRE(chat.request->messages.size() == 1);
  CHECK(chat.request->messages[0].content == "hi");
  auto ids = detok(R"({"model":"tiny","tokens":[1, 2, 3]})");
  REQUIRE(ids);
  CHECK(ids.request->detokenize);
  CHECK(ids.request->tokens == std::vector<std::int32_t>{1, 2, 3});
  auto none = detok(R"({"model":"tiny","tokens":[]})");
  REQUIRE(none);
  CHECK(none.request->tokens.empty());
  struct bad {
    bool detokenize;
    const char* body;
    int status;
    const char* param;
  };
  for (auto b : {bad{false, R"({"prompt":"x"})", 400, "model"},
                 bad{false, R"({"model":"tiny"})", 400, "prompt"},
                 bad{false, R"({"model":"other","prompt":"x"})", 404, "model"},
                 bad{false, R"({"model":"tiny","prompt":1})", 400, "prompt"},
                 bad{false, R"({"model":"tiny","prompt":"x","messages":[]})",
                     400, "messages"},
                 bad{false, R"({"model":"tiny","prompt":"x","tokens":[1]})",
                     400, "tokens"},
                 bad{false,
                     R"({"model":"tiny","prompt":"x","add_special_tokens":1})",
                     400, "add_special_tokens"},
                 bad{true, R"({"model":"tiny"})", 400, "tokens"},
                 bad{true, R"({"model":"tiny","tokens":[-1]})", 400,
                     "tokens[0]"},
                 bad{true, R"({"model":"tiny","tokens":"1 2"})", 400, "tokens"},
                 bad{true, R"({"model":"tiny","tokens":[1],"prompt":"x"})",
                     400, "prompt"},
                 bad{true, R"([1, 2])", 400, ""},
                 bad{true, R"({"model":)", 400, ""}}) {
    auto r = parse_tokenize(b.detokenize, b.body, {},
                            [](const std::string& id) { return id == "tiny"; });
    INFO(b.body << ": " << r.error.message);
    REQUIRE_FALSE(r);
    CHECK(r.error.status == b.status);
    CHECK(r.error.param == b.param);
  }
  request_limits small;
  small.max_body_bytes = 16;
  CHECK(parse_tokenize(false, R"({"model":"tiny","prompt":"a long prompt"})",
                       small)
          .error.status
        == 413);
}

TEST_CASE("penalties and a logit bias are read and bounded as OpenAI's and "
          "vLLM's sampling extras as vLLM's") {
  auto with = [](const std::string& extra) {
    return chat(R"({"model":"tiny","messages":[{"role":"user","content":"x"}])"
                + extra + "}");
  };
  auto none = with("");
  REQUIRE(none);
  CHECK(none.request->frequency_penalty == 0.0);
  CHECK(none.request->presence_penalty == 0.0);
  CHECK(none.request->logit_bias.empty());
  auto r = with(R"(,"frequency_penalty":1.5,"presence_penalty":-2,
                  "logit_bias":{"50256":-100,"7":2.5,"0":100})");
  REQUIRE(r);
  CHECK(r.request->frequency_penalty == 1.5);
  CHECK(r.request->presence_penalty == -2.0);
  CHECK(r.request->logit_bias
        == std::map<std::int32_t, double>{{0, 100.0}, {7, 2.5},
                                          {50256, -100.0}});
  auto nulls = with(R"(,"frequency_penalty":null,"presence_penalty":null,
                      "logit_bias":null)");
  REQUIRE(nulls);
  CHECK(nulls.request->logit_bias.empty());
  CHECK(with(R"(,"logit_bias":{})"));
  // Out of range, of the wrong type, or not a token id: a 400 naming it.
  auto far = with(R"(,"frequency_penalty":2.5)");
  CHECK(far.error.status == 400);
  CHECK(far.error.param == "frequency_penalty");
  CHECK(far.error.message.find("is not in [-2.0, 2.0]") != std::string::npos);
  CHECK(with(R"(,"presence_penalty":"1")").error.param == "presence_penalty");
  CHECK(with(R"(,"logit_bias":[1,2])").error.param == "logit_bias");
  CHECK(with(R"(,"logit_bias":{"7":101})").error.param == "logit_bias.7");
  CHECK(with(R"(,"logit_bias":{"7":"up"})").error.param == "logit_bias.7");
  for (const char* key : {"-1", "x", "", "1.5", "+3", " 3", "12345678901"}) {
    INFO(key);
    auto bad = with(std::string{R"(,"logit_bias":{")"} + key + R"(":1})");
    CHECK(bad.error.param == "logit_bias");
    CHECK(bad.error.message.find("not a token id") != std::string::npos);
  }
  std::string many = R"(,"logit_bias":{)";
  for (int i = 0; i <= 1024; ++i)
    many += (i ? "," : "") + ("\"" + std::to_string(i) + "\":1");
  many += "}";
  CHECK(with(many).error.message.find("more than the limit of 1024")
        != std::string::npos);
  // vLLM's extras: top_k (-1 and 0: every token), min_p, repetition.
  CHECK_FALSE(none.request->top_k);
  CHECK(none.request->min_p == 0.0);
  CHECK(none.request->repetition_penalty == 1.0);
  auto extras = with(R"(,"top_k":20,"min_p":0.05,"repetition_penalty":1.1)");
  REQUIRE(extras);
  CHECK(extras.request->top_k == 20);
  CHECK(extras.request->min_p == 0.05);
  CHECK(extras.request->repetition_penalty == 1.1);
  CHECK(with(R"(,"top_k":-1)").request->top_k == -1);
  CHECK(with(R"(,"top_k":-2)").error.param == "top_k");
  CHECK(with(R"(,"top_k":1.5)").error.param == "top_k");
  CHECK(with(R"(,"min_p":1.5)").error.param == "min_p");
  CHECK(with(R"(,"repetition_penalty":0)").error.param
        == "repetition_penalty");
  CHECK(with(R"(,"repetition_penalty":2.01)").error.param
        == "repetition_penalty");
  // The completions endpoint reads them the same way.
  auto c = completion(R"({"model":"tiny","prompt":"a","frequency_penalty":0.5,
                          "logit_bias":{"3":-1}})");
  REQUIRE(c);
  CHECK(c.request->frequency_penalty == 0.5);
  CHECK(c.request->logit_bias.size() == 1);
}

TEST_CASE("response_format json_object is JSON mode, json_schema is refused "
          "by name") {
  auto with = [](const std::string& extra) {
    return chat(R"({"model":"tiny","messages":[{"role":"user","content":"x"}])"
                + extra + "}");
  };
  CHECK_FALSE(with("").request->json_object);
  CHECK_FALSE(with(R"(,"response_format":{"type":"text"})").request->json_object);
  CHECK_FALSE(with(R"(,"response_format":null)").request->json_object);
  CHECK(with(R"(,"response_format":{"type":"json_object"})").request->json_object);
  auto schema = with(R"(,"response_format":{"type":"json_schema",
                       "json_schema":{"name":"x","schema":{}}})");
  CHECK(schema.error.status == 400);
  CHECK(schema.error.param == "response_format.type");
  CHECK(schema.error.message.find("json_schema' is not supported")
        != std::string::npos);
  CHECK(with(R"(,"response_format":{"type":"yaml"})").error.param
        == "response_format.type");
  CHECK(with(R"(,"response_format":{})").error.param
        == "response_format.type");
  CHECK(with(R"(,"response_format":"json_object")").error.param
        == "response_format");
  CHECK(with(R"(,"response_format":{"type":"json_object","strict":true})")
          .error.param
        == "response_format.strict");
  CHECK(completion(R"({"model":"tiny","prompt":"a",
                      "response_format":{"type":"json_object"}})")
          .request->json_object);
}

TEST_CASE("a completion's echo is read, with logprobs too (the prompt "
          "scored) and max_tokens 0, and refused by name on a chat") {
  auto plain = completion(R"({"model":"tiny","prompt":"x","echo":true})");
  REQUIRE(plain);
  CHECK(plain.request->echo);
  CHECK(plain.request->echo_text.empty()); // the server's to set
  auto off = completion(R"({"model":"tiny","prompt":"x","echo":false})");
  REQUIRE(off);
  CHECK_FALSE(off.request->echo);
  auto null = completion(R"({"model":"tiny","prompt":"x","echo":null})");
  REQUIRE(null);
  CHECK_FALSE(null.request->echo);
  auto typed = completion(R"({"model":"tiny","prompt":"x","echo":1})");
  CHECK(typed.error.status == 400);
  CHECK(typed.error.param == "echo");
  // With logprobs (lm-evaluation-harness's loglikelihood requests),
  // whichever field comes first; max_tokens 0 only with echo.
  for (auto body : {R"({"model":"tiny","prompt":"x","echo":true,"logprobs":1})",
                    R"({"model":"tiny","logprobs":0,"echo":true,"prompt":"x"})",
                    R"({"model":"tiny","prompt":[1,5],"max_tokens":0,)"
                    R"("echo":true,"logprobs":1})"}) {
    INFO(body);
    auto both = completion(body);
    REQUIRE(both);
    CHECK(both.request->echo);
    CHECK(both.request->logprobs >= 0);
  }
  CHECK(*completion(R"({"model":"tiny","prompt":"x","echo":true,)"
                    R"("max_tokens":0})")
           .request->max_tokens
        == 0);
  auto none = completion(R"({"model":"tiny","prompt":"x","max_tokens":0})");
  CHECK(none.error.status == 400);
  CHECK(none.error.param == "max_tokens");
  CHECK_THAT(none.error.message, Catch::Contains("0 only with 'echo'"));
  auto negative = completion(R"({"model":"tiny","prompt":"x","echo":true,)"
                             R"("max_tokens":-1})");
  CHECK(negative.error.param == "max_tokens");
  auto chat_echo = chat(R"({"model":"tiny","messages":[{"role":"user",)"
                        R"("content":"x"}],"echo":true})");
  CHECK(chat_echo.error.param == "echo");
}

TEST_CASE("vLLM's prompt_logprobs is read on completions and chat, from 0 "
          "to 20, and refused by name with stream, -1 or a wrong type") {
  CHECK(completion(R"({"model":"tiny","prompt":"x"})")
          .request->prompt_logprobs
        == -1);
  CHECK(completion(R"({"model":"tiny","prompt":"x","prompt_logprobs":null})")
          .request->prompt_logprobs
        == -1);
  auto zero = completion(R"({"model":"tiny","prompt":"x","prompt_logprobs":0})");
  REQUIRE(zero);
  CHECK(zero.request->prompt_logprobs == 0);
  CHECK(zero.request->logprobs == -1); // the generated tokens' stay apart
  auto max = chat(R"({"model":"tiny","messages":[{"role":"user",)"
                  R"("content":"x"}],"prompt_logprobs":20})");
  REQUIRE(max);
  CHECK(max.request->prompt_logprobs == 20);
  for (auto body : {R"({"model":"tiny","prompt":"x","prompt_logprobs":21})",
                    R"({"model":"tiny","prompt":"x","prompt_logprobs":-2})",
                    R"({"model":"tiny","prompt":"x","prompt_logprobs":"3"})",
                    R"({"model":"tiny","prompt":"x","prompt_logprobs":true})"}) {
    INFO(body);
    auto bad = completion(body);
    CHECK(bad.error.status == 400);
    CHECK(bad.error.param == "prompt_logprobs");
  }
  auto whole = completion(R"({"model":"tiny","prompt":"x",)"
                          R"("prompt_logprobs":-1})");
  CHECK(whole.error.param == "prompt_logprobs");
  CHECK_THAT(whole.error.message, Catch::Contains("whole vocabulary"));
  // max_tokens 0 with it: the prompt scored, nothing generated.
  CHECK(*completion(R"({"model":"tiny","prompt":"x","max_tokens":0,)"
                    R"("prompt_logprobs":1})")
           .request->max_tokens
        == 0);
  CHECK(*chat(R"({"model":"tiny","messages":[{"role":"user","content":"x"}],)"
              R"("max_completion_tokens":0,"prompt_logprobs":0})")
           .request->max_tokens
        == 0);
  auto streamed = chat(R"({"model":"tiny","messages":[{"role":"user",)"
                       R"("content":"x"}],"stream":true,"prompt_logprobs":1})");
  CHECK(streamed.error.status == 400);
  CHECK(streamed.error.param == "prompt_logprobs");
  CHECK_THAT(streamed.error.message, Catch::Contains("stream"));
}
