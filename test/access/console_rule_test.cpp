// Clients' console commands (issue 6): which permission each needs, how
// auth= is taken out of the argument, the strict/lenient rule, and the
// decision a role's token gets for each command (no actors involved).

#include "core/access/access_policy.hpp"
#include "core/access/console_rule.hpp"
#include "core/access/token.hpp"

#include <catch2/catch.hpp>

#include <chrono>

using namespace exo::access;

namespace {

console_requirement need(permission p) {
  return {console_requirement::kind::permission, p};
}

bool same(const console_requirement& a, const console_requirement& b) {
  return a.how == b.how
         && (a.how == console_requirement::kind::by_service
             || a.perm == b.perm);
}

} // namespace

TEST_CASE("every console command maps to the permission of the role table") {
  using p = permission;
  struct row {
    const char* cmd;
    const char* arg;
    console_requirement want;
  };
  const console_requirement by_service{console_requirement::kind::by_service,
                                       p::policy_admin};
  for (auto& r : {row{"devices", "", need(p::device_list)},
                  row{"thermal", "", need(p::thermal_read)},
                  row{"thermal", " report a1 x", need(p::policy_admin)},
                  row{"audit", "query type=access_denied", need(p::audit_read)},
                  row{"audit", "verify", need(p::audit_read)},
                  row{"run", "m.gguf prompt=hi", need(p::job_submit)},
                  row{"plan", "m.gguf keep=no", need(p::job_submit)},
                  row{"attach", "n1:3", need(p::job_submit)},
                  row{"cancel", "3", need(p::job_cancel)},
                  row{"jobs", "", need(p::monitoring_read)},
                  row{"plans", "", need(p::monitoring_read)},
                  row{"shards", "", need(p::monitoring_read)},
                  row{"nodes", "", need(p::monitoring_read)},
                  row{"links", "", need(p::monitoring_read)},
                  row{"inspect", "a1:gate", need(p::monitoring_read)},
                  row{"leave", "", need(p::policy_admin)},
                  row{"dev", "sync gpu:0 auth=t", by_service},
                  row{"token", "issue principal=x auth=t", by_service},
                  row{"launch-missiles", "", need(p::policy_admin)}}) {
    INFO(r.cmd << " " << r.arg);
    CHECK(same(console_permission(r.cmd, r.arg), r.want));
  }
}

TEST_CASE("auth= is taken out of a console argument, the rest kept as is") {
  auto a = take_auth("query type=access_denied auth=exo1.a.b limit=5");
  CHECK(a.has_token);
  CHECK(a.token == "exo1.a.b");
  CHECK(a.rest == "query type=access_denied limit=5");
  CHECK(a.error.empty());
  a = take_auth("auth=T");
  CHECK(a.has_token);
  CHECK(a.token == "T");
  CHECK(a.rest.empty());
  a = take_auth("auth=T m.gguf prompt=\"a  b\"");
  CHECK(a.rest == "m.gguf prompt=\"a  b\"");
  // Without auth= the argument is untouched, spacing included.
  a = take_auth("m.gguf  prompt=x ");
  CHECK_FALSE(a.has_token);
  CHECK(a.rest == "m.gguf  prompt=x ");
  // An empty token is still a token (and refused by the check).
  a = take_auth("query auth=");
  CHECK(a.has_token);
  CHECK(a.token.empty());
  CHECK(take_auth("auth=a auth=b").error == "auth= given twice");
  // Only a word starting with auth= counts.
  a = take_auth("query principal=auth=x");
  CHECK_FALSE(a.has_token);
}

TEST_CASE("least privilege by default: read-only views are open to client "
          "certificates, every other command needs a token, strict needs one "
          "for all, a token is checked either way") {
  // The views a certificate may see without a token.
  for (auto p : {permission::device_list, permission::monitoring_read,
                 permission::thermal_read}) {
    auto read = need(p);
    CHECK(open_read(p));
    CHECK(console_rule(read, false, false) == console_action::serve);
    CHECK(console_rule(read, true, false) == console_action::check);
    CHECK(console_rule(read, false, true) == console_action::refuse);
    CHECK(console_rule(read, true, true) == console_action::check);
  }
  // State-changing commands, and the audit log, need a token in both modes.
  for (const char* cmd : {"run", "plan", "cancel", "leave", "audit", "drain",
                          "evict", "something-new"}) {
    auto req = console_permission(cmd, "");
    CAPTURE(cmd);
    CHECK_FALSE(open_read(req.perm));
    CHECK(console_rule(req, false, false) == console_action::refuse);
    CHECK(console_rule(req, false, true) == console_action::refuse);
    CHECK(console_rule(req, true, false) == console_action::check);
  }
  // A peer's thermal push is admin-only from a client.
  CHECK(console_rule(console_permission("thermal", "report x"), false, false)
        == console_action::refuse);
  CHECK(console_rule(console_permission("thermal", ""), false, false)
        == console_action::serve);
  const console_requirement svc{console_requirement::kind::by_service,
                                permission::policy_admin};
  // dev and token check auth= themselves, in both modes
  for (bool has : {false, true})
    for (bool strict : {false, true})
      CHECK(console_rule(svc, has, strict) == console_action::pass_through);
}

TEST_CASE("a monitor token may list devices and read thermal state but not "
          "run jobs or read the audit log, power users may") {
  const std::string key = "0123456789abcdef0123456789abcdef-console";
  access_config cfg;
  cfg.key = key;
  access_policy policy{cfg};
  token_issuer issuer{key};
  auto now = std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
               .count();
  auto token_of = [&](role r) {
    token_claims c;
    c.id = "t-" + std::string{to_string(r)};
    c.principal = std::string{to_string(r)};
    c.granted_role = r;
    c.all_devices = true;
    c.issued_at = now;
    c.expires_at = now + 600;
    return issuer.issue(c);
  };
  auto allowed = [&](role r, const char* cmd, const char* arg = "") {
    auto req = console_permission(cmd, arg);
    return policy.check(token_of(r), req.perm).allowed();
  };
  for (auto cmd : {"devices", "thermal", "nodes", "plans"})
    CHECK(allowed(role::monitor, cmd));
  for (auto cmd : {"run", "plan", "audit", "leave"})
    CHECK_FALSE(allowed(role::monitor, cmd));
  CHECK(allowed(role::user, "run"));
  CHECK(allowed(role::user, "plan"));
  CHECK_FALSE(allowed(role::user, "audit"));
  CHECK(allowed(role::power_user, "audit"));
  CHECK_FALSE(allowed(role::power_user, "leave"));
  CHECK_FALSE(allowed(role::power_user, "thermal", "report a1 fake"));
  CHECK(allowed(role::admin, "leave"));
  auto d = policy.check(token_of(role::monitor),
                        console_permission("run", "").perm);
  CHECK(d.code == decision_code::permission_denied);
  CHECK(d.principal == "monitor");
}
