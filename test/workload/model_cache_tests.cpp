// The model cache: files named by SHA-256, received in order and moved into
// place only when size and digest match.

#include "core/workload/model_cache.hpp"

#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <unistd.h>

using namespace exo::workload;
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

namespace {

std::string sha_of(const std::string& bytes) {
  auto p = (fs::temp_directory_path()
            / ("exo-sha-test-" + std::to_string(::getpid())))
             .string();
  std::ofstream{p, std::ios::binary | std::ios::trunc} << bytes;
  auto out = range_sha256(p, 0, bytes.size());
  fs::remove(p);
  return out;
}

std::string read_all(const std::string& path) {
  std::ifstream f{path, std::ios::binary};
  return {std::istreambuf_iterator<char>{f}, std::istreambuf_iterator<char>{}};
}

} // namespace

TEST_CASE("a partial model records only parts whose digest matches, and "
          "keeps them across restarts",
          "[workload]") {
  temp_state t;
  const std::string model = "HEADER--aaaaBBBBccccDDDD";
  auto sha = sha_of(model);
  model_part head{0, 8, sha_of(model.substr(0, 8))};
  model_part mid{12, 4, sha_of(model.substr(12, 4))};
  model_part tail{20, 4, sha_of(model.substr(20, 4))};
  auto put = [&](partial_model& pm, const model_part& p) {
    pm.begin(p);
    auto bytes = model.substr(p.offset, p.length);
    pm.write(reinterpret_cast<const std::uint8_t*>(bytes.data()), 2);
    pm.write(reinterpret_cast<const std::uint8_t*>(bytes.data()) + 2,
             bytes.size() - 2);
    pm.commit();
  };
  {
    partial_model pm{t.dir, sha, model.size()};
    CHECK(pm.path() == cached_model_path(t.dir, sha));
    CHECK(pm.missing({head, mid}).size() == 2);
    put(pm, head);
    put(pm, mid);
    CHECK(pm.missing({head, mid}).empty());
    CHECK(pm.missing({head, mid, tail}) == std::vector<model_part>{tail});
    // Bytes that do not match the digest are written but not recorded.
    pm.begin(tail);
    const std::uint8_t bad[] = {'x', 'x', 'x', 'x'};
    pm.write(bad, 4);
    CHECK_THROWS_WITH(pm.commit(), Catch::Contains("SHA-256 mismatch"));
    pm.begin(tail);
    const std::uint8_t five[] = {'D', 'D', 'D', 'D', 'D'};
    CHECK_THROWS_WITH(pm.write(five, 5), Catch::Contains("more than"));
  }
  // The file has the model's size, the parts at their offsets, holes
  // elsewhere.
  auto bytes = read_all(cached_model_path(t.dir, sha));
  REQUIRE(bytes.size() == model.size());
  CHECK(bytes.substr(0, 8) == "HEADER--");
  CHECK(bytes.substr(12, 4) == "BBBB");
  CHECK(bytes.substr(8, 4) == std::string(4, '\0'));
  {
    // A restart reads the manifest: nothing is fetched again.
    partial_model pm{t.dir, sha, model.size()};
    CHECK(pm.missing({head, mid}).empty());
    CHECK(pm.missing({head, mid, tail}) == std::vector<model_part>{tail});
    put(pm, tail);
    CHECK(pm.missing({head, mid, tail}).empty());
  }
  {
    // A torn last manifest line (a crash mid-append) is ignored.
    std::ofstream{cached_model_path(t.dir, sha).substr(
                    0, cached_model_path(t.dir, sha).size() - 10)
                    + "parts",
                  std::ios::app}
      << "20 4 abc";
    partial_model pm{t.dir, sha, model.size()};
    CHECK(pm.missing({head, mid, tail}).empty());
  }
  {
    // Another size starts over.
    partial_model pm{t.dir, sha, model.size() + 1};
    CHECK(pm.missing({head}).size() == 1);
  }
  CHECK_THROWS(partial_model{t.dir, "../../etc", 3});
  CHECK_THROWS(partial_model{t.dir, sha, 0});
  CHECK_FALSE(is_sha256("ABC"));
  CHECK(is_sha256(abc_sha));
}

TEST_CASE("parts a peer names are checked before anything is written",
          "[workload]") {
  const auto d = std::string(64, 'a');
  CHECK_NOTHROW(check_parts({{0, 10, d}, {16, 4, d}}, 100));
  CHECK_THROWS_WITH(check_parts({}, 100), Catch::Contains("names 0 parts"));
  CHECK_THROWS_WITH(check_parts({{4, 10, d}}, 100),
                    Catch::Contains("must start at offset 0"));
  CHECK_THROWS_WITH(check_parts({{0, 10, "xyz"}}, 100),
                    Catch::Contains("well-formed SHA-256"));
  CHECK_THROWS_WITH(check_parts({{0, 10, d}, {5, 10, d}}, 100),
                    Catch::Contains("overlaps"));
  CHECK_THROWS_WITH(check_parts({{0, 10, d}, {95, 10, d}}, 100),
                    Catch::Contains("lies outside"));
  CHECK_THROWS_WITH(check_parts({{0, 10, d}, {~0ull - 1, 10, d}}, 100),
                    Catch::Contains("lies outside"));
  CHECK_THROWS_WITH(check_parts({{0, 0, d}}, 100), Catch::Contains("empty"));
  CHECK_THROWS_WITH(check_parts({{0, 10, d}}, 0),
                    Catch::Contains("out of range"));
  std::vector<model_part> many;
  for (std::uint64_t i = 0; i < max_model_parts + 1; ++i)
    many.push_back({i * 2, 1, d});
  CHECK_THROWS_WITH(check_parts(many, 100000), Catch::Contains("parts (1 to"));
  temp_state t;
  auto empty = t.dir + "/empty";
  std::ofstream{empty}.flush();
  CHECK(range_sha256(empty, 0, 0)
        == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}
