// The member view: merging gossip, failure detection, coordinator choice,
// refutation, and validation of what peers send.

#include "actors/cluster/member_table.hpp"

#include <catch2/catch.hpp>

using namespace exo;
using namespace exo::cluster;
using namespace std::chrono_literals;

namespace {

member_info member(const std::string& name, std::uint64_t inc,
                   member_status st = member_status::alive) {
  member_info m;
  m.name = name;
  m.host = "127.0.0.1";
  m.port = 7700;
  m.incarnation = inc;
  m.status = st;
  return m;
}

const time_point t0{};

} // namespace

TEST_CASE("the coordinator is the alive member with the smallest name") {
  member_table t{member("m", 1)};
  CHECK(t.coordinator() == "m");
  t.merge(member("b", 1), t0);
  t.merge(member("z", 1), t0);
  CHECK(t.coordinator() == "b");
  t.mark("b", member_status::dead, "killed");
  CHECK(t.coordinator() == "m");
}

TEST_CASE("a death verdict is final for an incarnation, a restart wins") {
  member_table t{member("a", 1)};
  t.merge(member("b", 5), t0);
  CHECK(t.merge(member("b", 5, member_status::dead), t0));
  CHECK_FALSE(t.alive("b"));
  CHECK_FALSE(t.merge(member("b", 5), t0)); // stale alive claim
  CHECK_FALSE(t.alive("b"));
  CHECK(t.merge(member("b", 6), t0)); // restarted
  CHECK(t.alive("b"));
  CHECK_FALSE(t.merge(member("b", 5, member_status::left), t0));
  CHECK(t.alive("b"));
}

TEST_CASE("silent members expire after the failure timeout") {
  member_table t{member("a", 1)};
  t.merge(member("b", 1), t0);
  t.merge(member("c", 1), t0);
  t.heard_from("c", t0 + 1000ms);
  auto dead = t.expire(t0 + 1600ms, 1500ms);
  CHECK(dead == std::vector<std::string>{"b"});
  CHECK(t.alive("c"));
  CHECK(t.alive("a")); // never ourselves
  CHECK(t.find("b")->status_reason.find("no heartbeat") == 0);
}

TEST_CASE("claims about ourselves are ignored and refuted") {
  member_table t{member("a", 10)};
  member_view v;
  v.members = {member("a", 10, member_status::dead)};
  t.merge(v, t0);
  CHECK(t.alive("a"));
  CHECK(t.accuses_self(v));
  t.bump_incarnation(10);
  CHECK(t.self_incarnation() == 11);
  CHECK_FALSE(t.accuses_self(v));
}

TEST_CASE("a completed handshake revives a member gossip called dead") {
  member_table t{member("a", 1)};
  t.merge(member("b", 3, member_status::dead), t0);
  CHECK_FALSE(t.alive("b"));
  t.revive("b", t0);
  CHECK(t.alive("b"));
}

TEST_CASE("a member that rejoins after a death verdict comes back one "
          "incarnation above it, which old gossip cannot undo") {
  // Seen from a: c was declared dead at incarnation 3 (it froze); it
  // thawed and completes a join handshake, still at 3.
  member_table a{member("a", 1)};
  a.merge(member("c", 3), t0);
  a.mark("c", member_status::dead, "no heartbeat");
  CHECK(a.rejoin(member("c", 3), t0 + 1s));
  REQUIRE(a.find("c"));
  CHECK(a.alive("c"));
  CHECK(a.find("c")->incarnation == 4);
  // b, which still holds the old verdict, gossips it: it no longer wins.
  member_view from_b;
  from_b.members = {member("c", 3, member_status::dead)};
  a.merge(from_b, t0 + 2s);
  CHECK(a.alive("c"));
  // c adopts the incarnation the view gives it (never a lower one) and
  // its own records carry it from then on.
  member_table c{member("c", 3)};
  CHECK(c.adopt_incarnation(4));
  CHECK(c.self_incarnation() == 4);
  CHECK(!c.adopt_incarnation(2));
  CHECK(c.self_incarnation() == 4);
  // A member known alive at that incarnation rejoins as it is.
  CHECK(!a.rejoin(member("c", 4), t0 + 3s));
  CHECK(a.find("c")->incarnation == 4);
  // A member seen for the first time is fresh.
  CHECK(a.rejoin(member("d", 1), t0 + 3s));
  CHECK(a.alive("d"));
}

TEST_CASE("a node paused past the failure timeout does not blame the others "
          "for its own silence") {
  member_table t{member("c", 1)};
  t.merge(member("a", 1), t0);
  t.merge(member("b", 1), t0);
  // Woken 5 s later: everyone is heard from now, nobody expires yet.
  t.heard_from_all(t0 + 5s);
  CHECK(t.expire(t0 + 5s, 1500ms).empty());
  CHECK(t.alive("a"));
  // Still silent a failure timeout later: now it is theirs.
  CHECK(t.expire(t0 + 7s, 1500ms).size() == 2);
}

TEST_CASE("a death verdict that our own connection and heartbeats "
          "contradict is discounted") {
  // After a partition heals, n3 still gossips the verdicts it reached while
  // cut off ("n2 dead"); n1, connected to n2 and hearing its heartbeats,
  // must not take them, or n2 flaps dead and alive again.
  member_table t{member("n1", 1)};
  t.merge(member("n2", 4), t0);
  t.merge(member("n4", 2), t0);
  t.merge(member("n5", 1), t0);
  t.heard_from("n2", t0 + 1000ms);
  t.heard_from("n4", t0 + 1000ms);
  t.heard_from("n5", t0 + 1000ms);
  member_view v;
  v.from = "n3";
  v.members = {member("n2", 4, member_status::dead),   // stale: discounted
               member("n4", 2, member_status::dead),   // not connected
               member("n5", 1, member_status::left),   // left always passes
               member("n1", 1, member_status::dead)};  // about us: refuted
  auto now = t0 + 1200ms;
  std::vector<std::string> connected{"n2", "n5"};
  auto gone = t.discount_hearsay(v, now, 1500ms, connected);
  CHECK(gone == std::vector<std::string>{"n2"});
  REQUIRE(v.members.size() == 3);
  t.merge(v, now);
  CHECK(t.alive("n2"));
  CHECK_FALSE(t.alive("n4"));
  CHECK_FALSE(t.alive("n5"));
  CHECK(t.accuses_self(v));

  // Silence past the window, or a newer incarnation, is news: it passes.
  member_table u{member("n1", 1)};
  u.merge(member("n2", 4), t0);
  u.heard_from("n2", t0);
  member_view late;
  late.members = {member("n2", 4, member_status::dead)};
  CHECK(u.discount_hearsay(late, t0 + 1600ms, 1500ms, {"n2"}).empty());
  CHECK(late.members.size() == 1);
  member_view newer;
  newer.members = {member("n2", 5, member_status::dead)};
  CHECK(u.discount_hearsay(newer, t0 + 100ms, 1500ms, {"n2"}).empty());
  CHECK(newer.members.size() == 1);
}

TEST_CASE("members we hold dead that a peer's view lists alive at the same "
          "incarnation or later are contradicted, and we must dial them") {
  member_table t{member("c", 1)};
  t.merge(member("a", 5), t0);
  t.merge(member("b", 3), t0);
  t.merge(member("d", 2), t0);
  t.merge(member("e", 4), t0);
  t.mark("a", member_status::dead, "no heartbeat");
  t.mark("b", member_status::dead, "no heartbeat");
  t.mark("d", member_status::left, "left the cluster");
  member_view v;
  v.from = "e";
  v.members = {member("a", 5),                      // same incarnation
               member("b", 2),                      // an older record
               member("c", 1, member_status::dead), // about ourselves
               member("d", 2),                      // left is final
               member("e", 4)};                     // alive here too
  CHECK(t.contradicted(v) == std::vector<std::string>{"a"});
  // Merged, the verdict stands at an equal incarnation (so the dial is
  // the only way back) and a later one is taken as it is.
  t.merge(v, t0);
  CHECK(!t.alive("a"));
  CHECK(t.contradicted(v) == std::vector<std::string>{"a"});
  v.members = {member("b", 4)};
  CHECK(t.contradicted(v) == std::vector<std::string>{"b"});
  t.merge(v, t0);
  CHECK(t.alive("b"));
  CHECK(t.contradicted(v).empty());
}

TEST_CASE("records from the network are validated against limits") {
  auto ok = member("node-1", 1);
  CHECK_FALSE(member_table::validate(ok));
  auto bad = ok;
  bad.name = "../etc";
  CHECK(member_table::validate(bad));
  bad = ok;
  bad.name = std::string(65, 'x');
  CHECK(member_table::validate(bad));
  bad = ok;
  bad.port = 0;
  CHECK(member_table::validate(bad));
  bad = ok;
  bad.devices.resize(max_devices_per_member + 1);
  CHECK(*member_table::validate(bad) == "member node-1: too many devices");
  member_view v;
  v.members.assign(max_members + 1, ok);
  CHECK(*member_table::validate(v) == "view has too many members");
}

TEST_CASE("member events: joined, status changes and removals, in name "
          "order, each naming the coordinator") {
  member_table t{member("m", 1)};
  auto before = t.view();
  CHECK(member_changes(before, t.view(), t.coordinator()).empty());
  t.merge(member("z", 1), t0);
  t.merge(member("b", 2), t0);
  auto joined = member_changes(before, t.view(), t.coordinator());
  REQUIRE(joined.size() == 2);
  CHECK(joined[0].change == member_change::joined);
  CHECK(joined[0].member.name == "b");
  CHECK(joined[0].coordinator == "b");
  CHECK(joined[1].member.name == "z");
  before = t.view();
  t.mark("b", member_status::dead, "killed");
  t.mark("z", member_status::left, "maintenance");
  auto changed = member_changes(before, t.view(), t.coordinator());
  REQUIRE(changed.size() == 2);
  CHECK(changed[0].change == member_change::status);
  CHECK(changed[0].member.name == "b");
  CHECK(changed[0].member.status == member_status::dead);
  CHECK(changed[0].member.status_reason == "killed");
  CHECK(changed[0].previous == member_status::alive);
  CHECK(changed[0].coordinator == "m"); // b is dead now
  CHECK(changed[1].member.status == member_status::left);
  // A member missing from the later view was removed; the earlier view's
  // record is the one reported.
  auto after = t.view();
  auto shrunk = after;
  shrunk.members.erase(shrunk.members.begin()); // "b"
  auto removed = member_changes(after, shrunk, "m");
  REQUIRE(removed.size() == 1);
  CHECK(removed[0].change == member_change::removed);
  CHECK(removed[0].member.name == "b");
  CHECK(std::string{to_string(member_change::removed)} == "removed");
}

TEST_CASE("member events: a member restarted between two views ends its "
          "old incarnation, then joins with the new one") {
  member_table t{member("m", 1)};
  t.merge(member("b", 1), t0);
  t.merge(member("c", 1), t0);
  auto before = t.view();
  // b left and came back within one tick: only its incarnation shows it.
  t.mark("b", member_status::left, "left the cluster");
  t.merge(member("b", 2), t0);
  auto es = member_changes(before, t.view(), t.coordinator());
  REQUIRE(es.size() == 2);
  CHECK(es[0].change == member_change::status);
  CHECK(es[0].member.name == "b");
  CHECK(es[0].member.incarnation == 1);
  CHECK(es[0].member.status == member_status::dead);
  CHECK(es[0].member.status_reason == "restarted (incarnation 1 -> 2)");
  CHECK(es[1].change == member_change::joined);
  CHECK(es[1].member.incarnation == 2);
  CHECK(es[1].member.status == member_status::alive);
  // Seen left in one view, back in the next: its end was told already.
  t.mark("c", member_status::left, "left the cluster");
  auto left = t.view();
  t.merge(member("c", 3), t0);
  es = member_changes(left, t.view(), t.coordinator());
  REQUIRE(es.size() == 1);
  CHECK(es[0].change == member_change::joined);
  CHECK(es[0].member.incarnation == 3);
  CHECK(es[0].previous == member_status::left);
}

TEST_CASE("member events - a member that refuted a verdict between two views "
          "is the same life and not a restart") {
  auto life = [](const std::string& name, std::uint64_t inc,
                 std::int64_t joined) {
    auto m = member(name, inc);
    m.join_time_ns = joined;
    return m;
  };
  member_table t{member("m", 1)};
  t.merge(life("b", 1, 1000), t0);
  t.merge(life("c", 1, 2000), t0);
  auto before = t.view();
  // b raised its incarnation to refute a stale verdict this node never
  // held: alive in both views, the same join time. No event: the jobs it
  // coordinates are not taken over.
  t.merge(life("b", 2, 1000), t0);
  // c restarted within the tick: a new join time.
  t.mark("c", member_status::left, "left the cluster");
  t.merge(life("c", 2, 5000), t0);
  auto es = member_changes(before, t.view(), t.coordinator());
  REQUIRE(es.size() == 2);
  CHECK(es[0].member.name == "c");
  CHECK(es[0].change == member_change::status);
  CHECK(es[0].member.status == member_status::dead);
  CHECK(es[0].member.status_reason == "restarted (incarnation 1 -> 2)");
  CHECK(es[1].member.name == "c");
  CHECK(es[1].change == member_change::joined);
  // Seen dead, then back in the same life: it joins again, as before.
  t.mark("b", member_status::dead, "no heartbeat");
  auto dead = t.view();
  t.merge(life("b", 3, 1000), t0);
  es = member_changes(dead, t.view(), t.coordinator());
  REQUIRE(es.size() == 1);
  CHECK(es[0].change == member_change::joined);
  CHECK(es[0].previous == member_status::dead);
  // Without a join time (0: not known) a new incarnation is a restart.
  member_table u{member("m", 1)};
  u.merge(member("d", 1), t0);
  auto u0 = u.view();
  u.merge(member("d", 2), t0);
  es = member_changes(u0, u.view(), u.coordinator());
  REQUIRE(es.size() == 2);
  CHECK(es[0].member.status_reason == "restarted (incarnation 1 -> 2)");
}

TEST_CASE("departed members are forgotten after the retention, and stale "
          "gossip does not bring them back") {
  member_table t{member("m", 1)};
  t.merge(member("b", 3), t0);
  t.merge(member("c", 1), t0);
  t.merge(member("d", 2, member_status::left), t0);
  t.mark("b", member_status::dead, "killed");
  // Retention counts from the first call that sees a member departed.
  CHECK(t.forget_departed(t0 + 1s, 10s).empty());
  CHECK(t.forget_departed(t0 + 10s, 10s).empty());
  auto gone = t.forget_departed(t0 + 11s, 10s);
  CHECK(gone == std::vector<std::string>{"b", "d"});
  CHECK(t.find("b") == nullptr);
  CHECK(t.find("d") == nullptr);
  CHECK(t.alive("c")); // alive members stay
  CHECK(t.find("m") != nullptr); // and ourselves
  CHECK(t.view().members.size() == 2);
  // A peer that has not forgotten yet gossips them back: ignored, alive
  // claims of the forgotten incarnation too.
  CHECK_FALSE(t.merge(member("b", 3, member_status::dead), t0 + 12s));
  CHECK_FALSE(t.merge(member("b", 3), t0 + 12s));
  CHECK_FALSE(t.merge(member("d", 1, member_status::left), t0 + 12s));
  CHECK(t.find("b") == nullptr);
  // A later incarnation is a restart: it comes back.
  CHECK(t.merge(member("d", 3), t0 + 12s));
  CHECK(t.alive("d"));
  // The member itself joining over its own connection comes back too.
  CHECK(t.rejoin(member("b", 3), t0 + 12s));
  CHECK(t.alive("b"));
  // A member that died and came back alive before the retention ran out
  // starts its count again when it departs next.
  t.merge(member("e", 1), t0 + 12s);
  t.mark("e", member_status::dead, "killed");
  CHECK(t.forget_departed(t0 + 13s, 10s).empty());
  t.merge(member("e", 2), t0 + 14s);
  CHECK(t.forget_departed(t0 + 15s, 10s).empty());
  t.mark("e", member_status::dead, "killed");
  CHECK(t.forget_departed(t0 + 20s, 10s).empty());
  CHECK(t.forget_departed(t0 + 29s, 10s).empty());
  CHECK(t.forget_departed(t0 + 30s, 10s) == std::vector<std::string>{"e"});
  // After a second retention the quarantine ends: the old incarnation is
  // news again (a node partitioned away for that long).
  CHECK(t.forget_departed(t0 + 41s, 10s).empty());
  CHECK(t.merge(member("e", 2, member_status::dead), t0 + 41s));
}

TEST_CASE("a cluster whose nodes come and go under new names keeps a view "
          "within the limit") {
  member_table t{member("m", 1)};
  auto now = t0;
  for (int i = 0; i < 3 * static_cast<int>(max_members); ++i) {
    auto name = "app" + std::to_string(i);
    t.merge(member(name, 1), now);
    t.mark(name, member_status::left, "stopped");
    now += 1s;
    t.forget_departed(now, 60s);
    REQUIRE_FALSE(member_table::validate(t.view()));
  }
  CHECK(t.view().members.size() <= 62);
}
