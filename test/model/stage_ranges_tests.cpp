// model::stage_file_ranges: the bytes of a GGUF file a stage reads. Proof
// that they suffice: a copy of the file holding only those bytes (zeros
// elsewhere, as in a node's sparse model cache) computes the stage exactly
// as the whole file does.

#include "core/model/stage_ranges.hpp"
#include "core/model/test_model.hpp"
#include "test/model/temp_file.hpp"

#include <catch2/catch.hpp>

#include <fstream>
#include <iterator>

using namespace exo::model;
using exo::model::test::temp_file;

namespace {

std::string read_all(const std::string& path) {
  std::ifstream f{path, std::ios::binary};
  return {std::istreambuf_iterator<char>{f}, std::istreambuf_iterator<char>{}};
}

/// Writes a copy of `bytes` with only `ranges` kept, zeros elsewhere.
void write_sparse(const std::string& bytes,
                  const std::vector<byte_range>& ranges,
                  const std::string& path) {
  std::string out(bytes.size(), '\0');
  for (auto& r : ranges)
    std::copy(bytes.begin() + static_cast<std::ptrdiff_t>(r.offset),
              bytes.begin() + static_cast<std::ptrdiff_t>(r.offset + r.length),
              out.begin() + static_cast<std::ptrdiff_t>(r.offset));
  std::ofstream{path, std::ios::binary} << out;
}

/// Runs stage [first, last) of `m` over a few tokens (embedding first when
/// it is the first stage, the head when it is the last); returns its output.
std::vector<float> run_stage(std::shared_ptr<const llama_model> m,
                             std::uint32_t first, std::uint32_t last) {
  llama_stage st{m, first, last};
  auto& hp = m->hparams();
  const std::int32_t toks[] = {5, 77, 300, 2};
  const std::size_t n = 4;
  std::vector<float> x(n * hp.n_embd);
  if (st.is_first())
    st.embed(toks, n, x.data());
  else
    for (std::size_t i = 0; i < x.size(); ++i)
      x[i] = 0.01f * static_cast<float>(i % 97) - 0.4f;
  auto cache = st.make_cache(16);
  st.forward(x.data(), n, cache);
  if (!st.is_last())
    return x;
  std::vector<float> logits(hp.n_vocab);
  st.head(x.data() + (n - 1) * hp.n_embd, 1, logits.data());
  return logits;
}

} // namespace

TEST_CASE("a stage's file ranges are all it reads", "[model]") {
  for (bool tied : {false, true}) {
    for (auto type : {tensor_type::f32, tensor_type::q8_0}) {
      INFO("tied " << tied << ", type " << to_string(type));
      test_model_options o;
      o.layers = 5;
      o.tied = tied;
      o.type = type;
      temp_file whole{"whole"};
      make_test_model(o, whole.path());
      auto bytes = read_all(whole.path());
      auto m = llama_model::load(whole.path());
      for (auto [first, last] : {std::pair<std::uint32_t, std::uint32_t>{0, 2},
                                 {2, 4}, {4, 5}, {1, 5}, {0, 5}}) {
        INFO("layers [" << first << ", " << last << ")");
        auto ranges = stage_file_ranges(*m, first, last);
        REQUIRE(!ranges.empty());
        CHECK(ranges.front().offset == 0); // the header comes first
        std::uint64_t total = 0, end = 0;
        for (auto& r : ranges) {
          CHECK(r.offset >= end); // in order, disjoint
          end = r.offset + r.length;
          total += r.length;
        }
        CHECK(end <= bytes.size());
        if (last - first < 5)
          CHECK(total < bytes.size());
        temp_file part{"part"};
        write_sparse(bytes, ranges, part.path());
        auto sparse = llama_model::load(part.path());
        CHECK(run_stage(sparse, first, last) == run_stage(m, first, last));
      }
    }
  }
}

TEST_CASE("a layer is the same range whichever stage asks for it",
          "[model]") {
  test_model_options o;
  o.layers = 6;
  temp_file whole{"whole"};
  make_test_model(o, whole.path());
  auto m = llama_model::load(whole.path());
  auto a = stage_file_ranges(*m, 2, 4);
  auto b = stage_file_ranges(*m, 3, 6);
  // Layer 3's range appears in both.
  std::size_t shared = 0;
  for (auto& x : a)
    for (auto& y : b)
      if (x.offset == y.offset && x.length == y.length)
        ++shared;
  CHECK(shared == 2); // the header and layer 3
  CHECK_THROWS_WITH(stage_file_ranges(*m, 3, 3), Catch::Contains("not inside"));
  CHECK_THROWS_WITH(stage_file_ranges(*m, 0, 7), Catch::Contains("not inside"));
}
