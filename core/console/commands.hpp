#pragma once

/// The console's commands: one table, one parser, the help from the table.
///
/// Every command a console client may type is a row of `command_table()`:
/// its name, an optional subcommand, its positional arguments and its
/// options, each with a type and one help line. `parse_command` turns a
/// command line into a `parsed_command` or throws `command_error` naming the
/// unknown command, subcommand or option, the missing argument or the bad
/// value. The exo-console client validates lines with it before sending and
/// prints `help` and `help CMD` from the table; the node's services parse
/// their argument with the same function.
///
/// On the wire a command stays (name, argument text): relays between nodes
/// and the gate's token check (auth= taken out of the text) work on the
/// text, and a node parses what it receives itself rather than trusting a
/// client's parse.
///
/// Numbers go through core/text/number.hpp, the one strict parser: counts
/// are decimal digits only, numbers finite decimals, sizes take B, KiB..TiB
/// or kB..TB, durations ns..d (seconds when bare); a bad or out-of-range
/// value names the option and the rule ("ttl: '1e9' has an unknown unit").
///
/// Options are spelled two ways, as each command has always taken them:
/// `key=value` (plan ctx=512, audit query type=T, token issue principal=P)
/// or dashed (`--model FILE`, `-n 16`, `--json`). Every command also takes
/// `auth=TOKEN` (checked by the gate or the service, never printed).

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace exo::console {

/// In a node's answer about a job: its backup runs it now ("job coord:1
/// was taken over by spare while this node was unreachable"). The node
/// that says it ended its own copy; a client waiting for the job
/// re-attaches to it (attach by its name) instead of failing.
inline constexpr const char* job_taken_over = " was taken over by ";

/// How an error a console got while it waited for a job (run, attach)
/// reads to a console that follows the job (follow_reading): the job may
/// have moved, or not yet arrived where it goes.
enum class job_follow : std::uint8_t {
  ended,      ///< about the job itself: the console reports it
  node_lost,  ///< "lost node ...": the node it waited through went
  taken_over, ///< "... was taken over by NODE": the job runs there now
  not_found,  ///< "attach: no job ...": not here yet (a takeover under way)
};

/// Reads `msg` (a client_error's text) as above.
job_follow follow_reading(const std::string& msg);

/// The node `msg` says took the job over ("job coord:1 was taken over by
/// spare while ..." gives "spare"), "" when it says none.
std::string taken_over_by(const std::string& msg);

/// The members a console asks next for a job it follows, in order: the
/// one a takeover named (`prefer`, when it is among them) first, then the
/// others as given, and the one it just lost (`last`) at the end: a
/// frozen node that came back knows where its job went.
std::vector<std::string> follow_order(const std::vector<std::string>& members,
                                      const std::string& prefer,
                                      const std::string& last);

/// What an argument or option holds; checked by the parser.
enum class value_type : std::uint8_t {
  text,   ///< any word
  count,  ///< a non-negative integer in [min, max]
  number, ///< a decimal number in [min, max]
  choice, ///< one of `choices`
  flag,   ///< a dashed option without a value
  size,     ///< bytes, with an optional unit (4096, 4GiB, 512MB), <= max
  duration, ///< whole seconds: a bare count or with a unit (90, 90m, 1h, 7d)
};

/// A positional argument.
struct argument_spec {
  std::string name; ///< as shown in help: "DEVICE", "[NODE]"
  value_type type = value_type::text;
  bool required = true;
};

/// An option: `key=value` unless `dashed` ("--key value", "-n N").
struct option_spec {
  std::string name; ///< without dashes or '=': "ctx", "model", "n"
  bool dashed = false;
  value_type type = value_type::text;
  std::string meta; ///< "N", "FILE" (help only)
  std::string help;
  std::vector<std::string> choices; ///< for value_type::choice
  double min = 0;                   ///< for count and number
  double max = 18446744073709551616.0; ///< 2^64: no upper bound
  std::vector<std::string> aliases; ///< other names ("context" for "ctx")
  bool internal = false;            ///< not in help (peer relays)
};

/// One form of a command: "audit query ..." and "audit verify" are two.
struct command_spec {
  std::string name;
  std::string sub; ///< empty: the command without a subcommand
  std::vector<argument_spec> args;
  std::vector<option_spec> options;
  std::string help;
  bool local = false;    ///< answered by the client itself (help, quit)
  bool internal = false; ///< not listed in help
};

/// Every console command, in the order of `help`.
const std::vector<command_spec>& command_table();

/// A command line the parser accepted.
struct parsed_command {
  const command_spec* spec = nullptr;
  std::string name;
  std::string sub;
  std::vector<std::string> args;             ///< positional, in order
  std::map<std::string, std::string> values; ///< by option name; flags "1"
  bool has_auth = false;                     ///< auth= was given
  std::string auth;

  bool has(const std::string& option) const;
  /// The option's text, or `fallback` when it was not given.
  std::string text(const std::string& option,
                   const std::string& fallback = {}) const;
  /// A count option (already checked), or `fallback`.
  std::uint64_t count(const std::string& option,
                      std::uint64_t fallback) const;
  /// A number option (already checked), or `fallback`.
  double number(const std::string& option, double fallback) const;
  /// A size option in bytes (already checked), or `fallback`.
  std::uint64_t size(const std::string& option, std::uint64_t fallback) const;
  /// A duration option in whole seconds (already checked), or `fallback`.
  std::uint64_t seconds(const std::string& option,
                        std::uint64_t fallback) const;
};

/// A command line the parser refused; what() names the problem.
class command_error : public std::invalid_argument {
public:
  using std::invalid_argument::invalid_argument;
};

/// Parses the argument text of command `name` (as a service receives it).
/// Throws command_error.
parsed_command parse_command(const std::string& name,
                             const std::string& arg);

/// Parses a whole line ("plan m.gguf ctx=512"); an empty line gives a
/// command with an empty name. Throws command_error.
parsed_command parse_line(const std::string& line);

/// Whether `name` is a command of the table.
bool is_command(const std::string& name);

/// `help`: one line per command form.
std::string help_text();

/// `help CMD`: every form of CMD with its arguments and options. Throws
/// command_error for an unknown command.
std::string help_text(const std::string& name);

/// The synopsis of one form ("dev alloc DEVICE BYTES").
std::string synopsis(const command_spec& spec);

} // namespace exo::console
