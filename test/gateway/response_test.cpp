#include "core/gateway/response.hpp"

#include <nlohmann/json.hpp>

#include <catch2/catch.hpp>

using namespace exo::gateway;
using nlohmann::json;

namespace {

const response_head head{"chatcmpl-x-1", 1700000000, "tiny"};

/// The JSON of one SSE event, checking the framing.
json event_json(const std::string& event) {
  REQUIRE(event.rfind("data: ", 0) == 0);
  REQUIRE(event.size() > 8);
  REQUIRE(event.substr(event.size() - 2) == "\n\n");
  return json::parse(event.substr(6, event.size() - 8));
}

} // namespace

TEST_CASE("a chat completion object carries the message, reason and usage") {
  auto j = json::parse(completion_body(endpoint_kind::chat_completions, head,
                                       {{"hi there", finish_reason::length}},
                                       {5, 2}));
  CHECK(j["id"] == "chatcmpl-x-1");
  CHECK(j["object"] == "chat.completion");
  CHECK(j["created"] == 1700000000);
  CHECK(j["model"] == "tiny");
  REQUIRE(j["choices"].size() == 1);
  CHECK(j["choices"][0]["index"] == 0);
  CHECK(j["choices"][0]["message"]["role"] == "assistant");
  CHECK(j["choices"][0]["message"]["content"] == "hi there");
  CHECK(j["choices"][0]["finish_reason"] == "length");
  CHECK(j["usage"] == json{{"prompt_tokens", 5},
                           {"completion_tokens", 2},
                           {"total_tokens", 7},
                           {"prompt_tokens_details", {{"cached_tokens", 0}}}});
  usage cached{600, 2, 512};
  auto k = json::parse(completion_body(endpoint_kind::completions, head,
                                       {{"x", finish_reason::stop}}, cached));
  CHECK(k["usage"]["prompt_tokens_details"]["cached_tokens"] == 512);
}

TEST_CASE("a text completion object carries the text") {
  auto j = json::parse(completion_body(endpoint_kind::completions,
                                       {"cmpl-x-2", 1, "tiny"},
                                       {{"abc", finish_reason::stop}},
                                       {1, 3}));
  CHECK(j["object"] == "text_completion");
  CHECK(j["choices"][0]["text"] == "abc");
  CHECK(j["choices"][0]["finish_reason"] == "stop");
  CHECK(j["choices"][0]["logprobs"].is_null());
  CHECK(j["usage"]["total_tokens"] == 4);
}

TEST_CASE("vLLM's prompt_logprobs: per completions choice, once for a chat, "
          "the first token null, then ids to logprob, rank and text") {
  // A prompt of three tokens: the first unscored; the second ranked 4th
  // with two alternatives; the third is its row's best (not repeated among
  // its alternatives), its text half a UTF-8 character.
  std::vector<token_logprob> prompt(3);
  prompt[0].token = "<s>";
  prompt[0].id = 1;
  prompt[0].scored = false;
  prompt[1].token = " fox";
  prompt[1].id = 7;
  prompt[1].logprob = -2.5f;
  prompt[1].rank = 4;
  prompt[1].top = {{" dog", -0.25f, 9}, {" cat", -1.5f, 3}};
  prompt[2].token = "\xe2";
  prompt[2].id = 300;
  prompt[2].logprob = -0.125f;
  prompt[2].rank = 1;
  prompt[2].top = {{"\xe2", -0.125f, 300}, {"x", -3.0f, 2}};
  const json expected = json::array(
    {nullptr,
     {{"7", {{"logprob", -2.5}, {"rank", 4}, {"decoded_token", " fox"}}},
      {"9", {{"logprob", -0.25}, {"rank", 1}, {"decoded_token", " dog"}}},
      {"3", {{"logprob", -1.5}, {"rank", 2}, {"decoded_token", " cat"}}}},
     {{"300",
       {{"logprob", -0.125}, {"rank", 1}, {"decoded_token", "\ufffd"}}},
      {"2", {{"logprob", -3.0}, {"rank", 2}, {"decoded_token", "x"}}}}});
  choice_result with{"a", finish_reason::length};
  with.prompt_logprobs = prompt;
  choice_result without{"b", finish_reason::length};
  auto j = json::parse(completion_body(endpoint_kind::completions, head,
                                       {with, without}, {3, 2}));
  CHECK(j["choices"][0]["prompt_logprobs"] == expected);
  CHECK_FALSE(j["choices"][1].contains("prompt_logprobs"));
  CHECK(j["choices"][0]["logprobs"].is_null()); // logprobs not asked for
  CHECK_FALSE(j.contains("prompt_logprobs"));
  // Chat: the answer's (every choice has the same prompt).
  auto c = json::parse(completion_body(endpoint_kind::chat_completions, head,
                                       {with, with}, {3, 2}));
  CHECK(c["prompt_logprobs"] == expected);
  CHECK_FALSE(c["choices"][0].contains("prompt_logprobs"));
  // None asked for: no field.
  auto none = json::parse(completion_body(endpoint_kind::chat_completions,
                                          head, {without}, {3, 1}));
  CHECK_FALSE(none.contains("prompt_logprobs"));
}

TEST_CASE("chat stream chunks: role first, deltas, finish, usage, DONE") {
  auto first = event_json(text_chunk(endpoint_kind::chat_completions, head,
                                     0, "Hel", true, true));
  CHECK(first["object"] == "chat.completion.chunk");
  CHECK(first["choices"][0]["delta"]["role"] == "assistant");
  CHECK(first["choices"][0]["delta"]["content"] == "Hel");
  CHECK(first["choices"][0]["finish_reason"].is_null());
  CHECK(first.contains("usage"));
  CHECK(first["usage"].is_null());
  auto next = event_json(text_chunk(endpoint_kind::chat_completions, head,
                                    0, "lo", false, false));
  CHECK_FALSE(next["choices"][0]["delta"].contains("role"));
  CHECK_FALSE(next.contains("usage"));
  auto fin = event_json(finish_chunk(endpoint_kind::chat_completions, head,
                                     0, finish_reason::stop, false));
  CHECK(fin["choices"][0]["delta"] == json::object());
  CHECK(fin["choices"][0]["finish_reason"] == "stop");
  auto use = event_json(usage_chunk(endpoint_kind::chat_completions, head,
                                    {3, 2}));
  CHECK(use["choices"] == json::array());
  CHECK(use["usage"]["total_tokens"] == 5);
  CHECK(sse_done() == "data: [DONE]\n\n");
}

TEST_CASE("completion stream chunks are text_completion objects") {
  auto c = event_json(text_chunk(endpoint_kind::completions, head, 0,
                                 "a\"b\n", true, false));
  CHECK(c["object"] == "text_completion");
  CHECK(c["choices"][0]["text"] == "a\"b\n");
}

TEST_CASE("several choices: each with its index, text and reason") {
  auto j = json::parse(completion_body(
    endpoint_kind::completions, head,
    {{"one", finish_reason::stop}, {"", finish_reason::length},
     {"three", finish_reason::length}},
    {4, 9}));
  REQUIRE(j["choices"].size() == 3);
  for (std::size_t i = 0; i < 3; ++i)
    CHECK(j["choices"][i]["index"] == i);
  CHECK(j["choices"][0]["text"] == "one");
  CHECK(j["choices"][1]["text"] == "");
  CHECK(j["choices"][2]["text"] == "three");
  CHECK(j["choices"][0]["finish_reason"] == "stop");
  CHECK(j["choices"][2]["finish_reason"] == "length");
  CHECK(j["usage"]["completion_tokens"] == 9);
  auto c = json::parse(completion_body(
    endpoint_kind::chat_completions, head,
    {{"a", finish_reason::stop}, {"b", finish_reason::stop}}, {1, 2}));
  CHECK(c["choices"][1]["index"] == 1);
  CHECK(c["choices"][1]["message"]["content"] == "b");
  // A stream's chunks name their choice.
  auto t = event_json(text_chunk(endpoint_kind::chat_completions, head, 2,
                                 "x", true, false));
  CHECK(t["choices"][0]["index"] == 2);
  CHECK(t["choices"][0]["delta"]["role"] == "assistant");
  auto f = event_json(finish_chunk(endpoint_kind::completions, head, 1,
                                   finish_reason::length, false));
  CHECK(f["choices"][0]["index"] == 1);
  CHECK(f["choices"][0]["finish_reason"] == "length");
}

TEST_CASE("an error inside a stream is one SSE event with the error "
          "object") {
  auto e = event_json(error_event(unavailable("device lost")));
  CHECK(e["error"]["message"] == "device lost");
  CHECK(e["error"]["type"] == "server_error");
}

TEST_CASE("the model list and health bodies") {
  auto m = json::parse(models_body({{"tiny", 5, "exo"}, {"big", 6, "me"}}));
  CHECK(m["object"] == "list");
  REQUIRE(m["data"].size() == 2);
  CHECK(m["data"][1] == json{{"id", "big"},
                             {"object", "model"},
                             {"created", 6},
                             {"owned_by", "me"}});
  CHECK(health_body(true) == R"({"status":"ok"})");
  auto h = json::parse(health_body(false));
  CHECK(h["error"]["code"] == 503);
  CHECK(h["error"]["message"] == "Loading model");
}

TEST_CASE("ids carry the endpoint's prefix and never repeat") {
  id_generator ids{0xabcdefu};
  CHECK(ids.next(endpoint_kind::chat_completions)
        == "chatcmpl-0000000000abcdef-1");
  CHECK(ids.next(endpoint_kind::completions) == "cmpl-0000000000abcdef-2");
  id_generator a, b;
  CHECK(a.next(endpoint_kind::completions)
        != b.next(endpoint_kind::completions));
}

TEST_CASE("a stop string split over pieces ends the text before it") {
  stop_filter f{{"END"}};
  std::string out;
  for (auto piece : {"hello E", "N", "D and more"})
    out += f.feed(piece);
  CHECK(f.stopped());
  CHECK(out == "hello ");
  CHECK(f.feed("late") == "");
  CHECK(f.flush() == "");
}

TEST_CASE("text that only looks like a stop string's start is released") {
  stop_filter f{{"\n\n", "STOP"}};
  CHECK(f.feed("ab\n") == "ab");
  CHECK(f.feed("c") == "\nc");
  CHECK(f.feed("ST") == "");
  CHECK(f.feed("AY") == "STAY");
  CHECK(f.feed("x\n") == "x");
  CHECK(f.flush() == "\n");
  CHECK_FALSE(f.stopped());
}

TEST_CASE("the earliest of several stop strings wins") {
  stop_filter f{{"bc", "b"}};
  CHECK(f.feed("abcd") == "a");
  CHECK(f.stopped());
}

TEST_CASE("an incomplete UTF-8 character is held until it is whole") {
  // U+00E9 (2 bytes), U+20AC (3 bytes), U+1F600 (4 bytes), split.
  stop_filter f;
  CHECK(f.feed("caf\xc3") == "caf");
  CHECK(f.feed("\xa9 \xe2\x82") == "\xc3\xa9 ");
  CHECK(f.feed("\xac\xf0\x9f\x98") == "\xe2\x82\xac");
  CHECK(f.feed("\x80") == "\xf0\x9f\x98\x80");
  CHECK(complete_utf8_prefix("ab") == 2);
  CHECK(complete_utf8_prefix("a\xe2\x82") == 1);
  CHECK(complete_utf8_prefix("\x80\x80\x80\x80") == 4);
}

TEST_CASE("text is sent as well-formed UTF-8, each stray byte as U+FFFD") {
  const std::string r = "\xef\xbf\xbd";
  CHECK(valid_utf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80")
        == "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  CHECK(valid_utf8("a\x80z") == "a" + r + "z");
  // A character cut short is one U+FFFD (its maximal subpart).
  CHECK(valid_utf8("a\xe2\x82") == "a" + r);
  CHECK(valid_utf8("\xe2\x82z\xf0\x9f\x98") == r + "z" + r);
  CHECK(valid_utf8("\xc0\xaf") == r + r);              // overlong
  CHECK(valid_utf8("\xe0\x80") == r + r);
  CHECK(valid_utf8("\xed\xa0\x80") == r + r + r);      // a surrogate
  CHECK(valid_utf8("\xf4\x90\x80\x80") == r + r + r + r); // past U+10FFFF
  CHECK(valid_utf8("\xff") == r);
  CHECK(valid_utf8("") == "");
}

TEST_CASE("the text's U+FFFDs are those of the JSON writer's replacement") {
  // What the JSON writer would have made of the raw text: the byte count a
  // resumed stream skips is the same as the text the client decoded.
  std::uint32_t x = 12345;
  const std::string alphabet[] = {"a", "\xc3", "\xa9", "\xe2", "\x82",
                                  "\xac", "\xf0", "\x9f", "\x98", "\x80",
                                  "\xed", "\xa0", "\xc0", "\xff", "\xf4",
                                  "\x90"};
  for (int n = 0; n < 2000; ++n) {
    std::string s;
    for (int k = 0; k < 8; ++k) {
      x = x * 1103515245u + 12345u;
      s += alphabet[(x >> 16) % 16];
    }
    auto dumped = nlohmann::json(s).dump(
      -1, ' ', false, nlohmann::json::error_handler_t::replace);
    INFO(nlohmann::json(valid_utf8(s)).dump());
    CHECK(nlohmann::json::parse(dumped).get<std::string>() == valid_utf8(s));
  }
}
