// The audit sink's signed checkpoints and its witnessing of peers'
// checkpoints (actors/audit/audit_actor.hpp), in one actor system.

#include "actors/audit/audit_actor.hpp"
#include "core/audit/checkpoint.hpp"
#include "core/audit/log_files.hpp"
#include "core/audit/verify.hpp"
#include "core/config/node_config.hpp"
#include "core/tls/cert_tool.hpp"
#include "core/tls/trust_store.hpp"
#include "messages/audit.hpp"
#include "messages/cluster.hpp"
#include "messages/registration.hpp"
#include "test/audit/tamper.hpp"
#include "test/audit/temp_dir.hpp"

#include <caf/all.hpp>
#include <catch2/catch.hpp>

#include <sys/resource.h>
#include <sys/stat.h>

#include <csignal>
#include <mutex>
#include <thread>

using namespace exo;
using namespace std::chrono_literals;
namespace tls = exo::tls;

namespace {

struct config : caf::actor_system_config {
  config() {
    register_messages(*this);
  }
};

struct fixture {
  tls::credential ca = tls::create_ca();
  tls::credential n1 = tls::issue_certificate(ca, tls::cert_options{"n1"});
  tls::credential n2 = tls::issue_certificate(ca, tls::cert_options{"n2"});
  std::shared_ptr<const tls::trust_store> store =
    std::make_shared<tls::trust_store>(ca.cert);
  test::temp_dir dir;
  config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  caf::actor sink;

  audit::audit_actor_config sink_config(std::uint64_t every_records) {
    audit::audit_actor_config ac;
    ac.log.directory = dir.path();
    ac.log.node = "n1";
    ac.checkpoints.key = std::make_shared<tls::private_key>(n1.key);
    ac.checkpoints.cert_pem = n1.cert.to_pem();
    ac.checkpoints.ca = store;
    ac.checkpoints.every_records = every_records;
    ac.checkpoints.every = std::chrono::hours(1);
    ac.checkpoints.clock = [] { return std::int64_t{1700000000}; };
    return ac;
  }

  fixture() {
    sink = audit::spawn_audit_actor(sys, sink_config(3));
  }

  ~fixture() {
    stop();
  }

  void stop() {
    if (!sink)
      return;
    self->send_exit(sink, caf::exit_reason::user_shutdown);
    self->wait_for(sink);
    sink = nullptr;
  }

  void append(std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      audit_entry e;
      e.type = static_cast<std::uint8_t>(audit::event_type::device_list);
      e.principal = "alice";
      self->send(sink, audit_atom::value, e);
    }
    std::uint64_t seq = 0;
    self->request(sink, 10s, audit_atom::value, caf::flush_atom::value)
      .receive([&](std::uint64_t s) { seq = s; }, [](caf::error&) {});
  }

  std::string latest() {
    std::string line;
    self->request(sink, 10s, audit_atom::value, checkpoint_atom::value)
      .receive([&](std::string& l) { line = std::move(l); },
               [](caf::error&) {});
    return line;
  }

  audit::checkpoint n2_checkpoint(std::uint64_t seq, char head,
                                  const audit::checkpoint* prev = nullptr) {
    return audit::sign_checkpoint("n2", seq, std::string(64, head),
                                  1700000000 + static_cast<std::int64_t>(seq),
                                  n2.cert.to_pem(), n2.key, prev);
  }

  /// Offers a line as a peer would; returns the error text ("" when ok).
  std::string offer(const std::string& line) {
    std::string err;
    self
      ->request(sink, 10s, audit_atom::value, witness_atom::value,
                audit_checkpoint{line})
      .receive([](caf::atom_value) {},
               [&](caf::error& e) { err = sys.render(e); });
    return err;
  }

  console_reply console(const std::string& arg) {
    console_reply r;
    self
      ->request(sink, 10s, console_atom::value, std::string{"audit"}, arg)
      .receive([&](console_reply& x) { r = std::move(x); },
               [&](caf::error& e) { r.text = "ERROR " + sys.render(e); });
    return r;
  }
};

} // namespace

TEST_CASE("the sink signs a checkpoint every N records and one when it "
          "stops, into a private file") {
  fixture f;
  CHECK(f.latest().empty());
  f.append(7);
  auto line = f.latest();
  REQUIRE_FALSE(line.empty());
  auto cp = audit::read_checkpoint(line, *f.store);
  CHECK(cp.node == "n1");
  CHECK(cp.seq >= 6);
  f.stop();
  auto path = f.dir.file("checkpoints");
  struct stat sb {};
  REQUIRE(::stat(path.c_str(), &sb) == 0);
  CHECK((sb.st_mode & 0777) == 0600);
  auto cps = audit::load_checkpoints(path, *f.store);
  REQUIRE(cps.size() >= 3);
  // The last one covers every record, up to the log's head at exit.
  auto files = std::vector<std::string>{};
  for (auto& lf : audit::list_log_files(f.dir.path(), "audit"))
    files.push_back(lf.path);
  audit::verify_options o;
  o.checkpoints = cps;
  auto res = audit::verify(files, o);
  INFO(res.reason);
  CHECK(res.ok);
  CHECK(cps.back().seq == res.last_seq);
  CHECK(res.checkpoints_checked == cps.size());
  // Each names the one before it.
  CHECK(cps.front().prev_seq == 0);
  for (std::size_t i = 1; i < cps.size(); ++i) {
    CHECK(cps[i].prev_seq == cps[i - 1].seq);
    CHECK(cps[i].prev_head == cps[i - 1].head);
  }
}

TEST_CASE("a log cut while the node was down is audited at start, and the "
          "new checkpoints start a new chain that witnesses see as a fork") {
  fixture f;
  f.append(7);
  f.stop();
  auto cps = audit::load_checkpoints(f.dir.file("checkpoints"), *f.store);
  REQUIRE_FALSE(cps.empty());
  auto old = cps.back();
  REQUIRE(old.seq == 7);
  std::vector<std::string> files;
  for (auto& lf : audit::list_log_files(f.dir.path(), "audit"))
    files.push_back(lf.path);
  test::cut_tail(files, 4);
  f.sink = audit::spawn_audit_actor(f.sys, f.sink_config(3));
  auto line = f.latest();
  REQUIRE_FALSE(line.empty());
  auto fresh = audit::read_checkpoint(line, *f.store);
  CHECK(fresh.prev_seq == 0);
  CHECK(fresh.seq == 5); // records 1..4 and the event below
  auto rb = f.console("query type=audit_rollback");
  CHECK(rb.json.find("\"when\":\"start\"") != std::string::npos);
  CHECK(rb.json.find("\"found\":\"the log ends at seq 4\"")
        != std::string::npos);
  // A witness of the old checkpoint sees the new one as a rollback, and
  // once the log has grown past seq 7, as a fork.
  CHECK(audit::compare(old, fresh) == audit::witness_verdict::rollback);
  f.append(6);
  auto later = audit::read_checkpoint(f.latest(), *f.store);
  REQUIRE(later.seq > 7);
  CHECK(audit::compare(old, later) == audit::witness_verdict::fork);
}

TEST_CASE("a log rewritten past its checkpoint while the node was down is "
          "audited at start as a fork") {
  fixture f;
  f.append(7);
  f.stop();
  std::vector<std::string> files;
  for (auto& lf : audit::list_log_files(f.dir.path(), "audit"))
    files.push_back(lf.path);
  test::cut_tail(files, 4);
  {
    // Records 4..9 written again, other ones: record 7 exists, with
    // another hash than the checkpoint's (the sink finds it from the log's
    // end, audit_log::record_at).
    audit::audit_log_options o;
    o.directory = f.dir.path();
    o.node = "n1";
    audit::audit_log log{o};
    for (int i = 0; i < 6; ++i) {
      audit::event ev;
      ev.type = audit::event_type::device_free;
      ev.details = {{"i", std::to_string(i)}};
      log.append(ev);
    }
  }
  f.sink = audit::spawn_audit_actor(f.sys, f.sink_config(3));
  REQUIRE_FALSE(f.latest().empty());
  auto fk = f.console("query type=audit_fork");
  CHECK(fk.json.find("\"when\":\"start\"") != std::string::npos);
  CHECK(fk.json.find("\"found\":\"record 7 has another hash\"")
        != std::string::npos);
}

TEST_CASE("the sink witnesses peers' checkpoints: newer ones replace, "
          "rollbacks and forks are audited and kept") {
  fixture f;
  auto c5 = f.n2_checkpoint(5, 'a');
  CHECK(f.offer(audit::to_line(c5)).empty());
  auto wpath = f.dir.path() + "/witness/n2.checkpoint";
  struct stat sb {};
  REQUIRE(::stat(wpath.c_str(), &sb) == 0);
  CHECK((sb.st_mode & 0777) == 0600);
  CHECK(f.offer(audit::to_line(f.n2_checkpoint(9, 'b', &c5))).empty());
  // Refused: garbage, a forged signature, our own CA's client... all named.
  CHECK(f.offer("{").find("not JSON") != std::string::npos);
  auto forged = f.n2_checkpoint(20, 'c');
  forged.seq = 21;
  CHECK(f.offer(audit::to_line(forged)).find("does not verify")
        != std::string::npos);
  CHECK(f.offer(std::string(audit::max_checkpoint_line + 10, 'x'))
          .find("too long")
        != std::string::npos);
  // A rollback and a fork: accepted as messages, audited, not kept as latest.
  CHECK(f.offer(audit::to_line(f.n2_checkpoint(4, 'a'))).empty());
  CHECK(f.offer(audit::to_line(f.n2_checkpoint(9, 'd', &c5))).empty());
  // The same again is audited once.
  CHECK(f.offer(audit::to_line(f.n2_checkpoint(9, 'd', &c5))).empty());
  // A higher seq that starts a new chain (skips the held one): a fork.
  CHECK(f.offer(audit::to_line(f.n2_checkpoint(12, 'e'))).empty());
  audit_checkpoint held;
  f.self
    ->request(f.sink, 10s, audit_atom::value, witness_atom::value,
              std::string{"n2"})
    .receive([&](audit_checkpoint& c) { held = std::move(c); },
             [](caf::error&) {});
  REQUIRE_FALSE(held.line.empty());
  auto cp = audit::read_checkpoint(held.line, *f.store);
  CHECK(cp.seq == 9);
  CHECK(cp.head == std::string(64, 'b'));
  auto rb = f.console("query type=audit_rollback");
  CHECK(rb.json.find("\"offered_seq\":\"4\"") != std::string::npos);
  CHECK(rb.json.find("\"witnessed_seq\":\"9\"") != std::string::npos);
  auto fk = f.console("query type=audit_fork");
  CHECK(fk.json.find(std::string(64, 'd')) != std::string::npos);
  CHECK(fk.json.find(std::string(64, 'e')) != std::string::npos);
  std::size_t forks = 0;
  for (auto at = fk.json.find("\"audit_fork\""); at != std::string::npos;
       at = fk.json.find("\"audit_fork\"", at + 1))
    ++forks;
  CHECK(forks == 2);
  auto evidence = test::slurp(f.dir.path() + "/witness/n2.conflicts");
  CHECK(test::lines_of(evidence).size() == 3);
  // Nothing is known of n3.
  f.self
    ->request(f.sink, 10s, audit_atom::value, witness_atom::value,
              std::string{"n3"})
    .receive([&](audit_checkpoint& c) { held = std::move(c); },
             [](caf::error&) {});
  CHECK(held.line.empty());
}

TEST_CASE("the sink's verify uses its own checkpoints and the peers' lines") {
  fixture f;
  f.append(6);
  auto own = f.latest();
  REQUIRE_FALSE(own.empty());
  console_reply r;
  f.self
    ->request(f.sink, 10s, audit_atom::value, verify_atom::value,
              std::vector<std::string>{own},
              std::vector<std::string>{"peer n3 is dead: not asked"})
    .receive([&](console_reply& x) { r = std::move(x); },
             [&](caf::error& e) { r.text = f.sys.render(e); });
  INFO(r.text);
  CHECK(r.text.find("audit chain ok") != std::string::npos);
  CHECK(r.text.find("1 witnessed by peers") != std::string::npos);
  CHECK(r.text.find("note: peer n3 is dead") != std::string::npos);
  CHECK(r.json.find("\"ok\":true") != std::string::npos);
  // A peer's checkpoint beyond the log's end: the tail is missing.
  auto ahead = audit::sign_checkpoint("n1", 100, std::string(64, 'e'),
                                      1700000000, f.n1.cert.to_pem(), f.n1.key);
  f.self
    ->request(f.sink, 10s, audit_atom::value, verify_atom::value,
              std::vector<std::string>{audit::to_line(ahead)},
              std::vector<std::string>{})
    .receive([&](console_reply& x) { r = std::move(x); },
             [&](caf::error& e) { r.text = f.sys.render(e); });
  CHECK(r.text.find("BROKEN") != std::string::npos);
  CHECK(r.text.find("..100 missing: checkpoint of n1 signed at")
        != std::string::npos);
}

TEST_CASE("the checkpoint settings of the config: defaults and ranges") {
  using config::parse;
  auto d = parse("{}", "test").safety;
  CHECK(d.audit_checkpoint_records == 1000);
  CHECK(d.audit_checkpoint_interval == std::chrono::milliseconds{60000});
  CHECK(d.audit_checkpoint_keep == 1000);
  auto s = parse(R"({"safety": {"audit_checkpoint_records": 4,
                   "audit_checkpoint_interval_ms": 300,
                   "audit_checkpoint_keep": 7}})",
                 "test")
             .safety;
  CHECK(s.audit_checkpoint_records == 4);
  CHECK(s.audit_checkpoint_interval == std::chrono::milliseconds{300});
  CHECK(s.audit_checkpoint_keep == 7);
  for (auto* bad : {R"({"safety": {"audit_checkpoint_records": 0}})",
                    R"({"safety": {"audit_checkpoint_records": -1}})",
                    R"({"safety": {"audit_checkpoint_interval_ms": 5}})",
                    R"({"safety": {"audit_checkpoint_keep": "many"}})"}) {
    INFO(bad);
    CHECK_THROWS_WITH(parse(bad, "test"),
                      Catch::Contains("safety.audit_checkpoint_"));
  }
}

TEST_CASE("a log that cannot be written (a full disk) is told to the "
          "operator once, with the folder and the reason") {
  test::temp_dir dir;
  struct system_config : caf::actor_system_config {
    system_config() {
      register_messages(*this);
    }
  } cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  auto lines = std::make_shared<std::vector<std::string>>();
  auto mutex = std::make_shared<std::mutex>();
  audit::audit_actor_config ac;
  ac.log.directory = dir.path();
  ac.log.node = "n1";
  ac.log.sync = audit::fsync_policy::every_record; // write at once
  ac.flush_interval = 50ms;
  ac.operator_log = [lines, mutex](const std::string& l) {
    std::lock_guard<std::mutex> guard{*mutex};
    lines->push_back(l);
  };
  auto sink = audit::spawn_audit_actor(sys, ac);
  auto send = [&](int n) {
    for (int i = 0; i < n; ++i) {
      audit_entry e;
      e.type = static_cast<std::uint8_t>(audit::event_type::device_list);
      self->send(sink, audit_atom::value, e);
    }
    self->request(sink, 10s, audit_atom::value, caf::flush_atom::value)
      .receive([](std::uint64_t) {}, [](caf::error&) {});
  };
  send(2);
  CHECK(lines->empty());
  // A full disk, as the process sees it: no file may grow (EFBIG).
  rlimit saved{};
  REQUIRE(getrlimit(RLIMIT_FSIZE, &saved) == 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit full = saved;
  full.rlim_cur = 0;
  REQUIRE(setrlimit(RLIMIT_FSIZE, &full) == 0);
  send(20);
  std::this_thread::sleep_for(200ms); // a few ticks
  send(5);
  REQUIRE(setrlimit(RLIMIT_FSIZE, &saved) == 0);
  std::signal(SIGXFSZ, old_handler);
  self->send_exit(sink, caf::exit_reason::user_shutdown);
  self->wait_for(sink);
  std::lock_guard<std::mutex> guard{*mutex};
  REQUIRE(lines->size() == 1); // told once, not once per record
  CHECK_THAT(lines->front(),
             Catch::Contains("exo: the audit log in " + dir.path()
                             + " cannot be written: "));
  CHECK_THAT(lines->front(), Catch::Contains("records lost so far"));
}
