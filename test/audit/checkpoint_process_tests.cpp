// Signed audit checkpoints witnessed by peers, across real exo-node
// processes on 127.0.0.1 (issue 23): each node signs checkpoints of its
// audit log and its peers keep the latest one; with a peer's copy,
// `exo-node audit verify --checkpoints` finds a cut tail, a dropped head
// and a rewrite with recomputed hashes in the node's log, none of which the
// hash chain alone reveals; the console's `audit verify` checks a node's
// log against its own checkpoints and its peers' witnesses and names a
// peer that is down.

#include "core/audit/checkpoint.hpp"
#include "core/audit/log_files.hpp"
#include "core/audit/record.hpp"
#include "test/audit/tamper.hpp"
#include "test/support/cluster.hpp"

#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>
#include <sys/stat.h>
#include <thread>

using namespace exo::test;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

const char* fast_checkpoints = R"(, "safety": {
  "audit_flush_interval_ms": 100,
  "audit_checkpoint_records": 4,
  "audit_checkpoint_interval_ms": 300})";

/// The seq of the checkpoint held in `path`, 0 when none (yet).
std::uint64_t seq_in(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec))
    return 0;
  try {
    auto text = exo::test::read_file(path);
    auto nl = text.find('\n');
    if (nl == std::string::npos)
      return 0;
    return exo::audit::parse_checkpoint(text.substr(0, nl)).seq;
  } catch (const std::exception&) {
    return 0;
  }
}

/// Waits until `pred` holds (checked every 100 ms) or `timeout` passes.
template <class Pred>
bool wait_until(Pred pred, std::chrono::milliseconds timeout) {
  auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (pred())
      return true;
    std::this_thread::sleep_for(100ms);
  }
  return pred();
}

/// A copy of the node's audit log files in a folder of its own.
std::vector<std::string> copy_log(const std::string& audit_dir,
                                  const std::string& to) {
  fs::create_directories(to);
  std::vector<std::string> files;
  for (auto& f : exo::audit::list_log_files(audit_dir, "audit")) {
    auto dst = to + "/" + fs::path(f.path).filename().string();
    fs::copy_file(f.path, dst, fs::copy_options::overwrite_existing);
    files.push_back(dst);
  }
  return files;
}

run_result verify_cli(const std::vector<std::string>& checkpoints,
                      const std::string& ca,
                      const std::vector<std::string>& files) {
  std::vector<std::string> argv{exo_node(), "audit", "verify"};
  for (auto& c : checkpoints) {
    argv.push_back("--checkpoints");
    argv.push_back(c);
  }
  if (!ca.empty()) {
    argv.push_back("--ca");
    argv.push_back(ca);
  }
  argv.insert(argv.end(), files.begin(), files.end());
  return run(argv);
}

} // namespace

TEST_CASE("peers witness a node's audit checkpoints, and with them verify "
          "finds a cut tail, a dropped head and a recomputed rewrite") {
  pki p{"exo-audit-cp"};
  p.node("n1");
  p.node("n2");
  p.node("n3");
  node_options o1{"n1"};
  o1.extra = fast_checkpoints;
  auto n1 = start_node(p, o1);
  node_options o2{"n2"};
  o2.seed(n1.port).extra = fast_checkpoints;
  auto n2 = start_node(p, o2);
  node_options o3{"n3"};
  o3.seed(n1.port).extra = fast_checkpoints;
  auto n3 = start_node(p, o3);
  REQUIRE(eventually(p, n1.port, "nodes", [](const std::string& json) {
    std::size_t n = 0;
    for (auto at = json.find("\"alive\""); at != std::string::npos;
         at = json.find("\"alive\"", at + 1))
      ++n;
    return n >= 3;
  }, 30s));

  auto n1_state = p.dir + "/n1/state-n1";
  auto n1_audit = n1_state + "/audit";
  auto witness2 = p.dir + "/n2/state-n2/audit/witness/n1.checkpoint";
  auto witness3 = p.dir + "/n3/state-n3/audit/witness/n1.checkpoint";
  auto ca = p.dir + "/ca/ca.crt";

  // Records: every client read of the devices is audited on n1.
  for (int i = 0; i < 6; ++i)
    must(console(p, n1.port, {"devices"}));
  CHECK(wait_until([&] { return seq_in(witness2) >= 8; }, 30s));
  CHECK(wait_until([&] { return seq_in(witness3) >= 8; }, 30s));
  struct stat sb {};
  REQUIRE(::stat(witness2.c_str(), &sb) == 0);
  CHECK((sb.st_mode & 0777) == 0600);
  REQUIRE(::stat((n1_audit + "/checkpoints").c_str(), &sb) == 0);
  CHECK((sb.st_mode & 0777) == 0600);

  // The console's verify on n1: its own checkpoints and both witnesses
  // (`audit` needs a token with audit_read: the node's first admin token).
  auto admin = exo::test::read_file(n1_state + "/access/admin.token");
  while (!admin.empty() && (admin.back() == '\n' || admin.back() == '\r'))
    admin.pop_back();
  REQUIRE_FALSE(admin.empty());
  auto verify_cmd = "audit verify auth=" + admin;
  {
    auto r = console(p, n1.port, {verify_cmd});
    INFO(r.out << r.err);
    CHECK(r.code == 0);
    CHECK(contains(r.out, "audit chain ok"));
    CHECK(contains(r.out, "2 witnessed by peers"));
  }
  // n3 goes down: it is named, and the check still runs.
  n3.proc->signal(SIGKILL);
  n3.proc->wait(10s);
  {
    bool named = false;
    for (int i = 0; i < 50 && !named; ++i) {
      auto r = console(p, n1.port, {verify_cmd});
      named = r.code == 0 && contains(r.out, "audit chain ok")
              && contains(r.out, "n3") && contains(r.out, "note: peer n3");
      if (!named)
        std::this_thread::sleep_for(200ms);
    }
    CHECK(named);
  }

  // n1 stops; its log is checked with n2's copy of its checkpoint.
  n1.proc->signal(SIGTERM);
  n1.proc->wait(30s);
  auto witnessed = seq_in(witness2);
  REQUIRE(witnessed >= 8);
  auto work = p.dir + "/work";

  { // the untouched log passes
    auto files = copy_log(n1_audit, work + "/untouched");
    auto r = verify_cli({witness2}, ca, files);
    INFO(r.out << r.err);
    CHECK(r.code == 0);
    CHECK(contains(r.out, "checkpoints: 1 agree"));
    auto own = verify_cli({n1_audit + "/checkpoints", witness2}, ca, files);
    INFO(own.out << own.err);
    CHECK(own.code == 0);
  }
  { // a cut tail is found and the missing records named
    auto files = copy_log(n1_audit, work + "/cut");
    cut_tail(files, witnessed - 3);
    auto plain = verify_cli({}, "", files);
    CHECK(plain.code == 0); // the chain alone cannot tell
    auto r = verify_cli({witness2}, ca, files);
    INFO(r.out << r.err);
    CHECK(r.code == 1);
    CHECK(contains(r.out, "records " + std::to_string(witnessed - 2) + ".."
                            + std::to_string(witnessed)
                            + " missing: checkpoint of n1 signed at"));
  }
  { // a dropped head is found
    auto files = copy_log(n1_audit, work + "/head");
    drop_head(files, 3);
    CHECK(verify_cli({}, "", files).code == 0);
    auto r = verify_cli({witness2}, ca, files);
    INFO(r.out << r.err);
    CHECK(r.code == 1);
    CHECK(contains(r.out, "records 1..3 missing (the head was dropped)"));
  }
  { // a rewrite with every later hash recomputed is found
    auto files = copy_log(n1_audit, work + "/rewrite");
    rewrite(files, 2, [](exo::audit::record& r) {
      r.principal = "mallory";
    });
    auto plain = verify_cli({}, "", files);
    INFO(plain.out << plain.err);
    CHECK(plain.code == 0); // the chain alone cannot tell
    auto r = verify_cli({witness2}, ca, files);
    INFO(r.out << r.err);
    CHECK(r.code == 1);
    CHECK(contains(r.out, "hash differs from the checkpoint of n1 signed at"));
    CHECK(contains(r.out, "the log was rewritten"));
  }
}
