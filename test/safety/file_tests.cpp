// The bounded file reader every named-file input goes through: regular
// files only, a size bound, errors that name the path and the problem, and
// the permission checks of files holding secrets.

#include "core/text/file.hpp"

#include <catch2/catch.hpp>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

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

TEST_CASE("a client's file is found only inside the model folders, and a "
          "file outside them reads like a missing one") {
  using exo::text::resolve_client_file;
  temp_dir models, other;
  auto write = [](const std::string& p) { std::ofstream{p} << "x"; };
  write(models.path + "/m.gguf");
  ::mkdir((models.path + "/sub").c_str(), 0700);
  write(models.path + "/sub/n.gguf");
  write(other.path + "/secret");
  REQUIRE(::symlink((other.path + "/secret").c_str(),
                    (models.path + "/escape").c_str())
          == 0);
  REQUIRE(::symlink((models.path + "/m.gguf").c_str(),
                    (models.path + "/alias").c_str())
          == 0);
  std::vector<std::string> dirs{other.path + "/none", models.path};
  char real[PATH_MAX];
  REQUIRE(::realpath(models.path.c_str(), real));
  std::string base = real;
  CHECK(resolve_client_file("m.gguf", dirs, "model") == base + "/m.gguf");
  CHECK(resolve_client_file("sub/n.gguf", dirs, "model")
        == base + "/sub/n.gguf");
  CHECK(resolve_client_file(models.path + "/sub/../m.gguf", dirs, "model")
        == base + "/m.gguf");
  CHECK(resolve_client_file("alias", dirs, "model") == base + "/m.gguf");
  auto refused = [&](const std::string& name) {
    try {
      resolve_client_file(name, dirs, "model");
    } catch (const file_error& e) {
      return std::string{e.what()};
    }
    return std::string{"(accepted)"};
  };
  // Outside, missing, climbing out, a link out: the same words.
  for (const std::string& name : std::vector<std::string>{"/etc/shadow", "/etc/passwd", other.path + "/secret", "missing.gguf",
        "../" + other.path.substr(5) + "/secret", "sub/../../x", "escape",
        models.path + "/../" + other.path.substr(5) + "/secret",
        "", "/", "."}) {
    CAPTURE(name);
    CHECK(refused(name)
          == "model " + name
               + ": no such file in this node's model folders (models.dirs)");
  }
  // Control bytes are not echoed, nor a name past 256 bytes.
  CHECK(refused(std::string{"a\0b\n", 4})
        == "model a?b?: no such file in this node's model folders "
           "(models.dirs)");
  CHECK(refused(std::string(5000, 'a'))
        == "model " + std::string(256, 'a')
             + "...: no such file in this node's model folders (models.dirs)");
  // No folder: nothing is found.
  CHECK_THROWS_AS(resolve_client_file("m.gguf", {}, "model"), file_error);
}
