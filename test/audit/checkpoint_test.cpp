// Signed audit checkpoints (core/audit/checkpoint.hpp) and verify()'s
// checks against them: a cut tail, a dropped head and a rewrite with
// recomputed hashes, which the hash chain alone does not reveal.

#include "core/audit/audit_command.hpp"
#include "core/audit/audit_log.hpp"
#include "core/audit/checkpoint.hpp"
#include "core/audit/log_files.hpp"
#include "core/audit/verify.hpp"
#include "core/tls/cert_tool.hpp"
#include "core/tls/trust_store.hpp"
#include "test/audit/tamper.hpp"
#include "test/audit/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <iostream>
#include <sstream>

using namespace exo::audit;
namespace tls = exo::tls;
using exo::test::temp_dir;

namespace {

struct cluster_pki {
  tls::credential ca = tls::create_ca();
  tls::credential n1 = tls::issue_certificate(ca, tls::cert_options{"n1"});
  tls::credential n2 = tls::issue_certificate(ca, tls::cert_options{"n2"});
  tls::credential ops = tls::issue_certificate(
    ca, tls::cert_options{"ops", tls::cert_role::client});
  tls::trust_store store{ca.cert};
};

cluster_pki& pki() {
  static cluster_pki p;
  return p;
}

checkpoint sign_n1(std::uint64_t seq, const std::string& head,
                   std::int64_t time = 1700000000,
                   const checkpoint* prev = nullptr) {
  return sign_checkpoint("n1", seq, head, time, pki().n1.cert.to_pem(),
                         pki().n1.key, prev);
}

const std::string head_a(64, 'a');
const std::string head_b(64, 'b');

/// A log of `n` records of node n1 in `dir`; returns its files.
std::vector<std::string> make_log(const temp_dir& dir, std::size_t n,
                                  std::uint64_t max_file_bytes = 64ull << 20) {
  audit_log_options opts;
  opts.directory = dir.path();
  opts.node = "n1";
  opts.max_file_bytes = max_file_bytes;
  {
    audit_log log{opts};
    for (std::size_t i = 0; i < n; ++i) {
      event ev;
      ev.type = event_type::device_allocate;
      ev.principal = "alice";
      ev.details = {{"bytes", std::to_string(4096 * (i + 1))}};
      log.append(ev);
    }
  }
  std::vector<std::string> files;
  for (auto& f : list_log_files(dir.path(), "audit"))
    files.push_back(f.path);
  return files;
}

/// The checkpoint of the log as it is now, at seq `seq`.
checkpoint checkpoint_of(const std::vector<std::string>& files,
                         std::uint64_t seq) {
  for (auto& f : exo::test::read_log(files))
    for (auto& r : f)
      if (r.seq == seq)
        return sign_n1(seq, r.hash);
  throw std::runtime_error("no record " + std::to_string(seq));
}

verify_result check(const std::vector<std::string>& files,
                    std::vector<checkpoint> cps) {
  verify_options o;
  o.checkpoints = std::move(cps);
  return verify(files, o);
}

} // namespace

TEST_CASE("a checkpoint signs, round-trips as one line and verifies") {
  auto cp = sign_n1(42, head_a);
  auto line = to_line(cp);
  CHECK(line.find('\n') == std::string::npos);
  CHECK(line.size() < max_checkpoint_line);
  auto back = read_checkpoint(line, pki().store);
  CHECK(back.node == "n1");
  CHECK(back.seq == 42);
  CHECK(back.head == head_a);
  CHECK(back.time == 1700000000);
  CHECK(back.sig == cp.sig);
  CHECK(back.prev_seq == 0);
  CHECK(back.prev_head == std::string(64, '0'));
  auto next = sign_n1(50, head_b, 1700000001, &cp);
  auto nb = read_checkpoint(to_line(next), pki().store);
  CHECK(nb.prev_seq == 42);
  CHECK(nb.prev_head == head_a);
  CHECK(nb.chain == cp.chain);
  CHECK(is_hex_digest(cp.chain));
  CHECK(sign_n1(42, head_a).chain != cp.chain); // a new chain each time
  CHECK_THROWS_AS(sign_n1(42, head_b, 1, &cp), audit_error);
  CHECK(canonical_text(cp).rfind("exo-audit-checkpoint-v1\n", 0) == 0);
  CHECK(describe(cp) == "checkpoint of n1 signed at 2023-11-14T22:13:20Z");
}

TEST_CASE("a tampered checkpoint does not verify") {
  auto cp = sign_n1(42, head_a);
  SECTION("another seq") {
    cp.seq = 43;
    CHECK_THROWS_WITH(verify_checkpoint(cp, pki().store),
                      Catch::Contains("does not verify"));
  }
  SECTION("another head") {
    cp.head = head_b;
    CHECK_THROWS_AS(verify_checkpoint(cp, pki().store), audit_error);
  }
  SECTION("another predecessor") {
    cp.prev_seq = 41;
    cp.prev_head = head_b;
    CHECK_THROWS_AS(verify_checkpoint(cp, pki().store), audit_error);
  }
  SECTION("another chain") {
    cp.chain = head_b;
    CHECK_THROWS_AS(verify_checkpoint(cp, pki().store), audit_error);
  }
  SECTION("another time") {
    cp.time += 1;
    CHECK_THROWS_AS(verify_checkpoint(cp, pki().store), audit_error);
  }
  SECTION("another node name, same certificate") {
    cp = sign_checkpoint("n2", 42, head_a, 1, pki().n1.cert.to_pem(),
                         pki().n1.key);
    CHECK_THROWS_WITH(verify_checkpoint(cp, pki().store),
                      Catch::Contains("signed with the certificate of \"n1\""));
  }
  SECTION("another node's certificate") {
    cp.cert_pem = pki().n2.cert.to_pem();
    CHECK_THROWS_AS(verify_checkpoint(cp, pki().store), audit_error);
  }
  SECTION("a client certificate") {
    cp = sign_checkpoint("ops", 42, head_a, 1, pki().ops.cert.to_pem(),
                         pki().ops.key);
    CHECK_THROWS_AS(verify_checkpoint(cp, pki().store), audit_error);
  }
  SECTION("a certificate of another CA") {
    auto other = tls::create_ca();
    auto n1 = tls::issue_certificate(other, tls::cert_options{"n1"});
    cp = sign_checkpoint("n1", 42, head_a, 1, n1.cert.to_pem(), n1.key);
    CHECK_THROWS_WITH(verify_checkpoint(cp, pki().store),
                      Catch::Contains("does not verify"));
  }
  SECTION("a flipped signature byte") {
    cp.sig[cp.sig.size() / 2] ^= 1;
    CHECK_THROWS_AS(verify_checkpoint(cp, pki().store), audit_error);
  }
}

TEST_CASE("checkpoint lines are checked field by field") {
  auto line = to_line(sign_n1(7, head_a));
  auto bad = [&](std::string from, std::string to) {
    auto l = line;
    auto at = l.find(from);
    REQUIRE(at != std::string::npos);
    l.replace(at, from.size(), to);
    return l;
  };
  CHECK_THROWS_WITH(parse_checkpoint("not json"), Catch::Contains("not JSON"));
  CHECK_THROWS_WITH(parse_checkpoint("[1]"), Catch::Contains("object"));
  CHECK_THROWS_WITH(parse_checkpoint(""), Catch::Contains("empty"));
  CHECK_THROWS_WITH(parse_checkpoint(std::string(max_checkpoint_line + 1, ' ')),
                    Catch::Contains("too long"));
  CHECK_THROWS_WITH(parse_checkpoint(bad("\"checkpoint\":1", "\"checkpoint\":2")),
                    Catch::Contains("version"));
  CHECK_THROWS_WITH(parse_checkpoint(bad("\"seq\":7", "\"seq\":0")),
                    Catch::Contains("\"seq\""));
  CHECK_THROWS_WITH(parse_checkpoint(bad("\"seq\":7", "\"seq\":-7")),
                    Catch::Contains("\"seq\""));
  CHECK_THROWS_WITH(parse_checkpoint(bad("\"seq\":7", "\"seq\":\"7\"")),
                    Catch::Contains("\"seq\""));
  CHECK_THROWS_WITH(parse_checkpoint(bad("\"seq\":7", "\"seq\":7.5")),
                    Catch::Contains("\"seq\""));
  CHECK_THROWS_WITH(parse_checkpoint(bad("\"node\":\"n1\"", "\"node\":\"../x\"")),
                    Catch::Contains("node name"));
  CHECK_THROWS_WITH(parse_checkpoint(bad(head_a, std::string(63, 'a'))),
                    Catch::Contains("\"head\""));
  CHECK_THROWS_WITH(parse_checkpoint(bad(head_a, std::string(64, 'A'))),
                    Catch::Contains("\"head\""));
  CHECK_THROWS_WITH(parse_checkpoint(bad("\"time\":1700000000", "\"time\":-1")),
                    Catch::Contains("\"time\""));
  CHECK_THROWS_WITH(
    parse_checkpoint(bad("\"time\":1700000000", "\"time\":1e300")),
    Catch::Contains("\"time\""));
  CHECK_THROWS_WITH(parse_checkpoint(bad("\"sig\":\"", "\"sig\":\"zz")),
                    Catch::Contains("\"sig\""));
  CHECK_THROWS_WITH(parse_checkpoint(bad("\"sig\":\"", "\"sig\":\"0")),
                    Catch::Contains("\"sig\""));
  CHECK_THROWS_WITH(parse_checkpoint(bad("\"prev_seq\":0", "\"prev_seq\":7")),
                    Catch::Contains("\"prev_seq\""));
  CHECK_THROWS_WITH(
    parse_checkpoint(bad("\"prev_seq\":0", "\"prev_seq\":\"0\"")),
    Catch::Contains("\"prev_seq\""));
  CHECK_THROWS_WITH(
    parse_checkpoint(bad(std::string(64, '0'), std::string(64, 'a'))),
    Catch::Contains("64 zeros"));
  CHECK_THROWS_WITH(
    parse_checkpoint(bad(std::string(64, '0'), std::string(64, 'g'))),
    Catch::Contains("\"prev_head\""));
  CHECK_THROWS_WITH(parse_checkpoint(bad("\"chain\":\"", "\"chain\":\"x")),
                    Catch::Contains("\"chain\""));
  CHECK_THROWS_WITH(parse_checkpoint(bad("{", "{\"extra\":1,")),
                    Catch::Contains("unknown field"));
  CHECK_THROWS_WITH(parse_checkpoint(bad("\"cert\":\"-----BEGIN", "\"cert\":\"x\",\"y\":\"")),
                    Catch::Contains("unknown field"));
  CHECK_THROWS_WITH(parse_checkpoint(R"({"checkpoint":1})"),
                    Catch::Contains("lacks"));
}

TEST_CASE("verify with checkpoints passes an untouched log") {
  temp_dir dir;
  auto files = make_log(dir, 30, 2048); // several files
  REQUIRE(files.size() > 1);
  auto res = check(files, {checkpoint_of(files, 10), checkpoint_of(files, 30)});
  INFO(res.reason);
  CHECK(res.ok);
  CHECK(res.checkpoints_checked == 2);
  REQUIRE(res.newest_checkpoint);
  CHECK(res.newest_checkpoint->seq == 30);
}

TEST_CASE("verify with checkpoints finds a cut tail") {
  temp_dir dir;
  auto files = make_log(dir, 30);
  auto cp = checkpoint_of(files, 30);
  exo::test::cut_tail(files, 24);
  CHECK(verify(files).ok); // the chain alone cannot tell
  auto res = check(files, {cp});
  CHECK_FALSE(res.ok);
  CHECK(res.bad_seq == 25u);
  CHECK(res.reason.find("records 25..30 missing: checkpoint of n1 signed at")
        != std::string::npos);
  CHECK(res.reason.find("says 30 records") != std::string::npos);
}

TEST_CASE("verify with checkpoints finds a log emptied") {
  temp_dir dir;
  auto files = make_log(dir, 5);
  auto cp = checkpoint_of(files, 5);
  exo::test::cut_tail(files, 0);
  auto res = check(files, {cp});
  CHECK_FALSE(res.ok);
  CHECK(res.reason.find("records 1..5 missing") != std::string::npos);
}

TEST_CASE("verify with checkpoints finds a dropped head") {
  temp_dir dir;
  auto files = make_log(dir, 30);
  auto cp = checkpoint_of(files, 30);
  exo::test::drop_head(files, 6);
  CHECK(verify(files).ok); // the chain alone cannot tell
  auto res = check(files, {cp});
  CHECK_FALSE(res.ok);
  CHECK(res.bad_seq == 1u);
  CHECK(res.reason.find("records 1..6 missing (the head was dropped)")
        != std::string::npos);
}

TEST_CASE("verify with checkpoints finds a rewrite with recomputed hashes") {
  temp_dir dir;
  auto files = make_log(dir, 30, 2048);
  auto cp10 = checkpoint_of(files, 10);
  auto cp30 = checkpoint_of(files, 30);
  exo::test::rewrite(files, 17,
                     [](record& r) { r.principal = "mallory"; });
  CHECK(verify(files, verify_options{true, {}}).ok); // the chain still holds
  auto res = check(files, {cp30, cp10});
  CHECK_FALSE(res.ok);
  CHECK(res.bad_seq == 30u);
  CHECK(res.reason.find("record 30 hash differs from the checkpoint of n1 "
                        "signed at")
        != std::string::npos);
  CHECK(res.reason.find("the log was rewritten") != std::string::npos);
  CHECK(res.reason.find("seq 11..30") != std::string::npos);
  CHECK(res.checkpoints_checked == 1);
}

TEST_CASE("verify with checkpoints finds a rewritten first record") {
  temp_dir dir;
  auto files = make_log(dir, 5);
  auto cp = checkpoint_of(files, 5);
  exo::test::rewrite(files, 1, [](record& r) { r.principal = "mallory"; });
  auto res = check(files, {cp});
  CHECK_FALSE(res.ok);
  CHECK(res.bad_seq == 5u);
}

TEST_CASE("verify refuses another node's checkpoint") {
  temp_dir dir;
  auto files = make_log(dir, 5);
  auto cp = sign_checkpoint("n2", 5, head_a, 1, pki().n2.cert.to_pem(),
                            pki().n2.key);
  auto res = check(files, {cp});
  CHECK_FALSE(res.ok);
  CHECK(res.reason.find("is of node n2") != std::string::npos);
}

TEST_CASE("append_checkpoint keeps a bounded, private file") {
  temp_dir dir;
  auto path = dir.file("checkpoints");
  for (std::uint64_t i = 1; i <= 25; ++i)
    append_checkpoint(path, sign_n1(i, head_a), 5);
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  auto cps = load_checkpoints(path, pki().store);
  REQUIRE(cps.size() >= 5);
  CHECK(cps.size() <= 10);
  CHECK(cps.back().seq == 25);
}

TEST_CASE("witness verdicts: first, newer, same, rollback, fork") {
  std::optional<checkpoint> held;
  auto c5 = sign_n1(5, head_a);
  CHECK(compare(held, c5) == witness_verdict::first);
  held = c5;
  auto c6 = sign_n1(6, head_b, 1700000000, &c5);
  CHECK(compare(held, c6) == witness_verdict::newer);
  CHECK(compare(held, sign_n1(5, head_a, 1)) == witness_verdict::same);
  CHECK(compare(held, sign_n1(4, head_a)) == witness_verdict::rollback);
  CHECK(compare(held, sign_n1(5, head_b)) == witness_verdict::fork);
  // A higher seq whose chain of checkpoints skips the one held: a new
  // history (the log was cut or rewritten, then continued past it).
  CHECK(compare(held, sign_n1(9, head_b)) == witness_verdict::fork);
  auto c4 = sign_n1(4, head_b);
  CHECK(compare(held, sign_n1(9, head_b, 1, &c4)) == witness_verdict::fork);
  auto c5b = sign_n1(5, head_b);
  CHECK(compare(held, sign_n1(9, head_b, 1, &c5b)) == witness_verdict::fork);
  // A chain that continues: a new chain id makes it another history.
  auto other = sign_n1(9, head_b, 1, &c6);
  other.chain = head_a;
  CHECK(compare(held, other) == witness_verdict::fork);
  // The witness missed checkpoints in between: still newer.
  CHECK(compare(held, sign_n1(9, head_b, 1, &c6)) == witness_verdict::newer);
}

TEST_CASE("witness files hold one verified checkpoint, 0600") {
  temp_dir dir;
  auto path = witness_path(dir.path(), "n1");
  CHECK(path == dir.path() + "/n1.checkpoint");
  CHECK_THROWS_AS(witness_path(dir.path(), "../n1"), audit_error);
  CHECK_FALSE(read_witness(path, pki().store));
  write_witness(path, sign_n1(5, head_a));
  write_witness(path, sign_n1(9, head_b));
  auto held = read_witness(path, pki().store);
  REQUIRE(held);
  CHECK(held->seq == 9);
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  exo::test::spit(path, "garbage\n");
  CHECK_THROWS_AS(read_witness(path, pki().store), audit_error);
  CHECK_THROWS_WITH(load_checkpoints(dir.path(), pki().store),
                    Catch::Contains("not a regular file"));
}

TEST_CASE("exo-node audit verify --checkpoints: exit codes and messages") {
  temp_dir dir;
  auto files = make_log(dir, 12);
  auto ca_file = dir.file("ca.crt");
  exo::test::spit(ca_file, pki().ca.cert.to_pem());
  auto cps = dir.file("n1.checkpoint");
  write_witness(cps, checkpoint_of(files, 12));
  auto run = [&](std::vector<std::string> args, std::string& out,
                 std::string& err) {
    std::vector<std::string> all{"audit", "verify"};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all)
      argv.push_back(a.data());
    std::ostringstream o, e;
    int code = run_audit_command(static_cast<int>(argv.size()), argv.data(),
                                 o, e);
    out = o.str();
    err = e.str();
    return code;
  };
  std::string out, err;
  std::vector<std::string> args{"--checkpoints", cps, "--ca", ca_file};
  args.insert(args.end(), files.begin(), files.end());
  CHECK(run(args, out, err) == 0);
  CHECK(out.find("checkpoints: 1 agree; newest: seq 12") != std::string::npos);
  // --checkpoints without --ca, an unreadable or forged checkpoint file: 2.
  CHECK(run({"--checkpoints", cps, files[0]}, out, err) == 2);
  CHECK(err.find("needs --ca") != std::string::npos);
  CHECK(run({"--checkpoints", dir.file("none"), "--ca", ca_file, files[0]},
            out, err)
        == 2);
  auto other = dir.file("other-ca.crt");
  exo::test::spit(other, tls::create_ca().cert.to_pem());
  CHECK(run({"--checkpoints", cps, "--ca", other, files[0]}, out, err) == 2);
  CHECK(err.find("does not verify") != std::string::npos);
  // A cut tail: 1, naming the missing records.
  exo::test::cut_tail(files, 9);
  CHECK(run(args, out, err) == 1);
  CHECK(out.find("records 10..12 missing: checkpoint of n1 signed at")
        != std::string::npos);
}
