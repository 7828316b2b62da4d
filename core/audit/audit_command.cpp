#include "core/audit/audit_command.hpp"

#include "core/audit/checkpoint.hpp"
#include "core/audit/log_files.hpp"
#include "core/tls/tls_error.hpp"
#include "core/tls/trust_store.hpp"
#include "core/cli/program.hpp"
#include "core/audit/query.hpp"
#include "core/audit/verify.hpp"

#include <exception>
#include <ostream>
#include <string>
#include <vector>

namespace exo::audit {

namespace {

bool parse_count(const std::string& text, std::uint64_t& out) {
  if (text.empty() || text.size() > 18)
    return false;
  out = 0;
  for (char c : text) {
    if (c < '0' || c > '9')
      return false;
    out = out * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return true;
}

int run_verify(verify_options opts, const std::vector<std::string>& files,
               const std::vector<std::string>& checkpoint_files,
               const std::string& ca_file, std::ostream& out,
               std::ostream& err) {
  if (files.empty())
    return err << "audit verify: no files given (see --help)\n", 2;
  if (!checkpoint_files.empty()) {
    if (ca_file.empty())
      return err << "audit verify: --checkpoints needs --ca FILE (the "
                    "cluster CA that signed the node certificates)\n",
             2;
    std::optional<tls::trust_store> ca;
    try {
      ca = tls::trust_store::load(ca_file);
    } catch (const tls::tls_error& e) {
      return err << "audit verify: --ca " << ca_file << ": " << e.what()
                 << "\n",
             2;
    }
    for (auto& f : checkpoint_files) {
      try {
        auto cps = load_checkpoints(f, *ca);
        if (cps.empty())
          return err << "audit verify: " << f << " holds no checkpoint\n", 2;
        for (auto& cp : cps)
          opts.checkpoints.push_back(std::move(cp));
      } catch (const audit_error& e) {
        return err << "audit verify: unusable checkpoints: " << e.what()
                   << "\n",
               2;
      }
    }
  }
  auto res = verify(files, opts);
  if (!res.ok) {
    out << "FAIL: ";
    if (res.bad_seq)
      out << "first bad sequence number " << *res.bad_seq;
    else
      out << "first record is bad";
    out << " in " << res.bad_file << " line " << res.bad_line << ": "
        << res.reason << "\n";
    return 1;
  }
  out << "OK: " << res.records << " records in " << res.files << " file(s)";
  if (res.records > 0)
    out << ", seq " << res.first_seq << ".." << res.last_seq
        << ", head " << res.last_hash;
  out << "\n";
  if (res.records > 0 && res.first_seq != 1)
    out << "note: the chain starts at seq " << res.first_seq
        << "; records before it were not checked\n";
  if (res.newest_checkpoint) {
    auto& cp = *res.newest_checkpoint;
    out << "checkpoints: " << res.checkpoints_checked
        << " agree; newest: seq " << cp.seq << ", " << describe(cp) << "\n";
    if (res.last_seq > cp.seq)
      out << "note: records " << cp.seq + 1 << ".." << res.last_seq
          << " are after the newest checkpoint: only the hash chain "
             "covers them\n";
  }
  if (res.torn_tail)
    out << "warning: the last line is incomplete (a torn write); the sink "
           "truncates it when it starts\n";
  return 0;
}

/// The text values of `audit query`, checked after parsing.
struct query_args {
  std::string dir;
  std::string prefix = "audit";
  std::string type, principal, since, until, after, offset, limit;
};

int run_query(const CLI::App& cmd, const query_args& a, std::ostream& out,
              std::ostream& err) {
  audit_query q;
  const auto& dir = a.dir;
  const auto& prefix = a.prefix;
  auto given = [&](const char* name) { return cmd.count(name) > 0; };
  if (given("--type")) {
    auto t = parse_event_type(a.type);
    if (!t)
      return err << "audit query: unknown event type \"" << a.type
                 << "\"\n",
             2;
    q.type = t;
  }
  if (given("--principal"))
    q.principal = a.principal;
  for (auto* opt : {"--since", "--until"}) {
    if (!given(opt))
      continue;
    auto& val = std::string{opt} == "--since" ? a.since : a.until;
    auto t = parse_time(val);
    if (!t)
      return err << "audit query: invalid time \"" << val
                 << "\" (µs since the epoch or YYYY-MM-DDTHH:MM:SSZ)\n",
             2;
    (std::string{opt} == "--since" ? q.since_us : q.until_us) = t;
  }
  for (auto* opt : {"--after", "--offset", "--limit"}) {
    if (!given(opt))
      continue;
    std::string o = opt;
    auto& val = o == "--after" ? a.after : o == "--offset" ? a.offset
                                                          : a.limit;
    std::uint64_t n = 0;
    if (!parse_count(val, n))
      return err << "audit query: " << o << " needs a number, not \"" << val
                 << "\"\n",
             2;
    if (o == "--after")
      q.after_seq = n;
    else if (o == "--offset")
      q.offset = n;
    else
      q.limit = n;
  }
  if (dir.empty())
    return err << "audit query: --dir is required (see --help)\n", 2;
  auto page = query_directory(dir, prefix, q);
  std::string line;
  for (auto& r : page.records) {
    line.clear();
    append_record_line(line, r);
    out << line;
  }
  if (page.next_cursor)
    out << "# more: --after " << *page.next_cursor << "\n";
  if (page.skipped_lines > 0)
    err << "audit query: skipped " << page.skipped_lines
        << " unreadable line(s)\n";
  return 0;
}

} // namespace

int run_audit_command(int argc, char** argv, std::ostream& out,
                      std::ostream& err) {
  try {
    if (argc < 1 || argv == nullptr)
      return err << "audit: no arguments\n", 2;
    CLI::App app{"Verifies and queries audit logs (hash-chained JSON lines).",
                 "exo-node audit"};
    cli::configure(app);
    app.require_subcommand(1);
    verify_options vopts;
    std::vector<std::string> files;
    std::vector<std::string> checkpoint_files;
    std::string ca_file;
    auto* verify_cmd = app.add_subcommand(
      "verify", "check the hash chain of FILE... (one log, in order)");
    verify_cmd->add_flag("--from-genesis", vopts.require_genesis,
                         "the chain must start at sequence number 1");
    verify_cmd
      ->add_option("--checkpoints", checkpoint_files,
                   "signed checkpoints to check the log against (the "
                   "node's <state_dir>/audit/checkpoints, or a peer's "
                   "<state_dir>/audit/witness/NODE.checkpoint); repeatable")
      ->type_name("FILE")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    verify_cmd->add_option("--ca", ca_file,
                           "the cluster CA file (needed with --checkpoints)")
      ->type_name("FILE");
    verify_cmd->add_option("files", files, "the log files")
      ->type_name("FILE...");
    query_args qa;
    auto* query_cmd = app.add_subcommand(
      "query", "print the records of a log folder that match");
    query_cmd->add_option("--dir", qa.dir, "the log folder")
      ->type_name("D");
    query_cmd->add_option("--prefix", qa.prefix, "file prefix (audit)");
    query_cmd->add_option("--type", qa.type, "event type")->type_name("T");
    query_cmd->add_option("--principal", qa.principal, "who acted")
      ->type_name("P");
    query_cmd->add_option("--since", qa.since,
                          "µs since the epoch or YYYY-MM-DDTHH:MM:SSZ")
      ->type_name("TIME");
    query_cmd->add_option("--until", qa.until, "as --since")
      ->type_name("TIME");
    query_cmd->add_option("--after", qa.after,
                          "only records after this sequence number")
      ->type_name("SEQ");
    query_cmd->add_option("--offset", qa.offset, "skip N matches")
      ->type_name("N");
    query_cmd->add_option("--limit", qa.limit, "at most N records")
      ->type_name("N");
    app.footer("Exit status: 0 success, 1 verification failed (including a "
               "cut tail, dropped head or rewrite found by a checkpoint), 2 "
               "bad usage, unreadable files or a checkpoint that does not "
               "verify.");
    if (auto code = cli::parse(app, argc, argv, out, err, "audit: "))
      return *code;
    if (verify_cmd->parsed())
      return run_verify(vopts, files, checkpoint_files, ca_file, out, err);
    return run_query(*query_cmd, qa, out, err);
  } catch (const std::exception& e) {
    err << "audit: " << e.what() << "\n";
    return 2;
  }
}

} // namespace exo::audit
