#include "runtime/gateway/server.hpp"
#include "scripted_backend.hpp"
#include "test/support/process.hpp"
#include "test/support/tools.hpp"

#include <nlohmann/json.hpp>

#include <catch2/catch.hpp>

#include <cstdlib>
#include <unistd.h>

using namespace exo::gateway;
using namespace exo::gateway::testing;
using namespace std::chrono_literals;

namespace {

const std::vector<std::string> tokens{"Hello", ",", " wor", "ld", "!",
                                      " caf", "\xc3", "\xa9", " end"};

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

/// Device gauges of two simulated devices, as a node would report them.
struct fixed_devices : metrics_source {
  void collect(prometheus::text_writer& w) override {
    prometheus::device_reading a;
    a.gpu = "0";
    a.uuid = "sim-0";
    a.model_name = "exo sim \"fast\"";
    a.hostname = "node-a";
    a.backend = "sim";
    a.temperature_c = 55.5;
    a.power_w = 120;
    a.fb_used_mib = 512;
    a.fb_free_mib = 7680;
    a.util_percent = 40;
    a.sm_clock_mhz = 1500;
    auto b = a;
    b.gpu = "1";
    b.uuid = "cpu-0";
    b.backend = "cpu";
    b.temperature_c.reset();
    prometheus::write_device_gauges(w, {a, b});
  }
};

} // namespace

TEST_CASE("the official openai client lists, completes and streams") {
  auto tools = exo::test::require_tool("openai");
  auto node = which("node");
  if (node.empty())
    exo::test::skip_test("node is not on PATH: the openai client cannot run");
  auto backend = std::make_shared<scripted_backend>(tokens, 5);
  server_options o;
  o.models = {{"tiny-llama", 1700000000, "exo"}, {"tiny-qwen", 1700000001,
                                                  "exo"}};
  o.backend = backend;
  o.authorize = [](std::string_view t, exo::access::permission, std::string_view,
                   std::string_view) {
    auth_result r;
    r.allowed = t == "sk-exo-test";
    r.error = unauthorized("Incorrect API key");
    return r;
  };
  server srv{o};
  auto port = srv.start();
  std::string text, second; // the scripted backend's choices 0 and 1
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    text += tokens[i];
    second += tokens[(i + 1) % tokens.size()];
  }
  nlohmann::json expected{{"models", {"tiny-llama", "tiny-qwen"}},
                          {"text", text},
                          {"second", second},
                          {"tokens", tokens.size()},
                          {"prompt_tokens", 5}};
  auto r = exo::test::run({node, EXO_SOURCE_DIR "/test/gateway/openai_client.mjs",
                           exo::test::tools_dir(), std::to_string(port),
                           expected.dump()},
                          120s);
  INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
  CHECK(r.code == 0);
  CHECK(r.out.find("all checks passed") != std::string::npos);
  // What the client sent reached the backend as typed requests.
  auto reqs = backend->requests();
  REQUIRE(reqs.size() == 4);
  CHECK(reqs[3].n == 2);
  CHECK(reqs[0].kind == endpoint_kind::completions);
  CHECK(reqs[0].prompt == "Once upon a time");
  CHECK(reqs[0].seed == 42);
  CHECK(reqs[0].temperature == 0.0);
  CHECK(reqs[2].stream);
  CHECK(reqs[2].include_usage);
  CHECK(reqs[2].messages.size() == 2);
  CHECK(reqs[2].max_tokens == 64);
}

TEST_CASE("promtool accepts /metrics with the gateway's and device "
          "metrics") {
  auto promtool = which("promtool");
  if (promtool.empty())
    exo::test::skip_test("promtool is not installed (Debian package "
                         "prometheus): /metrics is not linted");
  auto backend = std::make_shared<scripted_backend>(tokens);
  server_options o;
  o.models = {{"tiny", 1, "exo"}};
  o.backend = backend;
  o.metrics = std::make_shared<fixed_devices>();
  server srv{o};
  auto port = srv.start();
  // Some traffic so that every family has samples.
  CHECK(http_exchange(port, post("/v1/chat/completions",
                                 R"({"model":"tiny","stream":true,)"
                                 R"("messages":[{"role":"user",)"
                                 R"("content":"x"}]})"))
          .status
        == 200);
  CHECK(http_exchange(port, post("/v1/completions", "{"))
          .status
        == 400);
  auto m = http_exchange(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n"
                               "Connection: close\r\n\r\n");
  REQUIRE(m.status == 200);
  CHECK(m.headers["content-type"]
        == "text/plain; version=0.0.4; charset=utf-8");
  auto& body = m.body;
  CHECK(body.find("exo_tokens_generated_total "
                  + std::to_string(tokens.size()) + "\n")
        != std::string::npos);
  CHECK(body.find("exo_http_requests_total{endpoint=\"/v1/completions\","
                  "status=\"400\"} 1\n")
        != std::string::npos);
  CHECK(body.find("exo_time_to_first_token_seconds_count 1\n")
        != std::string::npos);
  CHECK(body.find("DCGM_FI_DEV_GPU_TEMP{gpu=\"0\",UUID=\"sim-0\","
                  "modelName=\"exo sim \\\"fast\\\"\",Hostname=\"node-a\","
                  "backend=\"sim\"} 55.5\n")
        != std::string::npos);
  auto dir = exo::test::temp_dir("exo-gateway-metrics");
  exo::test::write_file(dir + "/metrics.txt", body);
  auto r = exo::test::run({"/bin/sh", "-c",
                           promtool + " check metrics < " + dir
                             + "/metrics.txt"},
                          60s);
  INFO("promtool stdout:\n" << r.out << "\nstderr:\n" << r.err);
  // promtool parses the whole exposition (a format error is fatal) and
  // then lints names. Its only complaint may be dcgm-exporter's own label
  // `modelName` (camelCase), which the dashboards made for it expect.
  std::string lint = r.out + r.err;
  std::size_t pos = 0, problems = 0, model_name = 0;
  while ((pos = lint.find('\n', pos)) != std::string::npos) {
    ++pos;
    ++problems;
  }
  for (pos = 0; (pos = lint.find("label names should be written in "
                                 "'snake_case' not 'camelCase'", pos))
                != std::string::npos;
       ++pos)
    ++model_name;
  CHECK(lint.find("error while linting") == std::string::npos);
  CHECK(problems == model_name);
  // promtool exits 1 on a parse error, 3 on lint problems only.
  CHECK((r.code == 0 || (r.code == 3 && model_name > 0)));
  std::system(("rm -rf " + dir).c_str());
}
