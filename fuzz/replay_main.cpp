// Runs a fuzz target over files and folders of inputs (the corpus), once
// each, without libFuzzer: `make test` and `make asan` replay every corpus
// this way. Prints how many inputs ran; exit 1 when an argument cannot be
// read, 0 otherwise (a finding aborts the process).

#include "fuzz/fuzz_target.hpp"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace {

bool run_file(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  if (!in)
    return false;
  std::vector<char> bytes{std::istreambuf_iterator<char>(in),
                          std::istreambuf_iterator<char>()};
  LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()),
                         bytes.size());
  return true;
}

} // namespace

int main(int argc, char** argv) {
  std::size_t ran = 0;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    struct stat st {};
    if (::stat(arg.c_str(), &st) != 0) {
      std::fprintf(stderr, "replay: cannot read %s\n", arg.c_str());
      return 1;
    }
    if (!S_ISDIR(st.st_mode)) {
      if (!run_file(arg))
        return 1;
      ++ran;
      continue;
    }
    std::vector<std::string> files;
    if (DIR* d = ::opendir(arg.c_str())) {
      while (auto* e = ::readdir(d))
        if (e->d_name[0] != '.')
          files.push_back(arg + "/" + e->d_name);
      ::closedir(d);
    }
    std::sort(files.begin(), files.end());
    for (auto& f : files) {
      if (!run_file(f)) {
        std::fprintf(stderr, "replay: cannot read %s\n", f.c_str());
        return 1;
      }
      ++ran;
    }
  }
  std::printf("replay: %zu inputs ran clean\n", ran);
  return ran ? 0 : 1;
}
