// Catch2 v2's console reporter indents the lines of a test's name after
// its first ": " to follow it; past the console width (80) it never ends
// a line, so a failing test with such a name prints its header for ever
// and looks hung (seen: gdb showed Catch::clara::TextFlow at 100% CPU).
// No test of the tree may have one, nor a ';' (below).

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

namespace {

/// The names of the TEST_CASEs in `source`: adjacent string literals
/// joined (escapes left as written).
std::vector<std::string> test_names(const std::string& source) {
  static const std::regex test_case{
    R"re(TEST_CASE\(((?:\s*"(?:[^"\\]|\\.)*")+))re"};
  static const std::regex literal{R"re("((?:[^"\\]|\\.)*)")re"};
  std::vector<std::string> out;
  for (std::sregex_iterator it(source.begin(), source.end(), test_case), end;
       it != end; ++it) {
    std::string name, lits = (*it)[1].str();
    for (std::sregex_iterator l(lits.begin(), lits.end(), literal);
         l != std::sregex_iterator(); ++l)
      name += (*l)[1].str();
    out.push_back(name);
  }
  return out;
}

/// Where Catch would indent a name's later lines (0: no ": ").
std::size_t colon_indent(const std::string& name) {
  auto i = name.find(": ");
  return i == std::string::npos ? 0 : i + 2;
}

} // namespace

TEST_CASE("test names are read from their joined literals") {
  auto names = test_names("TEST_CASE(\"a b \"\n  \"c: d\", \"[x]\") {}\n"
                          "TEST_CASE( \"e\" ) {}");
  REQUIRE(names.size() == 2);
  CHECK(names[0] == "a b c: d");
  CHECK(names[1] == "e");
  CHECK(colon_indent(names[0]) == 7);
  CHECK(colon_indent(names[1]) == 0);
}

TEST_CASE("no test name makes Catch's reporter indent past its width") {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(EXO_SOURCE_DIR) / "test";
  std::size_t seen = 0;
  for (auto& e : fs::recursive_directory_iterator(root)) {
    if (!e.is_regular_file() || e.path().extension() != ".cpp")
      continue;
    std::ifstream in(e.path());
    std::stringstream ss;
    ss << in.rdbuf();
    for (auto& name : test_names(ss.str())) {
      ++seen;
      INFO(e.path().string() << ": \"" << name << "\"");
      // 70: the header's own indent and a margin below the width of 80.
      CHECK(colon_indent(name) < 70);
      // CMake lists split at ';': ctest would run the name cut there,
      // which matches no test (and fails as "No test cases matched").
      CHECK(name.find(';') == std::string::npos);
    }
  }
  CHECK(seen > 500); // the tree's tests were found
}
