#include "core/audit/audit_command.hpp"

#include "core/audit/log_files.hpp"
#include "core/audit/query.hpp"
#include "core/audit/verify.hpp"

#include <exception>
#include <ostream>
#include <string>
#include <vector>

namespace exo::audit {

namespace {

constexpr const char* usage =
  "usage: audit verify [--from-genesis] FILE...\n"
  "       audit query --dir D [--prefix audit] [--type T] [--principal P]\n"
  "                   [--since TIME] [--until TIME] [--after SEQ]\n"
  "                   [--offset N] [--limit N]\n";

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

int run_verify(const std::vector<std::string>& args, std::ostream& out,
               std::ostream& err) {
  verify_options opts;
  std::vector<std::string> files;
  for (auto& a : args) {
    if (a == "--from-genesis")
      opts.require_genesis = true;
    else if (a.size() > 1 && a[0] == '-')
      return err << "audit verify: unknown option " << a << "\n" << usage, 2;
    else
      files.push_back(a);
  }
  if (files.empty())
    return err << "audit verify: no files given\n" << usage, 2;
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
  if (res.torn_tail)
    out << "warning: the last line is incomplete (a torn write); the sink "
           "truncates it when it starts\n";
  return 0;
}

int run_query(const std::vector<std::string>& args, std::ostream& out,
              std::ostream& err) {
  audit_query q;
  std::string dir;
  std::string prefix = "audit";
  for (std::size_t i = 0; i < args.size(); ++i) {
    auto& opt = args[i];
    if (i + 1 >= args.size())
      return err << "audit query: " << opt << " needs a value\n" << usage, 2;
    auto& val = args[++i];
    std::uint64_t n = 0;
    if (opt == "--dir") {
      dir = val;
    } else if (opt == "--prefix") {
      prefix = val;
    } else if (opt == "--type") {
      auto t = parse_event_type(val);
      if (!t)
        return err << "audit query: unknown event type \"" << val << "\"\n", 2;
      q.type = t;
    } else if (opt == "--principal") {
      q.principal = val;
    } else if (opt == "--since" || opt == "--until") {
      auto t = parse_time(val);
      if (!t)
        return err << "audit query: invalid time \"" << val
                   << "\" (µs since the epoch or YYYY-MM-DDTHH:MM:SSZ)\n",
               2;
      (opt == "--since" ? q.since_us : q.until_us) = t;
    } else if (opt == "--after" || opt == "--offset" || opt == "--limit") {
      if (!parse_count(val, n))
        return err << "audit query: " << opt << " needs a number, not \""
                   << val << "\"\n",
               2;
      if (opt == "--after")
        q.after_seq = n;
      else if (opt == "--offset")
        q.offset = n;
      else
        q.limit = n;
    } else {
      return err << "audit query: unknown option " << opt << "\n" << usage, 2;
    }
  }
  if (dir.empty())
    return err << "audit query: --dir is required\n" << usage, 2;
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
    if (argc < 2 || argv == nullptr)
      return err << usage, 2;
    std::string sub = argv[1] ? argv[1] : "";
    std::vector<std::string> args;
    for (int i = 2; i < argc; ++i)
      args.emplace_back(argv[i] ? argv[i] : "");
    if (sub == "verify")
      return run_verify(args, out, err);
    if (sub == "query")
      return run_query(args, out, err);
    if (sub == "-h" || sub == "--help" || sub == "help")
      return out << usage, 0;
    return err << "audit: unknown subcommand \"" << sub << "\"\n" << usage, 2;
  } catch (const std::exception& e) {
    err << "audit: " << e.what() << "\n";
    return 2;
  }
}

} // namespace exo::audit
