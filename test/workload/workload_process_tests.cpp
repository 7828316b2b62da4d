// The workload as users run it, with real processes on 127.0.0.1:
// `exo-node run` on one stage and on three (cpu, sim and, where present,
// vulkan) gives the same tokens and logits; two exo-node processes run a
// job across both through the console's `run`, the node without the model
// receives it once, and the tokens equal those of one stage on one node.

#include "core/model/test_model.hpp"
#include "test/support/cluster.hpp"

#include <catch2/catch.hpp>

#include <filesystem>

#include <cmath>
#include <csignal>
#include <fstream>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

using namespace exo::test;
using namespace std::chrono_literals;

namespace {

std::vector<double> read_numbers(const std::string& path) {
  std::ifstream in{path};
  std::vector<double> out;
  double x;
  while (in >> x)
    out.push_back(x);
  return out;
}

/// The tests' model: 6 layers, 64 wide, vocabulary 512.
exo::model::test_model_options model_options() {
  exo::model::test_model_options o;
  o.layers = 6;
  o.dim = 64;
  o.ff = 128;
  o.vocab = 512;
  o.seed = 21;
  return o;
}

std::string make_model(const std::string& dir,
                       const exo::model::test_model_options& o =
                         model_options()) {
  auto path = dir + "/model.gguf";
  exo::model::make_test_model(o, path);
  return path;
}

std::string line_after(const std::string& out, const std::string& prefix) {
  auto at = out.find(prefix);
  if (at == std::string::npos)
    return "";
  auto end = out.find('\n', at);
  return out.substr(at + prefix.size(), end - at - prefix.size());
}


/// A node with the cpu and a simulated device (failure timeout 3 s: the
/// runs below keep a core busy).
node_proc start(const pki& p, const std::string& name,
                const std::vector<std::uint16_t>& seeds) {
  node_options o{name};
  o.seeds = seeds;
  o.failure_timeout_ms = 3000;
  o.state_dir = p.dir + "/" + name + "/state";
  return start_node(p, o);
}

run_result console(const pki& p, std::uint16_t port, const std::string& cmd,
                   bool json = false) {
  return exo::test::console(p, port, {cmd}, {json, std::chrono::seconds(60)});
}

/// A small model (dir/long.gguf) on which the run of long_run() never
/// samples end-of-sequence; returns its path. With `layers` 1 (at
/// dir/NAME.gguf): its first layer with the same embedding and head, a
/// draft that agrees with it often.
std::string long_model(const pki& p, std::uint32_t layers = 2,
                       const std::string& name = "long") {
  exo::model::test_model_options o;
  o.layers = layers;
  o.dim = 64;
  o.ff = 128;
  o.vocab = 512;
  o.ctx = 4096;
  o.seed = 5;
  auto model = p.dir + "/" + name + ".gguf";
  exo::model::make_test_model(o, model);
  return model;
}

/// About 25 MiB of F32 weights (4 layers, 256 wide, vocabulary 4096,
/// context 4096; 2 KiB of F16 KV cache a token) at dir/NAME.gguf; another
/// seed gives another model of the same shape.
std::string big_model(const pki& p, const std::string& name = "big",
                      std::uint32_t seed = 5) {
  exo::model::test_model_options o;
  o.layers = 4;
  o.dim = 256;
  o.ff = 1024;
  o.vocab = 4096;
  o.ctx = 4096;
  o.seed = seed;
  auto model = p.dir + "/" + name + ".gguf";
  exo::model::make_test_model(o, model);
  return model;
}

/// exo-console running `cmd` on the node at `port` with the node's admin
/// token, beside the test, with the console's own timeout ten minutes away.
std::vector<std::string> background_console(const pki& p, std::uint16_t port,
                                            const std::string& cmd) {
  return console_argv(p, port, {cmd}, {false, std::chrono::minutes(10)});
}

/// exo-console running, on node `g`, 64 greedy sequences of 4000 tokens of
/// `model` (far longer than any test waits), with a 10-minute timeout.
std::vector<std::string> long_run(const pki& p, const node_proc& g,
                                  const std::string& model) {
  return background_console(p, g.port,
                            "run --model " + model
                              + " --prompt \"once upon a time\" -n 4000 "
                                "--seed 2 --temperature 0 --sequences 64 "
                                "--stages 1");
}

/// A node of a cluster with one access key (a token is good on every
/// node, so a console re-attaching through another node carries the same
/// token), failure timeout 3 s unless said.
node_proc shared_key_node(const pki& p, const std::string& name,
                          std::vector<std::uint16_t> seeds,
                          int failure_timeout_ms = 3000,
                          const std::string& extra = {}) {
  node_options o{name};
  o.seeds = std::move(seeds);
  o.failure_timeout_ms = failure_timeout_ms;
  o.state_dir = p.dir + "/" + name + "/state";
  o.extra = R"(, "safety": {"access_key_file": ")" + p.dir
            + R"(/access.key"})" + extra;
  return start_node(p, o);
}

/// Waits until the node on `port` sees coord, peer and spare alive.
bool sees_peer_and_spare(const pki& p, std::uint16_t port) {
  return eventually(
    p, port, "nodes",
    [](const std::string& out) {
      return contains(out, "\"coord\"") && contains(out, "\"peer\"")
             && contains(out, "\"spare\"")
             && !contains(out, "\"status\": \"dead\"");
    },
    30s);
}

/// Waits until each of coord, peer and spare sees the three alive (a node
/// learns of another by gossip a moment after coord does: a handoff or a
/// takeover checks its stages' nodes against its own view).
bool all_see_each_other(const pki& p, const node_proc& coord,
                        const node_proc& peer, const node_proc& spare) {
  return sees_peer_and_spare(p, coord.port) && sees_peer_and_spare(p, peer.port)
         && sees_peer_and_spare(p, spare.port);
}

/// Waits until the node on `port` holds a backup that `fragment` (of its
/// `jobs` JSON) names, with the whole model ("ready").
bool holds_ready_backup(const pki& p, std::uint16_t port,
                        const std::string& fragment) {
  return eventually(
    p, port, "jobs",
    [&](const std::string& out) {
      return contains(out, fragment) && contains(out, "\"ready\": true");
    },
    60s);
}

/// Waits until job `id` of the node on `port` has generated `at_least`
/// tokens (its prompt read: tokens flow).
bool job_has_tokens(const pki& p, std::uint16_t port, const std::string& id,
                    unsigned long at_least = 1) {
  return eventually(
    p, port, "jobs",
    [&](const std::string& json) {
      if (running_job_with_tokens(json) != id)
        return false;
      std::smatch m;
      return std::regex_search(json, m, std::regex{"\"tokens\": ([0-9]+)"})
             && std::stoul(m[1]) >= at_least;
    },
    60s);
}

/// Waits until the node on `port` backs up the job that `fragment` (of its
/// `jobs` JSON) names with at least one of its tokens replicated.
bool backup_has_tokens(const pki& p, std::uint16_t port,
                       const std::string& fragment) {
  return eventually(
    p, port, "jobs",
    [&](const std::string& json) {
      auto at = json.find(fragment);
      if (at == std::string::npos)
        return false;
      auto entry = json.substr(at, json.find('}', at) - at);
      return std::regex_search(entry, std::regex{R"("tokens": [1-9])"});
    },
    60s);
}

/// An `n`-token greedy run of `model` (on long_model's files it never
/// samples end-of-sequence).
std::string story_job(const std::string& model, int n = 3000,
                      const std::string& temperature = "0") {
  return "run --model " + model + " --prompt \"once upon a time\" -n "
         + std::to_string(n) + " --seed 2 --temperature " + temperature;
}

/// The text `job` (of `n` tokens) gives on one stage of the node at `port`:
/// the reference a run with losses must give.
std::string solo_text(const pki& p, std::uint16_t port, const std::string& job,
                      int n) {
  auto solo = exo::test::console(p, port, {job + " --stages 1"},
                                 {false, std::chrono::seconds(60)});
  INFO(solo.out << solo.err);
  REQUIRE(solo.code == 0);
  REQUIRE(contains(solo.out, "generation: " + std::to_string(n) + " tokens"));
  return line_after(solo.out, "text: ");
}

/// Nodes "coord" and `name` (seeded from coord), once coord sees `name`
/// and no node dead. `shared_key`: both with one access key (a console's
/// token is good on both), coord with `coord_extra` in its config.
std::pair<node_proc, node_proc> coord_and(pki& p, const std::string& name,
                                          bool shared_key = false,
                                          const std::string& coord_extra = {}) {
  p.node("coord");
  p.node(name);
  auto a = shared_key ? shared_key_node(p, "coord", {}, 3000, coord_extra)
                      : start(p, "coord", {});
  auto b = shared_key ? shared_key_node(p, name, {a.port})
                      : start(p, name, {a.port});
  REQUIRE(eventually(
    p, a.port, "nodes",
    [&](const std::string& out) {
      return contains(out, "\"" + name + "\"")
             && !contains(out, "\"status\": \"dead\"");
    },
    30s));
  return {std::move(a), std::move(b)};
}

} // namespace

TEST_CASE("exo-node run with a draft model gives the same text and says "
          "how many proposals it kept",
          "[workload][process][speculative]") {
  auto dir = temp_dir("exo-draft");
  // The draft is the model's first layer with the same (tied) head and
  // vocabulary: it agrees often, at a twelfth of the layers.
  exo::model::test_model_options o;
  o.layers = 6;
  o.dim = 128;
  o.ff = 256;
  o.vocab = 512;
  o.seed = 3;
  o.tied = true;
  exo::model::make_test_model(o, dir + "/model.gguf");
  o.layers = 1;
  exo::model::make_test_model(o, dir + "/draft.gguf");
  write_file(dir + "/node.json", R"({"node": {"name": "solo",
    "state_dir": ")" + dir + R"(/state"},
    "devices": {"include": ["cpu"], "rescan_interval_s": 0}})");
  auto go = [&](std::vector<std::string> extra,
                std::string temperature = "0") {
    std::vector<std::string> args{exo_node(), "run", "--model",
                                  dir + "/model.gguf", "--prompt",
                                  "the quick brown fox", "-n", "40",
                                  "--temperature", temperature, "--config",
                                  dir + "/node.json"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = run(args, 120s);
    INFO(r.out << r.err);
    REQUIRE(r.code == 0);
    return r.out;
  };
  auto plain = go({});
  auto drafted = go({"--draft", dir + "/draft.gguf", "--draft-tokens", "5"});
  auto text = [](const std::string& out) {
    return line_after(out, "the quick brown fox");
  };
  CHECK(!text(plain).empty());
  CHECK(text(drafted) == text(plain));
  CHECK(drafted.find("draft: " + dir + "/draft.gguf on solo/cpu:0, 5 tokens "
                     "a round; ")
        != std::string::npos);
  CHECK(drafted.find("proposed tokens kept") != std::string::npos);
  CHECK(plain.find("draft:") == std::string::npos);
  // Sampled (speculative sampling): the draft proposes and is checked
  // too, and a seed gives the same text again.
  const std::vector<std::string> sampling{"--seed", "4", "--draft",
                                          dir + "/draft.gguf",
                                          "--draft-tokens", "5"};
  auto sampled = go(sampling, "0.8");
  CHECK(sampled.find("proposed tokens kept") != std::string::npos);
  CHECK(!text(sampled).empty());
  CHECK(text(go(sampling, "0.8")) == text(sampled));
  // A draft of another vocabulary is refused before anything runs.
  o.vocab = 400;
  exo::model::make_test_model(o, dir + "/other.gguf");
  auto bad = run({exo_node(), "run", "--model", dir + "/model.gguf",
                  "--prompt", "hi", "--draft", dir + "/other.gguf",
                  "--config", dir + "/node.json"},
                 60s);
  INFO(bad.out << bad.err);
  CHECK(bad.code == 2);
  CHECK(bad.err.find("has a vocabulary of 400 tokens, the model 512")
        != std::string::npos);
}

TEST_CASE("exo-node run gives the same tokens and logits on one stage and "
          "on three stages over cpu, sim and vulkan devices",
          "[workload][process]") {
  auto dir = temp_dir("exo-run");
  auto model = make_model(dir);
  write_file(dir + "/node.json", R"({"node": {"name": "solo",
    "state_dir": ")" + dir + R"(/state"},
    "devices": {"include": ["cpu", "sim", "vulkan"],
                "simulated": [{"profile": "adreno-740"}],
                "rescan_interval_s": 0}})");
  auto go = [&](const std::string& stages) {
    auto r = run({exo_node(), "run", "--model", model, "--prompt",
                  "the quick brown fox", "-n", "16", "--seed", "9",
                  "--temperature", "0.8", "--stages", stages, "--config",
                  dir + "/node.json", "--logits-out",
                  dir + "/logits" + stages + ".txt"},
                 120s);
    INFO(r.out << r.err);
    REQUIRE(r.code == 0);
    return r.out;
  };
  auto one = go("1");
  auto three = go("3");
  CHECK(three.find("stage 2: layers [4, 6)") != std::string::npos);
  CHECK(three.find("sim:") != std::string::npos);
  CHECK(three.find("tokens/s") != std::string::npos);
  // The generated text (the line after the placement) is the same.
  auto text = [](const std::string& out) {
    return line_after(out, "the quick brown fox");
  };
  CHECK(!text(one).empty());
  CHECK(text(one) == text(three));
  auto a = read_numbers(dir + "/logits1.txt");
  auto b = read_numbers(dir + "/logits3.txt");
  REQUIRE(a.size() == 512);
  REQUIRE(a.size() == b.size());
  // The stages sit on cpu, Vulkan and sim devices: GPU attention sums in
  // F32 where the host kernel keeps llama.cpp's half accumulator (the
  // bound job_tests states for the same mix).
  for (std::size_t i = 0; i < a.size(); ++i)
    REQUIRE(std::abs(a[i] - b[i]) <= 5e-3 * std::max(1.0, std::abs(a[i])));
}

TEST_CASE("a Q4_K_M model runs as stored on cpu, sim and Vulkan stages and "
          "gives the engine's tokens",
          "[workload][process]") {
  // Q4_K and Q6_K matrices (llama.cpp's Q4_K_M mix) are device operations:
  // the cpu and sim devices run the engine's kernels (the same tokens as
  // exo-model run, bit for bit), Vulkan dequantizes them in its shader.
  auto dir = temp_dir("exo-run-q4km");
  auto o = model_options();
  o.dim = 256; // K-quant rows are 256 wide
  o.ff = 512;
  o.heads = 4;
  o.kv_heads = 2;
  o.type = exo::model::tensor_type::q4_k;
  o.mix = exo::model::file_type::mix::q4_k_m;
  auto model = make_model(dir, o);
  const std::string prompt = "the quick brown fox";
  auto engine = run({exo_model(), "run", "--model", model, "--prompt", prompt,
                     "-n", "16", "--temperature", "0"},
                    120s);
  INFO(engine.out << engine.err);
  REQUIRE(engine.code == 0);
  auto go = [&](const std::string& stages, const std::string& include) {
    write_file(dir + "/node.json", R"({"node": {"name": "solo",
      "state_dir": ")" + dir + R"(/state"},
      "devices": {"include": [)" + include + R"(],
                  "simulated": [{"profile": "adreno-740"}],
                  "rescan_interval_s": 0}})");
    auto r = run({exo_node(), "run", "--model", model, "--prompt", prompt,
                  "-n", "16", "--temperature", "0", "--stages", stages,
                  "--config", dir + "/node.json"},
                 120s);
    INFO(r.out << r.err);
    REQUIRE(r.code == 0);
    return r.out;
  };
  auto text = [&](const std::string& out) { return line_after(out, prompt); };
  REQUIRE(!text(engine.out).empty());
  // Host devices only: the engine's arithmetic on every stage.
  auto host = go("2", R"("cpu", "sim")");
  CHECK(host.find("sim:") != std::string::npos);
  CHECK(text(host) == text(engine.out));
  // With Vulkan in the pipeline the tokens may part at a near-tie (F32
  // activations against the engine's Q8_K ones); the run must finish with
  // 16 tokens on three stages.
  auto mixed = go("3", R"("cpu", "sim", "vulkan")");
  CHECK(mixed.find("stage 2:") != std::string::npos);
  CHECK(!text(mixed).empty());
}

TEST_CASE("two nodes run a job across both: the node without the model "
          "receives it once and the tokens equal one stage's",
          "[workload][process]") {
  pki p{"exo-workload"};
  p.node("alpha");
  p.node("beta");
  // No job backups: beta would fetch the whole model to back alpha's jobs
  // up (models.backup_jobs), and this test counts the parts it receives.
  node_options ao{"alpha"};
  ao.failure_timeout_ms = 3000;
  ao.state_dir = p.dir + "/alpha/state";
  ao.extra = R"(, "models": {"dirs": [")" + p.dir
             + R"("], "backup_jobs": false})";
  auto a = start_node(p, ao);
  auto b = start(p, "beta", {a.port});
  auto model = make_model(p.dir);
  // Wait until alpha sees beta alive.
  bool joined = false;
  for (int i = 0; i < 60 && !joined; ++i) {
    auto r = console(p, a.port, "nodes");
    joined = r.out.find("beta") != std::string::npos
             && r.out.find("dead") == std::string::npos;
    if (!joined)
      std::this_thread::sleep_for(250ms);
  }
  REQUIRE(joined);
  auto job = "run --model " + model
             + " --prompt \"once upon a time\" -n 12 --seed 4";
  auto solo = console(p, a.port, job + " --stages 1");
  INFO(solo.out << solo.err);
  REQUIRE(solo.code == 0);
  auto across = console(p, a.port, job + " --stages 3");
  INFO(across.out << across.err);
  REQUIRE(across.code == 0);
  CHECK(across.out.find("on alpha") != std::string::npos);
  CHECK(across.out.find("on beta") != std::string::npos);
  CHECK(line_after(across.out, "text: ") == line_after(solo.out, "text: "));
  CHECK(!line_after(solo.out, "text: ").empty());
  auto sent = [](const std::string& out) {
    std::smatch m;
    std::regex re{": (\\d+) bytes sent"};
    return std::regex_search(out, m, re) ? std::stoull(m[1]) : 0ull;
  };
  // beta runs layers [2, 4) of 6: it receives the header and those two
  // layers, not the whole file.
  auto whole = std::filesystem::file_size(model);
  CHECK(sent(across.out) > 0);
  CHECK(sent(across.out) < whole / 2);
  // The same run again finds those parts in beta's cache: nothing is sent.
  auto again = console(p, a.port, job + " --stages 3");
  INFO(again.out << again.err);
  REQUIRE(again.code == 0);
  CHECK(sent(again.out) == 0);
  CHECK(line_after(again.out, "text: ") == line_after(solo.out, "text: "));
  // Two stages: beta runs [3, 6) and the output head; it receives layers 4
  // and 5 and the head, not layer 3 again.
  auto more = console(p, a.port, job + " --stages 2");
  INFO(more.out << more.err);
  REQUIRE(more.code == 0);
  CHECK(sent(more.out) > 0);
  CHECK(sent(more.out) < whole);
  CHECK(line_after(more.out, "text: ") == line_after(solo.out, "text: "));
  // Three sampled sequences of one prompt on both nodes: the prompt is
  // read once (alpha's and beta's stages fork its KV rows, the steps that
  // say so cross the wire), the texts are those of reading it three times.
  {
    auto seqs = job + " --stages 2 --sequences 3 --temperature 0.9";
    auto shared = console(p, a.port, seqs);
    INFO(shared.out << shared.err);
    REQUIRE(shared.code == 0);
    auto apart = console(p, a.port, seqs + " --no-prompt-sharing");
    INFO(apart.out << apart.err);
    REQUIRE(apart.code == 0);
    CHECK(apart.out.find("on beta") != std::string::npos);
    // 12 tokens a copy ("once upon a time" and the beginning of text).
    CHECK(shared.out.find("prompt sharing: 24 of the 36 prompt tokens were "
                          "copies of another sequence's prompt, computed "
                          "once; 12 computed")
          != std::string::npos);
    CHECK(apart.out.find("prompt sharing") == std::string::npos);
    std::set<std::string> texts;
    for (int i = 0; i < 3; ++i) {
      auto k = "sequence " + std::to_string(i) + ": ";
      CHECK(!line_after(shared.out, k).empty());
      CHECK(line_after(shared.out, k) == line_after(apart.out, k));
      texts.insert(line_after(shared.out, k));
    }
    CHECK(texts.size() > 1); // sampled apart, not one text three times
  }
  // The coordinator audited each job's submission and end (issue 6).
  for (auto type : {"job_submitted", "job_finished"}) {
    auto q = console(p, a.port, std::string{"audit query type="} + type);
    INFO(q.out << q.err);
    CHECK(q.code == 0);
    std::size_t n = 0;
    for (auto at = q.out.find(type); at != std::string::npos;
         at = q.out.find(type, at + 1))
      ++n;
    CHECK(n == 6);
  }
  CHECK(console(p, a.port, "audit query type=job_finished").out.find(
          "outcome=ok")
        != std::string::npos);
  // A Q4_K_M file (Q4_K and Q6_K matrices) across both nodes: beta gets
  // its part as stored and runs it on its cpu device with the engine's
  // kernels, so the text is one stage's.
  {
    auto o = model_options();
    o.dim = 256;
    o.ff = 512;
    o.heads = 4;
    o.kv_heads = 2;
    o.type = exo::model::tensor_type::q4_k;
    o.mix = exo::model::file_type::mix::q4_k_m;
    auto qdir = p.dir + "/q4km";
    std::filesystem::create_directories(qdir);
    auto q = make_model(qdir, o);
    auto qjob = "run --model " + q
                + " --prompt \"once upon a time\" -n 12 --temperature 0";
    auto one = console(p, a.port, qjob + " --stages 1");
    INFO(one.out << one.err);
    REQUIRE(one.code == 0);
    auto two = console(p, a.port, qjob + " --stages 2");
    INFO(two.out << two.err);
    REQUIRE(two.code == 0);
    CHECK(two.out.find("on beta") != std::string::npos);
    CHECK(!line_after(one.out, "text: ").empty());
    CHECK(line_after(two.out, "text: ") == line_after(one.out, "text: "));
    // With llama.cpp's 8-bit KV cache (--kv-type q8_0; heads of 64): each
    // stage quantizes its own layers' rows, the text is one stage's.
    auto q8one = console(p, a.port, qjob + " --stages 1 --kv-type q8_0");
    INFO(q8one.out << q8one.err);
    REQUIRE(q8one.code == 0);
    auto q8two = console(p, a.port, qjob + " --stages 2 --kv-type q8_0");
    INFO(q8two.out << q8two.err);
    REQUIRE(q8two.code == 0);
    CHECK(q8two.out.find("on beta") != std::string::npos);
    // 6 layers of 2 x 128 values in 4 blocks of 34 bytes (f16: 3072).
    CHECK(q8two.out.find("KV cache: q8_0, 1632 bytes a token of context")
          != std::string::npos);
    CHECK(two.out.find("KV cache: ") == std::string::npos);
    CHECK(!line_after(q8one.out, "text: ").empty());
    CHECK(line_after(q8two.out, "text: ") == line_after(q8one.out, "text: "));
  }
  // Refused by name: an unknown cache type, and Q8_0 blocks on heads of 16.
  auto bad = console(p, a.port, job + " --kv-type q4_0");
  INFO(bad.out << bad.err);
  CHECK(bad.code != 0);
  CHECK((bad.out + bad.err).find("kv-type") != std::string::npos);
  CHECK((bad.out + bad.err).find("q4_0") != std::string::npos);
  auto narrow = console(p, a.port, job + " --kv-type q8_0");
  CHECK(narrow.code != 0);
  CHECK((narrow.out + narrow.err).find("multiple of 32 wide")
        != std::string::npos);
  // The prefix cache across both nodes: while a long run on alpha's and
  // beta's stages keeps them, a run whose prompt starts as its does
  // claims the rows both stages kept (the claims and copies cross the
  // wire) and gives the text of reading it all.
  {
    auto lm = long_model(p, 2, "prefix");
    std::string start = "the";
    for (int i = 0; i < 40; ++i)
      start += " quick brown fox jumps over a lazy dog";
    process keeper{background_console(
      p, a.port,
      "run --model " + lm + " --prompt \"" + start
        + " once\" -n 2500 --temperature 0 --stages 2")};
    // Its prompt read (it has generated tokens): its rows are kept.
    std::string keeper_job;
    REQUIRE(eventually(p, a.port, "jobs", [&](const std::string& json) {
      keeper_job = running_job_with_tokens(json);
      return !keeper_job.empty();
    }, 60s));
    auto later = "run --model " + lm + " --prompt \"" + start
                 + " twice\" -n 6 --temperature 0 --stages 2";
    auto cached = console(p, a.port, later);
    INFO(cached.out << cached.err);
    REQUIRE(cached.code == 0);
    CHECK(cached.out.find("on beta") != std::string::npos);
    CHECK(std::regex_search(cached.out,
                            std::regex{"[1-9][0-9]* of the [0-9]+ prompt "
                                       "tokens came from the prefix cache"}));
    auto all = console(p, a.port, later + " --no-prefix-cache");
    INFO(all.out << all.err);
    REQUIRE(all.code == 0);
    CHECK(all.out.find("prefix cache") == std::string::npos);
    CHECK(!line_after(all.out, "text: ").empty());
    CHECK(line_after(cached.out, "text: ") == line_after(all.out, "text: "));
    console(p, a.port, "cancel " + keeper_job);
    CHECK(keeper.wait(60s) == 0);
  }
  a.proc->signal(SIGTERM);
  b.proc->signal(SIGTERM);
  CHECK(a.proc->wait(30s) == 0);
  CHECK(b.proc->wait(30s) == 0);
}

TEST_CASE("a running job is listed with its id and cancelled from another "
          "console and its run replies with the text so far and cancelled",
          "[workload][process]") {
  pki p{"exo-workload"};
  p.node("gamma");
  auto g = start(p, "gamma", {});
  // A long run: far longer than the test waits unless cancelled.
  process runner{long_run(p, g, long_model(p))};
  // The node prints the id when the job starts.
  REQUIRE(g.proc->wait_for_output("job 1 started", 120s));
  auto listed = console(p, g.port, "jobs");
  INFO(listed.out << listed.err);
  CHECK(listed.code == 0);
  CHECK(listed.out.find("JOB") != std::string::npos);
  CHECK(listed.out.find("\n1 ") != std::string::npos);
  // Bad ids are clear errors.
  auto bad = console(p, g.port, "cancel x1");
  CHECK(bad.code == 1);
  CHECK(bad.err.find("cancel JOB: 'x1' is not an integer")
        != std::string::npos);
  auto none = console(p, g.port, "cancel 99");
  CHECK(none.code == 1);
  CHECK(none.err.find("no running job 99") != std::string::npos);
  auto c = console(p, g.port, "cancel 1");
  INFO(c.out << c.err);
  CHECK(c.code == 0);
  CHECK(c.out.find("cancelling job 1") != std::string::npos);
  REQUIRE(runner.wait(60s) == 0);
  auto out = runner.out();
  INFO(out << runner.err());
  CHECK(out.find("job 1\n") != std::string::npos);
  CHECK(out.find("sequence 0: once upon a time") != std::string::npos);
  CHECK(out.find("cancelled: job 1 stopped after ") != std::string::npos);
  auto after = out.find("stopped after ");
  REQUIRE(after != std::string::npos);
  auto made = std::stoull(out.substr(after + 14));
  CHECK(made < 64ull * 4000);
  // Gone from the list; the KV caches of its stage were released with it.
  auto empty = console(p, g.port, "jobs");
  CHECK(empty.out.find("no running jobs") != std::string::npos);
  auto q = console(p, g.port, "audit query type=job_finished");
  CHECK(q.out.find("outcome=cancelled") != std::string::npos);
  g.proc->signal(SIGTERM);
  CHECK(g.proc->wait(30s) == 0);
}

TEST_CASE("a console waiting on a node that dies or freezes says so within "
          "seconds and names the node, long before its timeout",
          "[workload][process]") {
  pki p{"exo-lost-node"};
  auto model = long_model(p);
  for (int sig : {SIGKILL, SIGSTOP}) {
    CAPTURE(sig);
    auto name = std::string{sig == SIGKILL ? "killed" : "frozen"};
    p.node(name);
    auto g = start(p, name, {});
    // A run far longer than the test, with a timeout of ten minutes.
    process runner{long_run(p, g, model)};
    REQUIRE(g.proc->wait_for_output("job 1 started", 120s));
    auto t0 = std::chrono::steady_clock::now();
    g.proc->signal(sig);
    // The target is 3 s (a closed connection at once, a frozen node after
    // two unanswered pings); the bound leaves a loaded machine room.
    auto code = runner.wait(20s);
    auto took = std::chrono::duration<double>(std::chrono::steady_clock::now()
                                              - t0)
                  .count();
    INFO("the console ended " << took << " s after the node was "
                              << name << ": " << runner.err());
    CHECK(code == 1);
    CHECK(took < 20);
    CHECK(runner.err().find("lost node " + name + " (127.0.0.1:"
                            + std::to_string(g.port) + ")")
          != std::string::npos);
    CHECK(runner.err().find(sig == SIGKILL ? "the connection to it closed"
                                           : "it stopped answering")
          != std::string::npos);
    std::printf("console noticed the %s node after %.2f s\n", name.c_str(),
                took);
    if (sig == SIGSTOP)
      g.proc->signal(SIGKILL);
  }
}

TEST_CASE("a job whose other node is killed or freezes mid-run is re-placed "
          "on the survivors and gives the tokens of an uninterrupted run",
          "[workload][process]") {
  pki p{"exo-lost-stage"};
  auto model = long_model(p);
  p.node("coord");
  auto a = start(p, "coord", {});
  // Greedy, never at end-of-sequence on this model (the sampler's state
  // over a recovery: job_tests.cpp).
  auto job = story_job(model);
  auto reference = solo_text(p, a.port, job, 3000);
  int jobs = 1;
  for (int sig : {SIGKILL, SIGSTOP}) {
    CAPTURE(sig);
    auto name = std::string{sig == SIGKILL ? "killed" : "frozen"};
    p.node(name);
    auto b = start(p, name, {a.port});
    REQUIRE(eventually(
      p, a.port, "nodes",
      [&](const std::string& out) {
        return contains(out, "\"" + name + "\"")
               && contains(out, "\"status\": \"alive\"");
      },
      30s));
    // Two stages, the second on `name`, with the console's and the job's
    // own timeouts far away.
    process runner{background_console(p, a.port, job + " --stages 2")};
    auto id = std::to_string(++jobs);
    REQUIRE(a.proc->wait_for_output("job " + id + " started", 120s));
    REQUIRE(job_has_tokens(p, a.port, id)); // then the strike
    b.proc->signal(sig);
    auto code = runner.wait(120s);
    INFO(runner.out() << runner.err());
    REQUIRE(code == 0);
    // The run went on without the node: its stage re-placed on coord.
    CHECK(contains(runner.out(), "job " + id + " recovered from "));
    CHECK((contains(runner.out(), "(" + name + "/cpu:0) is gone")
           || contains(runner.out(), "node " + name + " is dead")));
    CHECK(line_after(runner.out(), "text: ") == reference);
    std::smatch m;
    std::regex re{"next token ([0-9.]+) s after the loss was noticed "
                  "\\(([0-9.]+) s between tokens\\)"};
    auto out = runner.out();
    REQUIRE(std::regex_search(out, m, re));
    auto recovery = std::stod(m[1]);
    auto gap = std::stod(m[2]);
    // The target is 3 s between tokens (a kill seen at once, a freeze after
    // the failure timeout, 3 s here); the bound leaves a loaded machine
    // room.
    CHECK(recovery < 10);
    std::printf("job re-placed after the %s node: next token %.3f s after "
                "the loss was noticed, %.3f s between tokens\n",
                name.c_str(), recovery, gap);
    auto audit = console(p, a.port, "audit query type=job_recovered");
    CHECK(contains(audit.out, "job=" + id));
    if (sig == SIGSTOP)
      b.proc->signal(SIGKILL);
  }
}

namespace {

/// What strikes a node of a running job: it is killed, it freezes
/// (SIGSTOP, declared dead after the failure timeout), or its device
/// vanishes (the node lives on).
enum class strike { kill, freeze, vanish };

/// When. Each moment is held by a fault of the stage's simulated device
/// (a kill or a freeze strikes while the device hangs; a device vanishes
/// at the operation itself): `starting` before the first token, the
/// stage's weights not on its device yet (at its first allocation);
/// `prefill` the prompt's step inside the stage (at its first kernel);
/// `decode` tokens flowing (from an operation many steps in, armed before
/// the job); `replacing` a first loss being recovered, when the node the
/// stage went to next is struck as its weights arrive (the first loss: a
/// kill or a freeze of the node held mid-decode, or for a vanish a kill:
/// a hung device answers no fault, and the next node must be there before
/// the first loss).
enum class moment { starting, prefill, decode, replacing };

const char* name_of(strike s) {
  static const char* const names[] = {"kill", "freeze", "vanish"};
  return names[static_cast<int>(s)];
}

const char* name_of(moment m) {
  static const char* const names[] = {"starting", "prefill", "decode",
                                      "replacing"};
  return names[static_cast<int>(m)];
}

/// Injects `fault` into simulated device `device` of the node `n` (its
/// admin's `dev fault`).
void fault_device(const pki& p, const node_proc& n, const std::string& fault,
                  const std::string& device = "sim:adreno-740:0") {
  std::string admin;
  {
    std::ifstream f{p.dir + "/" + n.name + "/state/access/admin.token"};
    std::getline(f, admin);
  }
  // (Retried while the node has not listed its devices yet.)
  REQUIRE(poll_console(
    p, n.port, "dev fault " + device + " " + fault + " auth=" + admin,
    [](const run_result& r) { return r.code == 0; }, 30s, {false}));
}

/// A node whose one device is a simulated one (its stage goes there),
/// seeded from `seed`, with `fault` injected once it runs ("" none).
node_proc sim_node(const pki& p, const std::string& name, std::uint16_t seed,
                   const std::string& fault) {
  node_options o{name};
  o.seeds = {seed};
  o.failure_timeout_ms = 3000;
  o.state_dir = p.dir + "/" + name + "/state";
  o.devices = R"({"include": ["sim"], "exclude": ["cpu"],
                  "simulated": [{"profile": "adreno-740"}],
                  "rescan_interval_s": 0})";
  auto n = start_node(p, o);
  if (!fault.empty())
    fault_device(p, n, fault);
  return n;
}

/// The fault that holds a stage at its next operation of `kind`
/// ("allocate", "compute"): a hang before a kill or a freeze, the vanish
/// itself.
std::string hold(strike s, const std::string& kind) {
  return (s == strike::vanish ? "vanish_at:" : "hang:") + kind;
}

/// The simulated device's operations after which a stage holds mid-decode:
/// armed before the job (a fault sent once tokens flow could land after a
/// short job ended, on a loaded machine), many steps into its decode (a
/// one-layer stage's step is a few dozen operations) and far before its
/// end (1500 steps).
constexpr int decode_hold_ops = 2000;

/// Kills or freezes `n` (a vanish strikes by itself).
void strike_node(node_proc& n, strike s) {
  if (s == strike::kill)
    n.proc->signal(SIGKILL);
  else if (s == strike::freeze)
    n.proc->signal(SIGSTOP);
}

/// Until the node at `port` sees `name` alive.
void sees_alive(const pki& p, std::uint16_t port, const std::string& name) {
  REQUIRE(eventually(
    p, port, "nodes",
    [&](const std::string& out) { return status_of(out, name) == "alive"; },
    30s));
}

/// Runs a 6-stage job from `coord` (stages 1, 3 and 5 on a fresh node, 3
/// on its simulated device; after a loss of that node, on the node that
/// joined meanwhile the same way) and strikes at moment `m`; the tokens
/// must be the reference's and the recovery must say what it followed. `prompt_tokens`: the prompt's
/// length (re-fed alone by a recovery before the first token).
void strike_at(pki& p, node_proc& coord, int& jobs, strike s, moment m,
               const std::string& job, const std::string& reference,
               std::uint64_t prompt_tokens) {
  // (No hyphen: the console wraps long lines after one.)
  auto tag = std::string{name_of(s)} + name_of(m);
  CAPTURE(tag);
  p.node(tag);
  // Mid-decode a vanish strikes by itself; a kill or a freeze (and the
  // first loss of `replacing`, which waits for the next node) strikes the
  // stage held by a hang.
  const auto after = std::to_string(decode_hold_ops);
  auto b = sim_node(p, tag, coord.port,
                    m == moment::starting  ? hold(s, "allocate")
                    : m == moment::prefill ? hold(s, "compute")
                    : m == moment::decode && s == strike::vanish
                      ? "vanish_after:" + after
                      : "hang_after:" + after);
  sees_alive(p, coord.port, tag);
  process runner{background_console(p, coord.port, job + " --stages 6")};
  auto id = std::to_string(++jobs);
  REQUIRE(coord.proc->wait_for_output("job " + id + " started", 120s));
  std::optional<node_proc> d;
  if (m == moment::replacing) {
    // The node the job goes to next: held as its stage's weights arrive.
    p.node(tag + "next");
    d = sim_node(p, tag + "next", coord.port, hold(s, "allocate"));
    sees_alive(p, coord.port, tag + "next");
  }
  if (m == moment::replacing || (m == moment::decode && s != strike::vanish))
    // Tokens flow (the hang holds the stage from some step on: the job
    // cannot end first), two at least: the first generated token has been
    // fed, so a loss mid-decode re-feeds more than the prompt (with one,
    // a loaded machine could strike before its step).
    REQUIRE(job_has_tokens(p, coord.port, id, 2));
  strike_node(b, m == moment::replacing && s == strike::vanish ? strike::kill
                                                               : s);
  if (m == moment::replacing) {
    REQUIRE(coord.proc->wait_for_output(
      "job " + id + " starting its stages again on", 120s));
    CHECK(contains(coord.proc->out(), " " + tag + "next/sim:adreno-740:0"));
    strike_node(*d, s);
  }
  auto code = runner.wait(120s);
  INFO(runner.out() << runner.err());
  INFO("coord: " << coord.proc->out());
  REQUIRE(code == 0);
  CHECK(line_after(runner.out(), "text: ") == reference);
  CHECK(contains(runner.out(), "job " + id + " recovered from "));
  // What was lost is named. The second loss of `replacing` struck before
  // the first recovery's first token: while its stages started (the
  // recovery names both: "...; then node N is dead") or once they ran (a
  // second recovery, before any token).
  std::string said;
  for (std::size_t at = 0;
       (at = runner.out().find("job " + id + " recovered from ", at))
       != std::string::npos;
       ++at)
    said += line_after(runner.out().substr(at), "recovered from ") + "\n";
  CHECK(contains(said, s == strike::vanish && m != moment::replacing
                         ? tag + "/sim:adreno-740:0"
                         : tag));
  if (m == moment::replacing)
    CHECK(contains(said, s == strike::vanish ? tag + "next/sim:adreno-740:0"
                                             : tag + "next"));
  // Before the first token only the prompt is re-fed; mid-decode more.
  std::smatch sm;
  std::regex re{"job " + id + " recovered from [^\n]*: ([0-9]+) tokens re-fed"};
  auto out = runner.out();
  REQUIRE(std::regex_search(out, sm, re));
  auto refed = std::stoull(sm[1]);
  if (m == moment::starting || m == moment::prefill)
    CHECK(refed == prompt_tokens);
  else
    CHECK(refed > prompt_tokens);
  std::printf("%s: %s", tag.c_str(), said.c_str());
  // Gone before the next moment places anything.
  for (auto* n : {&b, d ? &*d : nullptr})
    if (n) {
      n->proc->signal(SIGKILL);
      REQUIRE(eventually(
        p, coord.port, "nodes",
        [&](const std::string& o) { return status_of(o, n->name) == "dead"; },
        30s));
    }
}

/// Each moment for strike `s`, on one coordinating node.
void strike_at_every_moment(strike s) {
  pki p{std::string{"exo-moment-"} + name_of(s)};
  auto model = long_model(p, 6, "long6");
  p.node("coord");
  auto coord = start(p, "coord", {});
  auto job = story_job(model, 1500);
  auto reference = solo_text(p, coord.port, job, 1500);
  const std::uint64_t prompt = 12; // "once upon a time" (bytes + BOS)
  int jobs = 1;
  for (auto m : {moment::starting, moment::prefill, moment::decode,
                 moment::replacing})
    strike_at(p, coord, jobs, s, m, job, reference, prompt);
}

} // namespace

TEST_CASE("a job whose stage node is killed before its first token, "
          "mid-prefill, mid-decode or while it is being placed again gives "
          "the tokens of an uninterrupted run",
          "[workload][process]") {
  strike_at_every_moment(strike::kill);
}

TEST_CASE("a job whose stage node freezes before its first token, "
          "mid-prefill, mid-decode or while it is being placed again gives "
          "the tokens of an uninterrupted run",
          "[workload][process]") {
  strike_at_every_moment(strike::freeze);
}

TEST_CASE("a job whose stage's device vanishes before its first token, "
          "mid-prefill, mid-decode or while it is being placed again gives "
          "the tokens of an uninterrupted run",
          "[workload][process]") {
  strike_at_every_moment(strike::vanish);
}

TEST_CASE("a job whose survivors cannot hold its model fails at once, "
          "naming the lost node and what is missing", "[workload][process]") {
  pki p{"exo-no-room"};
  // About 25 MiB of F32 weights: the coordinator's cpu hands out 4 MiB, so
  // the solver places every layer on the other node.
  auto model = big_model(p);
  p.node("coord");
  p.node("roomy");
  node_options co{"coord"};
  co.failure_timeout_ms = 3000;
  co.state_dir = p.dir + "/coord/state";
  co.devices = R"({"include": ["cpu"], "cpu_memory_limit_mib": 4,
                   "rescan_interval_s": 0})";
  auto a = start_node(p, co);
  node_options ro{"roomy"};
  ro.failure_timeout_ms = 3000;
  ro.state_dir = p.dir + "/roomy/state";
  ro.devices = R"({"include": ["cpu"], "rescan_interval_s": 0})";
  ro.seeds = {a.port};
  auto b = start_node(p, ro);
  REQUIRE(eventually(
    p, a.port, "nodes",
    [](const std::string& out) {
      return contains(out, "\"roomy\"")
             && !contains(out, "\"status\": \"dead\"")
             && !contains(out, "\"status\": \"suspect\"");
    },
    30s));
  process runner{background_console(
    p, a.port,
    "run --model " + model
      + " --prompt \"once upon a time\" -n 4000 --seed 2 --temperature 0")};
  REQUIRE(a.proc->wait_for_output("job 1 started", 120s));
  REQUIRE(contains(a.proc->out(), "on roomy"));
  REQUIRE(job_has_tokens(p, a.port, "1")); // then the kill
  auto t0 = std::chrono::steady_clock::now();
  b.proc->signal(SIGKILL);
  auto code = runner.wait(60s);
  auto took = std::chrono::duration<double>(std::chrono::steady_clock::now()
                                            - t0)
                .count();
  INFO("the run ended " << took << " s after the kill:\n"
                        << runner.out() << runner.err());
  CHECK(code == 1);
  CHECK(took < 20);
  CHECK(contains(runner.err(), "(roomy/cpu:0) is gone"));
  CHECK(contains(runner.err(), "could not be re-placed"));
  std::printf("a job without room on the survivors failed %.2f s after the "
              "kill\n", took);
}

TEST_CASE("a job that finds no room joins a running job's stages when its "
          "KV cache fits beside, else waits for the memory and runs once it "
          "is free, and one that waits too long fails with out_of_memory",
          "[workload][process]") {
  pki p{"exo-admission"};
  // About 25 MiB of F32 weights and 2 KiB of F16 KV cache a token, on a
  // simulated device of 64 MiB that reads 1 GB/s on the wall clock (25 ms
  // a token: the long jobs below outlast the test).
  auto model = big_model(p);
  p.node("solo");
  node_options no{"solo"};
  no.state_dir = p.dir + "/solo/state";
  no.devices = slow_small_sim(p.dir, 64);
  no.extra = R"(, "models": {"dirs": [")" + p.dir
             + R"("], "admission_wait_ms": 4000})";
  auto n = start_node(p, no);
  auto job = [&](int tokens, int seed, const std::string& more) {
    return "run --model " + model + " --prompt \"once upon a time\" -n "
           + std::to_string(tokens) + " --seed " + std::to_string(seed)
           + " --temperature 0 " + more;
  };
  // A long job: the weights and 8 MiB of KV cache its own (which leaves
  // about 37 MiB free).
  auto holder = job(2000, 2, "--ctx 4096");
  process first{background_console(p, n.port, holder)};
  REQUIRE(n.proc->wait_for_output("job 1 started", 120s));
  auto devices = console(p, n.port, std::vector<std::string>{"devices"},
                         console_options{true});
  INFO("devices with job 1 running: " << devices.out);
  // 1. 20 MiB of KV: no plan of its own fits (the weights again), but
  //    beside job 1 on its stage it does.
  auto beside = job(24, 3, "--ctx 2560 --sequences 4");
  auto joining = console(p, n.port, beside);
  INFO(joining.out << joining.err);
  REQUIRE(joining.code == 0);
  CHECK(contains(joining.out, "placement: beside job 1"));
  // 1b. 7 MiB of KV: a plan of its own (the weights again and working
  //     memory: 33 MiB) fits the free memory of now (35 MiB usable), but
  //     not beside the 8 MiB job 1's cache may still claim (its sequence
  //     holds a few hundred of its 4096 positions; its cache grows as it
  //     needs): it joins job 1 too, saying why.
  auto claimed = console(p, n.port, job(24, 5, "--ctx 1792 --sequences 2"));
  INFO(claimed.out << claimed.err);
  REQUIRE(claimed.code == 0);
  CHECK(contains(claimed.out, "for the KV caches of running jobs"));
  CHECK(contains(claimed.out, "placement: beside job 1"));
  // 2. 32 MiB of KV fits neither beside job 1 nor beside its weights: it
  //    waits, says so, and runs once job 1 is cancelled.
  auto big = job(24, 4, "--ctx 4096 --sequences 4");
  process second{background_console(p, n.port, big)};
  if (!n.proc->wait_for_output("a job waits for memory (1 waiting)", 60s)) {
    second.wait(60s);
    FAIL("the job did not wait: " << second.out() << second.err()
                                  << "\nthe node's output: "
                                  << n.proc->out());
  }
  CHECK(contains(n.proc->out(), "found no plan (infeasible)"));
  // `jobs` lists it, with the reason in its JSON.
  auto listed = console(p, n.port, "jobs");
  INFO(listed.out << listed.err);
  // (Named as the running job is: its model's digest, 12 digits.)
  auto label = line_after(listed.out, "\n1    ").substr(0, 12);
  CHECK(contains(listed.out, "waiting for memory: " + label + " console-"));
  CHECK(contains(listed.out, " s more\n"));
  auto listed_json = console(p, n.port, "jobs", true);
  CHECK(contains(listed_json.out, "\"seconds_left\""));
  CHECK(contains(listed_json.out, "found no plan (infeasible)"));
  std::this_thread::sleep_for(1s); // it tries again meanwhile
  CHECK(console(p, n.port, "cancel 1").code == 0);
  CHECK(first.wait(60s) == 0);
  auto second_code = second.wait(60s);
  INFO(second.out() << second.err() << "\nthe node's output: "
                    << n.proc->out());
  REQUIRE(second_code == 0);
  // The same jobs alone give the same texts.
  for (auto [ran, again] :
       {std::pair<std::string, std::string>{joining.out, beside},
        std::pair<std::string, std::string>{second.out(), big}}) {
    auto alone = console(p, n.port, again);
    INFO(alone.out << alone.err);
    REQUIRE(alone.code == 0);
    auto texts = [](const std::string& out) { // "sequence K: ..." lines
      auto from = out.find("sequence 0: ");
      auto to = out.find("\nprompt: ", from);
      return from == std::string::npos || to == std::string::npos
               ? std::string{}
               : out.substr(from, to - from);
    };
    CHECK(contains(texts(alone.out), "sequence 3: once upon a time"));
    CHECK(texts(ran) == texts(alone.out));
  }
  // 3. One that a running job keeps out longer than admission_wait_ms
  //    fails, saying why and how long it waited; the running job goes on.
  process third{background_console(p, n.port, holder)};
  REQUIRE(n.proc->wait_for_output("job 7 started", 120s));
  auto t0 = std::chrono::steady_clock::now();
  auto refused = console(p, n.port, big);
  auto took = std::chrono::duration<double>(std::chrono::steady_clock::now()
                                            - t0)
                .count();
  INFO(refused.out << refused.err);
  CHECK(refused.code == 1);
  CHECK(contains(refused.err, "found no plan (infeasible)"));
  CHECK(contains(refused.err, "s for the memory other jobs hold"));
  CHECK(took >= 3.5);
  CHECK(took < 30);
  CHECK(contains(console(p, n.port, "jobs").out, "\n7 "));
  CHECK(console(p, n.port, "cancel 7").code == 0);
  CHECK(third.wait(60s) == 0);
  // 4. Nothing else runs (the last job ended over 2 s ago: its stage is
  //    gone): a job that cannot fit fails at once.
  std::this_thread::sleep_for(2500ms);
  auto huge = console(p, n.port, job(24, 3, "--ctx 4096 --sequences 6"));
  INFO(huge.out << huge.err);
  CHECK(huge.code == 1);
  CHECK(contains(huge.err, "found no plan (infeasible)"));
  CHECK(!contains(huge.err, "waited"));
}

TEST_CASE("a stage kept after its last job counts as free memory and gives "
          "its device's room to another model's job",
          "[workload][process][keep]") {
  pki p{"exo-keep"};
  // Two models of 25 MiB of F32 weights each on a 40 MiB device: one
  // stage at a time fits.
  auto a = big_model(p);
  auto b = big_model(p, "other", 6);
  p.node("solo");
  node_options no{"solo"};
  no.state_dir = p.dir + "/solo/state";
  no.devices = slow_small_sim(p.dir, 40);
  auto n = start_node(p, no);
  auto job = [&](const std::string& model) {
    auto r = console(p, n.port,
                     std::vector<std::string>{
                       "run --model " + model
                       + " --prompt \"once upon a time\" -n 4 --ctx 256 "
                         "--temperature 0"},
                     console_options{true, std::chrono::milliseconds{120000}});
    INFO(r.out << r.err);
    CHECK(r.code == 0);
    return r.out;
  };
  auto device = [&] {
    return console(p, n.port,
                   std::vector<std::string>{"inspect solo:device/sim:tiny:0"},
                   console_options{true})
      .out;
  };
  auto field = [](const std::string& out, const std::string& key) {
    std::smatch m;
    std::regex re{"\"" + key + "\": \"?(\\d+)"};
    return std::regex_search(out, m, re) ? std::stoull(m[1].str())
                                         : ~0ull;
  };
  auto first = job(a);
  // The job is over; the device keeps its stage and says its memory is
  // free (40 MiB: placement may plan on it).
  auto kept = device();
  INFO(kept);
  CHECK(field(kept, "kept") == 1);
  CHECK(field(kept, "kept_bytes") >= 25ull << 20);
  CHECK(contains(console(p, n.port, std::vector<std::string>{"devices"},
                         console_options{true})
                   .out,
                 "\"free_memory\": 41943040"));
  // The other model's stage needs that room: the kept one gives way.
  job(b);
  auto after = device();
  INFO(after);
  CHECK(field(after, "kept_released") >= 1);
  CHECK(field(after, "kept") == 1); // the other model's stage now
  // And the first model again, the same text as before.
  auto again = job(a);
  CHECK(field(device(), "kept_released") >= 2);
  auto tokens = [](const std::string& out) {
    std::smatch m;
    std::regex re{"\"tokens\": \\[[^\\]]*\\]"};
    return std::regex_search(out, m, re) ? m[0].str() : std::string{"none"};
  };
  CHECK(tokens(first) != "none");
  CHECK(tokens(again) == tokens(first));
}

TEST_CASE("the solver re-places a job that lost a node on the two that "
          "remain, the tokens unchanged", "[workload][process]") {
  pki p{"exo-resolve"};
  // About 25 MiB of weights; no node's cpu hands out enough for all of it,
  // so the solver's plan spans two nodes, and two of three hold it.
  auto model = big_model(p);
  std::vector<node_proc> nodes;
  for (auto name : {"coord", "n2", "n3"}) {
    p.node(name);
    node_options no{name};
    no.failure_timeout_ms = 3000;
    no.state_dir = p.dir + "/" + name + "/state";
    no.devices = R"({"include": ["cpu"], "cpu_memory_limit_mib": 24,
                     "rescan_interval_s": 0})";
    if (!nodes.empty())
      no.seeds = {nodes.front().port};
    nodes.push_back(start_node(p, no));
  }
  auto& a = nodes.front();
  REQUIRE(eventually(
    p, a.port, "nodes",
    [](const std::string& out) {
      return contains(out, "\"n2\"") && contains(out, "\"n3\"")
             && !contains(out, "\"status\": \"dead\"")
             && !contains(out, "\"status\": \"suspect\"");
    },
    30s));
  auto job = "run --model " + model
             + " --prompt \"once upon a time\" -n 300 --seed 2 "
               "--temperature 0";
  // The reference: the same job on all three.
  auto whole = console(p, a.port, job);
  INFO(whole.out << whole.err);
  REQUIRE(whole.code == 0);
  // Its stages ended: each device's memory is usable again (the buffers
  // its pool keeps count as free), at once and a second later when the
  // member view has the devices' own figures.
  auto all_free = [](const std::string& out) {
    std::size_t n = 0;
    for (auto at = out.find("\"free_memory\": 25165824");
         at != std::string::npos;
         at = out.find("\"free_memory\": 25165824", at + 1))
      ++n;
    return n == 3;
  };
  CHECK(eventually(p, a.port, "devices", all_free, 10s));
  process runner{background_console(p, a.port, job)};
  if (!a.proc->wait_for_output("job 2 started", 120s)) {
    runner.wait(5s);
    FAIL("job 2 did not start: " << runner.out() << runner.err()
                                 << "\ndevices now: "
                                 << console(p, a.port, std::vector<std::string>{"devices"},
                                            console_options{true})
                                      .out
                                 << "\nplans now: "
                                 << console(p, a.port, std::vector<std::string>{"plans"}).out
                                 << "\ncoord's output: " << a.proc->out());
  }
  // A node of its plan other than coord.
  auto placed = a.proc->out();
  placed = placed.substr(placed.rfind("placement (solver)"));
  INFO(placed);
  auto victim = contains(placed, "on n2 cpu:0") ? 1 : 2;
  REQUIRE(contains(placed, "on " + nodes[victim].name + " cpu:0"));
  REQUIRE(job_has_tokens(p, a.port, "2")); // then the kill
  nodes[victim].proc->signal(SIGKILL);
  auto code = runner.wait(120s);
  INFO(runner.out() << runner.err());
  REQUIRE(code == 0);
  CHECK(contains(runner.out(), "job 2 recovered from "));
  auto survivor = nodes[3 - victim].name;
  auto after = a.proc->out();
  after = after.substr(after.rfind("re-placed after a loss"));
  CHECK(contains(after, "on " + survivor + " cpu:0"));
  CHECK(!contains(after, "on " + nodes[victim].name + " cpu:0"));
  CHECK(line_after(runner.out(), "text: ") == line_after(whole.out, "text: "));
}

TEST_CASE("drain moves a running job's stage off a node, which may then "
          "leave, its KV caches carried, and the tokens are those of an "
          "uninterrupted run",
          "[workload][process]") {
  pki p{"exo-drain"};
  auto model = long_model(p);
  auto [a, b] = coord_and(p, "leaving");
  // 4000 tokens (about 2.5 s on an idle Zen 4 core): the drain must find
  // the run mid-decode, with KV caches to carry.
  auto job = "run --model " + model
             + " --prompt \"once upon a time\" -n 4000 --seed 2 "
               "--temperature 0";
  auto solo = console(p, a.port, job + " --stages 1");
  REQUIRE(solo.code == 0);
  process runner{background_console(p, a.port, job + " --stages 2")};
  REQUIRE(a.proc->wait_for_output("job 2 started", 120s));
  REQUIRE(job_has_tokens(p, a.port, "2"));
  // Typed on the node that leaves: the run its coordinator holds moves.
  auto d = console(p, b.port, "drain leaving");
  INFO(d.out << d.err);
  CHECK(d.code == 0);
  CHECK(contains(d.out, "moving coord:2 (coordinated by other nodes) off "
                        "leaving"));
  // Once moved, the node leaves; the run goes on without it.
  REQUIRE(a.proc->wait_for_output("job 2 re-placed after node leaving is "
                                  "drained",
                                  60s));
  auto moved = a.proc->out();
  moved = moved.substr(moved.rfind("job 2 re-placed after"));
  moved = moved.substr(0, moved.find('\n'));
  CHECK(contains(moved, "now on coord/"));
  CHECK(!contains(moved, "leaving/"));
  // A run that comes after the drain is not placed there (an even split
  // over the members would put its second stage on "leaving").
  auto later = console(p, a.port, "run --model " + model
                                    + " --prompt \"once\" -n 4 --stages 2");
  INFO(later.out << later.err);
  CHECK(later.code == 0);
  CHECK(contains(later.out, "stage 1: layers [1, 2) on coord "));
  CHECK(!contains(later.out, " on leaving "));
  b.proc->signal(SIGTERM);
  CHECK(b.proc->wait(30s) == 0);
  auto code = runner.wait(120s);
  INFO(runner.out() << runner.err());
  REQUIRE(code == 0);
  // The KV caches went along: nothing re-fed.
  CHECK(contains(runner.out(), "job 2 recovered from node leaving is "
                               "drained (a planned move): KV caches moved ("));
  CHECK(contains(runner.out(), "iB), 0 tokens re-fed"));
  CHECK(line_after(runner.out(), "text: ") == line_after(solo.out, "text: "));
  // Nothing of this node's on it now.
  auto again = console(p, a.port, "drain leaving");
  CHECK(contains(again.out, "no run of coord has a stage on leaving"));
}

TEST_CASE("a node's own job is right beside a peer's job whose stage there "
          "holds other layers of the same model",
          "[workload][process]") {
  // The peer's stage on coord is loaded from coord's partial copy of the
  // model (only that stage's layers); coord's own first stage must come
  // from its whole file, not that copy (the soak found every token wrong).
  pki p{"exo-partial-copy"};
  auto model = long_model(p, 3);
  // Without backups: a backup would fetch the whole model into coord's
  // copy and hide the problem.
  std::vector<node_proc> two;
  for (auto name : {"coord", "peer"}) {
    p.node(name);
    node_options o{name};
    o.failure_timeout_ms = 3000;
    o.state_dir = p.dir + "/" + name + "/state";
    o.extra = R"(, "models": {"dirs": [")" + p.dir
              + R"("], "backup_jobs": false})";
    if (!two.empty())
      o.seeds = {two.front().port};
    two.push_back(start_node(p, o));
  }
  auto& a = two[0];
  auto& b = two[1];
  REQUIRE(eventually(
    p, a.port, "nodes",
    [&](const std::string& out) {
      return contains(out, "\"peer\"") && !contains(out, "\"dead\"");
    },
    30s));
  auto job = "run --model " + model
             + " --prompt \"once upon a time\" -n 3000 --seed 2 "
               "--temperature 0";
  // The reference on the peer: coord has not loaded the model yet.
  auto solo = console(p, b.port, job + " --stages 1");
  REQUIRE(solo.code == 0);
  // The peer's run: its first stage on the peer, the last on coord.
  process peer_run{background_console(p, b.port, job + " --stages 2")};
  REQUIRE(b.proc->wait_for_output("job 2 started", 120s));
  auto mine = console(p, a.port, job + " --stages 2");
  INFO(mine.out << mine.err);
  REQUIRE(mine.code == 0);
  CHECK(contains(mine.out, "stage 0: layers [0, 1) on coord "));
  CHECK(line_after(mine.out, "text: ") == line_after(solo.out, "text: "));
  auto code = peer_run.wait(120s);
  INFO(peer_run.out() << peer_run.err());
  REQUIRE(code == 0);
  CHECK(contains(peer_run.out(), "on coord "));
  CHECK(line_after(peer_run.out(), "text: ") == line_after(solo.out, "text: "));
}

namespace {

/// A simulated device profile "warm" (at dir/warm.json, returned) that
/// cools within seconds on the wall clock: 2 s time constant, throttles at
/// 95 C.
std::string warm_profile(const pki& p) {
  auto profiles = p.dir + "/warm.json";
  std::ofstream f{profiles};
  f << R"({"profiles": [{"name": "warm", "display_name": "warm",
    "vendor": "test", "architecture": "t", "memory_gib": 0.25,
    "compute_units": 8, "tflops": 1, "bandwidth_gbs": 1,
    "idle_power_w": 10, "peak_power_w": 50,
    "thermal_resistance_c_per_w": 0.1, "thermal_capacitance_j_per_c": 20,
    "ambient_c": 30, "throttle_c": 95}]})";
  return profiles;
}

} // namespace

TEST_CASE("a device paused for heat sends its job elsewhere with its KV "
          "caches, or, with nowhere else to go, keeps it there until it "
          "cools, and the tokens are those of an uninterrupted run",
          "[workload][process][thermal]") {
  pki p{"exo-heat"};
  auto model = long_model(p);
  // A simulated device that cools within seconds beside a cpu of 1 MiB,
  // too small for the model.
  auto profiles = warm_profile(p);
  p.node("solo");
  node_options no{"solo"};
  no.state_dir = p.dir + "/solo/state";
  no.devices = R"({"include": ["cpu", "sim"], "cpu_memory_limit_mib": 1,
                   "sim_profiles_file": ")"
               + profiles + R"(", "simulated": [{"profile": "warm"}],
                   "sim_time_scale": 1, "rescan_interval_s": 0})";
  auto n = start_node(p, no);
  auto job = "run --model " + model
             + " --prompt \"once upon a time\" -n 1500 --seed 2 "
               "--temperature 0";
  auto whole = console(p, n.port, job);
  INFO(whole.out << whole.err);
  REQUIRE(whole.code == 0);
  // 200 degrees hotter at its 1000th operation from now (a transfer or an
  // allocation: two a token): mid-decode. It stays above the 95 C
  // throttle for about 2 s as it cools (2 s time constant): a thermal
  // monitor slowed by a loaded machine still sees it (80 degrees were
  // above it for 0.4 s only, and the test failed under load).
  std::string admin;
  {
    std::ifstream f{no.state_dir + "/access/admin.token"};
    std::getline(f, admin);
  }
  auto heat = console(p, n.port,
                      "dev fault sim:warm:0 heat_after:1000:200 auth=" + admin);
  INFO(heat.out << heat.err);
  REQUIRE(heat.code == 0);
  auto r = console(p, n.port, job);
  INFO(r.out << r.err << "\nthe node's output: " << n.proc->out());
  REQUIRE(r.code == 0);
  CHECK(contains(n.proc->out(), "moving job 2 off solo/sim:warm:0 (paused "
                                "for heat)"));
  CHECK(contains(n.proc->out(), "job 2 stays on solo/sim:warm:0 (paused for "
                                "heat): no other device has room"));
  CHECK(contains(r.out, "job 2 recovered from device solo/sim:warm:0 paused "
                        "for heat ("));
  CHECK(contains(r.out, "iB), 0 tokens re-fed"));
  CHECK(line_after(r.out, "text: ") == line_after(whole.out, "text: "));
}

TEST_CASE("a device paused for heat while its job's stages start is left "
          "as soon as the job runs, and the tokens are those of an "
          "uninterrupted run",
          "[workload][process][thermal]") {
  pki p{"exo-heat-start"};
  auto model = long_model(p, 4, "long4");
  auto profiles = warm_profile(p);
  p.node("coord");
  p.node("late");
  // Failure timeout 10 s: "late" stays alive while frozen below.
  node_options co{"coord"};
  co.state_dir = p.dir + "/coord/state";
  co.failure_timeout_ms = 10000;
  co.devices = R"({"include": ["cpu", "sim"], "sim_profiles_file": ")"
               + profiles + R"(", "simulated": [{"profile": "warm"}],
                   "sim_time_scale": 1, "rescan_interval_s": 0})";
  auto a = start_node(p, co);
  node_options lo{"late"};
  lo.seeds = {a.port};
  lo.state_dir = p.dir + "/late/state";
  lo.failure_timeout_ms = 10000;
  auto b = start_node(p, lo);
  sees_alive(p, a.port, "late");
  auto job = story_job(model, 600);
  auto reference = solo_text(p, a.port, job, 600);
  // Four stages: coord/cpu, late/cpu, coord/sim:warm:0, late's sim. With
  // late frozen its stages never answer: the run stays in its start while
  // coord's warm device is paused for heat.
  b.proc->signal(SIGSTOP);
  process runner{background_console(p, a.port, job + " --stages 4")};
  REQUIRE(a.proc->wait_for_output("stage 2: layers [2, 3) on coord sim:warm:0",
                                  60s));
  fault_device(p, a, "heat:200", "sim:warm:0");
  REQUIRE(a.proc->wait_for_output("moves off it once its job runs (paused "
                                  "for heat)",
                                  30s));
  b.proc->signal(SIGCONT);
  auto code = runner.wait(120s);
  INFO(runner.out() << runner.err() << "\ncoord: " << a.proc->out());
  REQUIRE(code == 0);
  CHECK(line_after(runner.out(), "text: ") == reference);
  CHECK(contains(a.proc->out(), "moving job 2 off coord/sim:warm:0 "
                                "(drained or paused for heat while it was "
                                "placed)"));
  CHECK(contains(runner.out(), "job 2 recovered from coord/sim:warm:0 was "
                               "drained or paused for heat while the job was "
                               "placed (a planned move)"));
}

TEST_CASE("a job placed on a node that froze before its stage started is "
          "placed again without it when the node is declared dead, not "
          "after the shard timeout",
          "[workload][process]") {
  pki p{"exo-frozen-start"};
  auto model = long_model(p);
  auto [a, b] = coord_and(p, "frozen");
  // Frozen now, still alive in the view for the failure timeout (3 s): the
  // job is placed on it and its stage request is never answered.
  b.proc->signal(SIGSTOP);
  auto t0 = std::chrono::steady_clock::now();
  auto r = console(p, a.port,
                   "run --model " + model
                     + " --prompt \"once upon a time\" -n 8 --stages 2");
  auto took = std::chrono::duration<double>(std::chrono::steady_clock::now()
                                            - t0)
                .count();
  INFO("the run ended after " << took << " s:\n" << r.out << r.err);
  CHECK(r.code == 0);
  CHECK(took < 30);
  // Both stages on coord now, the reason said.
  CHECK(contains(r.out, "re-placed after a loss (node frozen is dead"));
  CHECK(contains(r.out, "stage 1: layers [1, 2) on coord"));
  auto solo = console(p, a.port,
                      "run --model " + model
                        + " --prompt \"once upon a time\" -n 8 --stages 1");
  CHECK(line_after(r.out, "text: ") == line_after(solo.out, "text: "));
  b.proc->signal(SIGKILL);
}

TEST_CASE("exo-node run --llama-threads gives exo-model's logits for the "
          "same llama.cpp thread count, past position 256",
          "[workload][process]") {
  auto dir = temp_dir("exo-llama-threads");
  auto o = model_options();
  o.layers = 2;
  o.ctx = 1024;
  o.seed = 5;
  auto model = make_model(dir, o);
  write_file(dir + "/node.json", R"({"node": {"name": "solo",
    "state_dir": ")" + dir + R"(/state"},
    "devices": {"include": ["cpu"], "rescan_interval_s": 0}})");
  // A prompt of a few hundred tokens: the generated tokens' decode steps
  // sit past position 256, where llama.cpp's attention splits its cells
  // over its threads (the prompt itself is one batch, never split).
  std::string prompt;
  for (int i = 0; i < 9; ++i)
    prompt += "the quick brown fox jumps over the lazy dog ";
  auto node = [&](const std::string& tag, std::vector<std::string> extra) {
    std::vector<std::string> argv{exo_node(), "run", "--model", model,
                                  "--prompt", prompt, "-n", "3",
                                  "--stages", "1", "--config",
                                  dir + "/node.json", "--logits-out",
                                  dir + "/" + tag + ".txt"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto r = run(argv, 120s);
    INFO(r.out << r.err);
    REQUIRE(r.code == 0);
    // Three tokens generated: the last logits are a decode step's.
    REQUIRE(r.out.find("generation: 3 tokens") != std::string::npos);
    std::smatch m;
    REQUIRE(std::regex_search(r.out, m, std::regex{"prompt: (\\d+) tokens"}));
    REQUIRE(std::stoi(m[1]) > 256);
    return read_numbers(dir + "/" + tag + ".txt");
  };
  auto engine = [&](const std::string& tag, const std::string& threads) {
    auto r = run({exo_model(), "run", "--model", model, "--prompt", prompt,
                  "-n", "3", "--llama-threads", threads, "--logits-out",
                  dir + "/" + tag + ".txt"},
                 120s);
    INFO(r.out << r.err);
    REQUIRE(r.code == 0);
    return read_numbers(dir + "/" + tag + ".txt");
  };
  auto one = node("node1", {});
  auto two = node("node2", {"--llama-threads", "2"});
  REQUIRE(one.size() == 512);
  CHECK(one == engine("engine1", "1"));
  CHECK(two == engine("engine2", "2"));
  // The split-KV bits do differ from one thread's.
  CHECK(one != two);
}

TEST_CASE("the console's run and exo-node run refuse the same over-long "
          "request with the same message",
          "[workload][process]") {
  pki p{"exo-workload"};
  p.node("delta");
  auto d = start(p, "delta", {});
  // The tests' model has a training context of 256 tokens.
  auto model = make_model(p.dir);
  auto words = std::string{"--model "} + model
               + " --prompt \"once upon a time\" -n 300 --stages 1";
  auto via_console = console(p, d.port, "run " + words);
  INFO(via_console.out << via_console.err);
  CHECK(via_console.code != 0);
  auto via_node = run({exo_node(), "run", "--model", model, "--prompt",
                       "once upon a time", "-n", "300", "--stages", "1",
                       "--state-dir", p.dir + "/solo"},
                      120s);
  INFO(via_node.out << via_node.err);
  CHECK(via_node.code == 2);
  // The rule's message, after each program's own prefix.
  std::smatch m;
  std::regex rule{"prompt \\(\\d+ tokens\\) plus -n 300 need a context of "
                  "\\d+ tokens, more than the model's training context of "
                  "256"};
  REQUIRE(std::regex_search(via_node.err, m, rule));
  auto message = m.str();
  CHECK(via_node.err.find("exo-node run: " + message) != std::string::npos);
  CHECK(via_console.err.find("run: " + message) != std::string::npos);
  // A --ctx beyond the training context is refused alike on both paths
  // (the console's run used to pass it on to the shards).
  auto ctx_console = console(p, d.port, "run " + words + " -n 4 --ctx 512");
  auto ctx_node = run({exo_node(), "run", "--model", model, "--prompt",
                       "once upon a time", "-n", "4", "--ctx", "512",
                       "--state-dir", p.dir + "/solo"},
                      120s);
  std::string ctx_rule = "--ctx 512 exceeds the model's training context "
                         "of 256 tokens";
  CHECK(ctx_console.err.find(ctx_rule) != std::string::npos);
  CHECK(ctx_node.err.find(ctx_rule) != std::string::npos);
  CHECK(ctx_node.code == 2);
  // Nothing was started for either refused run.
  CHECK(console(p, d.port, "jobs").out.find("no running jobs")
        != std::string::npos);
  d.proc->signal(SIGTERM);
  CHECK(d.proc->wait(30s) == 0);
}

/// coord, peer and spare (one access key); the text story_job gives on one
/// stage, sampled at temperature 0.2 and speculating with a draft
/// (speculative sampling: each round draws several numbers a token, which
/// a job that goes on from its tokens must skip); and a two-stage run of
/// it (--id story) coordinated by coord, the draft there, running once its
/// backup holds the whole model.
struct backed_up_story {
  std::string model;
  std::string reference;
  node_proc coord, peer, spare;
  std::unique_ptr<process> runner;
  std::string backup;

  backed_up_story(pki& p) {
    model = long_model(p);
    auto draft = long_model(p, 1, "long-draft");
    p.node("coord");
    p.node("peer");
    p.node("spare");
    coord = shared_key_node(p, "coord", {});
    auto job = story_job(model, 3000, "0.2") + " --draft " + draft
               + " --draft-tokens 4";
    reference = solo_text(p, coord.port, job, 3000);
    peer = shared_key_node(p, "peer", {coord.port});
    spare = shared_key_node(p, "spare", {coord.port});
    REQUIRE(all_see_each_other(p, coord, peer, spare));
    runner = std::make_unique<process>(background_console(
      p, coord.port, job + " --stages 2 --id story"));
    REQUIRE(coord.proc->wait_for_output("job 2 started", 120s));
    // The backup: spare, unless it looked unwell when the job started.
    backup = job_backup(p, coord.port, "story", 60s);
    REQUIRE(!backup.empty());
    REQUIRE(holds_ready_backup(
      p, keeper().port, "\"job\": \"coord:2\", \"name\": \"story\""));
  }
  node_proc& keeper() { return backup == "spare" ? spare : peer; }
  node_proc& other() { return backup == "spare" ? peer : spare; }
};

TEST_CASE("a job whose coordinating node dies is taken over by its backup, "
          "and the console re-attaches through another node to the tokens "
          "of an uninterrupted run",
          "[workload][process]") {
  pki p{"exo-coord-loss"};
  backed_up_story story{p};
  auto& a = story.coord;
  auto& runner = *story.runner;
  auto& backup = story.backup;
  auto& keeper = story.keeper();
  const auto& reference = story.reference;
  // Tokens flow and are replicated.
  REQUIRE(backup_has_tokens(p, keeper.port, "\"job\": \"coord:2\""));
  auto replicated = console(p, keeper.port, "jobs");
  a.proc->signal(SIGKILL);
  auto code = runner.wait(120s);
  INFO(replicated.out);
  INFO(runner.out() << runner.err());
  INFO(keeper.proc->out());
  REQUIRE(code == 0);
  // The console said it lost its node and where it went on.
  CHECK(contains(runner.err(), "lost node coord (127.0.0.1:"
                                 + std::to_string(a.port) + ")"));
  CHECK(contains(runner.err(), "re-attaching to job story through"));
  CHECK(contains(runner.out(), "attached to job coord:2"));
  // The backup took it over from the tokens it held and went on: the text is
  // that of an uninterrupted run (its samplers skipped the numbers the
  // replicated rounds drew; never at end-of-sequence with this seed).
  CHECK(contains(keeper.proc->out(), "taking job coord:2 over (coordinator "
                                     "coord is dead"));
  CHECK(contains(runner.out(), "recovered from coordinator coord is dead"));
  CHECK(line_after(runner.out(), "text: ") == reference);
  // It went on with the draft the backup fetched with the model.
  CHECK(contains(runner.out(), " on " + backup + "/cpu:0, 4 tokens a round"));
  std::smatch m;
  std::regex re{"next token ([0-9.]+) s after the loss was noticed"};
  auto out = runner.out();
  REQUIRE(std::regex_search(out, m, re));
  std::printf("job taken over by %s after its coordinator was killed: %s; "
              "next token %.3f s after the takeover began\n",
              backup.c_str(),
              line_after(keeper.proc->out(), "tokens replicated").empty()
                ? line_after(keeper.proc->out(), "over (").c_str()
                : "",
              std::stod(m[1]));
  // Ended: attached late, through the other node, it answers with the
  // same end (the node that finished it keeps its last runs' ends).
  auto& other = story.other();
  auto after = console(p, other.port, "attach story");
  INFO(after.out << after.err);
  CHECK(after.code == 0);
  CHECK(contains(after.out, "attached to job coord:2"));
  CHECK(line_after(after.out, "text: ") == reference);
  auto none = console(p, other.port, "attach nosuchjob");
  CHECK(none.code != 0);
  CHECK(contains(none.err, "no job nosuchjob on"));

  // coord starts again, from the same state folder. Its job numbers go on
  // from the last it gave out (2): with numbers from 1 again its second
  // new job would be coord:2 again, a key the node that took the old one
  // over still knows, and a backup there would end it as taken over.
  a.proc->wait(30s);
  auto again = shared_key_node(p, "coord", {keeper.port});
  REQUIRE(all_see_each_other(p, again, story.peer, story.spare));
  for (const char* id : {"3", "4"}) {
    auto r = console(p, again.port,
                     story_job(story.model, 400) + " --stages 2");
    INFO(r.out << r.err);
    INFO("coord: " << again.proc->out());
    CHECK(r.code == 0);
    CHECK(contains(r.out, "generation: 400 tokens"));
    CHECK(contains(again.proc->out(), std::string{"job "} + id + " started"));
  }
  CHECK_FALSE(contains(again.proc->out(), "job 1 started"));
  CHECK_FALSE(contains(again.proc->out(), "taken over by"));
  std::ifstream numbers{p.dir + "/coord/state/job-numbers"};
  std::string kept;
  std::getline(numbers, kept);
  CHECK(kept == "exo job numbers: last 4");
}

TEST_CASE("a job whose coordinating node stops is handed to its backup "
          "with its stages and KV caches, nothing re-fed, and the console "
          "re-attaches to the tokens of an uninterrupted run",
          "[workload][process]") {
  pki p{"exo-coord-stop"};
  // The draft speculating on coord: the stages hold rows of proposals they
  // did not keep when the job pauses (the backup's job rewinds them).
  backed_up_story story{p};
  auto& a = story.coord;
  auto& runner = *story.runner;
  auto& backup = story.backup;
  auto& keeper = story.keeper();
  const auto& reference = story.reference;
  REQUIRE(job_has_tokens(p, a.port, "2")); // tokens flow
  // A graceful stop: coord moves its stage off itself, then hands the job
  // over.
  a.proc->signal(SIGTERM);
  auto code = runner.wait(120s);
  INFO(runner.out() << runner.err());
  INFO("coord: " << a.proc->out());
  INFO(backup << ": " << keeper.proc->out());
  REQUIRE(code == 0);
  CHECK(contains(a.proc->out(), "job 2 (coord:2) handed to " + backup
                                  + ": its 2 stages kept with "));
  CHECK(contains(keeper.proc->out(), "job coord:2 handed over by coord: its "
                                     "2 stages kept with "));
  CHECK_FALSE(contains(keeper.proc->out(), "taking job coord:2 over"));
  CHECK(contains(runner.err(), "re-attaching to job story through"));
  CHECK(contains(runner.out(), "attached to job coord:2"));
  CHECK(line_after(runner.out(), "text: ") == reference);
  // It went on speculating with a draft of its own (the backup fetched the
  // draft model with the model).
  CHECK(contains(runner.out(), " on " + backup + "/cpu:0, 4 tokens a round"));
  // One recovery: the move of coord's stage, then the handoff; its caches
  // carried, nothing re-fed.
  std::smatch m;
  std::regex re{"recovered from node coord is drained \\(a planned move\\); "
                "then coordinator coord stopped: the job was handed over "
                "with its stages and KV caches: KV caches moved \\(([0-9]+) "
                "positions, [0-9.]+ [KM]iB\\), 0 tokens re-fed, next token "
                "([0-9.]+) s after the loss was noticed \\(([0-9.]+) s "
                "between tokens\\)"};
  auto out = runner.out();
  REQUIRE(std::regex_search(out, m, re));
  CHECK(std::stoul(m[1]) > 4); // the prompt and some tokens
  CHECK_FALSE(std::regex_search(out, std::regex{" [1-9][0-9]* tokens re-fed"}));
  std::printf("job handed over to %s as its coordinator stopped: next token "
              "%.3f s after the move off coord began (%.3f s between "
              "tokens), %s positions of KV cache kept\n",
              backup.c_str(), std::stod(m[2]), std::stod(m[3]),
              m[1].str().c_str());
}

TEST_CASE("a job cancelled while its stopping coordinator hands it over "
          "stops at the backup that took it",
          "[workload][process]") {
  pki p{"exo-coord-stop-cancel"};
  auto model = long_model(p);
  p.node("coord");
  p.node("peer");
  p.node("spare");
  // Failure timeout 10 s: the backup is frozen for a moment below.
  auto a = shared_key_node(p, "coord", {}, 10000);
  auto b = shared_key_node(p, "peer", {a.port}, 10000);
  auto c = shared_key_node(p, "spare", {a.port}, 10000);
  REQUIRE(all_see_each_other(p, a, b, c));
  process runner{background_console(
    p, a.port, story_job(model) + " --stages 2 --id story")};
  REQUIRE(a.proc->wait_for_output("job 1 started", 120s));
  // Stages on coord and another member: the backup is the one without.
  auto backup = job_backup(p, a.port, "story", 60s);
  REQUIRE((backup == "peer" || backup == "spare"));
  auto& keeper = backup == "spare" ? c : b;
  auto& other = backup == "spare" ? b : c;
  auto story_other = backup == "spare" ? "peer" : "spare";
  REQUIRE(holds_ready_backup(p, keeper.port, "\"job\": \"coord:1\""));
  // The stages move off coord, then off the backup if they went there:
  // freezing the backup must hold the handoff, not the job's steps.
  auto drain = [&](const std::string& node) {
    auto d = console(p, a.port, "drain " + node);
    INFO(d.out << d.err);
    REQUIRE(d.code == 0);
    REQUIRE(a.proc->wait_for_output("job 1 re-placed after node " + node
                                      + " is drained",
                                    60s));
    auto moved = a.proc->out();
    moved = moved.substr(moved.rfind("job 1 re-placed after"));
    return moved.substr(0, moved.find('\n'));
  };
  auto moved = drain("coord");
  if (contains(moved, backup + "/"))
    moved = drain(backup);
  INFO(moved);
  REQUIRE(!contains(moved, backup + "/"));
  REQUIRE(!contains(moved, "coord/"));
  // The backup does not answer; coord stops: the job pauses at a token
  // boundary and waits for the backup's answer. Cancelled now, and the
  // backup takes it when it thaws: the cancel must follow the job there.
  keeper.proc->signal(SIGSTOP);
  a.proc->signal(SIGTERM);
  bool paused = a.proc->wait_for_output(
    "job 1 (coord:1) paused at a token boundary: handing it to " + backup,
    30s);
  auto cancel = console(p, a.port, "cancel 1");
  keeper.proc->signal(SIGCONT);
  REQUIRE(paused);
  INFO(cancel.out << cancel.err);
  CHECK(cancel.code == 0);
  CHECK(contains(cancel.out, "cancelling job 1"));
  INFO("coord: " << a.proc->out());
  INFO(backup << ": " << keeper.proc->out());
  CHECK(a.proc->wait_for_output("cancelled meanwhile: the cancel follows it "
                                "to " + backup,
                                30s));
  CHECK(keeper.proc->wait_for_output("(coord:1) stops: it was cancelled while it "
                                "was handed over",
                                30s));
  // The client, re-attached, hears the end of a cancelled run, not all of
  // its 3000 tokens.
  auto code = runner.wait(120s);
  INFO(runner.out() << runner.err());
  INFO("then " << backup << ": " << keeper.proc->out());
  INFO("then " << story_other << ": " << other.proc->out());
  CHECK(code == 0);
  CHECK(contains(runner.out(), "attached to job coord:1"));
  CHECK(contains(runner.out(), "cancelled: job "));
  CHECK(!contains(runner.out(), "generation: 3000 tokens"));
}

/// Three nodes that share one access key (peer and spare seeded from coord;
/// they declare a silent node dead after `silence` ms, coord after 3 s),
/// each seeing the others, and a console running the greedy 3000-token
/// story of `model` on coord over 2 stages as job "story" (coord:1) until
/// its backup (the keeper) holds the whole model and tokens.
struct story_on_three {
  node_proc a, b, c;
  std::unique_ptr<process> runner;
  std::string backup;
  /// `more`: options the run gets beside story_job's.
  story_on_three(pki& p, const std::string& model, int silence = 3000,
                 const std::string& more = "") {
    p.node("coord");
    p.node("peer");
    p.node("spare");
    a = shared_key_node(p, "coord", {});
    b = shared_key_node(p, "peer", {a.port}, silence);
    c = shared_key_node(p, "spare", {a.port}, silence);
    REQUIRE(all_see_each_other(p, a, b, c));
    runner = std::make_unique<process>(background_console(
      p, a.port, story_job(model) + " --stages 2 --id story" + more));
    REQUIRE(a.proc->wait_for_output("job 1 started", 120s));
    backup = job_backup(p, a.port, "story", 60s);
    REQUIRE((backup == "peer" || backup == "spare"));
    INFO("backup " << backup);
    if (!holds_ready_backup(p, keeper().port, "\"job\": \"coord:1\""))
      FAIL("no ready backup; its output: " << keeper().proc->out()
                                           << keeper().proc->err());
    // Tokens flow and are replicated.
    REQUIRE(backup_has_tokens(p, keeper().port, "\"job\": \"coord:1\""));
  }
  node_proc& keeper() { return backup == "spare" ? c : b; }
  node_proc& third() { return backup == "spare" ? b : c; }
  std::string third_name() const { return backup == "spare" ? "peer" : "spare"; }
};

TEST_CASE("a run whose node dies before any backup holds it is run again "
          "by its console through another node, with the same text",
          "[workload][process]") {
  pki p{"exo-lost-run"};
  auto model = long_model(p);
  // coord backs none of its jobs up: every job it runs is one that dies
  // with it (as one does between its start and its first replication).
  auto [coord, peer] = coord_and(
    p, "peer", true,
    R"(, "models": {"dirs": [")" + p.dir + R"("], "backup_jobs": false})");
  auto job = story_job(model, 3000);
  auto reference = solo_text(p, peer.port, job, 3000);
  process runner{background_console(p, coord.port,
                                    job + " --stages 1 --id lost")};
  REQUIRE(job_has_tokens(p, coord.port, "1"));
  coord.proc->signal(SIGKILL);
  auto code = runner.wait(180s);
  INFO(runner.out() << runner.err());
  INFO(peer.proc->out());
  REQUIRE(code == 0);
  CHECK(contains(runner.err(), "lost node coord"));
  CHECK(contains(runner.err(), "no node has job lost (lost before any "
                               "backup held it); running it again through "
                               "peer"));
  // Run again from its prompt: the text of an uninterrupted run.
  CHECK(contains(runner.out(), "generation: 3000 tokens"));
  CHECK(line_after(runner.out(), "text: ") == reference);
  CHECK_FALSE(contains(peer.proc->out(), "taking job"));
  peer.proc->signal(SIGTERM);
  CHECK(peer.proc->wait(30s) == 0);
}

TEST_CASE("a console whose node went while it sat idle runs its next run "
          "through another node it was given on its command line",
          "[workload][process]") {
  pki p{"exo-idle-lost"};
  auto model = long_model(p);
  auto [coord, peer] = coord_and(p, "peer", true);
  auto job = story_job(model, 400);
  auto reference = solo_text(p, peer.port, job, 400);
  // An interactive console (lines on its stdin) given both nodes: it lists
  // the nodes, then sits idle until the test lets its run go.
  console_options co;
  co.timeout = std::chrono::minutes(2);
  co.fallback = {peer.port};
  auto argv = console_argv(p, coord.port, {}, co);
  argv.push_back("--token-file");
  argv.push_back(p.dir + "/coord/state/access/admin.token");
  std::string quoted;
  for (auto& a : argv)
    quoted += " '" + a + "'";
  auto go = p.dir + "/go";
  process runner{{"/bin/sh", "-c",
                  "(echo nodes; while [ ! -e '" + go
                    + "' ]; do sleep 0.1; done; echo '" + job
                    + " --stages 1 --id idle') |" + quoted}};
  REQUIRE(runner.wait_for_output("peer", 60s));
  // coord goes while the console waits for its next line: the member list
  // the run asks for first fails (the node is lost), so the console has
  // only the nodes it was given to re-attach through (named by address
  // until one lists the members).
  coord.proc->signal(SIGKILL);
  coord.proc->wait(30s);
  std::this_thread::sleep_for(2s);
  exo::test::write_file(go, "");
  auto code = runner.wait(180s);
  INFO(runner.out() << runner.err());
  CHECK(code == 0);
  CHECK(contains(runner.err(), "lost node coord"));
  CHECK(contains(runner.err(), "re-attaching to job idle through 127.0.0.1:"
                                 + std::to_string(peer.port)));
  CHECK(contains(runner.err(), "running it again through peer"));
  CHECK(contains(runner.out(), "generation: 400 tokens"));
  CHECK(line_after(runner.out(), "text: ") == reference);
  peer.proc->signal(SIGTERM);
  CHECK(peer.proc->wait(30s) == 0);
}

TEST_CASE("a backup that froze past the failure timeout drops the replica "
          "it still holds when it comes back, and the job goes on",
          "[workload][process]") {
  pki p{"exo-backup-freeze"};
  auto model = long_model(p);
  // Eight sequences, each on its own step: the job runs long enough for
  // the backup to freeze, be replaced and come back.
  story_on_three story{p, model, 3000, " --sequences 8 --batch 1"};
  auto& a = story.a;
  auto& runner = *story.runner;
  auto& backup = story.backup;
  auto& keeper = story.keeper();
  // Frozen: coord declares it dead and backs the job up elsewhere.
  keeper.proc->signal(SIGSTOP);
  bool dead = a.proc->wait_for_output("member " + backup + " is dead", 60s);
  bool elsewhere
    = dead
      && holds_ready_backup(p, story.third().port, "\"job\": \"coord:1\"");
  keeper.proc->signal(SIGCONT);
  INFO("coord: " << a.proc->out());
  REQUIRE(dead);
  REQUIRE(elsewhere);
  // Back, it still holds the job's old replica: coord, which asks its
  // former backups whether one took the job over, tells it to drop it
  // (else it would take the job over beside the new backup if coord
  // went).
  bool dropped = keeper.proc->wait_for_output(
    "drops its replica: job coord:1 is backed up elsewhere now", 60s);
  INFO(backup << ": " << keeper.proc->out());
  CHECK(dropped);
  auto code = runner.wait(180s);
  INFO("runner: " << runner.out() << runner.err());
  CHECK(code == 0);
  CHECK(contains(runner.out(), "generation: 24000 tokens"));
  CHECK(!contains(keeper.proc->out(), "taking job coord:1 over"));
  CHECK(!contains(runner.err(), "re-attaching"));
}

TEST_CASE("a coordinating node that froze and comes back after its backup "
          "took its job over ends its own copy",
          "[workload][process]") {
  pki p{"exo-coord-freeze"};
  story_on_three story{p, long_model(p)};
  auto& a = story.a;
  auto& runner = *story.runner;
  auto& backup = story.backup;
  auto& keeper = story.keeper();
  // Frozen: declared dead, its job taken over by the backup.
  a.proc->signal(SIGSTOP);
  REQUIRE(keeper.proc->wait_for_output("taking job coord:1 over", 60s));
  // Back: its copy of the job hears from the backup and ends. (On a loaded
  // machine the backup may be silent past the failure timeout in turn and
  // the third node take the job over from it: coord's copy hears that.)
  a.proc->signal(SIGCONT);
  auto other = story.third_name();
  bool ended = a.proc->wait_for_output(
    "job 1 ends here: job coord:1 was taken over by ", 60s);
  INFO(a.proc->out());
  CHECK(ended);
  CHECK((contains(a.proc->out(), "job coord:1 was taken over by " + backup
                                   + " while this node was unreachable")
         || contains(a.proc->out(), "job coord:1 was taken over by " + other
                                      + " while this node was unreachable")));
  // The client, re-attached through another node, gets the whole run.
  auto code = runner.wait(180s);
  INFO(runner.out() << runner.err());
  INFO("backup " << backup << ": " << keeper.proc->out());
  CHECK(code == 0);
  CHECK(contains(runner.out(), "attached to job coord:1"));
  auto text = line_after(runner.out(), "text: ");
  CHECK(!text.empty());
  // Whether the client noticed the freeze first or heard the node say its
  // copy ended, it re-attached: it never reports the takeover as a failure.
  CHECK(contains(runner.err(), "re-attaching to job story through "));
  // Re-attached through the backup of the job's new run, the client got
  // its end from the node that finished it (asked by that run's key).
  CHECK(!contains(runner.err(), "did not pass its end on"));
  // Asked on the node that came back, an attach hears that its copy ended
  // and follows the job to the node that finished it.
  auto late = console(p, a.port, "attach story");
  INFO(late.out << late.err);
  CHECK(late.code == 0);
  CHECK(contains(late.err, "was taken over by "));
  CHECK(contains(late.err, "re-attaching to job story through "));
  CHECK(contains(late.out, "attached to job coord:1"));
  CHECK(line_after(late.out, "text: ") == text);
}

/// A job taken over twice: coord freezes and its backup (the keeper) takes
/// the job over; then the keeper freezes and the third node, which backs
/// the keeper's copy up, takes it over in turn. `coord_back_first`: coord
/// comes back before the keeper freezes (it hears from the keeper that its
/// job moved), else while the keeper is frozen (it hears it from the third
/// node, which backs the keeper's copy up or runs it already). Each copy
/// the job left ends, the third node runs it under its first key, and the
/// console follows it from node to node to the undisturbed run's text.
/// When coord comes back while the keeper is frozen, peer and spare
/// declare a silent node dead after 10 s: coord (which finds the keeper
/// gone at once, as its join goes unanswered) hears from the third node
/// that the keeper took its job over before the third takes it in turn.
/// `stall_third`: the third node is stopped that long as the keeper comes
/// back, so that the keeper's join with it goes unanswered and it declares
/// the third dead while its stage and backup were there: the keeper, paused
/// past the failure timeout, must not re-place its copy then (the third
/// took it over), but wait to hear from the third and end.
/// `console_follows`: the console, which follows the job through the
/// third, must see its end although it lost the third (a stop past its
/// pings) and re-attached elsewhere.
void taken_over_twice(bool coord_back_first,
                      std::chrono::milliseconds stall_third = {},
                      bool console_follows = false) {
  pki p{"exo-takeover-twice"};
  auto model = long_model(p);
  story_on_three story{p, model, coord_back_first ? 3000 : 10000};
  auto& a = story.a;
  auto& runner = *story.runner;
  auto& backup = story.backup;
  auto& keeper = story.keeper();
  auto& third = story.third();
  auto third_name = story.third_name();
  auto job = story_job(model);
  a.proc->signal(SIGSTOP);
  REQUIRE(keeper.proc->wait_for_output("taking job coord:1 over", 60s));
  // With coord frozen, the keeper's copy is backed up on the third node.
  auto copy = "\"job\": \"" + backup + ":1\"";
  bool backed = holds_ready_backup(p, third.port, copy)
                && backup_has_tokens(p, third.port, copy);
  if (!backed)
    a.proc->signal(SIGCONT);
  REQUIRE(backed);
  bool coord_ended = false;
  if (coord_back_first) {
    a.proc->signal(SIGCONT);
    coord_ended = a.proc->wait_for_output(
      "job 1 ends here: job coord:1 was taken over by " + backup, 60s);
    keeper.proc->signal(SIGSTOP);
  } else {
    keeper.proc->signal(SIGSTOP);
    a.proc->signal(SIGCONT);
    coord_ended = a.proc->wait_for_output(
      "job 1 ends here: job coord:1 was taken over by " + backup, 60s);
  }
  bool third_took = third.proc->wait_for_output(
    "taking job " + backup + ":1 over", 60s);
  if (stall_third.count() > 0) {
    // Once the third's copy is placed (stopped while it starts its stages,
    // the third's copy is another story).
    CHECK(third.proc->wait_for_output("job coord:1 placed:", 60s));
    third.proc->signal(SIGSTOP);
    keeper.proc->signal(SIGCONT);
    std::this_thread::sleep_for(stall_third);
    third.proc->signal(SIGCONT);
  }
  keeper.proc->signal(SIGCONT);
  // The keeper's own words first: what a failure here is about.
  auto ended = keeper.proc->wait_for_output("job 1 ends here: job " + backup
                                              + ":1 was taken over by "
                                              + third_name,
                                            60s);
  INFO(backup << ": " << keeper.proc->out());
  INFO("coord: " << a.proc->out());
  INFO(third_name << ": " << third.proc->out());
  CHECK(coord_ended);
  CHECK(third_took);
  CHECK(ended);
  if (stall_third.count() > 0) {
    // Its join with the stopped third went unanswered: the third is dead
    // to it, and the stage the third held lost; the copy waited (said
    // "waits to hear from" the third when the loss came first) instead of
    // being re-placed to run on, and finish, beside the third's.
    CHECK(!contains(keeper.proc->out(), "job 1 re-placed after"));
    CHECK(third.proc->wait_for_output("job coord:1 (taken over) finished",
                                      180s));
    CHECK(!contains(keeper.proc->out(), "(taken over) finished"));
    // The console, attached through the third since coord froze, loses
    // it too when the stop outlasts its pings, and looks for the job
    // again: with console_follows it must find it and see its end.
    auto rc = runner.wait(console_follows ? 180s : 60s);
    if (console_follows) {
      INFO("runner: " << runner.out() << runner.err());
      INFO("coord, at the end: " << a.proc->out() << a.proc->err());
      INFO(third_name << ", at the end: " << third.proc->out());
      INFO(backup << ", at the end: " << keeper.proc->out());
      CHECK(rc == 0);
      CHECK(contains(runner.out(), "attached to job coord:1"));
      CHECK(line_after(runner.out(), "text: ")
            == solo_text(p, a.port, job, 3000));
    }
    return;
  }
  auto code = runner.wait(180s);
  INFO("runner: " << runner.out() << runner.err());
  CHECK(code == 0);
  CHECK(contains(runner.out(), "attached to job coord:1"));
  CHECK(contains(runner.err(), "re-attaching to job story through "));
  // The third node ran it to its end under its first key; the nodes it
  // left did not run their copies on.
  CHECK(third.proc->wait_for_output("job coord:1 (taken over) finished",
                                    30s));
  auto jobs = [&](std::uint16_t port) {
    std::string json;
    eventually(p, port, "jobs",
               [&](const std::string& out) {
                 json = out;
                 return true;
               },
               30s);
    return json;
  };
  auto ran = "\"state\": \"finished\"";
  CHECK(contains(jobs(third.port), ran));
  CHECK(!contains(jobs(a.port), ran));
  CHECK(!contains(jobs(keeper.port), ran));
  CHECK(!contains(keeper.proc->out(), "(taken over) finished"));
  // Greedy: the text is the undisturbed run's.
  CHECK(line_after(runner.out(), "text: ") == solo_text(p, a.port, job, 3000));
}

TEST_CASE("a job whose backup froze too after taking it over goes on at the "
          "third node and the console follows it there",
          "[workload][process]") {
  taken_over_twice(true);
}

TEST_CASE("a coordinating node that comes back while the node that took its "
          "job over is frozen ends its own copy all the same",
          "[workload][process]") {
  taken_over_twice(false);
}

TEST_CASE("a node back from a pause that cannot reach the node that took its "
          "job over waits for it instead of running the job on",
          "[workload][process]") {
  taken_over_twice(true, 1800ms);
}

TEST_CASE("a console that loses the node it followed a job taken over twice "
          "through finds the job and its end",
          "[workload][process]") {
  // The third is stopped past the console's two pings: the console
  // re-attaches through the others, one of which backed the keeper's copy
  // up when the third took it over. Before such a replica was dropped
  // with the copy, the console waited there for an end that never came
  // (3 runs of 4 here).
  taken_over_twice(true, 2800ms, true);
}
