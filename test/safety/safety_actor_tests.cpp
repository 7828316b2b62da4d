// The safety actors of issue 6 driven through real CAF messages: thermal
// monitors pausing a simulated device before its limit, a pause in the
// middle of work, token checks in the device actor, quotas, and the audit
// sink recording all of it.

#include "actors/access/access_actor.hpp"
#include "actors/audit/audit_actor.hpp"
#include "actors/device/device_actor.hpp"
#include "actors/thermal/thermal_actor.hpp"
#include "backends/factory/factory.hpp"
#include "backends/sim/sim_backend.hpp"
#include "messages/access.hpp"
#include "messages/cluster.hpp"
#include "messages/errors.hpp"
#include "messages/registration.hpp"
#include "test/audit/temp_dir.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <catch2/catch.hpp>

#include <algorithm>
#include <limits>
#include <optional>
#include <cstring>
#include <thread>

using namespace exo;
using namespace std::chrono_literals;

namespace {

struct config : caf::actor_system_config {
  config() {
    register_messages(*this);
    // Plain (test-only) networking, to reach a device from a second node.
    load<caf::io::middleman>();
  }
};

const std::string key = "0123456789abcdef0123456789abcdef-test-key";

std::int64_t now_s() {
  return std::chrono::duration_cast<std::chrono::seconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

std::string make_token(access::role r, std::string principal = "alice",
                       std::vector<std::string> devices = {},
                       std::uint64_t quota = access::unlimited_quota,
                       std::int64_t ttl = 3600, std::string id = "") {
  static int n = 0;
  access::token_claims c;
  c.id = id.empty() ? "id" + std::to_string(++n) : id;
  c.principal = std::move(principal);
  c.granted_role = r;
  c.all_devices = devices.empty();
  c.devices = std::move(devices);
  c.quota_bytes = quota;
  c.issued_at = now_s() - 10;
  c.expires_at = c.issued_at + ttl;
  return access::token_issuer{key}.issue(c);
}

bool is(const caf::error& err, exo_errc code) {
  return err.category() == exo_error_category()
         && err.code() == static_cast<std::uint8_t>(code);
}

struct fixture {
  backend::registry reg;
  config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  test::temp_dir dir;
  caf::actor audit;
  std::shared_ptr<access::shared_policy> policy;
  exo::device_actor dev;
  backend::sim_device* sim = nullptr;
  std::string dev_id;

  fixture() {
    backend::factory_options opts;
    opts.use_environment = false;
    opts.include = {"sim"};
    opts.sim.devices = {{"adreno-740", ""}};
    auto r = backend::registry::create(opts);
    REQUIRE(r.ok());
    reg = std::move(*r);
    auto devs = reg.devices();
    backend::device* d = nullptr;
    for (auto* x : devs)
      if (auto* s = dynamic_cast<backend::sim_device*>(x)) {
        sim = s;
        d = x;
      }
    REQUIRE(sim != nullptr);
    dev_id = d->properties().id;
    audit::audit_actor_config ac;
    ac.log.directory = dir.path() + "/audit";
    ac.log.node = "n1";
    audit = audit::spawn_audit_actor(sys, ac);
    access::access_config pc;
    pc.key = key;
    policy = std::make_shared<access::shared_policy>(pc);
    device::device_actor_config dc;
    dc.node = "n1";
    dc.audit = audit;
    dc.access = policy;
    dev = device::spawn_device_actor(sys, *d, dc);
  }

  ~fixture() {
    self->send_exit(dev, caf::exit_reason::user_shutdown);
    self->send_exit(audit, caf::exit_reason::user_shutdown);
    self->wait_for(dev, audit);
  }

  /// Runs a request; returns the error (none on success), result in `out`.
  template <class T, class Handle, class... Ts>
  caf::error ask(T& out, const Handle& h, Ts&&... xs) {
    caf::error failed;
    self->request(h, 10s, std::forward<Ts>(xs)...)
      .receive([&](T& x) { out = std::move(x); },
               [&](caf::error& e) { failed = std::move(e); });
    return failed;
  }

  console_reply console(const caf::actor& h, const std::string& cmd,
                        const std::string& arg, caf::error* err = nullptr) {
    console_reply r;
    auto e = ask(r, h, console_atom::value, cmd, arg);
    if (err)
      *err = e;
    else
      REQUIRE_FALSE(e);
    return r;
  }

  /// Flushes the sink and counts records of `type`.
  std::size_t audited(const std::string& type) {
    std::uint64_t seq = 0;
    REQUIRE_FALSE(ask(seq, audit, audit_atom::value, caf::flush_atom::value));
    auto r = console(audit, "audit", "query type=" + type + " limit=10000");
    std::size_t n = 0;
    for (auto p = r.json.find("\"seq\""); p != std::string::npos;
         p = r.json.find("\"seq\"", p + 1))
      ++n;
    return n;
  }

  handle_id buffer(std::uint64_t floats) {
    handle_id h = 0;
    REQUIRE_FALSE(ask(h, dev, allocate_atom::value, floats * 4));
    return h;
  }

  kernel_call add_call(handle_id a, handle_id b, handle_id c,
                       std::uint64_t n) {
    kernel_call k;
    k.op = backend::to_wire(backend::op_kind::add);
    k.inputs = {a, b};
    k.input_offsets = {0, 0};
    k.output = c;
    k.dims = {n};
    return k;
  }

  thermal::thermal_config policy_for_profile() {
    thermal::thermal_config tc;
    auto& p = sim->profile();
    tc.limit_c = p.throttle_c;  // 70 C for adreno-740
    tc.margin_c = 5;
    tc.hysteresis_c = 10;
    tc.interval_s = 0.5;
    tc.horizon_s = 10;
    tc.min_dwell_s = 2;
    tc.prior.resistance_c_per_w = p.thermal_resistance;
    tc.prior.tau_s = p.thermal_resistance * p.thermal_capacitance;
    tc.prior.ambient_c = p.ambient_c;
    return tc;
  }

  caf::actor monitor() {
    thermal::thermal_actor_config mc;
    mc.node = "n1";
    mc.device = dev_id;
    mc.target = dev;
    mc.policy = policy_for_profile();
    mc.audit = audit;
    mc.interval = 0ms; // sampled by the test, on the simulated clock
    auto* s = sim;
    mc.clock = [s] { return s->now(); };
    return thermal::spawn_thermal_actor(sys, std::move(mc));
  }

  thermal_status tick(const caf::actor& m) {
    thermal_status st;
    REQUIRE_FALSE(ask(st, m, thermal_atom::value, tick_atom::value));
    return st;
  }
};

} // namespace

TEST_CASE_METHOD(fixture, "a hot device is paused before its limit and "
                          "resumed after cooling",
                 "[thermal]") {
  auto m = monitor();
  auto limit = sim->profile().throttle_c;
  double max_temp = 0;
  bool paused = false, resumed = false;
  int refused = 0;
  for (int i = 0; i < 1200 && !resumed; ++i) {
    device_info info;
    REQUIRE_FALSE(ask(info, dev, info_atom::value));
    if (info.state == device_state::paused) {
      sim->advance(0.5); // no new compute: it cools
      ++refused;
    } else {
      sim->run_load(sim->profile().peak_power_w, 0.5);
    }
    max_temp = std::max(max_temp, sim->temperature());
    auto st = tick(m);
    if (st.state == "paused")
      paused = true;
    if (paused && st.state != "paused")
      resumed = true;
  }
  CHECK(paused);
  CHECK(resumed);
  CHECK(refused > 0);
  CHECK(max_temp < limit);
  device_info info;
  REQUIRE_FALSE(ask(info, dev, info_atom::value));
  CHECK(info.state == device_state::ready);
  CHECK(audited("thermal_pause") >= 1);
  CHECK(audited("thermal_resume") >= 1);
  self->send_exit(m, caf::exit_reason::user_shutdown);
}

TEST_CASE_METHOD(fixture, "a pause in the middle of work loses no request",
                 "[thermal]") {
  auto m = monitor();
  constexpr std::uint64_t n = 1024;
  auto a = buffer(n), b = buffer(n), c = buffer(n);
  // Ten computes in flight, then the monitor sees a jump to the limit.
  std::vector<caf::error> results(10);
  std::vector<decltype(self->request(dev, 10s, compute_atom::value,
                                     add_call(a, b, c, n)))>
    handles;
  for (int i = 0; i < 10; ++i)
    handles.push_back(
      self->request(dev, 10s, compute_atom::value, add_call(a, b, c, n)));
  sim->jump_temperature(sim->profile().throttle_c - sim->temperature());
  auto st = tick(m); // telemetry queues behind the computes; then pause
  CHECK(st.state == "paused");
  int ok = 0;
  for (auto& h : handles)
    h.receive([&](caf::atom_value) { ++ok; }, [&](caf::error&) {});
  CHECK(ok == 10);
  caf::atom_value out;
  auto err = ask(out, dev, compute_atom::value, add_call(a, b, c, n));
  CHECK(is(err, exo_errc::paused));
  CHECK(error_message(err).find("paused") != std::string::npos);
  // Reads, writes and syncs are still served while paused.
  CHECK_FALSE(ask(out, dev, sync_atom::value));
  // Cool down; the monitor resumes after its dwell time.
  for (int i = 0; i < 100 && st.state == "paused"; ++i) {
    sim->advance(1.0);
    st = tick(m);
  }
  CHECK(st.state != "paused");
  CHECK_FALSE(ask(out, dev, compute_atom::value, add_call(a, b, c, n)));
  self->send_exit(m, caf::exit_reason::user_shutdown);
}

TEST_CASE_METHOD(fixture, "devices without temperature are listed as such",
                 "[thermal]") {
  std::vector<thermal_status> xs(2);
  xs[0].node = "n1";
  xs[0].device = "gpu0";
  xs[0].has_temperature = true;
  xs[0].temp_c = 71;
  xs[0].limit_c = 90;
  xs[0].state = "paused";
  xs[0].peak_c = 86.5;
  xs[1].node = "n2";
  xs[1].device = "cpu0";
  xs[1].state = "no temperature";
  auto text = thermal::render_overview(xs);
  CHECK(text.find("hottest: n1/gpu0 71.0 C") != std::string::npos);
  CHECK(text.find("paused: n1/gpu0") != std::string::npos);
  CHECK(text.find("n1/gpu0  71.0  86.5  ") != std::string::npos); // peak
  CHECK(text.find("n2/cpu0  -  -  -  -  -  no temperature reading")
        != std::string::npos);
  // A peer's report is typed but untrusted: one node, bounded, finite.
  CHECK(thermal::check_report(xs) == std::optional<std::string>{
          "a report mixes nodes (n1 and n2)"});
  xs[1].node = "n1";
  CHECK_FALSE(thermal::check_report(xs));
  CHECK(thermal::check_report({})->find("1 to 256") != std::string::npos);
  auto bad = xs;
  bad[0].temp_c = std::numeric_limits<double>::quiet_NaN();
  CHECK(thermal::check_report(bad)->find("not finite") != std::string::npos);
  bad = xs;
  bad[1].device = std::string(200, 'd');
  CHECK(thermal::check_report(bad)->find("bad length") != std::string::npos);
  CHECK(thermal::check_report(std::vector<thermal_status>(257, xs[0]))
          ->find("not 257") != std::string::npos);
}

TEST_CASE_METHOD(fixture, "the role-by-permission matrix holds through the "
                          "device actor",
                 "[access]") {
  constexpr std::uint64_t n = 16;
  auto a = buffer(n), b = buffer(n), c = buffer(n);
  for (auto r : {access::role::monitor, access::role::user,
                 access::role::power_user, access::role::admin}) {
    CAPTURE(access::to_string(r));
    auto perms = access::role_permissions(r);
    auto token = make_token(r, std::string{access::to_string(r)});
    device_info info;
    CHECK(!ask(info, dev, info_atom::value, token)
          == perms.contains(access::permission::device_info));
    handle_id h = 0;
    auto err = ask(h, dev, allocate_atom::value, std::uint64_t{64}, token);
    CHECK(!err == perms.contains(access::permission::memory_allocate));
    if (err)
      CHECK(is(err, exo_errc::access_denied));
    auto victim = buffer(4);
    caf::atom_value out;
    CHECK(!ask(out, dev, free_atom::value, victim, token)
          == perms.contains(access::permission::memory_free));
    CHECK(!ask(out, dev, compute_atom::value, add_call(a, b, c, n), token)
          == perms.contains(access::permission::compute_run));
    CHECK(!ask(out, dev, sync_atom::value, token)
          == perms.contains(access::permission::compute_sync));
  }
  // monitor: allocate, free, compute and sync denied -> four denials.
  CHECK(audited("access_denied") == 4);
}

TEST_CASE_METHOD(fixture, "expired, revoked, forged and truncated tokens "
                          "are refused and audited",
                 "[access]") {
  caf::atom_value out;
  auto good = make_token(access::role::user, "bob", {}, access::unlimited_quota,
                         3600, "good1");
  CHECK_FALSE(ask(out, dev, sync_atom::value, good));
  auto expired = make_token(access::role::user, "bob", {},
                            access::unlimited_quota, 1);
  auto forged = good;
  forged[forged.size() / 2] = forged[forged.size() / 2] == 'A' ? 'B' : 'A';
  auto truncated = good.substr(0, good.rfind('.'));
  auto other_key = access::token_issuer{std::string(40, 'k')};
  access::token_claims claims;
  claims.id = "x";
  claims.principal = "mallory";
  claims.granted_role = access::role::admin;
  claims.all_devices = true;
  claims.issued_at = now_s();
  claims.expires_at = now_s() + 60;
  auto wrong_key = other_key.issue(claims);
  for (auto& t : {expired, forged, truncated, wrong_key, std::string{}}) {
    auto err = ask(out, dev, sync_atom::value, t);
    CHECK(is(err, exo_errc::access_denied));
  }
  policy->revoke_token("good1", now_s() + 3600);
  auto err = ask(out, dev, sync_atom::value, good);
  CHECK(is(err, exo_errc::access_denied));
  CHECK(error_message(err).find("revoked") != std::string::npos);
  CHECK(audited("access_denied") == 6);
}

TEST_CASE_METHOD(fixture, "operations without a token are served only to "
                          "actors of the device's own node",
                 "[access]") {
  // Locally (a shard, a monitor, this scoped actor): trusted, no token.
  caf::atom_value out;
  REQUIRE_FALSE(ask(out, dev, sync_atom::value));
  // The same device reached from another actor system (another node).
  auto port = caf::io::publish(dev, 0, "127.0.0.1");
  REQUIRE(port);
  config other_cfg;
  caf::actor_system other{other_cfg};
  auto remote = caf::io::remote_actor<exo::device_actor>(other, "127.0.0.1",
                                                          *port);
  REQUIRE(remote);
  caf::scoped_actor peer{other};
  // `out` only names the reply type.
  auto remote_ask = [&](auto out, auto... xs) {
    caf::error failed;
    peer->request(*remote, 10s, xs...)
      .receive([&](decltype(out)&) {},
               [&](caf::error& e) { failed = std::move(e); });
    return failed;
  };
  auto ok = caf::atom_value{};
  for (auto err :
       {remote_ask(ok, sync_atom::value),
        remote_ask(handle_id{}, allocate_atom::value, std::uint64_t{64}),
        remote_ask(device_info{}, info_atom::value),
        remote_ask(telemetry_sample{}, telemetry_atom::value),
        remote_ask(ok, pause_atom::value, std::string{"remote"})}) {
    CHECK(is(err, exo_errc::access_denied));
    CHECK(error_message(err).find("without a token") != std::string::npos);
  }
  // A snapshot (counters only) is served: the console's `inspect` reaches
  // devices of other nodes delegated through their gate.
  CHECK_FALSE(remote_ask(actor_snapshot{}, inspect_atom::value));
  // With a token the remote request is checked like any client's.
  auto token = make_token(access::role::user, "remote-user");
  CHECK_FALSE(remote_ask(ok, sync_atom::value, token));
  CHECK(is(remote_ask(ok, sync_atom::value, std::string{"exo1.forged"}),
           exo_errc::access_denied));
  // Still ready (the remote pause was refused), and every refusal audited.
  device_info info;
  REQUIRE_FALSE(ask(info, dev, info_atom::value));
  CHECK(info.state == device_state::ready);
  CHECK(audited("access_denied") == 6);
  sys.middleman().unpublish(dev, *port);
}

TEST_CASE_METHOD(fixture, "tokens are scoped to devices", "[access]") {
  caf::atom_value out;
  auto elsewhere = make_token(access::role::user, "carol", {"cpu:0"});
  auto err = ask(out, dev, sync_atom::value, elsewhere);
  CHECK(is(err, exo_errc::access_denied));
  CHECK(error_message(err).find("device_out_of_scope") != std::string::npos);
  auto here = make_token(access::role::user, "carol", {dev_id});
  CHECK_FALSE(ask(out, dev, sync_atom::value, here));
}

TEST_CASE_METHOD(fixture, "an allocation over quota fails with a quota error "
                          "and an audit event",
                 "[access]") {
  auto token = make_token(access::role::user, "dave", {}, 1000);
  handle_id h1 = 0, h2 = 0;
  REQUIRE_FALSE(ask(h1, dev, allocate_atom::value, std::uint64_t{600}, token));
  auto err = ask(h2, dev, allocate_atom::value, std::uint64_t{600}, token);
  CHECK(is(err, exo_errc::quota_exceeded));
  CHECK(policy->usage("dave") == 600);
  caf::atom_value out;
  // Freeing releases the quota.
  REQUIRE_FALSE(ask(out, dev, free_atom::value, h1, token));
  CHECK(policy->usage("dave") == 0);
  CHECK_FALSE(ask(h2, dev, allocate_atom::value, std::uint64_t{600}, token));
  CHECK(audited("quota_exceeded") == 1);
  CHECK(audited("device_allocate") >= 2);
  CHECK(audited("device_free") >= 1);
}

TEST_CASE_METHOD(fixture, "the access service issues and revokes tokens for "
                          "admins only",
                 "[access]") {
  access::access_actor_config ac;
  ac.node = "n1";
  ac.policy = policy;
  ac.key = key;
  ac.audit = audit;
  auto svc = access::spawn_access_actor(sys, ac);
  auto admin = access::issue_admin_token(key, "root", 600);
  auto user = make_token(access::role::user, "eve");
  caf::error err;
  console(svc, "token", "issue principal=frank role=user", &err);
  CHECK(err);
  console(svc, "token", "issue principal=frank role=user auth=" + user, &err);
  CHECK(err);
  auto r = console(svc, "token",
                   "issue principal=frank role=user ttl=60 auth=" + admin);
  auto token = r.text.substr(0, r.text.find('\n'));
  CHECK(console(svc, "token", "check " + token + " perm=compute_run").text
        == "allow\n");
  CHECK(console(svc, "token", "check " + token + " perm=policy_admin")
          .text.rfind("permission_denied", 0)
        == 0);
  caf::atom_value out;
  CHECK_FALSE(ask(out, dev, sync_atom::value, token));
  console(svc, "token", "revoke principal=frank auth=" + admin);
  CHECK(console(svc, "token", "check " + token).text.rfind("revoked", 0)
        == 0);
  CHECK(is(ask(out, dev, sync_atom::value, token), exo_errc::access_denied));
  CHECK(audited("token_issued") == 1);
  CHECK(audited("token_revoked") == 1);
  self->send_exit(svc, caf::exit_reason::user_shutdown);
}

TEST_CASE_METHOD(fixture, "token issue takes a ttl duration and a quota size",
                 "[access]") {
  access::access_actor_config ac;
  ac.node = "n1";
  ac.policy = policy;
  ac.key = key;
  ac.audit = audit;
  auto svc = access::spawn_access_actor(sys, ac);
  auto admin = access::issue_admin_token(key, "root", 600);
  caf::error err;
  // The strict parser's refusals reach the client with the rule.
  console(svc, "token", "issue principal=gina quota=4G auth=" + admin, &err);
  REQUIRE(err);
  CHECK(sys.render(err).find("'4G' has an ambiguous unit")
        != std::string::npos);
  console(svc, "token", "issue principal=gina quota=-1 auth=" + admin, &err);
  REQUIRE(err);
  CHECK(sys.render(err).find("'-1' must not be negative")
        != std::string::npos);
  console(svc, "token", "issue principal=gina ttl=1e9 auth=" + admin, &err);
  REQUIRE(err);
  CHECK(sys.render(err).find("'1e9' has an exponent") != std::string::npos);
  // A ttl past the node's limit is refused as before, in seconds.
  console(svc, "token", "issue principal=gina ttl=100000d auth=" + admin,
          &err);
  REQUIRE(err);
  CHECK(sys.render(err).find("ttl must be in [1, ") != std::string::npos);
  // 1KiB is 1024 bytes of quota; 1h an hour.
  auto r = console(svc, "token",
                   "issue principal=gina role=user ttl=1h quota=1KiB auth="
                     + admin);
  auto token = r.text.substr(0, r.text.find('\n'));
  handle_id h1 = 0, h2 = 0;
  REQUIRE_FALSE(ask(h1, dev, allocate_atom::value, std::uint64_t{1000}, token));
  CHECK(is(ask(h2, dev, allocate_atom::value, std::uint64_t{25}, token),
           exo_errc::quota_exceeded));
  CHECK_FALSE(ask(h2, dev, allocate_atom::value, std::uint64_t{24}, token));
  self->send_exit(svc, caf::exit_reason::user_shutdown);
}

TEST_CASE_METHOD(fixture, "the audit sink answers queries and verifies its "
                          "chain",
                 "[audit]") {
  for (int i = 0; i < 5; ++i)
    buffer(4);
  CHECK(audited("device_allocate") == 5);
  auto page = console(audit, "audit", "query type=device_allocate limit=2");
  CHECK(page.json.find("\"next_cursor\"") != std::string::npos);
  auto v = console(audit, "audit", "verify");
  CHECK(v.json.rfind("{\"ok\":true", 0) == 0);
  caf::error err;
  console(audit, "audit", "query type=nonsense", &err);
  CHECK(err);
  // An entry of an unknown type is dropped, not written.
  audit_entry bad;
  bad.type = 200;
  self->send(audit, audit_atom::value, bad);
  CHECK(audited("device_allocate") == 5);
}

namespace {

/// The types of the records a query reply lists, in order.
std::vector<std::string> types_in(const std::string& json) {
  std::vector<std::string> out;
  const std::string key = "\"type\":\"";
  for (auto p = json.find(key); p != std::string::npos;
       p = json.find(key, p + 1)) {
    auto b = p + key.size();
    out.push_back(json.substr(b, json.find('"', b) - b));
  }
  return out;
}

/// The "time" fields of the records a query reply lists.
std::vector<std::int64_t> times_in(const std::string& json) {
  std::vector<std::int64_t> out;
  const std::string key = "\"time\":";
  for (auto p = json.find(key); p != std::string::npos;
       p = json.find(key, p + 1))
    out.push_back(std::stoll(json.substr(p + key.size())));
  return out;
}

std::int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

} // namespace

TEST_CASE_METHOD(fixture, "compute batches are audited in groups, each "
                          "record with its own time and in the device's "
                          "order",
                 "[audit]") {
  auto a = buffer(8), b = buffer(8), c = buffer(8), d = buffer(8);
  std::vector<kernel_call> batch{add_call(a, b, c, 8), add_call(c, b, a, 8)};
  auto compute = [&] {
    caf::atom_value ok;
    auto err = ask(ok, dev, compute_atom::value, batch);
    INFO(sys.render(err));
    REQUIRE_FALSE(err);
  };
  auto t0 = now_us();
  for (int i = 0; i < 5; ++i)
    compute();
  auto t1 = now_us();
  // The next event of another kind reaches the sink after the held-back
  // ones.
  caf::atom_value ok;
  REQUIRE_FALSE(ask(ok, dev, free_atom::value, d));
  CHECK(audited("device_compute") == 5);
  auto all = console(audit, "audit", "query limit=100").json;
  auto types = types_in(all);
  std::vector<std::string> want{"device_allocate", "device_allocate",
                                "device_allocate", "device_allocate",
                                "device_compute",
                                "device_compute",  "device_compute",
                                "device_compute",  "device_compute",
                                "device_free"};
  CHECK(types == want);
  // Each compute record has the time it ran, not the time it was sent.
  auto q = console(audit, "audit", "query type=device_compute limit=100");
  auto times = times_in(q.json);
  REQUIRE(times.size() == 5);
  for (auto t : times) {
    CHECK(t >= t0);
    CHECK(t <= t1);
  }
  CHECK(std::is_sorted(times.begin(), times.end()));
  CHECK(q.json.find("\"calls\":\"2\"") != std::string::npos);
  // Without any other event, the group is sent within the interval.
  compute();
  compute();
  bool arrived = false;
  for (int i = 0; i < 200 && !arrived; ++i) {
    arrived = audited("device_compute") == 7;
    if (!arrived)
      std::this_thread::sleep_for(25ms);
  }
  CHECK(arrived);
}

TEST_CASE_METHOD(fixture, "a device actor that exits sends the compute "
                          "records it held back",
                 "[audit]") {
  device::device_actor_config dc;
  dc.node = "n1";
  dc.audit = audit;
  dc.audit_batch_interval = std::chrono::hours(1);
  auto slow = device::spawn_device_actor(sys, *reg.devices().front(), dc);
  handle_id a = 0;
  REQUIRE_FALSE(ask(a, slow, allocate_atom::value, std::uint64_t{32}));
  std::vector<kernel_call> batch{add_call(a, a, a, 8)};
  caf::atom_value ok;
  for (int i = 0; i < 3; ++i)
    REQUIRE_FALSE(ask(ok, slow, compute_atom::value, batch));
  self->send_exit(slow, caf::exit_reason::user_shutdown);
  self->wait_for(slow);
  // The sink has the records once it has read what the exit sent.
  bool arrived = false;
  for (int i = 0; i < 200 && !arrived; ++i) {
    arrived = audited("device_compute") == 3;
    if (!arrived)
      std::this_thread::sleep_for(25ms);
  }
  CHECK(arrived);
}
