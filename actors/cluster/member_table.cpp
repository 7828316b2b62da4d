#include "actors/cluster/member_table.hpp"

#include <algorithm>
#include <cctype>
#include <map>

namespace exo::cluster {

namespace {

int severity(member_status s) {
  switch (s) {
    case member_status::alive: return 0;
    case member_status::dead: return 1;
    case member_status::left: return 2;
  }
  return 0;
}

} // namespace

member_table::member_table(member_info self) : self_(self.name) {
  self.status = member_status::alive;
  members_[self_] = entry{std::move(self), time_point{}, std::nullopt};
}

void member_table::update_self(std::vector<device_info> devices,
                               std::vector<link_info> links) {
  auto& me = members_[self_].info;
  me.devices = std::move(devices);
  me.links = std::move(links);
}

bool member_table::merge(const member_info& m, time_point now) {
  if (m.name == self_)
    return false;
  auto it = members_.find(m.name);
  if (it == members_.end()) {
    if (auto f = forgotten_.find(m.name);
        f != forgotten_.end() && m.incarnation <= f->second.incarnation)
      return false; // stale gossip about a member forgotten here
    forgotten_.erase(m.name);
    members_[m.name] = entry{m, now, std::nullopt};
    return true;
  }
  auto& cur = it->second.info;
  if (m.incarnation > cur.incarnation) {
    cur = m;
    it->second.last_heard = now;
    return true;
  }
  if (m.incarnation < cur.incarnation)
    return false;
  bool changed = false;
  if (severity(m.status) > severity(cur.status)) {
    cur.status = m.status;
    cur.status_reason = m.status_reason;
    changed = true;
  }
  // Devices and links of a member are newest from the member itself;
  // take them when the record is alive (it came from a live exchange).
  if (m.status == member_status::alive && cur.status == member_status::alive) {
    if (m.devices.size() != cur.devices.size() || m.links.size() != cur.links.size())
      changed = true;
    cur.devices = m.devices;
    cur.links = m.links;
    cur.host = m.host;
    cur.port = m.port;
    cur.bulk_port = m.bulk_port;
  }
  return changed;
}

bool member_table::merge(const member_view& v, time_point now) {
  bool changed = false;
  for (auto& m : v.members)
    changed = merge(m, now) || changed;
  return changed;
}

void member_table::heard_from(const std::string& name, time_point now) {
  auto it = members_.find(name);
  if (it != members_.end())
    it->second.last_heard = now;
}

std::vector<std::string>
member_table::expire(time_point now, std::chrono::milliseconds timeout) {
  std::vector<std::string> out;
  for (auto& [name, e] : members_) {
    if (name == self_ || e.info.status != member_status::alive)
      continue;
    if (now - e.last_heard > timeout) {
      e.info.status = member_status::dead;
      e.info.status_reason = "no heartbeat for "
                             + std::to_string(timeout.count()) + " ms";
      out.push_back(name);
    }
  }
  return out;
}

bool member_table::mark(const std::string& name, member_status status,
                        const std::string& reason) {
  auto it = members_.find(name);
  if (it == members_.end() || name == self_)
    return false;
  auto& cur = it->second.info;
  if (severity(status) <= severity(cur.status))
    return false;
  cur.status = status;
  cur.status_reason = reason;
  return true;
}

void member_table::revive(const std::string& name, time_point now) {
  auto it = members_.find(name);
  if (it == members_.end() || name == self_)
    return;
  it->second.info.status = member_status::alive;
  it->second.info.status_reason.clear();
  it->second.last_heard = now;
}

std::vector<std::string>
member_table::forget_departed(time_point now,
                              std::chrono::milliseconds retention) {
  for (auto it = forgotten_.begin(); it != forgotten_.end();)
    it = it->second.until <= now ? forgotten_.erase(it) : std::next(it);
  std::vector<std::string> out;
  for (auto it = members_.begin(); it != members_.end();) {
    auto& e = it->second;
    if (it->first == self_ || e.info.status == member_status::alive) {
      e.departed.reset();
      ++it;
      continue;
    }
    if (!e.departed)
      e.departed = now;
    if (now - *e.departed < retention) {
      ++it;
      continue;
    }
    forgotten_[it->first] = {e.info.incarnation, now + retention};
    out.push_back(it->first);
    it = members_.erase(it);
  }
  return out;
}

bool member_table::rejoin(const member_info& m, time_point now) {
  if (m.name == self_)
    return false;
  forgotten_.erase(m.name); // the member itself, over its own connection
  auto it = members_.find(m.name);
  if (it != members_.end() && it->second.info.status != member_status::alive
      && it->second.info.incarnation >= m.incarnation) {
    auto incarnation = it->second.info.incarnation + 1;
    it->second.info = m;
    it->second.info.incarnation = incarnation;
    it->second.info.status = member_status::alive;
    it->second.info.status_reason.clear();
    it->second.last_heard = now;
    return true;
  }
  bool fresh = it == members_.end()
               || it->second.info.incarnation != m.incarnation
               || it->second.info.status != member_status::alive;
  merge(m, now);
  revive(m.name, now);
  return fresh;
}

bool member_table::adopt_incarnation(std::uint64_t seen) {
  auto& me = members_[self_].info;
  if (seen <= me.incarnation)
    return false;
  me.incarnation = seen;
  return true;
}

void member_table::heard_from_all(time_point now) {
  for (auto& [name, e] : members_)
    if (name != self_)
      e.last_heard = now;
}

std::vector<std::string>
member_table::discount_hearsay(member_view& v, time_point now,
                               std::chrono::milliseconds window,
                               const std::vector<std::string>& connected) const {
  std::vector<std::string> out;
  auto keep = [&](const member_info& m) {
    if (m.status != member_status::dead || m.name == self_)
      return true;
    auto it = members_.find(m.name);
    if (it == members_.end() || it->second.info.status != member_status::alive
        || it->second.info.incarnation != m.incarnation
        || now - it->second.last_heard > window
        || std::find(connected.begin(), connected.end(), m.name)
             == connected.end())
      return true;
    out.push_back(m.name);
    return false;
  };
  v.members.erase(std::remove_if(v.members.begin(), v.members.end(),
                                 [&](const member_info& m) { return !keep(m); }),
                  v.members.end());
  return out;
}

std::vector<std::string>
member_table::contradicted(const member_view& v) const {
  std::vector<std::string> out;
  for (auto& m : v.members) {
    if (m.name == self_ || m.status != member_status::alive)
      continue;
    auto it = members_.find(m.name);
    if (it != members_.end() && it->second.info.status == member_status::dead
        && m.incarnation >= it->second.info.incarnation)
      out.push_back(m.name);
  }
  return out;
}

bool member_table::accuses_self(const member_view& v) const {
  auto mine = self_incarnation();
  for (auto& m : v.members)
    if (m.name == self_ && m.status != member_status::alive
        && m.incarnation >= mine)
      return true;
  return false;
}

void member_table::bump_incarnation(std::uint64_t above) {
  auto& me = members_[self_].info;
  me.incarnation = std::max(me.incarnation, above) + 1;
}

std::uint64_t member_table::self_incarnation() const {
  return members_.at(self_).info.incarnation;
}

bool member_table::alive(const std::string& name) const {
  auto it = members_.find(name);
  return it != members_.end()
         && it->second.info.status == member_status::alive;
}

const member_info* member_table::find(const std::string& name) const {
  auto it = members_.find(name);
  return it == members_.end() ? nullptr : &it->second.info;
}

std::string member_table::coordinator() const {
  for (auto& [name, e] : members_) // std::map: sorted by name
    if (e.info.status == member_status::alive)
      return name;
  return self_;
}

member_view member_table::view() const {
  member_view v;
  v.from = self_;
  for (auto& [name, e] : members_)
    v.members.push_back(e.info);
  return v;
}

std::vector<std::string> member_table::alive_peers() const {
  std::vector<std::string> out;
  for (auto& [name, e] : members_)
    if (name != self_ && e.info.status == member_status::alive)
      out.push_back(name);
  return out;
}

bool member_table::valid_name(const std::string& name) {
  if (name.empty() || name.size() > max_name_length)
    return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'
           || c == '.';
  });
}

std::optional<std::string> member_table::validate(const member_info& m) {
  if (!valid_name(m.name))
    return "member name is empty, too long or has invalid characters";
  if (m.host.empty() || m.host.size() > 255)
    return "member " + m.name + ": bad host";
  if (m.port == 0)
    return "member " + m.name + ": bad port";
  if (m.status_reason.size() > max_text_length)
    return "member " + m.name + ": status reason too long";
  if (m.devices.size() > max_devices_per_member)
    return "member " + m.name + ": too many devices";
  if (m.links.size() > max_links_per_member)
    return "member " + m.name + ": too many links";
  for (auto& d : m.devices)
    if (d.id.size() > 256 || d.name.size() > max_text_length
        || d.state_reason.size() > max_text_length)
      return "member " + m.name + ": device record too large";
  for (auto& l : m.links)
    if (!valid_name(l.from) || !valid_name(l.to))
      return "member " + m.name + ": bad link names";
  return std::nullopt;
}

std::optional<std::string> member_table::validate(const member_view& v) {
  if (v.members.size() > max_members)
    return "view has too many members";
  for (auto& m : v.members)
    if (auto err = validate(m))
      return err;
  return std::nullopt;
}

std::vector<member_event> member_changes(const member_view& before,
                                         const member_view& after,
                                         const std::string& coordinator) {
  std::map<std::string, const member_info*> old;
  for (auto& m : before.members)
    old[m.name] = &m;
  std::map<std::string, std::vector<member_event>> out;
  for (auto& m : after.members) {
    auto it = old.find(m.name);
    if (it == old.end()) {
      out[m.name].push_back({member_change::joined, m, m.status, coordinator});
      continue;
    }
    auto& was = *it->second;
    // The same life of the node (its join time, set once at its start,
    // unchanged) alive in both views at a higher incarnation: it refuted
    // a verdict this node never held, and never stopped. Reporting that
    // as a restart had the jobs it coordinated taken over for nothing.
    bool refuted = was.incarnation != m.incarnation && was.join_time_ns != 0
                   && was.join_time_ns == m.join_time_ns
                   && was.status == member_status::alive
                   && m.status == member_status::alive;
    if (refuted) {
      // Nothing changed that a listener acts on.
    } else if (was.incarnation != m.incarnation) {
      // Restarted between the two views (it left or died and came back
      // within one tick): the old incarnation ended — listeners that act
      // on a member's end (jobs it coordinated, stages it held) must see
      // it — and a new one joined.
      // (Seen dead or left already, its end was an event of its own.)
      auto gone = was;
      if (was.status == member_status::alive) {
        gone.status = member_status::dead;
        gone.status_reason = "restarted (incarnation "
                             + std::to_string(was.incarnation) + " -> "
                             + std::to_string(m.incarnation) + ")";
        out[m.name].push_back(
          {member_change::status, gone, was.status, coordinator});
      }
      out[m.name].push_back(
        {member_change::joined, m, gone.status, coordinator});
    } else if (was.status != m.status) {
      out[m.name].push_back(
        {member_change::status, m, was.status, coordinator});
    }
    old.erase(it);
  }
  for (auto& [name, m] : old)
    out[name].push_back({member_change::removed, *m, m->status, coordinator});
  std::vector<member_event> xs;
  for (auto& [name, es] : out)
    for (auto& e : es)
      xs.push_back(std::move(e));
  return xs;
}

} // namespace exo::cluster
