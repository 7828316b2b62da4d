// The model cache: files named by SHA-256, received in order and moved into
// place only when size and digest match.

#include "actors/shard/model_cache.hpp"

#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <unistd.h>

using namespace exo::shard;
namespace fs = std::filesystem;

namespace {

struct temp_state {
  std::string dir;
  temp_state() {
    dir = (fs::temp_directory_path()
           / ("exo-cache-test-" + std::to_string(::getpid())))
            .string();
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~temp_state() {
    fs::remove_all(dir);
  }
};

const std::string abc_sha
  = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

} // namespace

TEST_CASE("a file's SHA-256 is its standard digest", "[workload]") {
  temp_state t;
  auto p = t.dir + "/abc";
  std::ofstream{p} << "abc";
  CHECK(file_sha256(p) == abc_sha);
  CHECK(file_size(p) == 3);
  CHECK_THROWS_AS(file_sha256(t.dir + "/missing"), model_cache_error);
}

TEST_CASE("a download lands in the cache only when its digest matches",
          "[workload]") {
  temp_state t;
  const std::uint8_t abc[] = {'a', 'b', 'c'};
  {
    model_download d{t.dir, abc_sha, 3};
    d.append(abc, 2);
    d.append(abc + 2, 1);
    auto path = d.finish();
    CHECK(path == cached_model_path(t.dir, abc_sha));
    CHECK(file_sha256(path) == abc_sha);
  }
  auto other = std::string(64, 'e');
  {
    model_download d{t.dir, other, 3};
    d.append(abc, 3);
    CHECK_THROWS_WITH(d.finish(), Catch::Contains("SHA-256 mismatch"));
  }
  CHECK_FALSE(fs::exists(cached_model_path(t.dir, other)));
  {
    model_download d{t.dir, other, 2};
    CHECK_THROWS_WITH(d.append(abc, 3), Catch::Contains("more than"));
  }
  CHECK_THROWS(model_download{t.dir, "../../etc", 3});
  CHECK_FALSE(is_sha256("ABC"));
  CHECK(is_sha256(abc_sha));
}
