// The layering check (layer_check.hpp): exo's own tree passes it, and each
// rule catches the include that breaks it.

#include "test/layering/layer_check.hpp"

#include <catch2/catch.hpp>

#include <algorithm>

using namespace exo::layering;

namespace {

using tree = std::vector<std::pair<std::string, std::string>>;

bool mentions(const std::vector<violation>& vs, const std::string& file,
              int line, const std::string& text) {
  return std::any_of(vs.begin(), vs.end(), [&](const violation& v) {
    return v.file == file && v.line == line
           && v.what.find(text) != std::string::npos;
  });
}

} // namespace

TEST_CASE("exo's tree includes only downwards and its folders form no "
          "cycle") {
  auto found = check_tree(EXO_SOURCE_DIR);
  for (auto& v : found)
    UNSCOPED_INFO(v.file << ":" << v.line << ": " << v.what);
  CHECK(found.empty());
}

TEST_CASE("paths map to their layer and folder unit") {
  CHECK(layer_of("backends/backend.hpp") == 0);
  CHECK(layer_of("core/model/gguf.hpp") == 1);
  CHECK(layer_of("messages/device.hpp") == 2);
  CHECK(layer_of("actors/workload/job_actor.hpp") == 3);
  CHECK(layer_of("runtime/node/runtime.hpp") == 4);
  CHECK(layer_of("test/support/process.hpp") == -1);
  CHECK(layer_of("corex/a.hpp") == -1);
  CHECK(unit_of("core/model/gguf.hpp") == "core/model");
  CHECK(unit_of("backends/backend.hpp") == "backends");
  CHECK(unit_of("backends/cuda/kernels.cu") == "backends/cuda");
}

TEST_CASE("an include from a lower layer to a higher one is refused with "
          "its file and line") {
  tree t{{"core/model/engine.hpp",
          "#pragma once\n#include \"backends/backend.hpp\"\n"
          "#include \"actors/workload/job_actor.hpp\"\n"},
         {"backends/backend.hpp", ""},
         {"actors/workload/job_actor.hpp", "#include \"core/model/x.hpp\"\n"}};
  auto found = check_files(t);
  REQUIRE(found.size() == 1);
  CHECK(mentions(found, "core/model/engine.hpp", 3,
                 "core may not include actors"));
}

TEST_CASE("exo's tree with one deliberately wrong include fails on "
          "exactly that include") {
  // messages/ is the wire contract: it may include core/ and backends/,
  // never an actor's header (as messages/workload.hpp once did).
  auto t = read_tree(EXO_SOURCE_DIR);
  auto it = std::find_if(t.begin(), t.end(), [](auto& f) {
    return f.first == "messages/workload.hpp";
  });
  REQUIRE(it != t.end());
  auto lines = 1 + std::count(it->second.begin(), it->second.end(), '\n');
  it->second += "\n#include \"actors/workload/shard_actor.hpp\"\n";
  auto found = check_files(t);
  REQUIRE(found.size() == 1);
  CHECK(mentions(found, "messages/workload.hpp", static_cast<int>(lines) + 1,
                 "messages may not include actors"));
  // And a lower layer reaching up into the assembly.
  auto t2 = read_tree(EXO_SOURCE_DIR);
  for (auto& f : t2)
    if (f.first == "core/model/llama_model.hpp")
      f.second = "#include \"runtime/node/runtime.hpp\"\n" + f.second;
  auto found2 = check_files(t2);
  REQUIRE(found2.size() >= 1);
  CHECK(mentions(found2, "core/model/llama_model.hpp", 1,
                 "core may not include runtime"));
}

TEST_CASE("a cycle between folders of one layer is refused") {
  tree t{{"core/a/x.hpp", "#include \"core/b/y.hpp\"\n"},
         {"core/b/y.hpp", "\n#include \"core/c/z.hpp\"\n"},
         {"core/c/z.hpp", "#include \"core/a/w.hpp\"\n"},
         {"core/a/w.hpp", ""}};
  auto found = check_files(t);
  REQUIRE(found.size() == 1);
  CHECK(found[0].what.find("cycle") != std::string::npos);
  CHECK(found[0].what.find("core/a -> core/b") != std::string::npos);
  CHECK(found[0].what.find("core/c -> core/a") != std::string::npos);
  // Without the edge back there is no cycle.
  t[2].second = "";
  CHECK(check_files(t).empty());
}

TEST_CASE("backends and core may not include CAF, messages may") {
  tree t{{"core/audit/log.cpp", "#include <caf/all.hpp>\n"},
         {"backends/cpu/x.cpp", "#include <vector>\n#include <caf/fwd.hpp>\n"},
         {"messages/device.hpp", "#include <caf/typed_actor.hpp>\n"}};
  auto found = check_files(t);
  CHECK(found.size() == 2);
  CHECK(mentions(found, "core/audit/log.cpp", 1, "CAF-free"));
  CHECK(mentions(found, "backends/cpu/x.cpp", 2, "CAF-free"));
}

TEST_CASE("product code may not include tests, tests may include "
          "anything") {
  tree t{{"runtime/node/main.cpp", "#include \"test/support/process.hpp\"\n"},
         {"test/workload/job_tests.cpp",
          "#include \"runtime/node/runtime.hpp\"\n#include <caf/all.hpp>\n"}};
  auto found = check_files(t);
  REQUIRE(found.size() == 1);
  CHECK(mentions(found, "runtime/node/main.cpp", 1, "may not include test/"));
}

TEST_CASE("the public headers: exo/core.hpp is CAF-free core, the others "
          "stand on the runtime") {
  CHECK(layer_of("include/exo/core.hpp") == 1);
  CHECK(layer_of("include/exo/exo.hpp") == 4);
  tree t{{"include/exo/core.hpp",
          "#include \"core/gguf/gguf.hpp\"\n#include <caf/actor.hpp>\n"
          "#include \"runtime/node/runtime.hpp\"\n"},
         {"include/exo/exo.hpp", "#include \"runtime/node/runtime.hpp\"\n"
                                 "#include <caf/all.hpp>\n"}};
  auto vs = check_files(t);
  CHECK(mentions(vs, "include/exo/core.hpp", 2, "CAF-free"));
  CHECK(mentions(vs, "include/exo/core.hpp", 3, "may not include runtime"));
  CHECK(std::none_of(vs.begin(), vs.end(), [](const violation& v) {
    return v.file == "include/exo/exo.hpp";
  }));
}
