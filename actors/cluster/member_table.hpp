#pragma once

/// The membership's pure core: the member view, how gossip merges into it,
/// failure detection from heartbeat times, and the deterministic choice of
/// the coordinator. No actors, no clocks of its own: callers pass `now`.
///
/// Merge rule for one name: a higher incarnation (a later start of that
/// node) wins; for the same incarnation the "worse" status wins
/// (left > dead > alive), so a death verdict is final for that incarnation
/// and a restarted node comes back with a new one. Claims about ourselves
/// from others are ignored: we know best whether we are alive.

#include "messages/cluster.hpp"

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace exo::cluster {

using time_point = std::chrono::steady_clock::time_point;

class member_table {
public:
  explicit member_table(member_info self);

  const std::string& self_name() const noexcept {
    return self_;
  }

  /// Replaces our own record's devices and links.
  void update_self(std::vector<device_info> devices,
                   std::vector<link_info> links);

  /// Merges one record (from gossip or a handshake). Returns whether the
  /// view changed.
  bool merge(const member_info& m, time_point now);

  /// Merges every record of a view.
  bool merge(const member_view& v, time_point now);

  /// A heartbeat (or any message) from `name` arrived.
  void heard_from(const std::string& name, time_point now);

  /// Marks alive members silent for longer than `timeout` as dead; returns
  /// their names.
  std::vector<std::string> expire(time_point now,
                                  std::chrono::milliseconds timeout);

  /// Marks a member dead / left (this incarnation). Returns whether it
  /// changed.
  bool mark(const std::string& name, member_status status,
            const std::string& reason);

  /// Direct proof of life (a completed handshake) beats hearsay: marks
  /// `name` alive again even if gossip had declared it dead.
  void revive(const std::string& name, time_point now);

  /// A member that completed a join handshake with us (`m`: its own
  /// record). When we hold it dead or gone at its incarnation or later, its
  /// record comes back alive one incarnation above ours — a verdict that
  /// other members still gossip at the old incarnation no longer overrides
  /// it (a frozen node thawed, a partition healed); the member adopts that
  /// incarnation from the view it gets (adopt_incarnation). Else merged
  /// and revived. Returns whether it was not known alive at m's
  /// incarnation before.
  bool rejoin(const member_info& m, time_point now);

  /// Forgets the members that have been dead or gone for `retention`
  /// (counted from the first call that saw them so): without it a
  /// long-lived cluster whose nodes come and go under new names (embedded
  /// applications, autoscaled machines) filled its view with departed
  /// members until the view outgrew max_members and nobody could join.
  /// For `retention` more, gossip that still lists a forgotten member at
  /// the incarnation it was forgotten at or below is ignored (the peers
  /// forget it too, a little later; taking it back would pass it back and
  /// forth for ever); a join of the member itself (rejoin) or a later
  /// incarnation brings it back. Returns the names forgotten.
  std::vector<std::string> forget_departed(time_point now,
                                           std::chrono::milliseconds retention);

  /// Takes `seen` as our incarnation when it is larger (a peer raised it
  /// for us on a rejoin). Returns whether it did.
  bool adopt_incarnation(std::uint64_t seen);

  /// Every member heard from now: after this node itself was paused
  /// longer than the failure timeout (frozen, suspended), the others'
  /// silence is not theirs.
  void heard_from_all(time_point now);

  /// Takes out of `v` the death verdicts that our own evidence
  /// contradicts: a member `v` calls dead at the incarnation we hold alive,
  /// that we are still connected to (`connected`) and heard from within
  /// `window` (the failure timeout). Such a verdict is the gossiper's view
  /// of its own link (a healed partition's stale verdicts, an asymmetric
  /// cut), not news about the member; taking it would make the member
  /// refute it and flap the membership. Returns the names taken out. A
  /// member that really dies drops our connection or goes silent, and we
  /// declare it dead ourselves; "left" and newer incarnations always pass.
  std::vector<std::string>
  discount_hearsay(member_view& v, time_point now,
                   std::chrono::milliseconds window,
                   const std::vector<std::string>& connected) const;

  /// The members we hold dead (not gone) that `v`, a peer's view, lists
  /// alive at the same incarnation or a later one: the peer still hears
  /// from them, so our verdict was about our own link or a pause of ours.
  /// A merge keeps our verdict at an equal incarnation, and the member
  /// never hears of it (its connected peers discount it), so nobody would
  /// dial the other again: we must (a join readmits us both).
  std::vector<std::string> contradicted(const member_view& v) const;

  /// Whether `v` claims we are dead or gone (at our incarnation or later).
  bool accuses_self(const member_view& v) const;

  /// Refutes such a claim: our incarnation becomes larger than any seen.
  void bump_incarnation(std::uint64_t above);

  std::uint64_t self_incarnation() const;

  bool alive(const std::string& name) const;
  const member_info* find(const std::string& name) const;

  /// The alive member with the smallest name (ourselves included).
  std::string coordinator() const;

  /// Every member, sorted by name.
  member_view view() const;

  /// Names of alive members other than ourselves.
  std::vector<std::string> alive_peers() const;

  /// Checks a record from the network against the size limits and naming
  /// rules; returns the problem, or nothing when it is fine.
  static std::optional<std::string> validate(const member_info& m);
  static std::optional<std::string> validate(const member_view& v);
  static bool valid_name(const std::string& name);

private:
  struct entry {
    member_info info;
    time_point last_heard;
    std::optional<time_point> departed; ///< first seen dead or gone
  };
  struct forgotten {
    std::uint64_t incarnation = 0;
    time_point until;
  };
  std::string self_;
  std::map<std::string, entry> members_;
  std::map<std::string, forgotten> forgotten_;
};

/// The member events that lead from `before` to `after` (two views of one
/// gate, sorted by name as view() gives them): a member new in `after` is
/// `joined`, one whose status differs is `status` (with the old status),
/// one missing from `after` is `removed`; one whose incarnation differs
/// restarted in between: a `status` event ends the old incarnation (dead,
/// "restarted ..."; none when `before` had it dead or left already), then
/// `joined` brings the new one -- unless it is alive in both with the same
/// join time (the same life: it refuted a verdict, which raised its
/// incarnation), which is no event; in name order. Each event names
/// `coordinator`.
std::vector<member_event> member_changes(const member_view& before,
                                         const member_view& after,
                                         const std::string& coordinator);

} // namespace exo::cluster
