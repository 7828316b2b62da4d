// exo's byte fields on the wire (messages/bounded_bytes.hpp): a claimed
// length above the field's bound is refused before anything is allocated;
// what is within it loads as before, byte for byte.

#include "messages/cluster.hpp"
#include "messages/device.hpp"
#include "messages/thermal.hpp"
#include "messages/workload.hpp"

#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

#include <catch2/catch.hpp>

#include <sys/resource.h>

#include <cmath>
#include <cstring>
#include <limits>

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

TEST_CASE("a chunk within 4 MiB loads byte for byte, a claim of 1 GiB is "
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

namespace {

template <class T>
T round_trip(T x) {
  std::vector<char> buf;
  caf::binary_serializer sink{nullptr, buf};
  REQUIRE_FALSE(sink(x));
  T y;
  caf::binary_deserializer src{nullptr, buf};
  REQUIRE_FALSE(src(y));
  return y;
}

bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

} // namespace

TEST_CASE("infinities and NaNs cross the wire exactly (CAF's own float "
          "packing never ends on an infinity)") {
  constexpr double inf = std::numeric_limits<double>::infinity();
  thermal_status t;
  t.node = "n1";
  t.temp_c = inf;
  t.predicted_c = -inf;
  t.power_w = std::nan("");
  t.time_to_limit_s = 1e-310; // subnormal
  t.utilization = 0.25;
  auto back = round_trip(t);
  CHECK(back.temp_c == inf);
  CHECK(back.predicted_c == -inf);
  CHECK(std::isnan(back.power_w));
  CHECK(back.time_to_limit_s == 1e-310);
  CHECK(back.utilization == 0.25);
  CHECK(back.node == "n1");
  telemetry_sample s;
  s.temperature_c = inf;
  s.utilization = 0.5;
  auto sb = round_trip(s);
  REQUIRE(sb.temperature_c);
  CHECK(*sb.temperature_c == inf);
  CHECK_FALSE(sb.power_w);
  CHECK(*sb.utilization == 0.5);
  // Activations: a block of floats, bit for bit.
  stage_step st;
  st.tokens = {1, 2};
  st.x = {1.5f, -0.0f, std::numeric_limits<float>::infinity(),
          std::numeric_limits<float>::quiet_NaN(),
          std::numeric_limits<float>::denorm_min()};
  auto stb = round_trip(st);
  REQUIRE(stb.x.size() == st.x.size());
  for (std::size_t i = 0; i < st.x.size(); ++i)
    CHECK(same_bits(stb.x[i], st.x[i]));
  // A row's log-sum-exp (doubles) the same way: CAF's packing of a
  // vector<double> holding an infinity never ended (found by the fuzzer).
  st.logprobs = true;
  st.lse = {inf, -inf, std::nan(""), 1e-310, -2.5};
  auto lb = round_trip(st);
  REQUIRE(lb.lse.size() == st.lse.size());
  for (std::size_t i = 0; i < st.lse.size(); ++i)
    CHECK(std::memcmp(&lb.lse[i], &st.lse[i], sizeof(double)) == 0);
  // A vector<float> a peer claims past 64 MiB is refused before it is
  // allocated.
  auto before = peak_rss_kib();
  std::vector<char> evil;
  caf::binary_serializer es{nullptr, evil};
  stage_step small;
  REQUIRE_FALSE(es(small));
  // Keep job (u64), seq and pos (u32), tokens (empty); then x's length.
  REQUIRE(evil.size() >= 8 + 4 + 4 + 1);
  std::vector<char> claim(evil.begin(), evil.begin() + 8 + 4 + 4 + 1);
  auto n = varbyte(std::uint64_t{1} << 30);
  claim.insert(claim.end(), n.begin(), n.end());
  stage_step bad;
  caf::binary_deserializer bs{nullptr, claim};
  CHECK(bs(bad));
  CHECK(peak_rss_kib() - before < 64 * 1024);
}

TEST_CASE("a job request's sampling parameters cross the wire whole") {
  workload::job_request r;
  r.prompt = "hi";
  auto& p = r.sampling;
  p.temperature = 0.7f;
  p.top_k = 20;
  p.top_p = 0.9f;
  p.seed = 11;
  p.min_p = 0.05f;
  p.repetition_penalty = 1.1f;
  p.frequency_penalty = -0.5f;
  p.presence_penalty = 1.5f;
  p.bias_ids = {3, 50256};
  p.bias_values = {-100.0f, 2.5f};
  p.json = true;
  auto b = round_trip(r).sampling;
  CHECK(b.json);
  CHECK(b.temperature == p.temperature);
  CHECK(b.top_k == p.top_k);
  CHECK(b.top_p == p.top_p);
  CHECK(b.seed == p.seed);
  CHECK(b.min_p == p.min_p);
  CHECK(b.repetition_penalty == p.repetition_penalty);
  CHECK(b.frequency_penalty == p.frequency_penalty);
  CHECK(b.presence_penalty == p.presence_penalty);
  CHECK(b.bias_ids == p.bias_ids);
  CHECK(b.bias_values == p.bias_values);
}

TEST_CASE("a prompt's scores cross the wire whole: asked in a step, "
          "answered, and sent to a listener") {
  workload::job_request r;
  r.prompt = "hi";
  r.logprobs = 2;
  r.prompt_logprobs = true;
  auto rb = round_trip(r);
  CHECK(rb.prompt_logprobs);
  CHECK(rb.logprobs == 2);
  model::token_logprobs lp;
  lp.logprob = -1.25f;
  lp.top_ids = {7, 9};
  lp.top_logprobs = {-0.5f, -1.25f};
  stage_step s;
  s.tokens = {1, 2, 3};
  s.scores.ids = {2, 3, -1};
  s.scores.top = 2;
  s.scores.rows = {lp, lp};
  auto sb = round_trip(s);
  CHECK(sb.scores.ids == s.scores.ids);
  CHECK(sb.scores.top == 2);
  REQUIRE(sb.scores.rows.size() == 2);
  CHECK(sb.scores.rows[1].logprob == lp.logprob);
  CHECK(sb.scores.rows[1].top_ids == lp.top_ids);
  CHECK(sb.scores.rows[1].top_logprobs == lp.top_logprobs);
  job_prompt_scores e{4, 1, {1, 2, 3}, {lp, lp}};
  auto eb = round_trip(e);
  CHECK(eb.job == 4);
  CHECK(eb.seq == 1);
  CHECK(eb.tokens == e.tokens);
  REQUIRE(eb.scores.size() == 2);
  CHECK(eb.scores[0].top_logprobs == lp.top_logprobs);
}

// CAF's built-in byte sequence (std::vector<char>), which any peer may put
// in any message, is resized to the length claimed before a byte is read;
// messages/sequence_bound.cpp refuses a claim past the message's end.

#include "messages/sequence_bound.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/message.hpp>
#include <caf/make_message.hpp>

#include <algorithm>

TEST_CASE("the sequence bound is in force in a program that links it") {
  CHECK(sequence_bound_in_force());
}

TEST_CASE("a byte sequence claiming 1 GiB over a few bytes is refused "
          "before anything is allocated, true lengths load as before") {
  auto before_refused = refused_sequence_claims();
  std::vector<char> ok{1, 2, 3};
  CHECK(round_trip(ok) == ok);
  CHECK(round_trip(std::vector<char>{}).empty());
  CHECK(round_trip(std::u16string{u"exo"}) == u"exo");
  CHECK(refused_sequence_claims() == before_refused);

  auto before = peak_rss_kib();
  auto claim = varbyte(std::uint64_t{1} << 30);
  claim.insert(claim.end(), {1, 2, 3, 4, 5, 6, 7, 8});
  std::vector<char> bytes;
  caf::binary_deserializer src{nullptr, claim};
  CHECK(src(bytes) == caf::sec::end_of_stream);
  CHECK(bytes.empty());
  // CAF sizes a std::vector<bool> by the bit count it claims, eight to a
  // byte, so none can cross the wire any more (exo's messages hold none:
  // bits go as std::vector<std::uint8_t>).
  std::vector<bool> bits;
  caf::binary_deserializer bsrc{nullptr, claim};
  CHECK(bsrc(bits));
  CHECK(bits.empty());
  CHECK(peak_rss_kib() - before < 64 * 1024);
  CHECK(refused_sequence_claims() >= before_refused + 2);
  // One byte past the end is refused as well; exactly the end loads.
  auto exact = varbyte(8);
  exact.insert(exact.end(), 8, 'x');
  std::vector<char> fits;
  caf::binary_deserializer esrc{nullptr, exact};
  CHECK_FALSE(esrc(fits));
  CHECK(fits.size() == 8);
  auto over = varbyte(9);
  over.insert(over.end(), 8, 'x');
  caf::binary_deserializer osrc{nullptr, over};
  CHECK(osrc(fits));
}

TEST_CASE("a message from a peer holding a byte sequence that claims 1 GiB "
          "is refused as CAF's network layer loads it") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  // What a peer sends: a message with a 16-byte vector<char>, its length
  // then rewritten to 1 GiB (the bytes that follow stay 16).
  auto msg = caf::make_message(std::string{"x"},
                               std::vector<char>(16, char{0x5a}));
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  REQUIRE_FALSE(sink(msg));
  std::vector<char> run(16, char{0x5a});
  run.insert(run.begin(), char{16});
  auto at = std::search(buf.begin(), buf.end(), run.begin(), run.end());
  REQUIRE(at != buf.end());
  // The true message loads.
  caf::message back;
  caf::binary_deserializer src{sys, buf};
  REQUIRE_FALSE(src(back));
  REQUIRE(back.match_elements<std::string, std::vector<char>>());
  CHECK(back.get_as<std::vector<char>>(1).size() == 16);
  // The lying one does not, and costs nothing.
  auto pos = static_cast<std::size_t>(at - buf.begin());
  auto len = varbyte(std::uint64_t{1} << 30);
  buf.erase(buf.begin() + static_cast<std::ptrdiff_t>(pos));
  buf.insert(buf.begin() + static_cast<std::ptrdiff_t>(pos), len.begin(),
             len.end());
  auto before = peak_rss_kib();
  auto refused = refused_sequence_claims();
  caf::message evil;
  caf::binary_deserializer esrc{sys, buf};
  // CAF's message loader reports no error here but keeps nothing.
  static_cast<void>(esrc(evil));
  CHECK_FALSE(evil.match_elements<std::string, std::vector<char>>());
  CHECK(refused_sequence_claims() == refused + 1);
  CHECK(peak_rss_kib() - before < 64 * 1024);
}

TEST_CASE("a job replica's line of copies crosses the wire whole") {
  job_replica r;
  r.origin = "spare";
  r.job = 3;
  r.lineage = {"coord:1", "peer:1"};
  auto b = round_trip(r);
  CHECK(b.origin == "spare");
  CHECK(b.job == 3);
  CHECK(b.lineage == r.lineage);
}
