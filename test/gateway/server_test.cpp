#include "core/tls/cert_tool.hpp"
#include "runtime/gateway/server.hpp"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include "scripted_backend.hpp"

#include <nlohmann/json.hpp>

#include <catch2/catch.hpp>

#include <regex>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <sys/resource.h>
#include <sys/socket.h>

using namespace exo;
using namespace exo::gateway;
using namespace exo::gateway::testing;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

const std::vector<std::string> tokens{"Hello", ",", " wor", "ld", "!",
                                      " caf", "\xc3", "\xa9", " end"};

std::string joined(std::size_t n = tokens.size()) {
  std::string s;
  for (std::size_t i = 0; i < n; ++i)
    s += tokens[i];
  return s;
}

server_options options(std::shared_ptr<completion_backend> backend) {
  server_options o;
  o.models = {{"tiny", 1700000000, "exo"}, {"other", 1700000001, "exo"}};
  o.backend = std::move(backend);
  o.threads = 2;
  return o;
}

std::string chat_body(bool stream, const std::string& extra = {}) {
  return R"({"model":"tiny","messages":[{"role":"user","content":"hi"}],)"
         + std::string{"\"stream\":"} + (stream ? "true" : "false") + extra
         + "}";
}

/// Polls `pred` until it holds (bounded; no timing is asserted).
template <class Pred>
bool eventually(Pred pred, std::chrono::seconds bound = 30s) {
  auto deadline = std::chrono::steady_clock::now() + bound;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred())
      return true;
    std::this_thread::sleep_for(5ms);
  }
  return pred();
}

/// The text of a chat stream, checking every chunk's shape on the way.
std::string stream_text(const std::string& body, json* usage = nullptr,
                        std::string* reason = nullptr) {
  auto events = sse_payloads(body);
  REQUIRE(events.size() >= 2);
  REQUIRE(events.back() == "[DONE]");
  std::string text;
  for (std::size_t i = 0; i + 1 < events.size(); ++i) {
    auto j = json::parse(events[i]);
    if (j.contains("error"))
      FAIL("error event: " << events[i]);
    if (j["choices"].empty()) {
      if (usage)
        *usage = j["usage"];
      continue;
    }
    CHECK(j["object"] == "chat.completion.chunk");
    auto& c = j["choices"][0];
    if (!c["finish_reason"].is_null() && reason)
      *reason = c["finish_reason"];
    if (c["delta"].contains("content"))
      text += c["delta"]["content"].get<std::string>();
  }
  return text;
}

/// The script's text for choice `c` of n (the scripted backend's choice c
/// starts at token c): its first `n` tokens.
std::string choice_text(std::size_t c, std::size_t n) {
  std::string s;
  for (std::size_t i = 0; i < n; ++i)
    s += tokens[(i + c) % tokens.size()];
  return s;
}

/// A stream of several choices, read per choice: texts, finish reasons,
/// and the position (event number) of each choice's finish.
struct choices_read {
  std::map<std::uint32_t, std::string> text;
  std::map<std::uint32_t, std::string> reason;
  std::map<std::uint32_t, std::size_t> finished_at;
  std::map<std::uint32_t, std::size_t> last_text_at;
  json usage;
};

choices_read read_choices(const std::string& body) {
  choices_read out;
  auto events = sse_payloads(body);
  REQUIRE(events.size() >= 2);
  REQUIRE(events.back() == "[DONE]");
  for (std::size_t i = 0; i + 1 < events.size(); ++i) {
    auto j = json::parse(events[i]);
    REQUIRE_FALSE(j.contains("error"));
    if (j["choices"].empty()) {
      out.usage = j["usage"];
      continue;
    }
    REQUIRE(j["choices"].size() == 1);
    auto& c = j["choices"][0];
    auto index = c["index"].get<std::uint32_t>();
    std::string piece = c.contains("delta")
                          ? c["delta"].value("content", std::string{})
                          : c["text"].get<std::string>();
    if (!piece.empty()) {
      CHECK(out.reason.count(index) == 0); // no text after its finish
      out.text[index] += piece;
      out.last_text_at[index] = i;
    }
    if (!c["finish_reason"].is_null()) {
      CHECK(out.reason.count(index) == 0); // one finish per choice
      out.reason[index] = c["finish_reason"];
      out.finished_at[index] = i;
    }
  }
  return out;
}

/// Runs Debian's curl (installed by scripts/install-deps.sh) against this
/// test's own server on 127.0.0.1: a real client, never a download.
std::string run_curl(const std::string& args) {
  std::string out;
  auto* p = ::popen(("curl -sS --max-time 30 " + args + " 2>&1").c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0)
    out.append(buf, n);
  ::pclose(p);
  return out;
}

} // namespace

TEST_CASE("curl gets /health and /v1/models like llama-server's") {
  auto backend = std::make_shared<scripted_backend>(tokens);
  server srv{options(backend)};
  auto port = std::to_string(srv.start());
  auto health = run_curl("-i http://127.0.0.1:" + port + "/health");
  CHECK(health.find("HTTP/1.1 200 OK") == 0);
  CHECK(health.find("{\"status\":\"ok\"}") != std::string::npos);
  auto models = json::parse(run_curl("http://127.0.0.1:" + port
                                     + "/v1/models"));
  CHECK(models["object"] == "list");
  REQUIRE(models["data"].size() == 2);
  CHECK(models["data"][0]["id"] == "tiny");
  CHECK(models["data"][0]["object"] == "model");
}

TEST_CASE("a chat completion returns the backend's tokens as one message") {
  auto backend = std::make_shared<scripted_backend>(tokens, 7);
  server srv{options(backend)};
  auto port = srv.start();
  auto r = http_exchange(port, post("/v1/chat/completions", chat_body(false)));
  REQUIRE(r.status == 200);
  CHECK(r.headers["content-type"] == "application/json");
  auto j = json::parse(r.body);
  CHECK(j["object"] == "chat.completion");
  CHECK(j["model"] == "tiny");
  CHECK(j["id"].get<std::string>().rfind("chatcmpl-", 0) == 0);
  CHECK(j["choices"][0]["message"]["content"] == joined());
  CHECK(j["choices"][0]["finish_reason"] == "stop");
  CHECK(j["usage"]["prompt_tokens"] == 7);
  CHECK(j["usage"]["completion_tokens"] == int(tokens.size()));
}

TEST_CASE("a streamed chat arrives as SSE chunks ending in [DONE]") {
  auto backend = std::make_shared<scripted_backend>(tokens, 4);
  server srv{options(backend)};
  auto port = srv.start();
  auto r = http_exchange(port, post("/v1/chat/completions",
                               chat_body(true, R"(,"stream_options":)"
                                               R"({"include_usage":true})")));
  REQUIRE(r.status == 200);
  CHECK(r.headers["content-type"] == "text/event-stream");
  CHECK(r.headers["transfer-encoding"] == "chunked");
  json usage;
  std::string reason;
  CHECK(stream_text(r.body, &usage, &reason) == joined());
  CHECK(reason == "stop");
  CHECK(usage["prompt_tokens"] == 4);
  CHECK(usage["completion_tokens"] == int(tokens.size()));
  // The split "é" never reaches the client as half a character.
  CHECK(r.body.find("\\ufffd") == std::string::npos);
}

TEST_CASE("each text chunk's SSE id is the text's length so far, and a "
          "resumed request leaves out what its client has") {
  auto backend = std::make_shared<scripted_backend>(tokens, 4);
  server srv{options(backend)};
  auto port = srv.start();
  auto r = http_exchange(port, post("/v1/chat/completions", chat_body(true)));
  REQUIRE(r.status == 200);
  // The ids, read from the raw events: every text chunk has one.
  std::regex event{"id: ([0-9]+)\ndata: (\\{[^\n]*)\n\n"};
  std::string text, id;
  std::vector<std::uint64_t> ids;
  for (std::sregex_iterator it{r.body.begin(), r.body.end(), event}, end;
       it != end; ++it) {
    auto j = json::parse((*it)[2].str());
    text += j["choices"][0]["delta"]["content"].get<std::string>();
    CHECK(std::stoull((*it)[1].str()) == text.size());
    ids.push_back(text.size());
    id = j["id"];
  }
  CHECK(text == joined());
  REQUIRE(ids.size() >= 3);
  CHECK(backend->requests().at(0).id == id);
  CHECK_FALSE(backend->requests().at(0).resume);

  // The client had the first two chunks when its node died: it sends the
  // request again with the completion's id and the bytes it has.
  auto after = ids[1];
  auto resumed = http_exchange(
    port, post("/v1/chat/completions", chat_body(true),
               "X-Exo-Resume: " + id + "\r\nLast-Event-ID: "
                 + std::to_string(after) + "\r\n"));
  REQUIRE(resumed.status == 200);
  CHECK(stream_text(resumed.body) == joined().substr(after));
  CHECK(resumed.body.find("\"id\":\"" + id + "\"") != std::string::npos);
  CHECK(resumed.body.find("id: " + std::to_string(joined().size()) + "\n")
        != std::string::npos);
  auto req = backend->requests().at(1);
  CHECK(req.resume);
  CHECK(req.id == id);
  CHECK(req.resume_after == std::vector<std::uint64_t>{after});

  // Malformed resume headers are refused, naming the header.
  auto bad = [&](const std::string& headers) {
    auto x = http_exchange(port, post("/v1/chat/completions", chat_body(true),
                                      headers));
    CHECK(x.status == 400);
    return json::parse(x.body)["error"]["param"].get<std::string>();
  };
  CHECK(bad("X-Exo-Resume: a b\r\n") == "X-Exo-Resume");
  CHECK(bad("X-Exo-Resume: " + std::string(65, 'a') + "\r\n")
        == "X-Exo-Resume");
  CHECK(bad("X-Exo-Resume: " + id + "\r\nLast-Event-ID: -3\r\n")
        == "Last-Event-ID");
  CHECK(bad("Last-Event-ID: 3\r\n") == "Last-Event-ID");
  CHECK(backend->requests().size() == 2);
}

TEST_CASE("n choices: each its text, index and finish reason, the usage "
          "summed, a stop string ends one choice and the others go on") {
  auto backend = std::make_shared<scripted_backend>(tokens, 4);
  server srv{options(backend)};
  auto port = srv.start();
  // Whole answers: three choices of four tokens.
  auto r = http_exchange(port, post("/v1/completions",
                                    R"({"model":"tiny","prompt":"x",)"
                                    R"("max_tokens":4,"n":3})"));
  REQUIRE(r.status == 200);
  auto j = json::parse(r.body);
  REQUIRE(j["choices"].size() == 3);
  for (std::size_t c = 0; c < 3; ++c) {
    INFO("choice " << c);
    CHECK(j["choices"][c]["index"] == c);
    CHECK(j["choices"][c]["text"] == choice_text(c, 4));
    CHECK(j["choices"][c]["finish_reason"] == "length");
  }
  CHECK(j["usage"]["prompt_tokens"] == 4);
  CHECK(j["usage"]["completion_tokens"] == 12);
  CHECK(backend->requests().at(0).n == 3);

  // "Hel" ends choice 0 at its first token and choice 2 at its eighth
  // ("Hello", the script's first token, comes last there); choice 1 runs
  // to max_tokens. Streamed and whole: the same texts and reasons.
  const std::string stop = R"(,"max_tokens":8,"n":3,"stop":"Hel")";
  auto whole = http_exchange(port, post("/v1/chat/completions",
                                        chat_body(false, stop)));
  REQUIRE(whole.status == 200);
  auto w = json::parse(whole.body);
  REQUIRE(w["choices"].size() == 3);
  CHECK(w["choices"][0]["message"]["content"] == "");
  CHECK(w["choices"][0]["finish_reason"] == "stop");
  CHECK(w["choices"][1]["message"]["content"] == choice_text(1, 8));
  CHECK(w["choices"][1]["finish_reason"] == "length");
  CHECK(w["choices"][2]["message"]["content"] == choice_text(2, 7));
  CHECK(w["choices"][2]["finish_reason"] == "stop");
  CHECK(w["usage"]["completion_tokens"] == 1 + 8 + 8);
  // The backend was told each of choices 0 and 2 was done, once.
  CHECK(eventually([&] { return backend->choices_done() == 2; }));

  auto streamed = http_exchange(
    port, post("/v1/chat/completions",
               chat_body(true, stop + R"(,"stream_options":)"
                                      R"({"include_usage":true})")));
  REQUIRE(streamed.status == 200);
  auto s = read_choices(streamed.body);
  CHECK(s.text[0] == "");
  CHECK(s.text[1] == choice_text(1, 8));
  CHECK(s.text[2] == choice_text(2, 7));
  CHECK(s.reason[0] == "stop");
  CHECK(s.reason[1] == "length");
  CHECK(s.reason[2] == "stop");
  // A choice's finish goes out when it ends, not with the answer's end.
  CHECK(s.finished_at[0] < s.last_text_at[1]);
  CHECK(s.usage["completion_tokens"] == 17);
  CHECK(eventually([&] { return backend->choices_done() == 4; }));
}

TEST_CASE("with n choices each SSE id names every choice's bytes so far, "
          "and a resume gives each choice from its own count") {
  auto backend = std::make_shared<scripted_backend>(tokens, 4);
  server srv{options(backend)};
  auto port = srv.start();
  auto r = http_exchange(port, post("/v1/chat/completions",
                                    chat_body(true, R"(,"n":2)")));
  REQUIRE(r.status == 200);
  std::regex event{"id: ([0-9]+),([0-9]+)\ndata: (\\{[^\n]*)\n\n"};
  std::vector<std::string> text(2);
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ids;
  std::string id;
  for (std::sregex_iterator it{r.body.begin(), r.body.end(), event}, end;
       it != end; ++it) {
    auto j = json::parse((*it)[3].str());
    auto c = j["choices"][0]["index"].get<std::size_t>();
    REQUIRE(c < 2);
    text[c] += j["choices"][0]["delta"]["content"].get<std::string>();
    CHECK(std::stoull((*it)[1].str()) == text[0].size());
    CHECK(std::stoull((*it)[2].str()) == text[1].size());
    ids.emplace_back(text[0].size(), text[1].size());
    id = j["id"];
  }
  CHECK(text[0] == choice_text(0, tokens.size()));
  CHECK(text[1] == choice_text(1, tokens.size()));
  REQUIRE(ids.size() >= 4);
  auto [a, b] = ids[2];
  auto resumed = http_exchange(
    port, post("/v1/chat/completions", chat_body(true, R"(,"n":2)"),
               "X-Exo-Resume: " + id + "\r\nLast-Event-ID: "
                 + std::to_string(a) + "," + std::to_string(b) + "\r\n"));
  REQUIRE(resumed.status == 200);
  auto again = read_choices(resumed.body);
  CHECK(again.text[0] == text[0].substr(a));
  CHECK(again.text[1] == text[1].substr(b));
  CHECK(backend->requests().at(1).resume_after
        == std::vector<std::uint64_t>{a, b});
  // One count per choice, decimal numbers.
  auto bad = [&](const std::string& last, const std::string& extra) {
    auto x = http_exchange(
      port, post("/v1/chat/completions", chat_body(true, extra),
                 "X-Exo-Resume: " + id + "\r\nLast-Event-ID: " + last
                   + "\r\n"));
    CHECK(x.status == 400);
    return json::parse(x.body)["error"];
  };
  auto one = bad("5", R"(,"n":2)");
  CHECK(one["param"] == "Last-Event-ID");
  CHECK(one["message"].get<std::string>().find("2 choices")
        != std::string::npos);
  CHECK(bad("1,2", "")["param"] == "Last-Event-ID");
  CHECK(bad("1,,2", R"(,"n":3)")["param"] == "Last-Event-ID");
  CHECK(bad("1,2,", R"(,"n":2)")["param"] == "Last-Event-ID");
  CHECK(backend->requests().size() == 2);
}

TEST_CASE("max_tokens ends a completion with finish_reason length") {
  auto backend = std::make_shared<scripted_backend>(tokens);
  server srv{options(backend)};
  auto port = srv.start();
  auto r = http_exchange(port, post("/v1/completions",
                               R"({"model":"tiny","prompt":"x",)"
                               R"("max_tokens":3})"));
  REQUIRE(r.status == 200);
  auto j = json::parse(r.body);
  CHECK(j["object"] == "text_completion");
  CHECK(j["choices"][0]["text"] == joined(3));
  CHECK(j["choices"][0]["finish_reason"] == "length");
  CHECK(backend->requests().at(0).max_tokens == 3);
}

TEST_CASE("a stop string ends the stream before it and closes the sink") {
  auto backend = std::make_shared<scripted_backend>(tokens);
  server srv{options(backend)};
  auto port = srv.start();
  auto r = http_exchange(port, post("/v1/chat/completions",
                               chat_body(true, R"(,"stop":"world")")));
  REQUIRE(r.status == 200);
  std::string reason;
  CHECK(stream_text(r.body, nullptr, &reason) == "Hello, ");
  CHECK(reason == "stop");
  CHECK(backend->wait_until([&] { return backend->closes_seen() == 1; }));
}

TEST_CASE("log-probabilities go out with their tokens' text: whole and "
          "streamed, chat's and completions' shapes, cut by a stop string, "
          "left out of what a resumed client has") {
  auto backend = std::make_shared<scripted_backend>(tokens, 4);
  server srv{options(backend)};
  auto port = srv.start();
  auto lp = [](std::size_t i) { return -static_cast<double>(i + 1) / 8; };
  // Chat, whole: every token, its bytes and its alternatives.
  auto r = http_exchange(
    port, post("/v1/chat/completions",
               chat_body(false, R"(,"logprobs":true,"top_logprobs":2)")));
  REQUIRE(r.status == 200);
  auto j = json::parse(r.body);
  auto& content = j["choices"][0]["logprobs"]["content"];
  REQUIRE(content.size() == tokens.size());
  CHECK(j["choices"][0]["logprobs"]["refusal"].is_null());
  CHECK(backend->requests().at(0).logprobs == 2);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    INFO(i);
    auto& e = content[i];
    CHECK(e["logprob"].get<double>() == lp(i));
    std::vector<int> bytes;
    for (unsigned char c : tokens[i])
      bytes.push_back(c);
    CHECK(e["bytes"].get<std::vector<int>>() == bytes);
    REQUIRE(e["top_logprobs"].size() == 2);
    CHECK(e["top_logprobs"][0]["logprob"].get<double>() == lp(i));
    CHECK(e["top_logprobs"][1]["token"] == "alt1");
    CHECK(e["top_logprobs"][1]["logprob"].get<double>() == lp(i) - 1);
  }
  CHECK(content[0]["token"] == "Hello");
  CHECK(content[6]["token"] == "\xef\xbf\xbd"); // half of "é": bytes [195]
  // Without logprobs: null, and the job is asked for none.
  r = http_exchange(port, post("/v1/chat/completions", chat_body(false)));
  CHECK(json::parse(r.body)["choices"][0]["logprobs"].is_null());
  CHECK(backend->requests().at(1).logprobs == -1);

  // Streamed, with a stop string: the tokens whose text went out, each in
  // the chunk that completed it; " wor" and "ld" made the stop string.
  r = http_exchange(
    port, post("/v1/chat/completions",
               chat_body(true, R"(,"stop":"world","logprobs":true)")));
  REQUIRE(r.status == 200);
  std::vector<std::string> listed;
  for (auto& event : sse_payloads(r.body)) {
    if (event == "[DONE]")
      continue;
    auto c = json::parse(event)["choices"][0];
    if (c["logprobs"].is_null())
      continue;
    for (auto& e : c["logprobs"]["content"]) {
      listed.push_back(e["token"]);
      CHECK(e["top_logprobs"].empty());
    }
  }
  CHECK(stream_text(r.body) == "Hello, ");
  CHECK(listed == std::vector<std::string>{"Hello", ","});

  // Completions, whole: tokens, their logprobs, alternatives by text and
  // each token's byte offset in the text.
  auto completion = [](bool stream) {
    return std::string{R"({"model":"tiny","prompt":"hi","logprobs":1,)"}
           + R"("stream":)" + (stream ? "true" : "false") + "}";
  };
  r = http_exchange(port, post("/v1/completions", completion(false)));
  REQUIRE(r.status == 200);
  auto l = json::parse(r.body)["choices"][0]["logprobs"];
  REQUIRE(l["tokens"].size() == tokens.size());
  std::uint64_t offset = 0;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    INFO(i);
    CHECK(l["token_logprobs"][i].get<double>() == lp(i));
    CHECK(l["text_offset"][i] == offset);
    REQUIRE(l["top_logprobs"][i].size() == 1);
    CHECK(l["top_logprobs"][i].begin().value().get<double>() == lp(i));
    offset += tokens[i].size();
  }
  CHECK(l["tokens"][2] == " wor");

  // Streamed, then resumed after its first two chunks: the resumed stream
  // lists the tokens the client does not have, offsets in the whole text.
  r = http_exchange(port, post("/v1/completions", completion(true)));
  REQUIRE(r.status == 200);
  std::regex event{"id: ([0-9]+)\ndata: (\\{[^\n]*)\n\n"};
  std::vector<std::uint64_t> ids;
  std::string id;
  for (std::sregex_iterator it{r.body.begin(), r.body.end(), event}, end;
       it != end; ++it) {
    ids.push_back(std::stoull((*it)[1].str()));
    id = json::parse((*it)[2].str())["id"];
  }
  REQUIRE(ids.size() >= 3);
  auto resumed = http_exchange(
    port, post("/v1/completions", completion(true),
               "X-Exo-Resume: " + id + "\r\nLast-Event-ID: "
                 + std::to_string(ids[1]) + "\r\n"));
  REQUIRE(resumed.status == 200);
  std::vector<std::string> names;
  std::vector<std::uint64_t> offsets;
  for (auto& e : sse_payloads(resumed.body)) {
    if (e == "[DONE]")
      continue;
    auto c = json::parse(e)["choices"][0];
    if (c["logprobs"].is_null())
      continue;
    for (std::size_t i = 0; i < c["logprobs"]["tokens"].size(); ++i) {
      names.push_back(c["logprobs"]["tokens"][i]);
      offsets.push_back(c["logprobs"]["text_offset"][i]);
    }
  }
  REQUIRE(names.size() == tokens.size() - 2);
  CHECK(names.front() == tokens[2]);
  CHECK(offsets.front() == ids[1]);

  // Refused: a count out of range, top_logprobs without logprobs.
  auto refused = [&](const std::string& path, const std::string& body) {
    auto x = http_exchange(port, post(path, body));
    CHECK(x.status == 400);
    return json::parse(x.body)["error"]["param"].get<std::string>();
  };
  CHECK(refused("/v1/completions",
                R"({"model":"tiny","prompt":"hi","logprobs":21})")
        == "logprobs");
  CHECK(refused("/v1/completions",
                R"({"model":"tiny","prompt":"hi","logprobs":true})")
        == "logprobs");
  CHECK(refused("/v1/chat/completions",
                chat_body(false, R"(,"top_logprobs":3)"))
        == "top_logprobs");
  CHECK(refused("/v1/chat/completions",
                chat_body(false, R"(,"logprobs":true,"top_logprobs":-1)"))
        == "top_logprobs");
}

TEST_CASE("bad requests are answered in OpenAI's error shape") {
  auto backend = std::make_shared<scripted_backend>(tokens);
  server srv{options(backend)};
  auto port = srv.start();
  auto p = std::to_string(port);
  auto malformed = json::parse(run_curl(
    "-H 'Content-Type: application/json' -d '{\"model\":' "
    "http://127.0.0.1:" + p + "/v1/chat/completions"));
  CHECK(malformed["error"]["type"] == "invalid_request_error");
  CHECK(malformed["error"]["code"] == "invalid_json");
  CHECK(run_curl("-o /dev/null -w '%{http_code}' -d '{\"model\":' "
                 "http://127.0.0.1:" + p + "/v1/chat/completions")
        == "400");
  auto unknown = http_exchange(port, post("/v1/chat/completions",
                                     R"({"model":"nope","messages":[)"
                                     R"({"role":"user","content":"x"}]})"));
  CHECK(unknown.status == 404);
  CHECK(json::parse(unknown.body)["error"]["code"] == "model_not_found");
  auto n17 = http_exchange(port, post("/v1/chat/completions",
                                 chat_body(false, R"(,"n":17)")));
  CHECK(n17.status == 400);
  CHECK(json::parse(n17.body)["error"]["param"] == "n");
  auto wrong_method = http_exchange(port, "GET /v1/chat/completions HTTP/1.1\r\n"
                                     "Host: x\r\nConnection: close\r\n\r\n");
  CHECK(wrong_method.status == 405);
  auto nowhere = http_exchange(port, "GET /v2/nothing HTTP/1.1\r\n"
                                "Host: x\r\nConnection: close\r\n\r\n");
  CHECK(nowhere.status == 404);
  CHECK(json::parse(nowhere.body)["error"]["message"]
        == "Unknown endpoint: GET /v2/nothing");
  auto garbage = http_exchange(port, "NOT HTTP AT ALL\r\n\r\n");
  CHECK(garbage.status == 400);
  CHECK(backend->started() == 0);
}

TEST_CASE("a number too large for a double is a 400, not a crash") {
  // Found by fuzz_http_request: nlohmann's second parse (for the error's
  // position) threw out_of_range, which nothing caught.
  auto backend = std::make_shared<scripted_backend>(tokens);
  server srv{options(backend)};
  auto port = srv.start();
  for (auto body : {std::string{R"({"model":"tiny","prompt":"x","max_tokens":1e100000})"},
                    std::string{"111.110000e100040"}}) {
    auto r = http_exchange(port, post("/v1/completions", body));
    CHECK(r.status == 400);
    CHECK(json::parse(r.body)["error"]["type"] == "invalid_request_error");
  }
  CHECK(http_exchange(port, "GET /health HTTP/1.1\r\nHost: x\r\n"
                            "Connection: close\r\n\r\n")
          .status
        == 200);
  CHECK(backend->started() == 0);
}

TEST_CASE("a 100 MB body is refused with 413 before it is read") {
  auto backend = std::make_shared<scripted_backend>(tokens);
  server srv{options(backend)};
  auto port = srv.start();
  client_socket s{port};
  s.send("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
         "Content-Type: application/json\r\nContent-Length: 104857600\r\n"
         "\r\n{\"model\":\"tiny\",\"messages\":[");
  auto r = parse_reply(s.read_all());
  CHECK(r.status == 413);
  CHECK(json::parse(r.body)["error"]["code"] == "request_too_large");
  // curl, which sends Expect: 100-continue for a large body, gets the 413
  // without sending it.
  auto big = std::string(2 << 20, 'x');
  auto path = "/tmp/exo-gateway-big-" + std::to_string(port);
  {
    auto* f = std::fopen(path.c_str(), "wb");
    REQUIRE(f != nullptr);
    std::fwrite(big.data(), 1, big.size(), f);
    std::fclose(f);
  }
  auto code = run_curl("-o /dev/null -w '%{http_code}' --data-binary @" + path
                       + " http://127.0.0.1:" + std::to_string(port)
                       + "/v1/completions");
  std::remove(path.c_str());
  CHECK(code == "413");
  CHECK(backend->started() == 0);
}

TEST_CASE("headers over the limit are refused with 431") {
  auto backend = std::make_shared<scripted_backend>(tokens);
  auto o = options(backend);
  o.limits.max_header_bytes = 1024;
  server srv{o};
  auto port = srv.start();
  auto r = http_exchange(port, "GET /health HTTP/1.1\r\nHost: x\r\nX-Big: "
                            + std::string(4096, 'a') + "\r\n\r\n");
  CHECK(r.status == 431);
}

TEST_CASE("a request that arrives too slowly (slowloris) is closed") {
  auto backend = std::make_shared<scripted_backend>(tokens);
  auto o = options(backend);
  o.limits.request_timeout = 300ms;
  server srv{o};
  auto port = srv.start();
  client_socket s{port};
  s.send("GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: a");
  CHECK(s.closed_within(30s));
  CHECK(srv.stats().timeouts >= 1);
  // The server still answers others.
  CHECK(http_exchange(port, "GET /health HTTP/1.1\r\nHost: x\r\n"
                       "Connection: close\r\n\r\n")
          .status
        == 200);
}

TEST_CASE("1000 idle connections are bounded by the connection limit") {
  auto backend = std::make_shared<scripted_backend>(tokens);
  auto o = options(backend);
  o.limits.max_connections = 64;
  o.limits.request_timeout = 120s; // idle ones stay until the clients go
  // Both ends live in this process: 2000 descriptors and some.
  rlimit lim{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &lim) == 0);
  if (lim.rlim_cur < 4096 && lim.rlim_max > lim.rlim_cur) {
    lim.rlim_cur = std::min<rlim_t>(lim.rlim_max, 4096);
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
  REQUIRE(lim.rlim_cur >= 2200);
  server srv{o};
  auto port = srv.start();
  std::vector<std::unique_ptr<client_socket>> idle;
  for (int i = 0; i < 1000; ++i)
    idle.push_back(std::make_unique<client_socket>(port));
  CHECK(eventually([&] { return srv.stats().refused_connections == 936; }));
  auto st = srv.stats();
  CHECK(st.peak_connections == 64);
  // A refused connection reads a 503 in OpenAI's shape, then the close.
  auto refused = parse_reply(idle.back()->read_all());
  CHECK(refused.status == 503);
  CHECK(json::parse(refused.body)["error"]["code"] == "unavailable");
  // The clients leave; the server serves again.
  idle.clear();
  CHECK(eventually([&] { return srv.stats().connections == 0; }));
  CHECK(http_exchange(port, "GET /health HTTP/1.1\r\nHost: x\r\n"
                       "Connection: close\r\n\r\n")
          .status
        == 200);
}

TEST_CASE("bearer tokens are checked on every endpoint but /health") {
  auto backend = std::make_shared<scripted_backend>(tokens);
  auto o = options(backend);
  std::mutex mx;
  std::vector<std::pair<std::string, access::permission>> asked;
  o.authorize = [&](std::string_view t, access::permission p,
                    std::string_view path, std::string_view peer) {
    {
      std::lock_guard<std::mutex> guard{mx};
      asked.emplace_back(std::string{path}, p);
    }
    CHECK(peer.substr(0, 10) == "127.0.0.1:");
    auth_result r;
    if (t == "sk-good") {
      r.allowed = true;
    } else if (t == "sk-monitor") {
      r.allowed = p == access::permission::monitoring_read;
      r.error = forbidden("monitor only");
    } else if (t == "sk-busy") {
      r.error = rate_limited("slow down");
    } else {
      r.error = unauthorized("Incorrect API key");
    }
    return r;
  };
  server srv{o};
  auto port = srv.start();
  auto get = [&](const std::string& path, const std::string& auth) {
    return http_exchange(port, "GET " + path + " HTTP/1.1\r\nHost: x\r\n" + auth
                            + "Connection: close\r\n\r\n");
  };
  auto none = get("/v1/models", "");
  CHECK(none.status == 401);
  CHECK(json::parse(none.body)["error"]["code"] == "invalid_api_key");
  CHECK(json::parse(none.body)["error"]["message"].get<std::string>().find(
          "Missing bearer token")
        == 0);
  CHECK(get("/v1/models", "Authorization: Bearer sk-bad\r\n").status == 401);
  CHECK(get("/v1/models", "Authorization: Bearer sk-good\r\n").status == 200);
  CHECK(get("/v1/models", "Authorization: bearer sk-good\r\n").status == 200);
  auto monitor = get("/v1/models", "Authorization: Bearer sk-monitor\r\n");
  CHECK(monitor.status == 403);
  CHECK(json::parse(monitor.body)["error"]["type"] == "permission_error");
  CHECK(get("/metrics", "Authorization: Bearer sk-monitor\r\n").status
        == 200);
  auto busy = get("/metrics", "Authorization: Bearer sk-busy\r\n");
  CHECK(busy.status == 429);
  CHECK(busy.headers["retry-after"] == "1");
  CHECK(get("/metrics", "").status == 401);
  CHECK(get("/health", "").status == 200);
  CHECK(http_exchange(port, post("/v1/chat/completions", chat_body(false)))
          .status
        == 401);
  CHECK(backend->started() == 0);
  // /tokenize and /detokenize ask what a completion asks; this backend
  // has no vocabulary (501 once allowed).
  const std::string tok_body = R"({"model":"tiny","prompt":"x"})";
  CHECK(http_exchange(port, post("/tokenize", tok_body)).status == 401);
  auto no_vocab = http_exchange(
    port, post("/tokenize", tok_body, "Authorization: Bearer sk-good\r\n"));
  CHECK(no_vocab.status == 501);
  CHECK(json::parse(no_vocab.body)["error"]["code"] == "not_implemented");
  CHECK(http_exchange(port, post("/detokenize",
                                 R"({"model":"tiny","tokens":[1]})",
                                 "Authorization: Bearer sk-monitor\r\n"))
          .status
        == 403);
  CHECK(get("/tokenize", "Authorization: Bearer sk-good\r\n").status == 405);
  std::lock_guard<std::mutex> guard{mx};
  std::map<std::string, access::permission> by_path(asked.begin(),
                                                    asked.end());
  CHECK(by_path["/tokenize"] == access::permission::job_submit);
  CHECK(by_path["/detokenize"] == access::permission::job_submit);
  CHECK(by_path.count("/health") == 0);
  CHECK(by_path["/v1/models"] == access::permission::job_submit);
  CHECK(by_path["/metrics"] == access::permission::monitoring_read);
  CHECK(by_path["/v1/chat/completions"] == access::permission::job_submit);
}

TEST_CASE("more admitted completions than the queue holds get 429") {
  auto backend = std::make_shared<scripted_backend>(tokens);
  backend->hold();
  auto o = options(backend);
  o.limits.max_queued = 2;
  server srv{o};
  auto port = srv.start();
  client_socket a{port}, b{port};
  a.send(post("/v1/chat/completions", chat_body(true)));
  b.send(post("/v1/chat/completions", chat_body(false)));
  REQUIRE(backend->wait_until([&] { return backend->started() == 2; }));
  auto third = http_exchange(port, post("/v1/chat/completions", chat_body(false)));
  CHECK(third.status == 429);
  CHECK(third.headers["retry-after"] == "1");
  CHECK(json::parse(third.body)["error"]["type"] == "rate_limit_error");
  backend->release();
  CHECK(stream_text(parse_reply(a.read_all()).body) == joined());
  CHECK(json::parse(parse_reply(b.read_all()).body)["choices"][0]["message"]
                   ["content"]
        == joined());
  CHECK(eventually([&] { return srv.stats().in_flight == 0; }));
  CHECK(http_exchange(port, post("/v1/chat/completions", chat_body(false)))
          .status
        == 200);
  // Its slot was free before its answer left (CI once saw the next request
  // find it still taken).
  CHECK(srv.stats().in_flight == 0);
  // Each prompt of a request is a job: two prompts take both slots, three
  // (more than the queue) take the whole queue, and give them back.
  backend->hold();
  const std::string two = R"({"model":"tiny","prompt":["a","b"]})";
  client_socket c{port};
  c.send(post("/v1/completions", two));
  REQUIRE(backend->wait_until([&] { return backend->started() == 5; }));
  CHECK(srv.stats().in_flight == 2);
  CHECK(http_exchange(port, post("/v1/chat/completions", chat_body(false)))
          .status
        == 429);
  backend->release();
  CHECK(json::parse(parse_reply(c.read_all()).body)["choices"].size() == 2);
  CHECK(eventually([&] { return srv.stats().in_flight == 0; }));
  auto three = http_exchange(
    port, post("/v1/completions", R"({"model":"tiny","prompt":["a","b","c"]})"));
  CHECK(three.status == 200);
  CHECK(eventually([&] { return srv.stats().in_flight == 0; }));
}

TEST_CASE("a client that asks again on reading an answer gets a free slot") {
  // One slot: every answer must give it back before its last byte leaves,
  // or the client's next request meets 429 for its own finished one.
  auto backend = std::make_shared<scripted_backend>(tokens);
  auto o = options(backend);
  o.limits.max_queued = 1;
  server srv{o};
  auto port = srv.start();
  for (int i = 0; i < 100; ++i) {
    const bool stream = i % 2 == 1;
    const std::string body = i % 4 == 2 ? R"({"model":"tiny","prompt":"<fail>"})"
                                        : chat_body(stream);
    const std::string path = i % 4 == 2 ? "/v1/completions"
                                        : "/v1/chat/completions";
    auto r = http_exchange(port, post(path, body));
    INFO("request " << i << ": " << r.status << " " << r.body);
    CHECK(r.status == (i % 4 == 2 ? 503 : 200));
    CHECK(srv.stats().in_flight == 0);
  }
}

TEST_CASE("a client that disconnects closes its sink and frees its slot") {
  auto backend = std::make_shared<scripted_backend>(tokens);
  backend->hold();
  server srv{options(backend)};
  auto port = srv.start();
  {
    client_socket c{port};
    c.send(post("/v1/chat/completions", chat_body(true)));
    REQUIRE(backend->wait_until([&] { return backend->started() == 1; }));
  } // the client goes away before any token
  CHECK(backend->wait_until([&] { return backend->closes_seen() == 1; }));
  CHECK(backend->wait_until([&] { return backend->finished() == 1; }));
  CHECK(eventually([&] { return srv.stats().in_flight == 0; }));
  CHECK(srv.stats().client_disconnects == 1);
}

TEST_CASE("a slow streaming reader gets back-pressure, then every token") {
  // 3000 tokens of 400 bytes: far more than the socket buffers hold.
  std::vector<std::string> many;
  std::string expected;
  for (int i = 0; i < 3000; ++i) {
    char head[16];
    std::snprintf(head, sizeof head, "<%05d>", i);
    many.push_back(head + std::string(393, 'a' + i % 26));
    expected += many.back();
  }
  auto backend = std::make_shared<scripted_backend>(many);
  auto o = options(backend);
  o.limits.socket_send_buffer = 16 * 1024;
  o.limits.stream_buffer_bytes = 8 * 1024;
  server srv{o};
  auto port = srv.start();
  client_socket c{port, 4096};
  c.send(post("/v1/chat/completions", chat_body(true)));
  // The client reads nothing: the backend is told to pause.
  REQUIRE(backend->wait_until([&] { return backend->pauses() >= 1; }));
  CHECK(backend->finished() == 0);
  auto body = parse_reply(c.read_all(60s)).body;
  CHECK(stream_text(body) == expected);
  CHECK(backend->finished() == 1);
  // What the gateway held stayed near the buffer limit (one chunk over).
  CHECK(srv.stats().peak_stream_buffer < 8 * 1024 + 1024);
}

TEST_CASE("keep-alive connections carry several requests") {
  auto backend = std::make_shared<scripted_backend>(tokens);
  server srv{options(backend)};
  auto port = srv.start();
  client_socket c{port};
  auto body = chat_body(true);
  std::string req = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                    "Content-Length: "
                    + std::to_string(body.size()) + "\r\n\r\n" + body;
  c.send(req + "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  auto raw = c.read_all();
  auto second = raw.find("HTTP/1.1 200", 10);
  REQUIRE(second != std::string::npos);
  CHECK(stream_text(parse_reply(raw.substr(0, second)).body) == joined());
  CHECK(parse_reply(raw.substr(second)).body == R"({"status":"ok"})");
}

TEST_CASE("a backend failure before the first token is the HTTP answer") {
  struct failing : completion_backend {
    void complete(const completion_request&,
                  std::shared_ptr<token_sink> sink) override {
      sink->fail(unavailable("no device can hold the model"));
    }
  };
  server srv{options(std::make_shared<failing>())};
  auto port = srv.start();
  auto r = http_exchange(port, post("/v1/chat/completions", chat_body(true)));
  CHECK(r.status == 503);
  CHECK(json::parse(r.body)["error"]["message"]
        == "no device can hold the model");
  CHECK(srv.stats().in_flight == 0);
}

TEST_CASE("HTTPS serves with the cluster CA's certificate and refuses "
          "plain HTTP and a wrong key") {
  char tmpl[] = "/tmp/exo-gw-tls-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  std::string dir = tmpl;
  tls::init_ca(dir + "/ca");
  tls::cert_options co{"gw1"};
  co.alt_names = {"IP:127.0.0.1"};
  auto node = tls::issue_to_dir(dir + "/ca", "", dir + "/gw1", co);
  auto other = tls::issue_to_dir(dir + "/ca", "", dir + "/gw2",
                                 tls::cert_options{"gw2"});
  auto backend = std::make_shared<scripted_backend>(tokens);
  auto o = options(backend);
  o.tls = {node.cert, node.key, ""};
  {
    server srv{o};
    auto port = srv.start();
    auto health = https_exchange(port, "GET /health HTTP/1.1\r\nHost: x\r\n"
                                       "Connection: close\r\n\r\n",
                                 node.ca_cert);
    CHECK(health.status == 200);
    auto chat = https_exchange(port, post("/v1/chat/completions",
                                          chat_body(true)),
                               node.ca_cert);
    CHECK(chat.status == 200);
    CHECK(stream_text(chat.body) == joined());
    // Plain HTTP on the HTTPS port gets no answer, and the server goes on.
    client_socket plain{port};
    plain.send("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    CHECK(plain.read_all(5s).find("HTTP/1.1 200") == std::string::npos);
    // A client that trusts another CA refuses the server.
    tls::init_ca(dir + "/ca2");
    CHECK_THROWS_WITH(https_exchange(port, "GET /health HTTP/1.1\r\n\r\n",
                                     dir + "/ca2/ca.crt"),
                      Catch::Contains("TLS handshake failed"));
    CHECK(https_exchange(port, "GET /health HTTP/1.1\r\nHost: x\r\n"
                               "Connection: close\r\n\r\n",
                         node.ca_cert)
            .status
          == 200);
  }
  // A key that is not the certificate's, and a missing file, are named.
  o.tls = {node.cert, other.key, ""};
  server wrong{o};
  CHECK_THROWS_WITH(wrong.start(), Catch::Contains(other.key));
  o.tls = {dir + "/missing.crt", node.key, ""};
  server missing{o};
  CHECK_THROWS_WITH(missing.start(), Catch::Contains("missing.crt"));
  std::system(("rm -rf " + dir).c_str());
}

namespace {

/// A view_source with fixed views; push() sends an event to every
/// subscriber.
struct fake_views : view_source {
  std::mutex mx;
  std::map<std::uint64_t, std::function<void(std::string)>> subs;
  std::uint64_t next = 1;
  std::vector<std::uint64_t> cancelled;

  std::optional<std::string> view(const std::string& name) override {
    if (name == "cluster")
      return std::string{R"({"node":"alpha","nodes":[{"name":"alpha"}]})"};
    if (name == "nodes")
      return std::string{R"([{"name":"alpha"}])"};
    return std::nullopt;
  }
  std::uint64_t subscribe(std::function<void(std::string)> push) override {
    std::lock_guard<std::mutex> guard{mx};
    subs.emplace(next, std::move(push));
    return next++;
  }
  void unsubscribe(std::uint64_t id) override {
    std::lock_guard<std::mutex> guard{mx};
    subs.erase(id);
  }
  void cancel_job(std::uint64_t id,
                  std::function<void(int, std::string)> done) override {
    {
      std::lock_guard<std::mutex> guard{mx};
      cancelled.push_back(id);
    }
    std::thread([id, done] {
      done(id == 7 ? 200 : 404,
           "{\"job\":" + std::to_string(id) + "}");
    }).detach();
  }
  bool ask(const std::string& name, std::size_t limit,
           const std::string& type,
           std::function<void(int, std::string)> done) override {
    if (name != "audit" && name != "actors" && name != "plans")
      return false;
    done(200, "{\"asked\":\"" + name + "\",\"limit\":" + std::to_string(limit)
                + ",\"type\":\"" + type + "\"}");
    return true;
  }
  std::size_t subscribers() {
    std::lock_guard<std::mutex> guard{mx};
    return subs.size();
  }
  void push(const std::string& m) {
    std::vector<std::function<void(std::string)>> fs;
    {
      std::lock_guard<std::mutex> guard{mx};
      for (auto& [_, f] : subs)
        fs.push_back(f);
    }
    for (auto& f : fs)
      f(m);
  }
};

namespace ws = boost::beast::websocket;
using btcp = boost::asio::ip::tcp;

/// A blocking WebSocket client (Beast) on 127.0.0.1:port/v1/events,
/// offering `protocols`; returns the handshake's response.
struct ws_client {
  boost::asio::io_context ioc;
  ws::stream<btcp::socket> s{ioc};
  ws::response_type res;

  ws_client(std::uint16_t port, const std::string& protocols) {
    s.next_layer().connect({boost::asio::ip::make_address("127.0.0.1"),
                            port});
    s.set_option(ws::stream_base::decorator([protocols](ws::request_type& r) {
      if (!protocols.empty())
        r.set(boost::beast::http::field::sec_websocket_protocol, protocols);
    }));
    s.handshake(res, "127.0.0.1", "/v1/events");
  }

  std::string read() {
    boost::beast::flat_buffer b;
    s.read(b);
    return boost::beast::buffers_to_string(b.data());
  }
};

} // namespace

TEST_CASE("the dashboard and the cluster views are served, with their "
          "permissions") {
  auto views = std::make_shared<fake_views>();
  auto o = options(std::make_shared<scripted_backend>(tokens));
  o.views = views;
  std::mutex mx;
  std::map<std::string, access::permission> asked;
  o.authorize = [&](std::string_view t, access::permission p,
                    std::string_view path, std::string_view) {
    std::lock_guard<std::mutex> guard{mx};
    asked[std::string{path}] = p;
    auth_result r;
    r.allowed = t == "sk-good";
    r.error = unauthorized("no");
    return r;
  };
  server srv{o};
  auto port = srv.start();
  auto req = [&](const std::string& method, const std::string& path,
                 bool token = true) {
    return http_exchange(port, method + " " + path + " HTTP/1.1\r\nHost: x\r\n"
                                 + (token ? "Authorization: Bearer sk-good\r\n"
                                          : "")
                                 + "Content-Length: 0\r\n"
                                   "Connection: close\r\n\r\n");
  };
  // The page needs no token (its data does); it forbids other origins.
  auto page = req("GET", "/", false);
  CHECK(page.status == 200);
  CHECK(page.headers["content-type"] == "text/html; charset=utf-8");
  CHECK(page.headers["content-security-policy"].find("default-src 'self'")
        == 0);
  CHECK(page.body.find("app.js") != std::string::npos);
  CHECK(req("GET", "/app.js", false).headers["content-type"]
        == "text/javascript; charset=utf-8");
  CHECK(req("GET", "/style.css", false).status == 200);
  CHECK(req("POST", "/", false).status == 405);
  CHECK(req("GET", "/../etc/passwd", false).status == 404);

  CHECK(req("GET", "/v1/cluster", false).status == 401);
  auto c = req("GET", "/v1/cluster");
  CHECK(c.status == 200);
  CHECK(json::parse(c.body)["node"] == "alpha");
  CHECK(json::parse(req("GET", "/v1/cluster/nodes").body)[0]["name"]
        == "alpha");
  CHECK(req("GET", "/v1/cluster/secrets").status == 404);
  CHECK(req("DELETE", "/v1/cluster").status == 405);
  auto cancel = req("POST", "/v1/cluster/jobs/7/cancel");
  CHECK(cancel.status == 200);
  CHECK(json::parse(cancel.body)["job"] == 7);
  CHECK(req("POST", "/v1/cluster/jobs/8/cancel").status == 404);
  CHECK(req("POST", "/v1/cluster/jobs/x1/cancel").status == 400);
  CHECK(req("POST", "/v1/cluster/jobs/99999999999999999999/cancel").status
        == 400);
  // Job ids are 64-bit, as the console's cancel JOB takes them: 2^64-1 is an
  // id (not a running one), 2^64 is not.
  CHECK(req("POST", "/v1/cluster/jobs/18446744073709551615/cancel").status
        == 404);
  auto too_big = req("POST", "/v1/cluster/jobs/18446744073709551616/cancel");
  CHECK(too_big.status == 400);
  CHECK(too_big.body.find("is larger than 18446744073709551615")
        != std::string::npos);
  CHECK(req("GET", "/v1/events").status == 400); // not an upgrade
  auto audit = json::parse(req("GET", "/v1/cluster/audit?limit=5&type="
                                      "access_denied")
                             .body);
  CHECK(audit["asked"] == "audit");
  CHECK(audit["limit"] == 5);
  CHECK(audit["type"] == "access_denied");
  CHECK(json::parse(req("GET", "/v1/cluster/actors").body)["limit"] == 100);
  CHECK(req("GET", "/v1/cluster/audit?limit=0").status == 400);
  CHECK(req("GET", "/v1/cluster/audit?limit=99999").status == 400);
  auto bad_limit = req("GET", "/v1/cluster/audit?limit=%2B5");
  CHECK(bad_limit.status == 400);
  CHECK(bad_limit.body.find("limit must be 1..1000: limit: '%2B5' is not an "
                            "integer")
        != std::string::npos);
  CHECK(json::parse(req("GET", "/v1/cluster/audit?limit=0007").body)["limit"]
        == 7);
  CHECK(req("GET", "/v1/cluster/audit?type=a%20b").status == 400);
  CHECK(req("GET", "/v1/cluster/audit?path=/etc").status == 400);
  std::lock_guard<std::mutex> guard{mx};
  CHECK(asked["/v1/cluster"] == access::permission::monitoring_read);
  CHECK(asked["/v1/cluster/part"] == access::permission::monitoring_read);
  CHECK(asked["/v1/cluster/jobs/cancel"] == access::permission::job_cancel);
  CHECK(asked["/v1/cluster/audit"] == access::permission::audit_read);
  CHECK(asked.count("/") == 0);
}

namespace {

/// Views whose asks and cancels are never answered while the server runs:
/// the callbacks are kept, as an actor waiting on a gate that does not
/// answer keeps them (and ends, destroying them, whenever it ends).
struct unanswered_views : fake_views {
  std::vector<std::function<void(int, std::string)>> pending;

  void cancel_job(std::uint64_t,
                  std::function<void(int, std::string)> done) override {
    std::lock_guard<std::mutex> guard{mx};
    pending.push_back(std::move(done));
  }
  bool ask(const std::string&, std::size_t, const std::string&,
           std::function<void(int, std::string)> done) override {
    std::lock_guard<std::mutex> guard{mx};
    pending.push_back(std::move(done));
    return true;
  }
  std::size_t waiting() {
    std::lock_guard<std::mutex> guard{mx};
    return pending.size();
  }
};

} // namespace

TEST_CASE("a cluster view still unanswered when the server stops lets its "
          "session go, and a late answer goes nowhere") {
  // ASan found a node's SIGTERM destroying a session after its io_context:
  // the session was held by such a callback, in an actor that ended later.
  auto views = std::make_shared<unanswered_views>();
  auto o = options(std::make_shared<scripted_backend>(tokens));
  o.views = views;
  server srv{o};
  auto port = srv.start();
  client_socket ask{port}, cancel{port};
  REQUIRE(ask.send("GET /v1/cluster/actors HTTP/1.1\r\nHost: x\r\n\r\n"));
  REQUIRE(cancel.send("POST /v1/cluster/jobs/7/cancel HTTP/1.1\r\nHost: "
                      "x\r\nContent-Length: 0\r\n\r\n"));
  REQUIRE(eventually([&] { return views->waiting() == 2; }));
  CHECK(srv.stats().connections == 2);
  srv.stop();
  // Both sessions are gone although their callbacks are still held.
  CHECK(srv.stats().connections == 0);
  CHECK(ask.closed_within(10s));
  CHECK(cancel.closed_within(10s));
  // The answers come late (nothing is sent, nothing breaks), and the
  // callbacks go (the actor ends).
  std::vector<std::function<void(int, std::string)>> late;
  {
    std::lock_guard<std::mutex> guard{views->mx};
    late.swap(views->pending);
  }
  for (auto& done : late)
    done(200, "{}");
  late.clear();
}

TEST_CASE("events stream over a WebSocket, the token as its subprotocol") {
  auto views = std::make_shared<fake_views>();
  auto o = options(std::make_shared<scripted_backend>(tokens));
  o.views = views;
  o.authorize = [](std::string_view t, access::permission p,
                   std::string_view, std::string_view) {
    auth_result r;
    r.allowed = t == "sk-good" && p == access::permission::monitoring_read;
    r.error = unauthorized("no");
    return r;
  };
  server srv{o};
  auto port = srv.start();
  {
    ws_client c{port, "exo.v1, bearer.sk-good"};
    CHECK(c.res[boost::beast::http::field::sec_websocket_protocol]
          == "exo.v1");
    REQUIRE(eventually([&] { return views->subscribers() == 1; }));
    CHECK(srv.stats().event_sockets == 1);
    for (int i = 0; i < 3; ++i)
      views->push("{\"n\":" + std::to_string(i) + "}");
    for (int i = 0; i < 3; ++i)
      CHECK(c.read() == "{\"n\":" + std::to_string(i) + "}");
    c.s.close(ws::close_code::normal);
  }
  CHECK(eventually([&] { return views->subscribers() == 0; }));
  CHECK(eventually([&] { return srv.stats().event_sockets == 0; }));
  // A bad token: the upgrade is refused with 401.
  try {
    ws_client bad{port, "exo.v1, bearer.sk-bad"};
    FAIL("the handshake should be refused");
  } catch (const boost::system::system_error& e) {
    CHECK(e.code() == ws::error::upgrade_declined);
  }
  CHECK(views->subscribers() == 0);
}

TEST_CASE("a WebSocket that never reads is closed at its limit") {
  auto views = std::make_shared<fake_views>();
  auto o = options(std::make_shared<scripted_backend>(tokens));
  o.views = views;
  o.limits.events_hard_limit = 64 * 1024;
  o.limits.socket_send_buffer = 4096;
  server srv{o};
  auto port = srv.start();
  client_socket raw{port, 4096};
  raw.send("GET /v1/events HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
           "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
           "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n");
  REQUIRE(eventually([&] { return views->subscribers() == 1; }));
  std::string kb(1024, 'x');
  for (int i = 0; i < 4000 && views->subscribers() == 1; ++i)
    views->push("\"" + kb + "\"");
  CHECK(eventually([&] { return srv.stats().slow_event_sockets == 1; }));
  CHECK(eventually([&] { return views->subscribers() == 0; }));
  CHECK(http_exchange(port, "GET /health HTTP/1.1\r\nHost: x\r\n"
                            "Connection: close\r\n\r\n")
          .status
        == 200);
}

TEST_CASE("several prompts in one completion: each prompt's request "
          "gives choices p * n + j, whole or streamed, echoed, resumed, and "
          "one that fails fails the answer and stops the others") {
  auto backend = std::make_shared<scripted_backend>(tokens, 4);
  server srv{options(backend)};
  auto port = srv.start();
  const std::string body = R"({"model":"tiny","prompt":["A: ","B: ","C: "],)"
                           R"("n":2,"max_tokens":3,"echo":true)";
  auto r = http_exchange(port, post("/v1/completions", body + "}"));
  REQUIRE(r.status == 200);
  auto j = json::parse(r.body);
  REQUIRE(j["choices"].size() == 6);
  const std::vector<std::string> prompts{"A: ", "B: ", "C: "};
  for (std::size_t i = 0; i < 6; ++i) {
    INFO("choice " << i);
    CHECK(j["choices"][i]["index"] == i);
    CHECK(j["choices"][i]["text"] == prompts[i / 2] + choice_text(i % 2, 3));
    CHECK(j["choices"][i]["finish_reason"] == "length");
  }
  CHECK(j["usage"]["prompt_tokens"] == 3 * 4); // each prompt's, summed
  CHECK(j["usage"]["completion_tokens"] == 6 * 3);
  auto reqs = backend->requests();
  REQUIRE(reqs.size() == 3); // one request a prompt, n choices each
  for (std::size_t p = 0; p < 3; ++p) {
    CHECK(reqs[p].prompt == prompts[p]);
    CHECK(reqs[p].more_prompts.empty());
    CHECK(reqs[p].n == 2);
    CHECK(reqs[p].echo_text == prompts[p]);
    CHECK(reqs[p].id == reqs[0].id.substr(0, reqs[0].id.size() - 2) + "-"
                          + std::to_string(p));
  }

  // Streamed: each choice's text by its index; its SSE ids count all six.
  auto streamed = http_exchange(port, post("/v1/completions",
                                           body + R"(,"stream":true})"));
  REQUIRE(streamed.status == 200);
  auto s = read_choices(streamed.body);
  for (std::uint32_t i = 0; i < 6; ++i) {
    CHECK(s.text[i] == prompts[i / 2] + choice_text(i % 2, 3));
    CHECK(s.reason[i] == "length");
  }
  auto id = json::parse(sse_payloads(streamed.body).at(0))["id"]
              .get<std::string>();
  // A resume names six counts: each prompt's request gets its two.
  auto resumed = http_exchange(
    port, post("/v1/completions", body + R"(,"stream":true})",
               "X-Exo-Resume: " + id
                 + "\r\nLast-Event-ID: 3,3,3,3,3,4\r\n"));
  REQUIRE(resumed.status == 200);
  auto again = read_choices(resumed.body);
  CHECK(again.text[0] == choice_text(0, 3));
  CHECK(again.text[5] == choice_text(1, 3).substr(1));
  reqs = backend->requests();
  REQUIRE(reqs.size() == 9);
  CHECK(reqs[8].id == id + "-2");
  CHECK(reqs[8].resume);
  CHECK(reqs[8].resume_after == std::vector<std::uint64_t>{3, 4});
  auto wrong = http_exchange(
    port, post("/v1/completions", body + R"(,"stream":true})",
               "X-Exo-Resume: " + id + "\r\nLast-Event-ID: 3,3\r\n"));
  CHECK(wrong.status == 400);
  CHECK(wrong.body.find("6 choices") != std::string::npos);

  // A prompt whose request fails: the answer is its error, and the other
  // prompt's request is told to stop (its sink closes).
  const int closes = backend->closes_seen();
  auto failed = http_exchange(
    port, post("/v1/completions",
               R"({"model":"tiny","prompt":["A: ","<fail>"],"max_tokens":3})"));
  CHECK(failed.status == 503);
  CHECK(failed.body.find("scripted failure") != std::string::npos);
  CHECK(backend->wait_until([&] { return backend->closes_seen() > closes; }));
  // The slots are given back: a plain request still goes.
  CHECK(http_exchange(port, post("/v1/completions",
                                 R"({"model":"tiny","prompt":"x"})"))
          .status
        == 200);
}

TEST_CASE("vLLM's prompt_logprobs: each completions choice's, the chat's "
          "answer's, each cut to its own count, and an answer without them "
          "fails") {
  auto backend = std::make_shared<scripted_backend>(tokens, 4);
  server srv{options(backend)};
  auto port = srv.start();
  const std::string prompt = "Hello there: ";
  completion_request shape;
  shape.prompt = prompt;
  const auto scored = scripted_backend::prompt_tokens_of(shape);
  const std::string head = R"({"model":"tiny","prompt":")" + prompt + "\",";
  // Without logprobs: the prompt's tokens keyed by id, one alternative
  // each; no generated token's log-probabilities.
  auto r = http_exchange(port, post("/v1/completions",
                                    head + R"("prompt_logprobs":1,"n":2})"));
  REQUIRE(r.status == 200);
  auto j = json::parse(r.body);
  REQUIRE(j["choices"].size() == 2);
  for (std::size_t c = 0; c < 2; ++c) {
    INFO("choice " << c);
    auto& plp = j["choices"][c]["prompt_logprobs"];
    REQUIRE(plp.size() == scored.size());
    CHECK(plp[0].is_null());
    for (std::size_t i = 1; i < scored.size(); ++i) {
      INFO("prompt token " << i);
      REQUIRE(plp[i].size() == 2);
      auto& own = plp[i][std::to_string(100 + i - 1)];
      CHECK(own["logprob"].get<double>() == scored[i].logprob);
      CHECK(own["rank"] == i + 1);
      CHECK(own["decoded_token"] == scored[i].token);
      CHECK(plp[i]["1000"]["rank"] == 1);
      CHECK(plp[i]["1000"]["decoded_token"] == "p0");
    }
    CHECK(j["choices"][c]["logprobs"].is_null());
  }
  CHECK(backend->requests().back().prompt_logprobs == 1);
  // With echo and logprobs 2: the echo's tokens with two alternatives,
  // prompt_logprobs with none (the backend scored with two).
  r = http_exchange(port, post("/v1/completions",
                               head + R"("echo":true,"logprobs":2,)"
                                      R"("prompt_logprobs":0})"));
  REQUIRE(r.status == 200);
  j = json::parse(r.body);
  auto& echo = j["choices"][0]["logprobs"];
  CHECK(echo["top_logprobs"][1].size() == 2);
  auto& plp = j["choices"][0]["prompt_logprobs"];
  REQUIRE(plp.size() == scored.size());
  for (std::size_t i = 1; i < scored.size(); ++i)
    CHECK(plp[i].size() == 1);
  // Chat: the answer's, not a choice's.
  r = http_exchange(port, post("/v1/chat/completions",
                               R"({"model":"tiny","messages":[{"role":)"
                               R"("user","content":"hi"}],)"
                               R"("prompt_logprobs":3})"));
  REQUIRE(r.status == 200);
  j = json::parse(r.body);
  CHECK(j["prompt_logprobs"].is_array());
  CHECK(j["prompt_logprobs"][0].is_null());
  CHECK_FALSE(j["choices"][0].contains("prompt_logprobs"));
  // A backend that ends without them: an error, never an answer that
  // silently lacks them.
  backend->send_prompt_scores = false;
  r = http_exchange(port, post("/v1/completions",
                               head + R"("prompt_logprobs":1})"));
  CHECK(r.status == 500);
  CHECK_THAT(r.body, Catch::Contains("prompt_logprobs"));
  // Streamed: refused by name before anything runs.
  r = http_exchange(port, post("/v1/completions",
                               head + R"("prompt_logprobs":1,"stream":true})"));
  CHECK(r.status == 400);
  CHECK(json::parse(r.body)["error"]["param"] == "prompt_logprobs");
}

TEST_CASE("echo with logprobs starts each choice's logprobs with the "
          "prompt's tokens, the first null, whole or streamed, with "
          "max_tokens 0 too, and not again to a resumed client") {
  auto backend = std::make_shared<scripted_backend>(tokens, 4);
  server srv{options(backend)};
  auto port = srv.start();
  const std::string prompt = "Hello there: ";
  const std::string body = R"({"model":"tiny","prompt":")" + prompt
                           + R"(","echo":true,"logprobs":2,"n":2,)";
  completion_request shape;
  shape.prompt = prompt;
  shape.logprobs = 2;
  const auto scored = scripted_backend::prompt_tokens_of(shape);
  // Whole: the prompt's tokens, then the completion's, offsets counting
  // the prompt's text first.
  auto r = http_exchange(port, post("/v1/completions",
                                    body + R"("max_tokens":3})"));
  REQUIRE(r.status == 200);
  auto j = json::parse(r.body);
  REQUIRE(j["choices"].size() == 2);
  for (std::size_t c = 0; c < 2; ++c) {
    INFO("choice " << c);
    auto& lp = j["choices"][c]["logprobs"];
    REQUIRE(lp["tokens"].size() == scored.size() + 3);
    CHECK(lp["tokens"][0] == "<s>");
    CHECK(lp["token_logprobs"][0].is_null());
    CHECK(lp["top_logprobs"][0].is_null());
    std::uint64_t offset = 0;
    for (std::size_t i = 0; i < scored.size(); ++i) {
      INFO("prompt token " << i);
      CHECK(lp["tokens"][i] == scored[i].token);
      CHECK(lp["text_offset"][i] == offset);
      offset += scored[i].token.size();
      if (i > 0) {
        CHECK(lp["token_logprobs"][i].get<double>() == scored[i].logprob);
        CHECK(lp["top_logprobs"][i].size() == 2);
        CHECK(lp["top_logprobs"][i]["p1"].get<double>()
              == scored[i].logprob - 1);
      }
    }
    CHECK(lp["tokens"][scored.size()] == tokens[c]);
    CHECK(lp["text_offset"][scored.size()] == prompt.size());
    CHECK(lp["token_logprobs"][scored.size()].get<double>() == -0.125);
    CHECK(j["choices"][c]["text"]
          == prompt + tokens[c] + tokens[c + 1] + tokens[c + 2]);
  }
  CHECK(j["usage"]["completion_tokens"] == 6);
  CHECK(backend->requests().at(0).echo);
  CHECK(backend->requests().at(0).logprobs == 2);

  // max_tokens 0: the prompt alone, scored (what scoring a text asks).
  r = http_exchange(port, post("/v1/completions", body + R"("max_tokens":0})"));
  REQUIRE(r.status == 200);
  j = json::parse(r.body);
  CHECK(j["choices"][0]["text"] == prompt);
  CHECK(j["choices"][0]["logprobs"]["tokens"].size() == scored.size());
  CHECK(j["choices"][1]["logprobs"]["token_logprobs"].size() == scored.size());
  CHECK(j["usage"]["completion_tokens"] == 0);

  // Streamed: the echo's chunk carries the prompt's tokens.
  auto streamed = http_exchange(
    port, post("/v1/completions", body + R"("max_tokens":3,"stream":true})"));
  REQUIRE(streamed.status == 200);
  std::vector<std::vector<std::string>> listed(2);
  std::vector<json> first(2);
  for (auto& event : sse_payloads(streamed.body)) {
    if (event == "[DONE]")
      continue;
    auto c = json::parse(event)["choices"][0];
    if (c["logprobs"].is_null())
      continue;
    auto i = c["index"].get<std::size_t>();
    if (listed[i].empty())
      first[i] = c;
    for (auto& t : c["logprobs"]["tokens"])
      listed[i].push_back(t);
  }
  for (std::size_t c = 0; c < 2; ++c) {
    INFO("streamed choice " << c);
    REQUIRE(listed[c].size() == scored.size() + 3);
    CHECK(first[c]["text"] == prompt);
    CHECK(first[c]["logprobs"]["token_logprobs"][0].is_null());
    CHECK(listed[c][scored.size()] == tokens[c]);
  }
  auto id = json::parse(sse_payloads(streamed.body).at(0))["id"]
              .get<std::string>();
  // A client that had the prompt resumes: its tokens are not sent again.
  const auto had = std::to_string(prompt.size()) + ","
                   + std::to_string(prompt.size());
  auto resumed = http_exchange(
    port, post("/v1/completions", body + R"("max_tokens":3,"stream":true})",
               "X-Exo-Resume: " + id + "\r\nLast-Event-ID: " + had + "\r\n"));
  REQUIRE(resumed.status == 200);
  std::size_t again = 0;
  for (auto& event : sse_payloads(resumed.body)) {
    if (event == "[DONE]")
      continue;
    auto c = json::parse(event)["choices"][0];
    if (!c["logprobs"].is_null())
      again += c["logprobs"]["tokens"].size();
  }
  CHECK(again == 2 * 3);
}

TEST_CASE("echo starts each choice's text with the prompt's, whole or "
          "streamed, past no stop string, and a resume counts its bytes") {
  auto backend = std::make_shared<scripted_backend>(tokens, 4);
  server srv{options(backend)};
  auto port = srv.start();
  const std::string prompt = "Hello there: ";
  // "Hel" is in the prompt and is choice 0's first token: only what is
  // generated is looked at, so choice 0 is its prompt alone (stopped), and
  // choice 1 runs to max_tokens after its prompt.
  const std::string body = R"({"model":"tiny","prompt":")" + prompt
                           + R"(","echo":true,"max_tokens":4,"n":2,)"
                             R"("stop":"Hel")";
  auto r = http_exchange(port, post("/v1/completions", body + "}"));
  REQUIRE(r.status == 200);
  auto j = json::parse(r.body);
  REQUIRE(j["choices"].size() == 2);
  CHECK(j["choices"][0]["text"] == prompt);
  CHECK(j["choices"][0]["finish_reason"] == "stop");
  CHECK(j["choices"][1]["text"] == prompt + choice_text(1, 4));
  CHECK(j["choices"][1]["finish_reason"] == "length");
  CHECK(j["usage"]["completion_tokens"] == 1 + 4); // the prompt is no token
  CHECK(backend->requests().at(0).echo);

  auto streamed = http_exchange(port, post("/v1/completions",
                                           body + R"(,"stream":true})"));
  REQUIRE(streamed.status == 200);
  auto s = read_choices(streamed.body);
  CHECK(s.text[0] == prompt);
  CHECK(s.text[1] == prompt + choice_text(1, 4));
  CHECK(s.reason[0] == "stop");
  CHECK(s.reason[1] == "length");
  auto id = json::parse(sse_payloads(streamed.body).at(0))["id"]
              .get<std::string>();

  // A client that had the prompt and two bytes of choice 1 resumes: the
  // echo is not sent again.
  const auto had = std::to_string(prompt.size()) + ","
                   + std::to_string(prompt.size() + 2);
  auto resumed = http_exchange(
    port, post("/v1/completions", body + R"(,"stream":true})",
               "X-Exo-Resume: " + id + "\r\nLast-Event-ID: " + had + "\r\n"));
  REQUIRE(resumed.status == 200);
  auto again = read_choices(resumed.body);
  CHECK(again.text[0] == "");
  CHECK(again.text[1] == choice_text(1, 4).substr(2));

  // A prompt of token ids is echoed as their text, which this backend
  // cannot give: the answer says so instead of echoing nothing.
  auto ids = http_exchange(port, post("/v1/completions",
                                      R"({"model":"tiny","prompt":[1,2],)"
                                      R"("echo":true})"));
  CHECK(ids.status == 501);
  CHECK(ids.body.find("does not tokenize") != std::string::npos);
  CHECK(backend->requests().size() == 3);
}
