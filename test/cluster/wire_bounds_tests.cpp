// exo's byte fields on the wire (messages/bounded_bytes.hpp): a claimed
// length above the field's bound is refused before anything is allocated;
// what is within it loads as before, byte for byte.

#include "messages/cluster.hpp"
#include "messages/device.hpp"

#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

#include <catch2/catch.hpp>

#include <sys/resource.h>

using namespace exo;

namespace {

long peak_rss_kib() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

/// CAF's length prefix (unsigned LEB128, as binary_serializer writes it).
std::vector<char> varbyte(std::uint64_t n) {
  std::vector<char> out;
  while (n > 0x7f) {
    out.push_back(static_cast<char>((n & 0x7f) | 0x80));
    n >>= 7;
  }
  out.push_back(static_cast<char>(n));
  return out;
}

} // namespace

TEST_CASE("a chunk within 4 MiB loads byte for byte; a claim of 1 GiB is "
          "refused before anything is allocated") {
  chunk c;
  c.bytes = {1, 2, 3, 250};
  std::vector<char> buf;
  caf::binary_serializer sink{nullptr, buf};
  REQUIRE_FALSE(sink(c));
  // The wire format is the plain vector's: a length, then the bytes.
  CHECK(buf == std::vector<char>{4, 1, 2, 3, static_cast<char>(250)});
  chunk back;
  caf::binary_deserializer src{nullptr, buf};
  REQUIRE_FALSE(src(back));
  CHECK(back.bytes == c.bytes);
  auto before = peak_rss_kib();
  auto claim = varbyte(1ull << 30);
  claim.insert(claim.end(), {1, 2, 3, 4});
  chunk bad;
  caf::binary_deserializer evil{nullptr, claim};
  CHECK(evil(bad));
  CHECK(bad.bytes.empty());
  CHECK(peak_rss_kib() - before < 64 * 1024);
  // Exactly the bound is fine (as far as the bytes go: here they end).
  auto at_bound = varbyte(max_chunk_bytes);
  chunk short_one;
  caf::binary_deserializer short_src{nullptr, at_bound};
  CHECK(short_src(short_one)); // end of the bytes, not a bound
}

TEST_CASE("the join handshake's nonce and signature are bounded") {
  join_challenge ch;
  ch.responder = "n1";
  ch.nonce.assign(32, 7);
  ch.cert_pem = "PEM";
  ch.signature.assign(72, 9);
  std::vector<char> buf;
  caf::binary_serializer sink{nullptr, buf};
  REQUIRE_FALSE(sink(ch));
  join_challenge back;
  caf::binary_deserializer src{nullptr, buf};
  REQUIRE_FALSE(src(back));
  CHECK(back.nonce == ch.nonce);
  CHECK(back.signature == ch.signature);
  // A 65-byte nonce in a hello is refused.
  join_hello h;
  h.claimed = "n2";
  h.nonce.assign(max_nonce_bytes + 1, 1);
  std::vector<char> hb;
  caf::binary_serializer hs{nullptr, hb};
  REQUIRE_FALSE(hs(h));
  join_hello hback;
  caf::binary_deserializer hsrc{nullptr, hb};
  CHECK(hsrc(hback));
  // A 2 KiB signature in a proof too.
  join_proof pr;
  pr.claimed = "n2";
  pr.signature.assign(max_signature_bytes + 1, 1);
  std::vector<char> pb;
  caf::binary_serializer ps{nullptr, pb};
  REQUIRE_FALSE(ps(pr));
  join_proof pback;
  caf::binary_deserializer psrc{nullptr, pb};
  CHECK(psrc(pback));
}
