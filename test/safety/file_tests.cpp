// The bounded file reader every named-file input goes through: regular
// files only, a size bound, errors that name the path and the problem, and
// the permission checks of files holding secrets.

#include "core/text/file.hpp"

#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <string>

#include <sys/stat.h>
#include <unistd.h>

using exo::text::check_private;
using exo::text::create_private;
using exo::text::file_error;
using exo::text::read_file;

namespace {

struct temp_dir {
  std::string path;
  temp_dir() {
    char tmpl[] = "/tmp/exo-file-test-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~temp_dir() {
    std::string cmd = "rm -rf '" + path + "'";
    if (std::system(cmd.c_str()) != 0) {
    }
  }
};

std::string message_of(const std::string& path, std::uint64_t max) {
  try {
    read_file(path, max, "config");
  } catch (const file_error& e) {
    return e.what();
  }
  return "(read)";
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

} // namespace

TEST_CASE("a regular file within the bound is read whole", "[unit]") {
  temp_dir d;
  auto p = d.path + "/a.json";
  std::ofstream{p} << "{\"a\": 1}";
  CHECK(read_file(p, 100) == "{\"a\": 1}");
  CHECK(read_file(p, 8) == "{\"a\": 1}");
  std::ofstream{d.path + "/empty"};
  CHECK(read_file(d.path + "/empty", 0).empty());
}

TEST_CASE("files that are too large, missing or not regular are refused "
          "with their name and the reason",
          "[unit]") {
  temp_dir d;
  auto p = d.path + "/big";
  std::ofstream{p} << std::string(2048, 'x');
  auto m = message_of(p, 1024);
  CHECK(m == "config " + p + ": larger than 1 KiB");
  CHECK(contains(message_of(d.path + "/none", 10), "cannot open: No such"));
  CHECK(contains(message_of(d.path, 10), "is a directory"));
  // /dev/zero never ends: refused before a byte is read.
  CHECK(contains(message_of("/dev/zero", 1 << 20),
                 "is a character device, not a regular file"));
  // A FIFO without a writer must not block the reader.
  auto fifo = d.path + "/fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(contains(message_of(fifo, 10), "is a FIFO"));
}

TEST_CASE("secret files are created 0600 and refused when others may read "
          "them, with the fix",
          "[unit]") {
  temp_dir d;
  auto key = d.path + "/access.key";
  create_private(key, "secret\n", "access key");
  struct stat sb {};
  REQUIRE(::stat(key.c_str(), &sb) == 0);
  CHECK((sb.st_mode & 0777) == 0600);
  CHECK_NOTHROW(check_private(key, "access key"));
  CHECK_THROWS_AS(create_private(key, "again", "access key"), file_error);
  ::chmod(key.c_str(), 0644);
  try {
    check_private(key, "access key");
    FAIL("a 0644 key was accepted");
  } catch (const file_error& e) {
    CHECK(std::string{e.what()}
          == "access key " + key
               + ": mode 0644 lets other users read it; fix with: chmod 600 "
               + key);
  }
  ::chmod(d.path.c_str(), 0755);
  CHECK_NOTHROW(check_private(d.path, "state_dir", 022));
  ::chmod(d.path.c_str(), 0777);
  CHECK_THROWS_WITH(check_private(d.path, "state_dir", 022),
                    Catch::Contains("mode 0777 lets other users change it; "
                                    "fix with: chmod 700 " + d.path));
}

TEST_CASE("sizes print the way people write them", "[unit]") {
  CHECK(exo::text::size_text(16u << 20) == "16 MiB");
  CHECK(exo::text::size_text(1024) == "1 KiB");
  CHECK(exo::text::size_text(1000) == "1000 bytes");
}
