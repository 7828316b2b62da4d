#include "core/access/console_rule.hpp"

#include <cctype>

namespace exo::access {

console_requirement console_permission(std::string_view cmd,
                                       std::string_view arg) noexcept {
  using k = console_requirement::kind;
  auto need = [](permission p) { return console_requirement{k::permission, p}; };
  if (cmd == "dev" || cmd == "token")
    return {k::by_service, permission::policy_admin};
  if (cmd == "devices")
    return need(permission::device_list);
  if (cmd == "nodes" || cmd == "links" || cmd == "coordinator"
      || cmd == "actors" || cmd == "inspect" || cmd == "measure"
      || cmd == "services" || cmd == "plans" || cmd == "shards"
      || cmd == "jobs")
    return need(permission::monitoring_read);
  if (cmd == "thermal") {
    // Peers push their reports as "thermal report ..."; from a client that
    // would inject readings.
    auto start = arg.find_first_not_of(' ');
    if (start != std::string_view::npos
        && arg.substr(start).rfind("report", 0) == 0)
      return need(permission::policy_admin);
    return need(permission::thermal_read);
  }
  if (cmd == "audit")
    return need(permission::audit_read);
  if (cmd == "run" || cmd == "plan" || cmd == "attach")
    return need(permission::job_submit);
  if (cmd == "cancel")
    return need(permission::job_cancel);
  return need(permission::policy_admin);
}

console_auth take_auth(std::string_view arg) {
  console_auth out;
  auto space = [](char c) {
    return std::isspace(static_cast<unsigned char>(c)) != 0;
  };
  // Everything but the auth= word is kept verbatim (a prompt's spacing
  // included): the word is cut with the whitespace before it.
  std::size_t i = 0, kept = 0;
  while (i < arg.size()) {
    auto gap = i;
    while (i < arg.size() && space(arg[i]))
      ++i;
    auto start = i;
    while (i < arg.size() && !space(arg[i]))
      ++i;
    if (start == i)
      break;
    auto word = arg.substr(start, i - start);
    if (word.rfind("auth=", 0) != 0)
      continue;
    if (out.has_token)
      out.error = "auth= given twice";
    out.has_token = true;
    out.token = std::string{word.substr(5)};
    out.rest.append(arg.substr(kept, gap - kept));
    kept = i;
  }
  out.rest.append(arg.substr(kept));
  auto first = out.rest.find_first_not_of(" \t");
  out.rest.erase(0, first == std::string::npos ? out.rest.size() : first);
  return out;
}

bool open_read(permission p) noexcept {
  return p == permission::device_list || p == permission::monitoring_read
         || p == permission::thermal_read;
}

console_action console_rule(const console_requirement& req, bool has_token,
                            bool require_token) noexcept {
  if (req.how == console_requirement::kind::by_service)
    return console_action::pass_through;
  if (has_token)
    return console_action::check;
  return require_token || !open_read(req.perm) ? console_action::refuse
                                               : console_action::serve;
}

} // namespace exo::access
