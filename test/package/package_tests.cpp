// The installed exo as an application sees it (docs/embedding.md). The
// CTest fixture "package: cmake --install into a fresh prefix" installs the
// build tree into EXO_PACKAGE_PREFIX; each test here then uses only that
// prefix: the examples configured and built in fresh build folders with
// only the prefix on CMAKE_PREFIX_PATH (shared and static), pkg-config,
// every installed header compiled on its own, and the streaming example
// run against a 2-node cluster, its tokens checked against exo-model's.

#include "core/model/test_model.hpp"
#include "test/support/cluster.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

namespace fs = std::filesystem;
using namespace exo::test;
using namespace std::chrono_literals;

namespace {

const std::string prefix = EXO_PACKAGE_PREFIX;

std::string read_all(const std::string& path) {
  std::ifstream in{path};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// A fresh folder for one test's builds.
std::string work_dir(const std::string& name) {
  auto dir = std::string{EXO_PACKAGE_WORK} + "/" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

run_result sh(const std::string& script,
              std::chrono::milliseconds timeout = 600s) {
  return run({"/bin/sh", "-c", script}, timeout);
}

void must_run(const run_result& r, const std::string& what) {
  INFO(what << "\n--- stdout\n" << r.out << "\n--- stderr\n" << r.err);
  REQUIRE(r.code == 0);
}

/// Configures and builds the example in examples/NAME in `build` with only
/// the install prefix to find exo; returns the compile commands.
std::string build_example(const std::string& name, const std::string& build,
                          bool static_libs) {
  auto src = std::string{EXO_SOURCE_DIR} + "/examples/" + name;
  must_run(run({EXO_CMAKE, "-S", src, "-B", build, "-G", EXO_GENERATOR,
                "-DCMAKE_PREFIX_PATH=" + prefix,
                "-DCMAKE_BUILD_TYPE=Release",
                "-DCMAKE_CXX_COMPILER=" + std::string{EXO_CXX},
                "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON",
                std::string{"-DEXO_STATIC="} + (static_libs ? "ON" : "OFF")},
               300s),
           "configure " + name);
  must_run(run({EXO_CMAKE, "--build", build}, 600s), "build " + name);
  return read_all(build + "/compile_commands.json");
}

} // namespace

TEST_CASE("the install holds the programs, both kinds of libraries, the "
          "CMake package, pkg-config files and only the public headers",
          "[package]") {
  for (auto f : {"bin/exo-node", "bin/exo-console", "bin/exo-cert",
                 "bin/exo-model", "bin/exo-plan", "bin/exo-scenario",
                 "bin/exo-netem",
                 "lib/libexo-core.a", "lib/libexo-runtime.a",
                 "lib/libexo-guard.a", "lib/libexo-core.so.0.1",
                 "lib/libexo-runtime.so.0.1", "lib/cmake/exo/exoConfig.cmake",
                 "lib/cmake/exo/exoConfigVersion.cmake",
                 "lib/cmake/exo/exoTargets.cmake",
                 "lib/cmake/exo/exo_imported_targets.cmake",
                 "lib/pkgconfig/exo.pc", "lib/pkgconfig/exo-core.pc",
                 "include/exo/exo.hpp", "include/exo/core.hpp",
                 "include/exo/version.hpp",
                 "include/exo/runtime/node/runtime.hpp",
                 "include/exo/runtime/node/handles.hpp",
                 "include/exo/core/placement/solve.hpp",
                 "include/exo/core/gguf/gguf.hpp",
                 "include/exo/messages/workload.hpp"}) {
    INFO(f);
    CHECK(fs::exists(prefix + "/" + f));
  }
  // Internal headers stay out: the gate's state, the TLS guard's limits
  // table is public only as a config type, test and tool headers never.
  for (auto f : {"include/exo/actors/cluster/gate_state.hpp",
                 "include/exo/runtime/node/safety.hpp",
                 "include/exo/runtime/console/client.hpp",
                 "include/exo/test", "include/exo/bench"}) {
    INFO(f);
    CHECK_FALSE(fs::exists(prefix + "/" + f));
  }
  // Every installed header includes exo's headers as <exo/...>.
  std::size_t headers = 0;
  std::regex quoted{R"(#include "(backends|core|messages|actors|runtime|exo)/)"};
  for (auto& e : fs::recursive_directory_iterator(prefix + "/include/exo")) {
    if (!e.is_regular_file())
      continue;
    ++headers;
    INFO(e.path());
    CHECK_FALSE(std::regex_search(read_all(e.path()), quoted));
  }
  CHECK(headers > 20);
  // The version the headers state is the library's.
  auto version = read_all(prefix + "/include/exo/version.hpp");
  CHECK(contains(version, "#define EXO_VERSION_STRING \"0.1.0\""));
  // The soname carries major.minor (0.x: a minor version breaks the ABI).
  auto soname = run({"/bin/sh", "-c",
                     "objdump -p " + prefix
                       + "/lib/libexo-runtime.so | grep SONAME"});
  CHECK(contains(soname.out, "libexo-runtime.so.0.1"));
}

TEST_CASE("the placement example builds against the installed exo alone, "
          "shared and static, and proves its plan",
          "[package]") {
  auto dir = work_dir("placement");
  for (bool static_libs : {false, true}) {
    auto build = dir + (static_libs ? "/static" : "/shared");
    auto commands = build_example("placement", build, static_libs);
    INFO(commands);
    // Nothing from exo's source tree: its headers come from the prefix.
    CHECK_FALSE(contains(commands, std::string{EXO_SOURCE_DIR} + "/core"));
    CHECK_FALSE(contains(commands, "-I" + std::string{EXO_SOURCE_DIR} + " "));
    CHECK(contains(commands, prefix + "/include"));
    auto r = run({build + "/placement_example"}, 120s);
    INFO(r.out << r.err);
    REQUIRE(r.code == 0);
    CHECK(contains(r.out, "exo 0.1.0: 4 devices, 32 layers: optimal"));
    CHECK(contains(r.out, "proven optimal"));
    CHECK(contains(r.out, "memory-proportional split"));
    // A problem file, and a bad one (exit 2 naming the problem).
    auto file = std::string{EXO_SOURCE_DIR} + "/config/placement";
    std::string problem;
    for (auto& e : fs::directory_iterator(file))
      if (e.path().extension() == ".json") {
        problem = e.path();
        break;
      }
    REQUIRE(!problem.empty());
    auto f = run({build + "/placement_example", problem}, 120s);
    INFO(problem << "\n" << f.out << f.err);
    CHECK(f.code == 0);
    write_file(dir + "/bad.json", R"({"devices": [], "layers": []})");
    auto bad = run({build + "/placement_example", dir + "/bad.json"}, 60s);
    CHECK(bad.code == 2);
    CHECK(contains(bad.err, "placement_example: "));
    // The static program carries exo itself; the shared one loads it.
    auto ldd = run({"/bin/sh", "-c", "ldd " + build + "/placement_example"});
    CHECK(contains(ldd.out, "libexo-core.so") != static_libs);
  }
}

TEST_CASE("pkg-config's exo-core and exo give what a program needs",
          "[package]") {
  auto dir = work_dir("pkgconfig");
  auto env = "PKG_CONFIG_PATH=" + prefix + "/lib/pkgconfig ";
  auto v = sh(env + "pkg-config --modversion exo exo-core");
  INFO(v.out << v.err);
  REQUIRE(v.code == 0);
  CHECK(v.out == "0.1.0\n0.1.0\n");
  // The placement example with the flags pkg-config gives, nothing else.
  auto src = std::string{EXO_SOURCE_DIR} + "/examples/placement/main.cpp";
  auto exe = dir + "/placement";
  must_run(sh(env + EXO_CXX + " -O1 -o " + exe + " " + src
              + " $(" + env + "pkg-config --cflags --libs exo-core)"),
           "pkg-config build");
  auto r = sh("LD_LIBRARY_PATH=" + prefix + "/lib " + exe, 120s);
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  CHECK(contains(r.out, "proven optimal"));
  // exo's flags: the runtime, the guard linked whole, CAF.
  auto libs = sh(env + "pkg-config --libs exo");
  CHECK(contains(libs.out, "-lexo-runtime"));
  CHECK(contains(libs.out, "--whole-archive -lexo-guard"));
  CHECK(contains(libs.out, "caf_openssl"));
}

TEST_CASE("every installed header compiles on its own with the package's "
          "flags",
          "[package]") {
  auto dir = work_dir("headers");
  // One translation unit per header, in one CMake project that links
  // exo::runtime (its include folders and definitions, nothing else).
  std::vector<std::string> headers;
  for (auto& e : fs::recursive_directory_iterator(prefix + "/include"))
    if (e.is_regular_file() && e.path().extension() == ".hpp")
      headers.push_back(fs::relative(e.path(), prefix + "/include"));
  std::sort(headers.begin(), headers.end());
  REQUIRE(headers.size() > 20);
  fs::create_directories(dir + "/src");
  fs::create_directories(dir + "/old");
  std::string sources;
  for (std::size_t i = 0; i < headers.size(); ++i) {
    auto tu = "tu" + std::to_string(i) + ".cpp";
    write_file(dir + "/src/" + tu, "#include <" + headers[i] + ">\n");
    sources += " " + tu;
  }
  write_file(dir + "/src/CMakeLists.txt",
             "cmake_minimum_required(VERSION 3.24)\n"
             "project(headers LANGUAGES CXX)\n"
             "find_package(exo 0.1 REQUIRED)\n"
             "add_library(headers OBJECT" + sources + ")\n"
             "target_compile_options(headers PRIVATE -fsyntax-only -Wall "
             "-Wextra -Werror -Wno-unused-parameter)\n"
             "target_link_libraries(headers PRIVATE exo::runtime)\n"
             // exo's headers as the code they are, not system headers
             // whose warnings the compiler hides.
             "set_target_properties(headers PROPERTIES "
             "NO_SYSTEM_FROM_IMPORTED ON)\n");
  must_run(run({EXO_CMAKE, "-S", dir + "/src", "-B", dir + "/build", "-G",
                EXO_GENERATOR, "-DCMAKE_PREFIX_PATH=" + prefix,
                "-DCMAKE_CXX_COMPILER=" + std::string{EXO_CXX}},
               300s),
           "configure");
  auto r = run({EXO_CMAKE, "--build", dir + "/build", "--", "-k", "0"},
               900s);
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  // A version of the package that is not this one is refused.
  write_file(dir + "/old/CMakeLists.txt",
             "cmake_minimum_required(VERSION 3.24)\n"
             "project(old LANGUAGES CXX)\n"
             "find_package(exo 0.2 REQUIRED)\n");
  auto old = run({EXO_CMAKE, "-S", dir + "/old", "-B", dir + "/old-build",
                  "-DCMAKE_PREFIX_PATH=" + prefix},
                 300s);
  CHECK(old.code != 0);
  CHECK(contains(old.err + old.out, "0.1.0"));
}

TEST_CASE("the streaming example joins a 2-node cluster as a node and "
          "streams exo-model's tokens, with shared and static libraries",
          "[package][process]") {
  auto dir = work_dir("stream");
  pki p{"exo-package"};
  exo::model::test_model_options mo;
  mo.layers = 6;
  mo.dim = 64;
  mo.ff = 128;
  mo.vocab = 512;
  mo.seed = 33;
  auto model = p.dir + "/model.gguf";
  exo::model::make_test_model(mo, model);
  const std::string prompt = "the installed runtime";
  auto oracle = run({exo_model(), "run", "--model", model, "--prompt", prompt,
                     "-n", "12", "--temperature", "0", "--print-ids"},
                    120s);
  INFO(oracle.out << oracle.err);
  REQUIRE(oracle.code == 0);
  auto ids_of = [](const std::string& out) {
    std::smatch m;
    static const std::regex re{"generated ids: ([0-9 ]+)"};
    return std::regex_search(out, m, re) ? m[1].str() : std::string{};
  };
  auto expected = ids_of(oracle.out);
  REQUIRE(!expected.empty());

  // n1 runs from the start; after each application has subscribed to its
  // member events, one more node starts (n2, then n3), which it must see
  // join before it runs the job — and places a stage on it at once, mostly
  // before the two are connected (the gate holds the stage's message until
  // then; it was lost before, and the job waited forever).
  p.node("n1");
  auto n1 = start_node(p, {"n1"});
  std::vector<node_proc> later;
  int round = 0;
  for (bool static_libs : {false, true}) {
    auto build = dir + (static_libs ? "/static" : "/shared");
    build_example("stream_generation", build, static_libs);
    // The application is a node of its own ("app1", "app2"), with a
    // certificate of the cluster's CA and n1 as its seed.
    ++round;
    auto name = "app" + std::to_string(round);
    p.node(name);
    node_options o{name};
    o.seeds = {n1.port};
    o.devices = R"({"include": ["cpu"], "rescan_interval_s": 0})";
    auto config = write_node_config(p, o);
    process app{{build + "/stream_generation", "--config", config, "--model",
                 model, "--prompt", prompt, "-n", "12", "--stages", "3",
                 "--members", std::to_string(round + 2)}};
    INFO(name);
    REQUIRE(app.wait_for_output("member " + name + ": known", 120s, true));
    auto added = "n" + std::to_string(round + 1);
    p.node(added);
    later.push_back(start_node(p, node_options{added}.seed(n1.port)));
    auto code = app.wait(300s);
    run_result r{code, app.out(), app.err()};
    INFO("--- stdout\n" << r.out << "\n--- stderr\n" << r.err);
    REQUIRE(r.code == 0);
    CHECK(ids_of(r.out) == expected);
    // Three stages, on three members.
    CHECK(contains(r.err, "3 stages"));
    // The node started after the subscription arrived as a member event.
    CHECK(contains(r.err, "member " + added + ": joined, alive"));
    // The pieces streamed before the report are exo-model's text.
    auto at = oracle.out.find(prompt);
    auto end = oracle.out.find("\n\nprompt: ");
    REQUIRE(at != std::string::npos);
    REQUIRE(end != std::string::npos);
    auto text = oracle.out.substr(at + prompt.size(),
                                  end - at - prompt.size());
    // (The node's own log lines, "exo-node NAME: ...\n", go to stdout too,
    // each whole but wherever the stream is: "joined n3" came after the
    // first piece once.)
    std::string streamed = r.out.substr(0, r.out.find("\ngenerated ids: "));
    const std::string tag = "exo-node " + name + ": ";
    for (auto at = streamed.find(tag); at != std::string::npos;
         at = streamed.find(tag, at)) {
      auto end = streamed.find('\n', at);
      streamed.erase(at, end == std::string::npos ? std::string::npos
                                                  : end - at + 1);
    }
    CHECK(streamed == text);
  }
}
