#pragma once

/// The layering check: exo's folders form layers whose includes point one
/// way, down this list:
///
///   runtime/   assembly: node, console, scenario runner, programs   (4)
///   actors/    CAF behaviours, thin shells                          (3)
///   messages/  the wire contract                                    (2)
///   core/      CAF-free libraries                                   (1)
///   backends/  the device layer, no CAF                             (0)
///
/// A file may include files of its own layer and of lower ones only;
/// backends/ and core/ may not include CAF (<caf/...>); no product file
/// includes test/ or bench/; and the folders of the tree (two levels deep:
/// core/model, actors/workload, backends/cuda, ...) include each other
/// without cycles. test/, bench/ and examples/ may include anything. The
/// public headers (include/exo/) count as runtime, but for exo/core.hpp,
/// which is CAF-free like core/.
///
/// `check-layers SOURCE_DIR` runs the check on a tree (make test runs it on
/// exo's own); check_tree() is the same check as a function, for the tests.

#include <string>
#include <vector>

namespace exo::layering {

/// One broken rule, with the file and line that break it.
struct violation {
  std::string file;   ///< relative to the tree's root
  int line = 0;
  std::string what;   ///< "core may not include actors (layer 1 < 3)"
};

/// The layer of a path relative to the root ("core/model/x.hpp" -> 1), or
/// -1 for folders outside the layers (test/, bench/, examples/, ...).
int layer_of(const std::string& relative_path);

/// The name of layer n ("backends", "core", ...).
const char* layer_name(int n);

/// The folder unit of a path for the cycle check: its first two levels
/// ("core/model/gguf.hpp" -> "core/model"; "backends/backend.hpp" ->
/// "backends").
std::string unit_of(const std::string& relative_path);

/// Checks every C/C++/CUDA/HIP source under `root` (files tracked or not);
/// the result is empty when the tree is layered.
std::vector<violation> check_tree(const std::string& root);

/// The layered sources under `root` as (relative path, contents).
std::vector<std::pair<std::string, std::string>>
read_tree(const std::string& root);

/// The same check over files given as (relative path, contents): the
/// tests' synthetic and altered trees.
std::vector<violation>
check_files(const std::vector<std::pair<std::string, std::string>>& files);

} // namespace exo::layering
