#pragma once

/// The command line of every exo program, on CLI11 (Debian's libcli11-dev).
///
/// Each program describes its options and subcommands on a `CLI::App` and
/// lets `cli::parse` run it, so that every program and subcommand behaves
/// the same way:
///
///   -h, --help            the usage text on `out`, exit status 0
///   an unknown option     `PREFIX: unknown option "--x" (see --help)`, 2
///   a missing value       `PREFIX: --x: 1 required TEXT missing ...`, 2
///   an unknown command    `PREFIX: unknown command "x" (see --help)`, 2
///
/// Values that need the program's own checks (ranges, choices with a
/// tailored message) are read as text and checked after parsing.

#include <CLI/CLI.hpp>

#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

namespace exo::cli {

/// Prepares a new `app` (before any option or subcommand is added): a
/// repeated single-valued option keeps its last value, and unknown words are
/// collected so that `parse` can name them.
void configure(CLI::App& app);

/// Parses `argc`/`argv` (argv[0] is the program or command name) with
/// `app`. Returns nothing when the program goes on, or the exit status when
/// it must stop: 0 after printing the help, 2 after printing the error (with
/// `prefix`, e.g. "exo-node: ") on `err`.
std::optional<int> parse(CLI::App& app, int argc, const char* const* argv,
                         std::ostream& out, std::ostream& err,
                         const std::string& prefix);

/// Parses `args` (without a program name) with `app`; as above.
std::optional<int> parse(CLI::App& app, std::vector<std::string> args,
                         std::ostream& out, std::ostream& err,
                         const std::string& prefix);

/// Parses `args` with `app` and throws std::invalid_argument with the
/// message (no prefix) on a bad command line. Returns true when help was
/// asked for (nothing else is checked then).
bool parse_or_throw(CLI::App& app, std::vector<std::string> args);

} // namespace exo::cli
