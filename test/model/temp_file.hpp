#pragma once

#include <atomic>
#include <filesystem>
#include <string>

#include <unistd.h>

namespace exo::model::test {

/// A file path in the temp directory, removed when this object goes away.
class temp_file {
public:
  explicit temp_file(const std::string& stem) {
    static std::atomic<int> counter{0};
    path_ = (std::filesystem::temp_directory_path()
             / ("exo-model-test-" + std::to_string(::getpid()) + "-"
                + std::to_string(counter++) + "-" + stem + ".gguf"))
              .string();
  }
  ~temp_file() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  temp_file(const temp_file&) = delete;
  temp_file& operator=(const temp_file&) = delete;
  const std::string& path() const {
    return path_;
  }

private:
  std::string path_;
};

} // namespace exo::model::test
