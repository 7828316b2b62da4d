// llama-perplexity's arithmetic as the perplexity client computes it
// (core/gateway/perplexity.hpp): chunks, the scored half, the estimate and
// its uncertainty.

#include "core/gateway/perplexity.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <numeric>
#include <vector>

using namespace exo::gateway;

TEST_CASE("a text's tokens go in whole chunks of ctx, each starting with "
          "the BOS, and the second half of each is scored") {
  std::vector<std::int32_t> tokens(23);
  std::iota(tokens.begin(), tokens.end(), 100);
  auto chunks = perplexity_chunks(tokens, 8, 0, 1);
  REQUIRE(chunks.size() == 2); // 23 / 8, the rest left out
  CHECK(chunks[0] == std::vector<std::int32_t>{1, 101, 102, 103, 104, 105,
                                               106, 107});
  CHECK(chunks[1][0] == 1);
  CHECK(chunks[1][1] == 109);
  CHECK(perplexity_chunks(tokens, 8, 1, 1).size() == 1);
  CHECK(perplexity_chunks(tokens, 8, 0, -1)[1][0] == 108); // no BOS
  CHECK(perplexity_chunks(tokens, 24, 0, 1).empty());
  CHECK(perplexity_chunks(tokens, 1, 0, 1).empty());
  // llama.cpp reads rows ctx/2 .. ctx-2: tokens ctx/2 + 1 .. ctx - 1.
  CHECK(first_scored(512) == 257);
  CHECK(first_scored(8) == 5);
}

TEST_CASE("the estimate is exp of the mean negative log-likelihood of the "
          "scored tokens, its error llama-perplexity's") {
  perplexity_sum sum;
  CHECK(sum.ppl() == 0.0);
  // ctx 8: tokens 5, 6, 7 count; the others are not read.
  std::vector<double> a{0, 99, 99, 99, 99, -1.0, -2.0, -3.0};
  std::vector<double> b{0, 99, 99, 99, 99, -0.5, -0.5, -2.0};
  CHECK(sum.add_chunk(a, 8).empty());
  CHECK(sum.add_chunk(b, 8).empty());
  CHECK(sum.tokens() == 6);
  CHECK(sum.chunks() == 2);
  const std::vector<double> nll{1, 2, 3, 0.5, 0.5, 2};
  double mean = 0, sq = 0;
  for (double x : nll) {
    mean += x / 6;
    sq += x * x / 6;
  }
  CHECK(sum.ppl() == Approx(std::exp(mean)));
  CHECK(sum.error()
        == Approx(std::sqrt((sq - mean * mean) / 5) * std::exp(mean)));
  // What is not a chunk's scores is named, and not counted.
  CHECK(sum.add_chunk({0, -1}, 8).find("2 log-probabilities") != std::string::npos);
  std::vector<double> nan = a;
  nan[6] = std::nan("");
  CHECK(sum.add_chunk(nan, 8).find("token 6") != std::string::npos);
  std::vector<double> positive = a;
  positive[7] = 0.5;
  CHECK_FALSE(sum.add_chunk(positive, 8).empty());
  CHECK(sum.tokens() == 6);
}
