// The stall a running job sees when it loses a node (issue 21): a coordinator
// and a second node on 127.0.0.1, a greedy 4000-token run split over both
// (--stages 2, the second stage on the other node), and the other node
// SIGKILLed or SIGSTOPped at a different moment of each run. For every event
// it checks the text against one uninterrupted run and prints the seconds
// from the loss being noticed to the next token and between the tokens on
// either side; then the median and the maximum per kind of event. Last, the
// coordinating node itself is killed (three nodes: its backup takes the job
// over, the console re-attaches through another node).
//
//   build/bench/workload/recovery_bench [--repeats N]   (target bench_recovery)
//
// A Catch2 program because it drives the tests' cluster harness.

#include "core/model/test_model.hpp"
#include "test/support/cluster.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <string>
#include <thread>
#include <vector>

using namespace exo::test;
using namespace std::chrono_literals;

namespace {

std::string text_of(const std::string& out) {
  auto at = out.find("text: ");
  if (at == std::string::npos)
    return "";
  return out.substr(at, out.find('\n', at) - at);
}

double median(std::vector<double> xs) {
  if (xs.empty())
    return 0;
  std::sort(xs.begin(), xs.end());
  auto n = xs.size();
  return n % 2 ? xs[n / 2] : (xs[n / 2 - 1] + xs[n / 2]) / 2;
}

struct figures {
  std::vector<double> recovery, gap, refed;
  int wrong = 0;  // text differs from the uninterrupted run
  int missed = 0; // the run ended without a recovery
};

/// Waits for the run and adds its recovery to `f`: the seconds from the
/// loss being noticed to the next token and between the tokens (the run's
/// recovery line), and whether its text is `reference`; prints a line
/// naming the event (`what`) and the two figures (`noticed`, `between`).
void record(figures& f, process& runner, const std::string& reference,
            const std::string& what, const char* noticed,
            const char* between) {
  static const std::regex re{"([0-9]+) tokens re-fed, next token ([0-9.]+) "
                             "s after the loss was noticed \\(([0-9.]+) s "
                             "between tokens\\)"};
  auto code = runner.wait(180s);
  auto out = runner.out();
  std::smatch m;
  if (code != 0 || !std::regex_search(out, m, re)) {
    ++f.missed;
    std::printf("%s: no recovery (exit %d)\n%s%s\n", what.c_str(), code,
                out.c_str(), runner.err().c_str());
    return;
  }
  f.refed.push_back(std::stod(m[1]));
  f.recovery.push_back(std::stod(m[2]));
  f.gap.push_back(std::stod(m[3]));
  bool same = text_of(out) == reference;
  f.wrong += same ? 0 : 1;
  std::printf("%s: %s tokens re-fed, next token %s s %s, %s s %s, text "
              "%s\n",
              what.c_str(), m[1].str().c_str(), m[2].str().c_str(), noticed,
              m[3].str().c_str(), between, same ? "identical" : "DIFFERENT");
}

} // namespace

TEST_CASE("recovery stall per kind of event", "[.bench]") {
  int repeats = 5;
  if (auto* r = std::getenv("EXO_RECOVERY_REPEATS"))
    repeats = std::max(1, std::atoi(r));
  pki p{"exo-recovery-bench"};
  exo::model::test_model_options o;
  o.layers = 2;
  o.dim = 64;
  o.ff = 128;
  o.vocab = 512;
  o.ctx = 4096;
  o.seed = 5;
  auto model = p.dir + "/long.gguf";
  exo::model::make_test_model(o, model);
  p.node("coord");
  node_options co{"coord"};
  co.failure_timeout_ms = 1500;
  co.state_dir = p.dir + "/coord/state";
  co.devices = R"({"include": ["cpu"], "rescan_interval_s": 0})";
  // One access key for the cluster: the console's token is good on the
  // node it re-attaches through.
  co.extra = R"(, "safety": {"access_key_file": ")" + p.dir
             + R"(/coord/state/access.key"})";
  auto a = start_node(p, co);
  auto job = "run --model " + model
             + " --prompt \"once upon a time\" -n 4000 --seed 2 "
               "--temperature 0";
  auto solo = console(p, a.port, {job + " --stages 1"},
                      {false, std::chrono::seconds(120)});
  REQUIRE(solo.code == 0);
  auto reference = text_of(solo.out);
  REQUIRE(!reference.empty());
  // Moments after "job N started": before the first token, early, later.
  const std::vector<std::chrono::milliseconds> moments{0ms, 100ms, 300ms,
                                                       800ms, 1500ms};
  int jobs = 1;
  std::vector<std::pair<std::string, figures>> kinds;
  // 0: the node drained (`drain NAME` on coord: a planned move, its KV
  // caches carried).
  for (int sig : {SIGKILL, SIGSTOP, 0}) {
    figures f;
    auto kind = std::string{sig == SIGKILL   ? "node killed (SIGKILL)"
                            : sig == SIGSTOP ? "node frozen (SIGSTOP)"
                                             : "node drained (drain NODE)"};
    for (int i = 0; i < repeats; ++i) {
      auto name = std::string{sig == SIGKILL   ? "k"
                              : sig == SIGSTOP ? "f"
                                               : "d"}
                  + std::to_string(i);
      p.node(name);
      node_options vo{name};
      vo.failure_timeout_ms = 1500;
      vo.state_dir = p.dir + "/" + name + "/state";
      vo.devices = co.devices;
      vo.seeds = {a.port};
      auto b = start_node(p, vo);
      REQUIRE(eventually(
        p, a.port, "nodes",
        [&](const std::string& out) {
          return contains(out, "\"" + name + "\"")
                 && contains(out, "\"status\": \"alive\"");
        },
        30s));
      process runner{console_argv(p, a.port, {job + " --stages 2"},
                                  {false, std::chrono::minutes(10)})};
      REQUIRE(a.proc->wait_for_output(
        "job " + std::to_string(++jobs) + " started", 120s));
      auto moment = moments[static_cast<std::size_t>(i) % moments.size()];
      std::this_thread::sleep_for(moment);
      if (sig != 0)
        b.proc->signal(sig);
      else
        REQUIRE(console(p, a.port, {"drain " + name}).code == 0);
      record(f, runner, reference,
             kind + " at +" + std::to_string(moment.count()) + " ms",
             "after the loss was noticed", "between tokens");
      if (sig != SIGKILL)
        b.proc->signal(SIGKILL);
      b.proc->wait(10s);
      std::fflush(stdout);
    }
    kinds.emplace_back(kind, f);
  }
  // The coordinator itself: a fresh pair per run, x coordinating (the
  // console connected to it) with a stage on y or coord, its backup the
  // other; x is killed and the backup takes the job over from the tokens
  // replicated, the console re-attaching through another node.
  // Stopped gracefully (SIGTERM), x moves its stage off and hands the job
  // to its backup with the stages and their caches: nothing re-fed.
  for (int sig : {SIGKILL, SIGTERM}) {
    figures f;
    auto kind = std::string{sig == SIGKILL
                              ? "coordinator killed (SIGKILL)"
                              : "coordinator stopped (SIGTERM): handoff"};
    for (int i = 0; i < repeats; ++i) {
      auto tag = std::string{sig == SIGKILL ? "" : "s"} + std::to_string(i);
      auto xn = "x" + tag, yn = "y" + tag;
      std::vector<node_proc> pair;
      for (auto& name : {xn, yn}) {
        p.node(name);
        node_options vo{name};
        vo.failure_timeout_ms = 1500;
        vo.state_dir = p.dir + "/" + name + "/state";
        vo.devices = co.devices;
        vo.seeds = {a.port};
        vo.extra = R"(, "safety": {"access_key_file": ")" + p.dir
                   + R"(/coord/state/access.key"})";
        pair.push_back(start_node(p, vo));
      }
      auto& x = pair[0];
      REQUIRE(eventually(
        p, a.port, "nodes",
        [&](const std::string& out) {
          // (Each member's record: its name, then its status.)
          std::regex alive{"\"name\": \"(" + xn + "|" + yn
                           + ")\"[^}]*?\"status\": \"alive\""};
          auto n = std::distance(
            std::sregex_iterator(out.begin(), out.end(), alive),
            std::sregex_iterator());
          return n == 2;
        },
        30s));
      process runner{console_argv(p, x.port, {job + " --stages 2"},
                                  {false, std::chrono::minutes(10)})};
      REQUIRE(x.proc->wait_for_output("job 1 started", 120s));
      // Its backup (y or coord) holds the model and the replica.
      auto backup = job_backup(p, x.port, "", 60s);
      REQUIRE(!backup.empty());
      REQUIRE(eventually(p, backup == yn ? pair[1].port : a.port, "jobs",
                         [](const std::string& out) {
                           return contains(out, "\"ready\": true");
                         },
                         60s));
      auto moment = moments[static_cast<std::size_t>(i) % moments.size()];
      std::this_thread::sleep_for(moment);
      x.proc->signal(sig);
      record(f, runner, reference,
             kind + " at +" + std::to_string(moment.count())
               + " ms after its backup was ready",
             sig == SIGKILL ? "after the takeover began"
                            : "after the move off x began",
             sig == SIGKILL ? "after the last replicated token"
                            : "between tokens");
      x.proc->wait(20s);
      pair[1].proc->signal(SIGKILL);
      pair[1].proc->wait(10s);
      std::fflush(stdout);
    }
    kinds.emplace_back(kind, f);
  }
  std::printf("\n| event (failure timeout 1.5 s) | runs | from noticed to next "
              "token, median / max | between tokens, median / max | tokens "
              "re-fed, median / max | text identical |\n| --- | --- | --- | "
              "--- | --- | --- |\n");
  for (auto& [kind, f] : kinds) {
    auto mx = [](const std::vector<double>& xs) {
      return xs.empty() ? 0.0 : *std::max_element(xs.begin(), xs.end());
    };
    std::printf("| %s | %d | %.3f s / %.3f s | %.3f s / %.3f s | %.0f / %.0f "
                "| %zu of %zu%s |\n",
                kind.c_str(), repeats, median(f.recovery), mx(f.recovery),
                median(f.gap), mx(f.gap), median(f.refed), mx(f.refed),
                f.recovery.size() - f.wrong,
                f.recovery.size(),
                f.missed ? (" (" + std::to_string(f.missed)
                            + " runs without a recovery)").c_str()
                         : "");
    CHECK(f.wrong == 0);
    CHECK(f.missed == 0);
  }
}
