// Every exo program and each of its subcommands, run as a child process:
// the command line behaves the same everywhere (core/cli/program.hpp).

#include "test/support/process.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using exo::test::build_path;
using exo::test::run;

namespace {

/// A program and the words that select one of its (sub)commands.
struct command {
  std::string program;
  std::vector<std::string> words;

  std::string name() const {
    auto n = program.substr(program.rfind('/') + 1);
    for (auto& w : words)
      n += " " + w;
    return n;
  }

  std::vector<std::string> with(const std::vector<std::string>& args) const {
    std::vector<std::string> argv{build_path(program)};
    argv.insert(argv.end(), words.begin(), words.end());
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }
};

const std::vector<command>& every_command() {
  static const std::vector<command> all{
    {"runtime/node/exo-node", {}},
    {"runtime/node/exo-node", {"plan"}},
    {"runtime/node/exo-node", {"audit"}},
    {"runtime/node/exo-node", {"audit", "verify"}},
    {"runtime/node/exo-node", {"audit", "query"}},
    {"runtime/node/exo-node", {"run"}},
    {"runtime/console/exo-console", {}},
    {"runtime/scenario/exo-scenario", {}},
    {"runtime/scenario/exo-scenario", {"run"}},
    {"runtime/scenario/exo-scenario", {"check"}},
    {"runtime/tools/exo-cert", {}},
    {"runtime/tools/exo-cert", {"init-ca"}},
    {"runtime/tools/exo-cert", {"issue-node"}},
    {"runtime/tools/exo-cert", {"issue-client"}},
    {"runtime/tools/exo-cert", {"show"}},
    {"runtime/tools/exo-model", {}},
    {"runtime/tools/exo-model", {"make-test"}},
    {"runtime/tools/exo-model", {"info"}},
    {"runtime/tools/exo-model", {"quantize"}},
    {"runtime/tools/exo-model", {"run"}},
    {"runtime/tools/exo-plan", {}},
  };
  return all;
}

} // namespace

TEST_CASE("every program and subcommand prints its usage for --help and -h "
          "and exits 0") {
  for (auto& c : every_command()) {
    for (auto* flag : {"--help", "-h"}) {
      INFO(c.name() << " " << flag);
      auto r = run(c.with({flag}));
      CHECK(r.code == 0);
      CHECK_THAT(r.out, Catch::Contains("Usage: " + c.name()));
      CHECK_THAT(r.out, Catch::Contains("--help"));
      CHECK(r.err.empty());
    }
  }
}

TEST_CASE("every program and subcommand refuses an unknown option with "
          "exit 2, naming it") {
  for (auto& c : every_command()) {
    INFO(c.name());
    auto r = run(c.with({"--no-such-option"}));
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::Contains("unknown option \"--no-such-option\""));
    CHECK(r.out.empty());
  }
}

TEST_CASE("an option without its value exits 2 naming the option") {
  struct missing {
    command c;
    std::string option;
  };
  const std::vector<missing> cases{
    {{"runtime/node/exo-node", {}}, "--config"},
    {{"runtime/node/exo-node", {"run"}}, "--prompt"},
    {{"runtime/node/exo-node", {"plan"}}, "--problem"},
    {{"runtime/node/exo-node", {"audit", "query"}}, "--limit"},
    {{"runtime/console/exo-console", {}}, "--connect"},
    {{"runtime/scenario/exo-scenario", {"run"}}, "--bin-dir"},
    {{"runtime/tools/exo-cert", {"init-ca"}}, "--dir"},
    {{"runtime/tools/exo-model", {"make-test"}}, "--out"},
    {{"runtime/tools/exo-model", {"run"}}, "-n"},
    {{"runtime/tools/exo-plan", {}}, "--time-limit"},
  };
  for (auto& m : cases) {
    INFO(m.c.name() << " " << m.option);
    auto r = run(m.c.with({m.option}));
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::Contains(m.option) && Catch::Contains("missing"));
  }
}

TEST_CASE("a program with commands names an unknown command and exits 2") {
  for (auto* p : {"runtime/scenario/exo-scenario", "runtime/tools/exo-cert",
                  "runtime/tools/exo-model"}) {
    INFO(p);
    auto r = run({build_path(p), "frobnicate"});
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::Contains("unknown command \"frobnicate\""));
  }
  auto r = run({build_path("runtime/node/exo-node"), "audit", "frobnicate"});
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("unknown command \"frobnicate\""));
}

TEST_CASE("a bad number exits 2 naming the option and the rule") {
  // Each of these was taken by std::stoull, stoi, strtol or stof, or cut
  // to its type (--top-k 4294967297 was 1); core/text/number refuses them.
  struct bad_number {
    command c;
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<bad_number> cases{
    {{"runtime/node/exo-node", {"serve"}},
     {"--model", "m.gguf", "--port", "+80"},
     "--port: '+80' is not an integer (digits only)"},
    {{"runtime/node/exo-node", {"serve"}},
     {"--model", "m.gguf", "--ctx", "1e3"},
     "--ctx: '1e3' is not an integer (digits only)"},
    {{"runtime/node/exo-node", {"run"}},
     {"--model", "m.gguf", "--seed", "+3"},
     "--seed: '+3' is not an integer (digits only)"},
    {{"runtime/node/exo-node", {"run"}},
     {"--model", "m.gguf", "--temperature", "0x1p-1"},
     "--temperature: '0x1p-1' is not a number"},
    {{"runtime/console/exo-console", {}},
     {"--connect", "127.0.0.1:1", "--timeout-ms", "+1000"},
     "--timeout-ms: '+1000' is not an integer (digits only)"},
    {{"runtime/tools/exo-model", {"run"}},
     {"--model", "m.gguf", "--top-k", "4294967297"},
     "--top-k: '4294967297' is larger than 4294967295"},
    {{"runtime/tools/exo-model", {"run"}},
     {"--model", "m.gguf", "-n", "-1"},
     "--n: '-1' must be >= 0"},
    {{"runtime/tools/exo-model", {"run"}},
     {"--model", "m.gguf", "--top-p", "nan"},
     "--top-p: 'nan' is not a number"},
    {{"runtime/tools/exo-cert", {"init-ca"}},
     {"--dir", "/nonexistent/ca", "--days", "-5"},
     "--days: '-5' must be >= 1"},
    {{"runtime/tools/exo-plan", {}},
     {"--problem", "x.json", "--time-limit", "+5"},
     "--time-limit must be"},
  };
  for (auto& b : cases) {
    INFO(b.c.name() << " " << b.message);
    auto r = run(b.c.with(b.args));
    INFO(r.err);
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::Contains(b.message));
  }
}

TEST_CASE("exo-model refuses broken model files with exit 2, naming the "
          "problem") {
  // The files of the model fuzz target's corpus (fuzz/corpus/model), run
  // as a user runs them.
  const std::string dir = std::string(EXO_SOURCE_DIR) + "/fuzz/corpus/model/";
  struct bad {
    const char* file;
    std::vector<std::string> extra;
    const char* says;
  };
  const bad cases[] = {
    {"truncated-data.gguf", {}, "lies outside the data section"},
    {"unknown-type.gguf", {}, "unknown or unsupported tensor type 99"},
    {"overlapping-shape.gguf", {}, "overlap"},
    {"swapped-shape.gguf", {}, "row length 16 is not a multiple of the block"},
    {"no-merges.gguf", {}, "tokenizer.ggml.merges is missing"},
    {"bad-template.gguf", {"--chat"}, "chat template syntax error at line 1"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> argv{build_path("runtime/tools/exo-model"), "run",
                                  "--model", dir + c.file, "--prompt", "hi",
                                  "-n", "1"};
    argv.insert(argv.end(), c.extra.begin(), c.extra.end());
    auto r = run(argv);
    INFO(c.file << ": " << r.out << r.err);
    CHECK(r.code == 2);
    CHECK(r.err.find(c.says) != std::string::npos);
  }
  // The good ones of the corpus run.
  for (const char* f : {"llama3-q8_0.gguf", "spm-q4_0.gguf"}) {
    auto r = run({build_path("runtime/tools/exo-model"), "run", "--model",
                  dir + f, "--prompt", "hi", "-n", "2"});
    INFO(f << ": " << r.out << r.err);
    CHECK(r.code == 0);
  }
}
