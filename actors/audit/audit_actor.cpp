#include "actors/audit/audit_actor.hpp"

#include "core/text/json.hpp"
#include "core/text/json_escape.hpp"
#include "core/audit/log_files.hpp"
#include "core/audit/verify.hpp"
#include "core/console/commands.hpp"
#include "messages/cluster.hpp"

#include <caf/all.hpp>

#include <memory>
#include <sstream>

namespace exo::audit {

using text::append_json_string;

audit_entry to_entry(const event& ev) {
  audit_entry e;
  e.type = static_cast<std::uint8_t>(ev.type);
  e.level = static_cast<std::uint8_t>(ev.level);
  e.principal = ev.principal;
  e.details = ev.details;
  e.time_us = ev.time_us.value_or(0);
  return e;
}

void emit(const caf::actor& sink, const event& ev) {
  if (sink)
    caf::anon_send(sink, audit_atom::value, to_entry(ev));
}

namespace {

/// The query of a parsed "audit query"; returns an error message.
std::string query_of(const console::parsed_command& p, audit_query& q) {
  if (p.has("type")) {
    auto t = parse_event_type(p.text("type"));
    if (!t)
      return "unknown event type \"" + p.text("type") + "\"";
    q.type = *t;
  }
  if (p.has("principal"))
    q.principal = p.text("principal");
  for (const char* key : {"since", "until"}) {
    if (!p.has(key))
      continue;
    auto t = parse_time(p.text(key));
    if (!t)
      return std::string{key}
             + ": not a time (µs since the epoch or ISO 8601 UTC)";
    (std::string{key} == "since" ? q.since_us : q.until_us) = *t;
  }
  if (p.has("after"))
    q.after_seq = p.count("after", 0);
  if (p.has("limit"))
    q.limit = static_cast<std::size_t>(p.count("limit", q.limit));
  return {};
}

} // namespace

std::string parse_query_args(const std::string& args, audit_query& q) {
  try {
    return query_of(console::parse_command("audit", "query " + args), q);
  } catch (const console::command_error& e) {
    return e.what();
  }
}

namespace {

struct audit_state {
  static inline const char* name = "exo.audit";
  audit_actor_config cfg;
  /// Flushed by its destructor when the state goes (on exit).
  std::shared_ptr<audit_log> log;
  std::uint64_t dropped = 0;
  std::uint64_t received = 0;
  std::string last_error;
};

using self_ptr = caf::stateful_actor<audit_state>*;

console_reply render_query(const query_page& page) {
  console_reply r;
  r.command = "audit";
  // The records go out as the log holds them, byte for byte (their hashes
  // stay checkable): the envelope around them is the only JSON built here.
  std::string json = "{\"records\":[";
  std::ostringstream text;
  bool first = true;
  for (auto& rec : page.records) {
    json += first ? "" : ",";
    first = false;
    std::string line;
    append_record_line(line, rec);
    if (!line.empty() && line.back() == '\n')
      line.pop_back();
    json += line;
    text << rec.seq << "  " << rec.time_us << "  " << to_string(rec.type)
         << "  " << to_string(rec.level) << "  "
         << (rec.principal.empty() ? "-" : rec.principal);
    for (auto& [k, v] : rec.details)
      text << "  " << k << "=" << v;
    text << "\n";
  }
  json += "]";
  if (page.next_cursor)
    json += ",\"next_cursor\":" + std::to_string(*page.next_cursor);
  json += "}";
  if (page.records.empty())
    text << "no matching records\n";
  if (page.next_cursor)
    text << "more: audit query ... after=" << *page.next_cursor << "\n";
  r.text = text.str();
  r.json = std::move(json);
  return r;
}

console_reply run_verify(audit_state& st) {
  st.log->flush();
  std::vector<std::string> files;
  for (auto& f : list_log_files(st.cfg.log.directory, st.cfg.log.file_prefix))
    files.push_back(f.path);
  auto v = verify(files);
  console_reply r;
  r.command = "audit";
  std::ostringstream lines;
  text::json json = {{"ok", v.ok},
                     {"files", v.files},
                     {"records", v.records},
                     {"last_seq", v.last_seq}};
  if (v.ok) {
    lines << "audit chain ok: " << v.records << " records in " << v.files
         << " files, last seq " << v.last_seq << "\n";
  } else {
    lines << "audit chain BROKEN";
    if (v.bad_seq)
      lines << " at seq " << *v.bad_seq;
    lines << " (" << v.bad_file << ":" << v.bad_line << "): " << v.reason
         << "\n";
    json["bad_seq"] = v.bad_seq ? text::json(*v.bad_seq) : text::json(nullptr);
    json["reason"] = v.reason;
  }
  r.text = lines.str();
  r.json = text::compact(json);
  return r;
}

/// Appends one entry to the log; an unknown type or level is dropped.
void take(audit_state& st, audit_entry& e) {
  ++st.received;
  if (e.type >= event_type_count || e.level > 4) {
    ++st.dropped;
    return;
  }
  event ev;
  ev.type = static_cast<event_type>(e.type);
  ev.level = static_cast<severity>(e.level);
  ev.principal = std::move(e.principal);
  ev.details = std::move(e.details);
  if (e.time_us != 0)
    ev.time_us = e.time_us;
  try {
    st.log->append(ev);
  } catch (const std::exception& x) {
    ++st.dropped;
    st.last_error = x.what();
  }
}

caf::behavior audit_impl(self_ptr self, audit_actor_config cfg,
                         std::shared_ptr<audit_log> log) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  st.log = std::move(log);
  if (st.log->recovery().truncated_bytes > 0) {
    event ev;
    ev.type = event_type::audit_recovered;
    ev.level = severity::warning;
    ev.details = {
      {"truncated_bytes", std::to_string(st.log->recovery().truncated_bytes)},
      {"dropped_lines", std::to_string(st.log->recovery().dropped_lines)}};
    st.log->append(ev);
  }
  self->delayed_send(self, st.cfg.flush_interval, tick_atom::value);
  return {
    [self](audit_atom, audit_entry& e) { take(self->state, e); },
    [self](audit_atom, std::vector<audit_entry>& es) {
      for (auto& e : es)
        take(self->state, e);
    },
    [self](audit_atom, caf::flush_atom) -> std::uint64_t {
      auto& st = self->state;
      try {
        st.log->flush();
      } catch (const std::exception& x) {
        st.last_error = x.what();
      }
      return st.log->last_seq();
    },
    [self](tick_atom) {
      auto& st = self->state;
      try {
        if (st.log->buffered() > 0)
          st.log->flush();
      } catch (const std::exception& x) {
        st.last_error = x.what();
      }
      self->delayed_send(self, st.cfg.flush_interval, tick_atom::value);
    },
    [self](console_atom, const std::string& cmd,
           const std::string& arg) -> caf::result<console_reply> {
      auto& st = self->state;
      console::parsed_command p;
      try {
        p = console::parse_command("audit", arg);
      } catch (const console::command_error& e) {
        return caf::make_error(caf::sec::invalid_argument,
                               std::string{"audit: "} + e.what()
                                 + " (help audit)");
      }
      try {
        if (p.sub == "query") {
          audit_query q;
          auto err = query_of(p, q);
          if (!err.empty())
            return caf::make_error(caf::sec::invalid_argument,
                                   "audit query: " + err);
          return render_query(st.log->query(q));
        }
        if (p.sub == "verify")
          return run_verify(st);
      } catch (const std::exception& x) {
        return caf::make_error(caf::sec::runtime_error,
                               std::string{"audit: "} + x.what());
      }
      return caf::make_error(caf::sec::invalid_argument,
                             "audit: query or verify (help audit)");
    },
    [self](inspect_atom) {
      auto& st = self->state;
      actor_snapshot snap;
      snap.name = "audit";
      snap.kind = "audit";
      snap.node = st.cfg.log.node;
      snap.summary = std::to_string(st.log->last_seq()) + " records";
      snap.fields = {{"last_seq", std::to_string(st.log->last_seq())},
                     {"buffered", std::to_string(st.log->buffered())},
                     {"received", std::to_string(st.received)},
                     {"dropped", std::to_string(st.dropped)},
                     {"file", st.log->current_file()},
                     {"last_error", st.last_error}};
      return snap;
    },
  };
}

} // namespace

caf::actor spawn_audit_actor(caf::actor_system& sys, audit_actor_config cfg) {
  // Opened here so that a log that cannot be opened fails the caller.
  auto log = std::make_shared<audit_log>(cfg.log);
  return sys.spawn<caf::detached>(audit_impl, std::move(cfg), std::move(log));
}

} // namespace exo::audit
