// The prefix cache (issue 22): the time a request takes to read a prompt
// whose start (a long system prompt) another request on the same node read
// before, against reading it all. One node (cpu only) serves a long
// greedy run whose prompt is the system prompt and a first question (it
// keeps the stage, and so the kept rows, alive and decodes meanwhile, as a
// gateway's other clients would); then, alternately, console runs of the
// same system prompt with other questions, one token each: with the
// prefix cache, and with --no-prefix-cache. llama.cpp's column: the same
// number of tokens read from scratch by node-llama-cpp (what it does for
// a request that does not continue its slot's conversation; it keeps no
// prefix across slots), measured in the same run once the running request
// is cancelled (alone on the core), beside exo's runs then: with the cache
// ("after": no job runs, the rows come from the stage its device kept
// after the last job) and without. Each cell: the median of RUNS
// (min-max) seconds until the prompt was read.
//
//   build/bench/workload/prefix_cache_bench "[.bench]"   (target
//   bench_prefix_cache; EXO_PREFIX_RUNS, default 5; EXO_PREFIX_TYPES one
//   of f32, q4_k_m; CORE, default 1: the node's and llama.cpp's core)
//
// A Catch2 program because it drives the tests' cluster harness.

#include "core/model/test_model.hpp"
#include "test/support/cluster.hpp"
#include "test/support/tools.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

using namespace exo::test;
using namespace std::chrono_literals;

namespace {

std::string cell(std::vector<double> v) {
  if (v.empty())
    return "-";
  std::sort(v.begin(), v.end());
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f (%.3f-%.3f)", v[(v.size() - 1) / 2],
                v.front(), v.back());
  return buf;
}

struct prompt_read {
  double seconds = 0;
  long tokens = 0;
  long cached = 0;
};

/// The node's output, for a failure's message.
std::function<std::string()> node_log;

prompt_read read_of(const run_result& r) {
  static const std::regex prompt{"prompt: ([0-9]+) tokens in ([0-9.]+) s"};
  static const std::regex cached{"([0-9]+) of the [0-9]+ prompt tokens came "
                                 "from the prefix cache"};
  INFO(r.out << r.err);
  if (r.code != 0 && node_log) {
    auto log = node_log();
    INFO("node's output (last 6000 bytes):\n"
         << log.substr(log.size() > 6000 ? log.size() - 6000 : 0));
    REQUIRE(r.code == 0);
  }
  REQUIRE(r.code == 0);
  std::smatch m;
  REQUIRE(std::regex_search(r.out, m, prompt));
  prompt_read p;
  p.tokens = std::stol(m[1]);
  p.seconds = std::stod(m[2]);
  if (std::regex_search(r.out, m, cached))
    p.cached = std::stol(m[1]);
  return p;
}

} // namespace

TEST_CASE("prompt read with the prefix cache and without", "[.bench]") {
  int runs = 5;
  if (auto* r = std::getenv("EXO_PREFIX_RUNS"))
    runs = std::max(1, std::atoi(r));
  std::string llama_dir = tools_dir();
  bool have_llama = !llama_dir.empty()
                    && ::access("/usr/bin/node", X_OK) == 0
                    && ::access((llama_dir + "/node_modules/node-llama-cpp")
                                  .c_str(),
                                F_OK)
                         == 0;
  if (have_llama) // the probe finds the package there
    ::setenv("LLAMA_NODE_DIR", llama_dir.c_str(), 1);
  else
    std::printf("node or node-llama-cpp is missing (scripts/test-tools.sh "
                "installs the package): llama.cpp's column is left out\n");
  pki p{"exo-prefix-bench"};
  p.node("n1");
  node_options o{"n1"};
  o.devices = R"({"include": ["cpu"], "rescan_interval_s": 0})";
  o.state_dir = p.dir + "/n1/state";
  auto node = start_node(p, o);
  node_log = [&node] { return node.proc->out() + node.proc->err(); };
  // The node's threads (and those it starts) on one core, as the other
  // benchmarks pin exo-node; the consoles and this program run anywhere.
  const std::string core = std::getenv("CORE") ? std::getenv("CORE") : "1";
  REQUIRE(run({"/usr/bin/taskset", "-a", "-p", "-c", core,
               std::to_string(node.proc->pid())})
            .code
          == 0);
  // About 1100 tokens of the generated vocabulary (8 words: 29 tokens):
  // two whole pieces of 512 and some.
  std::string system = "the";
  for (int i = 0; i < 38; ++i)
    system += " quick brown fox jumps over a lazy dog";
  std::printf("12 layers, 512 wide, ff 1536, 8/4 heads, vocabulary 2048; a "
              "system prompt of about 1100 tokens and a question; seconds "
              "until the prompt is read beside a running request; one core; "
              "median of %d (min-max)\n",
              runs);
  std::printf("  %-7s %-7s %-7s %-22s %-22s %-22s %-22s %-22s\n", "type",
              "tokens", "cached", "exo, cache, beside", "exo, all, beside",
              "exo, cache, after", "exo, all, alone",
              "llama.cpp, all, alone");
  std::vector<std::string> types{"f32", "q4_k_m"};
  if (auto* t = std::getenv("EXO_PREFIX_TYPES"))
    types = {t};
  for (auto& type_name : types) {
    const char* type = type_name.c_str();
    auto model = p.dir + "/" + type + ".gguf";
    auto made = run({exo_model(), "make-test", "--out", model, "--type", type,
                     "--layers", "12", "--dim", "512", "--ff", "1536",
                     "--heads", "8", "--kv-heads", "4", "--vocab", "2048",
                     "--ctx", "4096", "--seed", "1"},
                    120s);
    REQUIRE(made.code == 0);
    // The request that keeps the stage: the system prompt, a question, and
    // as many tokens as the context leaves.
    process keeper{console_argv(
      p, node.port,
      {"run --model " + model + " --prompt \"" + system
       + " what is a fox\" -n 2900 --temperature 0"},
      console_options{false, std::chrono::milliseconds{600000}})};
    std::string keeper_job;
    // Once the long run has tokens its prompt is read and its rows kept.
    REQUIRE(eventually(p, node.port, "jobs", [&](const std::string& json) {
      keeper_job = running_job_with_tokens(json);
      return !keeper_job.empty();
    }, 60s));
    std::vector<double> with, without, llama;
    prompt_read last;
    // Question i of the system prompt, with the prefix cache or without.
    auto ask = [&](int i, bool cache) {
      return read_of(console(
        p, node.port,
        {"run --model " + model + " --prompt \"" + system
         + " and a question number " + std::to_string(i) + "\" -n 1"
         + (cache ? "" : " --no-prefix-cache")},
        console_options{false, std::chrono::milliseconds{120000}}));
    };
    for (int i = 0; i < runs; ++i) {
      auto a = ask(i, true);
      auto b = ask(i, false);
      REQUIRE(a.cached > 0);
      REQUIRE(b.cached == 0);
      with.push_back(a.seconds);
      without.push_back(b.seconds);
      last = a;
    }
    // llama.cpp alone, once the running request is cancelled (it would
    // share the core with another process's decoding otherwise, where
    // exo's batches with it). No job runs then: with the cache, the rows
    // come from the stage the device kept after its last job
    // (devices.keep_alive_s), as a chat's next turn finds them.
    console(p, node.port, {"cancel " + keeper_job});
    keeper.wait(60s);
    std::vector<double> alone, after;
    for (int i = 0; i < runs; ++i) {
      auto kept = ask(i, true);
      REQUIRE(kept.cached > 0);
      after.push_back(kept.seconds);
      alone.push_back(ask(i, false).seconds);
      if (!have_llama)
        continue;
      auto l = run({"/usr/bin/taskset", "-c", core, "/usr/bin/node",
                    EXO_SOURCE_DIR "/bench/workload/llama_cpp_batch_probe.mjs",
                    model, "1", "1", "1", std::to_string(last.tokens),
                    "same"},
                   120s);
      std::smatch m;
      if (l.code == 0
          && std::regex_search(l.out, m, std::regex{"prompt_s ([0-9.e-]+)"}))
        llama.push_back(std::stod(m[1]));
    }
    std::printf("  %-7s %-7ld %-7ld %-22s %-22s %-22s %-22s %-22s\n", type,
                last.tokens, last.cached, cell(with).c_str(),
                cell(without).c_str(), cell(after).c_str(),
                cell(alone).c_str(), cell(llama).c_str());
  }
}
