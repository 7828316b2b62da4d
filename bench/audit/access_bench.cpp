// Access check benchmark: the cost of a check answered from the decision
// cache (the hot path of every device operation) and of a full verification
// (MAC + payload parse) of a token not seen before.
// Run: bench_audit (or build/bench/audit/access_bench).

#include "core/access/access_policy.hpp"
#include "core/access/shared_policy.hpp"
#include "core/access/token.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

using namespace exo::access;
using bench_clock = std::chrono::steady_clock;

namespace {

const std::string key = "benchmark-key-benchmark-key-benchmark-key";

token_claims claims(std::size_t i) {
  token_claims c;
  c.id = "tok-" + std::to_string(i);
  c.principal = "user" + std::to_string(i % 100);
  c.granted_role = role::user;
  c.devices = {"gpu0", "gpu1", "gpu2", "gpu3"};
  c.quota_bytes = 1ull << 34;
  auto now = std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
               .count();
  c.issued_at = now - 10;
  c.expires_at = now + 3600;
  return c;
}

template <class F>
double median_ns_per_op(std::size_t ops, int rounds, F&& body) {
  std::vector<double> per_op;
  for (int r = 0; r < rounds; ++r) {
    auto t0 = bench_clock::now();
    body(ops);
    auto ns = std::chrono::duration<double, std::nano>(bench_clock::now() - t0)
                .count();
    per_op.push_back(ns / ops);
  }
  std::sort(per_op.begin(), per_op.end());
  return per_op[per_op.size() / 2];
}

volatile int sink;

} // namespace

int main() {
  token_issuer issuer{key};
  access_config cfg;
  cfg.key = key;
  access_policy policy{cfg};
  std::vector<std::string> tokens;
  for (std::size_t i = 0; i < 10000; ++i)
    tokens.push_back(issuer.issue(claims(i)));
  std::printf("access check, one thread (token %zu bytes)\n",
              tokens[0].size());
  std::printf("%-46s %12s\n", "operation", "ns/op");

  // Warm the cache.
  for (auto& t : tokens)
    sink = policy.check(t, permission::compute_run, "gpu2").allowed();

  auto cached_one = median_ns_per_op(1000000, 5, [&](std::size_t n) {
    int ok = 0;
    for (std::size_t i = 0; i < n; ++i)
      ok += policy.check(tokens[0], permission::compute_run, "gpu2").allowed();
    sink = ok;
  });
  std::printf("%-46s %12.1f\n", "cached check, same token", cached_one);

  // What a device actor calls: the node-wide policy behind its mutex.
  shared_policy shared{cfg};
  sink = shared.check(tokens[0], permission::compute_run, "gpu2").allowed();
  auto cached_shared = median_ns_per_op(1000000, 5, [&](std::size_t n) {
    int ok = 0;
    for (std::size_t i = 0; i < n; ++i)
      ok += shared.check(tokens[0], permission::compute_run, "gpu2").allowed();
    sink = ok;
  });
  std::printf("%-46s %12.1f\n", "cached check via shared_policy (device path)",
              cached_shared);

  auto cached_many = median_ns_per_op(1000000, 5, [&](std::size_t n) {
    int ok = 0;
    for (std::size_t i = 0; i < n; ++i)
      ok += policy.check(tokens[i % tokens.size()], permission::compute_run,
                         "gpu2")
              .allowed();
    sink = ok;
  });
  std::printf("%-46s %12.1f\n", "cached check, 10,000 tokens round robin",
              cached_many);

  auto denied = median_ns_per_op(1000000, 5, [&](std::size_t n) {
    int ok = 0;
    for (std::size_t i = 0; i < n; ++i)
      ok += policy.check(tokens[0], permission::policy_admin).allowed();
    sink = ok;
  });
  std::printf("%-46s %12.1f\n", "cached check, denied (builds a reason)",
              denied);

  hmac_sha256 mac{key};
  auto decode = median_ns_per_op(20000, 5, [&](std::size_t n) {
    int ok = 0;
    for (std::size_t i = 0; i < n; ++i)
      ok += decode_token(tokens[i % tokens.size()], mac).code
            == decision_code::allow;
    sink = ok;
  });
  std::printf("%-46s %12.1f\n", "uncached verify (MAC + parse)", decode);

  auto forged = tokens[0];
  forged[forged.size() - 3] = forged[forged.size() - 3] == 'A' ? 'B' : 'A';
  auto bad = median_ns_per_op(20000, 5, [&](std::size_t n) {
    int ok = 0;
    for (std::size_t i = 0; i < n; ++i)
      ok += policy.check(forged, permission::compute_run).allowed();
    sink = ok;
  });
  std::printf("%-46s %12.1f\n", "forged token refused (MAC, never cached)",
              bad);

  auto fresh = median_ns_per_op(10000, 3, [&](std::size_t n) {
    access_policy p{cfg};
    int ok = 0;
    for (std::size_t i = 0; i < n; ++i)
      ok += p.check(tokens[i % tokens.size()], permission::compute_run, "gpu1")
              .allowed();
    sink = ok;
  });
  std::printf("%-46s %12.1f\n", "first check of a token (verify + cache)",
              fresh);
  return 0;
}
