#include "test/layering/layer_check.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

namespace fs = std::filesystem;

namespace exo::layering {

namespace {

const char* const layers[] = {"backends", "core", "messages", "actors",
                              "runtime"};
constexpr int layer_count = 5;

std::string top_folder(const std::string& path) {
  auto slash = path.find('/');
  return slash == std::string::npos ? std::string{} : path.substr(0, slash);
}

bool is_source(const fs::path& p) {
  static const std::set<std::string> exts{".cpp", ".hpp", ".h",  ".cc",
                                          ".cu",  ".cuh", ".hip", ".inc"};
  return exts.count(p.extension().string()) != 0;
}

/// An include directive of a file: the quoted or bracketed name and line.
struct include_line {
  std::string name;
  bool quoted = false;
  int line = 0;
};

std::vector<include_line> includes_of(const std::string& text) {
  std::vector<include_line> out;
  std::istringstream in{text};
  std::string s;
  int n = 0;
  while (std::getline(in, s)) {
    ++n;
    auto i = s.find_first_not_of(" \t");
    if (i == std::string::npos || s[i] != '#')
      continue;
    i = s.find_first_not_of(" \t", i + 1);
    if (i == std::string::npos || s.compare(i, 7, "include") != 0)
      continue;
    i = s.find_first_not_of(" \t", i + 7);
    if (i == std::string::npos || (s[i] != '"' && s[i] != '<'))
      continue;
    char close = s[i] == '"' ? '"' : '>';
    auto j = s.find(close, i + 1);
    if (j == std::string::npos)
      continue;
    out.push_back({s.substr(i + 1, j - i - 1), close == '"', n});
  }
  return out;
}

} // namespace

int layer_of(const std::string& relative_path) {
  auto top = top_folder(relative_path);
  // The public API (include/exo/): exo/core.hpp is CAF-free like core/,
  // the others stand on the whole runtime.
  if (top == "include")
    return relative_path == "include/exo/core.hpp" ? 1 : layer_count - 1;
  for (int i = 0; i < layer_count; ++i)
    if (top == layers[i])
      return i;
  return -1;
}

const char* layer_name(int n) {
  return n >= 0 && n < layer_count ? layers[n] : "outside the layers";
}

std::string unit_of(const std::string& relative_path) {
  auto first = relative_path.find('/');
  if (first == std::string::npos)
    return relative_path;
  auto second = relative_path.find('/', first + 1);
  if (second == std::string::npos) // a file right in the top folder
    return relative_path.substr(0, first);
  return relative_path.substr(0, second);
}

std::vector<violation>
check_files(const std::vector<std::pair<std::string, std::string>>& files) {
  std::vector<violation> out;
  // unit -> unit -> an include that makes the edge (file:line)
  std::map<std::string, std::map<std::string, std::string>> edges;
  for (auto& [path, text] : files) {
    int from = layer_of(path);
    if (from < 0)
      continue; // tests, benchmarks, fuzz targets, examples may include anything
    auto from_unit = unit_of(path);
    for (auto& inc : includes_of(text)) {
      if (!inc.quoted) {
        if (from <= 1 && inc.name.rfind("caf/", 0) == 0)
          out.push_back({path, inc.line,
                         std::string{layer_name(from)}
                           + " is CAF-free: it may not include <" + inc.name
                           + ">"});
        continue;
      }
      auto top = top_folder(inc.name);
      if (top == "test" || top == "bench" || top == "examples"
          || top == "fuzz") {
        out.push_back({path, inc.line,
                       "product code may not include " + inc.name});
        continue;
      }
      int to = layer_of(inc.name);
      if (to < 0)
        continue; // a file next to it, a generated header, ...
      if (to > from) {
        out.push_back({path, inc.line,
                       std::string{layer_name(from)} + " may not include "
                         + layer_name(to) + " (" + inc.name + "): includes "
                         "point down, " + layer_name(from) + " is layer "
                         + std::to_string(from) + ", " + layer_name(to)
                         + " layer " + std::to_string(to)});
        continue; // reported; its edge would only repeat it as a cycle
      }
      auto to_unit = unit_of(inc.name);
      if (to_unit != from_unit && !edges[from_unit].count(to_unit))
        edges[from_unit][to_unit] = path + ":" + std::to_string(inc.line);
    }
  }
  // Cycles between folders: depth-first search, one report per cycle found
  // (the first back edge closes it).
  std::map<std::string, int> state; // 0 new, 1 on the stack, 2 done
  std::vector<std::string> stack;
  std::set<std::string> reported;
  std::function<void(const std::string&)> visit = [&](const std::string& u) {
    state[u] = 1;
    stack.push_back(u);
    for (auto& [v, where] : edges[u]) {
      if (state[v] == 1) {
        auto it = std::find(stack.begin(), stack.end(), v);
        std::vector<std::string> cyc(it, stack.end());
        auto key = *std::min_element(cyc.begin(), cyc.end());
        if (reported.insert(key + "|" + std::to_string(cyc.size())).second) {
          std::string text = "folders include each other in a cycle: ";
          std::string first_where;
          for (std::size_t i = 0; i < cyc.size(); ++i) {
            auto& a = cyc[i];
            auto& b = i + 1 < cyc.size() ? cyc[i + 1] : v;
            auto& w = edges[a][b];
            if (first_where.empty())
              first_where = w;
            text += a + " -> " + b + " (" + w + ")";
            if (i + 1 < cyc.size())
              text += ", ";
          }
          auto colon = first_where.rfind(':');
          out.push_back({first_where.substr(0, colon),
                         std::stoi(first_where.substr(colon + 1)), text});
        }
      } else if (state[v] == 0) {
        visit(v);
      }
    }
    stack.pop_back();
    state[u] = 2;
  };
  for (auto& [u, _] : edges)
    if (state[u] == 0)
      visit(u);
  return out;
}

std::vector<std::pair<std::string, std::string>>
read_tree(const std::string& root) {
  std::vector<std::pair<std::string, std::string>> files;
  for (auto* top : layers) {
    fs::path dir = fs::path{root} / top;
    if (!fs::is_directory(dir))
      continue;
    for (auto& e : fs::recursive_directory_iterator(dir)) {
      if (!e.is_regular_file() || !is_source(e.path()))
        continue;
      std::ifstream in{e.path(), std::ios::binary};
      std::ostringstream text;
      text << in.rdbuf();
      files.emplace_back(fs::relative(e.path(), root).generic_string(),
                         text.str());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<violation> check_tree(const std::string& root) {
  return check_files(read_tree(root));
}

} // namespace exo::layering
