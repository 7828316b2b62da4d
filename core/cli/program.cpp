#include "core/cli/program.hpp"

#include <ostream>
#include <stdexcept>

namespace exo::cli {

namespace {

/// The first word no option or subcommand took, as an error message.
std::string extras_error(CLI::App& app) {
  auto rest = app.remaining(true);
  if (rest.empty()) {
    if (app.get_require_subcommand_min() == 0 || !app.get_subcommands().empty())
      return {};
    std::string names;
    for (auto* sub : app.get_subcommands([](const CLI::App*) { return true; }))
      names += (names.empty() ? "" : ", ") + sub->get_name();
    return "which command? " + names;
  }
  const auto& w = rest.front();
  if (w.size() > 1 && w[0] == '-')
    return "unknown option \"" + w + "\"";
  // A word where a subcommand is expected names a command that is not one.
  if (app.get_require_subcommand_min() > 0 && app.get_subcommands().empty())
    return "unknown command \"" + w + "\"";
  return "unexpected argument \"" + w + "\"";
}

/// Runs `app` on `args` (reversed, CLI11's order); returns "help", an
/// error message, or nothing.
struct outcome {
  bool help = false;
  std::string error;
};

outcome run(CLI::App& app, std::vector<std::string>& reversed) {
  outcome r;
  // An unknown word before the subcommand leaves CLI11 looking for the
  // subcommand: the unknown word is the better error then.
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    r.help = true;
    return r;
  } catch (const CLI::CallForAllHelp&) {
    r.help = true;
    return r;
  } catch (const CLI::RequiredError& e) {
    r.error = extras_error(app);
    if (r.error.empty())
      r.error = e.what();
    return r;
  } catch (const CLI::ParseError& e) {
    r.error = e.what();
    return r;
  }
  r.error = extras_error(app);
  return r;
}

} // namespace

void configure(CLI::App& app) {
  app.allow_extras();
  app.option_defaults()->multi_option_policy(
    CLI::MultiOptionPolicy::TakeLast);
}

std::optional<int> parse(CLI::App& app, std::vector<std::string> args,
                         std::ostream& out, std::ostream& err,
                         const std::string& prefix) {
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  auto r = run(app, reversed);
  if (r.help) {
    out << app.help();
    return 0;
  }
  if (!r.error.empty()) {
    err << prefix << r.error << " (see --help)\n";
    return 2;
  }
  return std::nullopt;
}

std::optional<int> parse(CLI::App& app, int argc, const char* const* argv,
                         std::ostream& out, std::ostream& err,
                         const std::string& prefix) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i)
    args.emplace_back(argv[i] != nullptr ? argv[i] : "");
  return parse(app, std::move(args), out, err, prefix);
}

bool parse_or_throw(CLI::App& app, std::vector<std::string> args) {
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  auto r = run(app, reversed);
  if (r.help)
    return true;
  if (!r.error.empty())
    throw std::invalid_argument(r.error);
  return false;
}

} // namespace exo::cli
