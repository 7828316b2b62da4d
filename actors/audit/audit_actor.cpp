#include "actors/audit/audit_actor.hpp"

#include "core/text/json.hpp"
#include "core/text/json_escape.hpp"
#include "core/audit/checkpoint.hpp"
#include "core/audit/log_files.hpp"
#include "core/audit/verify.hpp"
#include "core/tls/private_key.hpp"
#include "core/tls/trust_store.hpp"
#include "core/console/commands.hpp"
#include "messages/cluster.hpp"

#include <caf/all.hpp>

#include <sys/stat.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

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

/// Signs the log's checkpoints: owned by the actor's state, and signs a last
/// one when it goes (the actor stops after the node's last records).
class checkpointer {
public:
  checkpointer() = default;
  checkpointer(const checkpointer&) = delete;
  checkpointer& operator=(const checkpointer&) = delete;

  void init(std::shared_ptr<audit_log> log, const audit_actor_config& cfg) {
    log_ = std::move(log);
    cfg_ = cfg.checkpoints;
    node_ = cfg.log.node;
    path_ = cfg.log.directory + "/checkpoints";
    if (!cfg_.clock)
      cfg_.clock = [] {
        return static_cast<std::int64_t>(
          std::chrono::duration_cast<std::chrono::seconds>(
            std::chrono::system_clock::now().time_since_epoch())
            .count());
      };
    last_time_ = std::chrono::steady_clock::now();
    // The latest own checkpoint: the next one follows it, and peers are
    // offered it at once after a restart.
    if (cfg_.key && cfg_.ca) {
      try {
        auto cps = load_checkpoints(path_, *cfg_.ca);
        if (!cps.empty() && cps.back().node == node_) {
          last_ = cps.back();
          latest_ = to_line(*last_);
          seq_ = last_->seq;
        }
      } catch (const std::exception&) {
        // Missing on a first start; an unusable file shows in verify.
      }
    }
  }

  /// Whether the log still holds what the latest own checkpoint says; when
  /// not (cut or rewritten while the node was down), returns the event that
  /// says so and starts a new chain of checkpoints, which every witness of
  /// the old one sees as a fork.
  std::optional<event> check_at_start() {
    if (!last_)
      return std::nullopt;
    std::string found;
    if (log_->last_seq() < last_->seq) {
      found = "the log ends at seq " + std::to_string(log_->last_seq());
    } else {
      // (From the log's end: a query parsed every record before it, half
      // a second of a node's start at 56k records.)
      auto at = log_->record_at(last_->seq);
      if (!at)
        found = "record " + std::to_string(last_->seq) + " is missing";
      else if (at->hash != last_->head)
        found = "record " + std::to_string(last_->seq)
                + " has another hash";
    }
    if (found.empty())
      return std::nullopt;
    event ev;
    ev.type = log_->last_seq() < last_->seq ? event_type::audit_rollback
                                            : event_type::audit_fork;
    ev.level = severity::critical;
    ev.details = {{"node", node_},
                  {"checkpoint_seq", std::to_string(last_->seq)},
                  {"checkpoint_head", last_->head},
                  {"checkpoint_time", format_utc(last_->time)},
                  {"found", found},
                  {"when", "start"}};
    last_.reset();
    latest_.clear();
    seq_ = 0;
    return ev;
  }

  /// Signs now (after check_at_start found the log changed).
  void sign_now(std::string& last_error) {
    if (enabled())
      try_sign(last_error);
  }

  ~checkpointer() {
    try {
      if (log_ && log_->last_seq() != seq_)
        sign();
    } catch (...) {
      // Nothing to tell anyone any more.
    }
  }

  bool enabled() const noexcept { return static_cast<bool>(cfg_.key); }

  /// After appends: sign when enough records were added.
  void after_append(std::string& last_error) {
    if (!enabled() || log_->last_seq() < seq_ + cfg_.every_records)
      return;
    try_sign(last_error);
  }

  /// On the timer: sign when the head moved and the time is up.
  void on_tick(std::string& last_error) {
    if (!enabled() || log_->last_seq() == seq_)
      return;
    if (std::chrono::steady_clock::now() - last_time_ < cfg_.every)
      return;
    try_sign(last_error);
  }

  const std::string& latest() const noexcept { return latest_; }
  std::uint64_t seq() const noexcept { return seq_; }
  std::uint64_t signed_count() const noexcept { return signed_; }
  const std::string& path() const noexcept { return path_; }

private:
  void try_sign(std::string& last_error) {
    try {
      sign();
    } catch (const std::exception& x) {
      last_error = std::string{"checkpoint: "} + x.what();
      // Try again after a full interval, not on every record.
      last_time_ = std::chrono::steady_clock::now();
      seq_ = log_->last_seq();
    }
  }

  void sign() {
    if (!enabled() || log_->last_seq() == 0)
      return;
    // A checkpoint must never cover records that a crash could still lose.
    log_->flush();
    auto cp = sign_checkpoint(node_, log_->last_seq(), log_->last_hash(),
                              cfg_.clock(), cfg_.cert_pem, *cfg_.key,
                              last_ ? &*last_ : nullptr);
    append_checkpoint(path_, cp, cfg_.keep);
    latest_ = to_line(cp);
    seq_ = cp.seq;
    last_ = std::move(cp);
    ++signed_;
    last_time_ = std::chrono::steady_clock::now();
  }

  std::shared_ptr<audit_log> log_;
  checkpoint_config cfg_;
  std::string node_;
  std::string path_;
  std::string latest_;
  std::optional<checkpoint> last_;
  std::uint64_t seq_ = 0;
  std::uint64_t signed_ = 0;
  std::chrono::steady_clock::time_point last_time_;
};

struct audit_state {
  static inline const char* name = "exo.audit";
  audit_actor_config cfg;
  /// Flushed by its destructor when the state goes (on exit).
  std::shared_ptr<audit_log> log;
  /// Declared after `log`: destroyed first, so its last checkpoint is
  /// signed while the log is still open.
  checkpointer checkpoints;
  std::uint64_t dropped = 0;
  std::uint64_t received = 0;
  std::string last_error;
  // What the operator was last told of a failure to write.
  std::string told_error;
  std::uint64_t told_dropped = 0;
  std::chrono::steady_clock::time_point told_at;
  // Witnessing.
  std::uint64_t witnessed = 0;
  std::uint64_t refused = 0;
  std::uint64_t conflicts = 0;
  /// (node, seq, head) already audited as a rollback or a fork.
  std::set<std::tuple<std::string, std::uint64_t, std::string>> flagged;
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

std::string witness_dir(const audit_state& st) {
  return st.cfg.log.directory + "/witness";
}

/// Checks the chain against the own checkpoints and the peers' `lines`
/// (their witness of this node); `notes` name peers that gave none.
console_reply run_verify(audit_state& st,
                         const std::vector<std::string>& lines = {},
                         const std::vector<std::string>& notes = {}) {
  st.log->flush();
  std::vector<std::string> files;
  for (auto& f : list_log_files(st.cfg.log.directory, st.cfg.log.file_prefix))
    files.push_back(f.path);
  verify_options opts;
  std::vector<std::string> problems = notes;
  std::size_t own = 0;
  text::json witnesses = text::json::array();
  auto& ca = st.cfg.checkpoints.ca;
  if (ca) {
    struct stat sb {};
    auto path = st.checkpoints.path();
    if (::stat(path.c_str(), &sb) == 0) {
      try {
        opts.checkpoints = load_checkpoints(path, *ca);
        own = opts.checkpoints.size();
      } catch (const std::exception& x) {
        problems.push_back(std::string{"own checkpoints unusable: "}
                           + x.what());
      }
    }
    for (auto& l : lines) {
      try {
        auto cp = read_checkpoint(l, *ca);
        if (cp.node != st.cfg.log.node) {
          problems.push_back("a peer answered with a checkpoint of "
                             + cp.node);
          continue;
        }
        witnesses.push_back({{"seq", cp.seq}, {"time", cp.time}});
        opts.checkpoints.push_back(std::move(cp));
      } catch (const std::exception& x) {
        problems.push_back(std::string{"a peer's witness is unusable: "}
                           + x.what());
      }
    }
  } else if (!lines.empty()) {
    problems.push_back("no cluster CA: peers' checkpoints not checked");
  }
  auto v = verify(files, opts);
  console_reply r;
  r.command = "audit";
  std::ostringstream text;
  text::json json = {{"ok", v.ok},
                     {"files", v.files},
                     {"records", v.records},
                     {"last_seq", v.last_seq},
                     {"checkpoints", opts.checkpoints.size()},
                     {"own_checkpoints", own},
                     {"witnessed", witnesses},
                     {"notes", problems}};
  if (v.ok) {
    text << "audit chain ok: " << v.records << " records in " << v.files
         << " files, last seq " << v.last_seq << "\n";
    if (v.newest_checkpoint) {
      text << "checked against " << opts.checkpoints.size()
           << " signed checkpoint(s) (" << own << " own, "
           << witnesses.size() << " witnessed by peers); newest: seq "
           << v.newest_checkpoint->seq << ", "
           << describe(*v.newest_checkpoint) << "\n";
      json["checkpoint_seq"] = v.newest_checkpoint->seq;
    } else {
      text << "no signed checkpoint to check against: a cut tail, a "
              "dropped head or a rewrite would go unnoticed\n";
    }
  } else {
    text << "audit chain BROKEN";
    if (v.bad_seq)
      text << " at seq " << *v.bad_seq;
    text << " (" << v.bad_file << ":" << v.bad_line << "): " << v.reason
         << "\n";
    json["bad_seq"] = v.bad_seq ? text::json(*v.bad_seq) : text::json(nullptr);
    json["reason"] = v.reason;
  }
  for (auto& p : problems)
    text << "note: " << p << "\n";
  r.text = text.str();
  r.json = text::compact(json);
  return r;
}

/// Takes a peer's checkpoint: verifies it and keeps the latest per node;
/// a rollback or a fork is audited and kept as evidence. Returns what is
/// wrong with it, empty when it was taken.
std::string witness(audit_state& st, const audit_checkpoint& msg) {
  auto& ca = st.cfg.checkpoints.ca;
  if (!ca)
    return "this node has no cluster CA to check checkpoints with";
  checkpoint cp;
  try {
    cp = read_checkpoint(msg.line, *ca);
  } catch (const std::exception& x) {
    ++st.refused;
    return x.what();
  }
  if (cp.node == st.cfg.log.node)
    return {}; // our own, relayed back
  auto dir = witness_dir(st);
  ::mkdir(dir.c_str(), 0700);
  auto path = witness_path(dir, cp.node);
  std::optional<checkpoint> held;
  try {
    held = read_witness(path, *ca);
  } catch (const std::exception& x) {
    st.last_error = std::string{"witness: "} + x.what();
  }
  auto verdict = compare(held, cp);
  switch (verdict) {
    case witness_verdict::first:
    case witness_verdict::newer:
      write_witness(path, cp);
      ++st.witnessed;
      return {};
    case witness_verdict::same:
      return {};
    case witness_verdict::rollback:
    case witness_verdict::fork:
      break;
  }
  auto key = std::make_tuple(cp.node, cp.seq, cp.head);
  if (st.flagged.count(key) > 0)
    return {};
  if (st.flagged.size() < 10000)
    st.flagged.insert(key);
  ++st.conflicts;
  keep_evidence(dir + "/" + cp.node + ".conflicts", cp);
  event ev;
  ev.type = verdict == witness_verdict::fork ? event_type::audit_fork
                                             : event_type::audit_rollback;
  ev.level = severity::error;
  ev.details = {{"node", cp.node},
                {"witnessed_seq", std::to_string(held->seq)},
                {"witnessed_head", held->head},
                {"witnessed_time", format_utc(held->time)},
                {"offered_seq", std::to_string(cp.seq)},
                {"offered_head", cp.head},
                {"offered_time", format_utc(cp.time)}};
  st.log->append(ev);
  st.checkpoints.after_append(st.last_error);
  return {};
}

/// What this node witnessed of `node` ("" when nothing).
audit_checkpoint witnessed_of(audit_state& st, const std::string& node) {
  audit_checkpoint out;
  auto& ca = st.cfg.checkpoints.ca;
  if (!ca)
    return out;
  try {
    if (auto cp = read_witness(witness_path(witness_dir(st), node), *ca))
      out.line = to_line(*cp);
  } catch (const std::exception& x) {
    st.last_error = std::string{"witness: "} + x.what();
  }
  return out;
}

/// Tells the operator (cfg.operator_log, else stderr) that the log cannot
/// be written: when a failure is new or its message changes, then at most
/// once a minute while records are still being lost.
void tell_operator(audit_state& st) {
  if (st.last_error.empty())
    return;
  auto now = std::chrono::steady_clock::now();
  bool changed = st.last_error != st.told_error;
  bool still = st.dropped > st.told_dropped
               && now - st.told_at >= std::chrono::minutes(1);
  if (!changed && !still)
    return;
  auto line = "exo: the audit log in " + st.cfg.log.directory
              + " cannot be written: " + st.last_error + " ("
              + std::to_string(st.dropped)
              + " records lost so far; free space or fix the folder)";
  if (st.cfg.operator_log)
    st.cfg.operator_log(line);
  else
    std::fprintf(stderr, "%s\n", line.c_str());
  st.told_error = st.last_error;
  st.told_dropped = st.dropped;
  st.told_at = now;
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
    tell_operator(st);
    return;
  }
  st.checkpoints.after_append(st.last_error);
}

caf::behavior audit_impl(self_ptr self, audit_actor_config cfg,
                         std::shared_ptr<audit_log> log) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  st.log = std::move(log);
  st.checkpoints.init(st.log, st.cfg);
  if (st.log->recovery().truncated_bytes > 0) {
    event ev;
    ev.type = event_type::audit_recovered;
    ev.level = severity::warning;
    ev.details = {
      {"truncated_bytes", std::to_string(st.log->recovery().truncated_bytes)},
      {"dropped_lines", std::to_string(st.log->recovery().dropped_lines)}};
    st.log->append(ev);
  }
  if (auto ev = st.checkpoints.check_at_start()) {
    st.log->append(*ev);
    st.checkpoints.sign_now(st.last_error);
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
      st.checkpoints.on_tick(st.last_error);
      tell_operator(st);
      self->delayed_send(self, st.cfg.flush_interval, tick_atom::value);
    },
    [self](audit_atom, checkpoint_atom) -> std::string {
      return self->state.checkpoints.latest();
    },
    [self](audit_atom, witness_atom,
           const audit_checkpoint& cp) -> caf::result<caf::atom_value> {
      auto& st = self->state;
      std::string bad;
      try {
        bad = witness(st, cp);
      } catch (const std::exception& x) {
        st.last_error = std::string{"witness: "} + x.what();
        return caf::make_error(caf::sec::runtime_error,
                               "audit witness: " + st.last_error);
      }
      if (!bad.empty())
        return caf::make_error(caf::sec::invalid_argument,
                               "audit checkpoint refused: " + bad);
      return caf::ok_atom::value;
    },
    [self](audit_atom, witness_atom,
           const std::string& node) -> audit_checkpoint {
      return witnessed_of(self->state, node);
    },
    [self](audit_atom, verify_atom, const std::vector<std::string>& lines,
           const std::vector<std::string>& notes)
      -> caf::result<console_reply> {
      try {
        return run_verify(self->state, lines, notes);
      } catch (const std::exception& x) {
        return caf::make_error(caf::sec::runtime_error,
                               std::string{"audit: "} + x.what());
      }
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
                     {"checkpoint_seq", std::to_string(st.checkpoints.seq())},
                     {"checkpoints_signed",
                      std::to_string(st.checkpoints.signed_count())},
                     {"witnessed", std::to_string(st.witnessed)},
                     {"witness_refused", std::to_string(st.refused)},
                     {"witness_conflicts", std::to_string(st.conflicts)},
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
