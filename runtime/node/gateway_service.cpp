#include "runtime/node/gateway_service.hpp"

#include "actors/audit/audit_actor.hpp"
#include "core/access/audit_event.hpp"
#include "core/gateway/job_mapping.hpp"
#include "core/model/llama_model.hpp"
#include "core/tokenizer/tokenizer.hpp"
#include "core/workload/job_request.hpp"
#include "core/workload/model_cache.hpp"
#include "runtime/gateway/cluster_watch.hpp"
#include "runtime/gateway/job_backend.hpp"
#include "runtime/gateway/server.hpp"
#include "runtime/node/runtime.hpp"

#include <openssl/crypto.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <set>

namespace exo {

struct gateway_service::impl {
  std::shared_ptr<gateway::cluster_watch> watch;
  std::unique_ptr<gateway::server> server;
  std::vector<std::string> ids;
};

namespace {

/// Compares without an early exit (the token's length still shows).
bool same_token(std::string_view a, const std::string& b) {
  return a.size() == b.size()
         && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

/// Audits one refused request (the hook runs on the server's threads; the
/// sink is sent to, never waited for).
void audit_refusal(const caf::actor& sink, audit::event ev,
                   std::string_view path, std::string_view peer) {
  if (!sink)
    return;
  ev.details.emplace("via", "gateway");
  ev.details.emplace("path", std::string{path});
  ev.details.emplace("peer", std::string{peer});
  audit::emit(sink, ev);
}

/// Audits the requests the server refused by a limit (request_refused),
/// at most `per_s` a second one by one: past that they are counted and the
/// count goes with the next record, so a flood cannot fill the log.
std::function<void(int, std::string_view, std::string_view,
                   std::string_view)>
make_on_limit(const caf::actor& sink, int per_s = 20) {
  struct window {
    std::mutex m;
    std::chrono::steady_clock::time_point start;
    int used = 0;
    std::uint64_t suppressed = 0;
  };
  auto w = std::make_shared<window>();
  return [sink, w, per_s](int status, std::string_view message,
                          std::string_view path, std::string_view peer) {
    if (!sink)
      return;
    std::uint64_t suppressed = 0;
    {
      std::lock_guard<std::mutex> guard{w->m};
      auto now = std::chrono::steady_clock::now();
      if (now - w->start >= std::chrono::seconds{1}) {
        w->start = now;
        w->used = 0;
      }
      if (w->used >= per_s) {
        ++w->suppressed;
        return;
      }
      ++w->used;
      suppressed = w->suppressed;
      w->suppressed = 0;
    }
    audit::event ev;
    ev.type = audit::event_type::request_refused;
    ev.level = audit::severity::warning;
    ev.details = {{"status", std::to_string(status)},
                  {"reason", std::string{message.substr(0, 256)}}};
    if (suppressed > 0)
      ev.details["suppressed_before"] = std::to_string(suppressed);
    audit_refusal(sink, std::move(ev), path, peer);
  };
}

/// The gateway's authorization: none, the one api_key, or exo's access
/// tokens through the node's policy; every refusal is audited.
gateway::authorize_fn make_authorize(runtime& rt,
                                     const config::gateway_section& g) {
  auto sink = rt.audit();
  switch (g.auth) {
    case config::gateway_auth::none:
      return {};
    case config::gateway_auth::api_key: {
      auto key = g.api_key;
      return [key, sink](std::string_view token, access::permission p,
                         std::string_view path, std::string_view peer) {
        gateway::auth_result r;
        if (same_token(token, key)) {
          r.allowed = true;
          return r;
        }
        r.error = gateway::unauthorized("Incorrect API key");
        audit::event ev;
        ev.type = audit::event_type::access_denied;
        ev.level = audit::severity::warning;
        ev.details.emplace("permission", std::string{access::to_string(p)});
        ev.details.emplace("reason", token.empty() ? "no bearer token"
                                                   : "wrong api key");
        audit_refusal(sink, std::move(ev), path, peer);
        return r;
      };
    }
    case config::gateway_auth::access_token:
      break;
  }
  auto policy = rt.access_policy();
  if (!policy)
    throw startup_error("the gateway's access tokens need the node's "
                        "access policy");
  return [policy, sink](std::string_view token, access::permission p,
                        std::string_view path, std::string_view peer) {
    gateway::auth_result r;
    access::decision d;
    if (token.empty()) {
      d.code = access::decision_code::malformed;
      d.reason = "no bearer token";
    } else {
      d = policy->check(std::string{token}, p);
    }
    if (d.allowed()) {
      r.allowed = true;
      return r;
    }
    r.error = gateway::access_refusal(d, p);
    audit_refusal(sink, access::make_audit_event(d, p), path, peer);
    return r;
  };
}

} // namespace

gateway_service::gateway_service(runtime& rt,
                                 const config::gateway_section& g)
  : impl_(std::make_unique<impl>()) {
  if (auto why = config::gateway_exposure_problem(g); !why.empty())
    throw startup_error(why);
  auto coordinator = rt.service_actor("jobs");
  if (!coordinator)
    throw startup_error("the gateway needs the node's jobs service");
  std::vector<gateway::model_source> models;
  std::set<std::string> seen;
  for (auto& m : g.models) {
    auto id = m.id.empty() ? gateway::model_id_of(m.path) : m.id;
    if (!seen.insert(id).second)
      throw startup_error("two gateway models have the id " + id
                          + " (give one --model-id / gateway.models[].id)");
    try {
      models.push_back(gateway::load_model_source(id, m.path));
      if (!g.kv_type.empty()) { // a cache the model cannot hold: now
        workload::job_request probe;
        probe.kv_type = g.kv_type;
        auto kv = workload::kv_type_of(probe);
        const auto hd = model::llama_hparams::from_gguf(*models.back().file)
                          .head_dim;
        if (!backend::kv_holds_heads(kv, hd))
          throw startup_error("gateway.kv_type q8_0 needs heads a multiple "
                              "of 32 wide (whole Q8_0 blocks); model " + id
                              + "'s are " + std::to_string(hd));
      }
      if (!m.draft.empty()) { // refused now, not on every request
        auto model = model::llama_model::load(m.path);
        (void) workload::load_draft(m.draft, *model,
                                    *models.back().tokenizer, 0);
        models.back().draft = m.draft;
      }
      // The coordinator names a model by its digest (peers fetch it by
      // that); computed once per file and process, so now rather than on
      // the first request.
      (void) workload::file_sha256(m.path);
    } catch (const std::exception& e) {
      throw startup_error(e.what());
    }
    impl_->ids.push_back(id);
  }
  gateway::mapping_limits limits;
  limits.ctx = g.ctx;
  limits.kv_type = g.kv_type;
  auto backend = std::make_shared<gateway::job_backend>(
    rt.system(), coordinator, std::move(models), limits,
    std::chrono::milliseconds{g.resume_grace_ms}, rt.config().node.name);
  gateway::server_options o;
  o.host = g.host;
  o.port = g.port;
  o.models = backend->entries();
  o.backend = backend;
  impl_->watch = std::make_shared<gateway::cluster_watch>(
    rt.system(), caf::actor_cast<caf::actor>(rt.gate()),
    rt.config().node.name, o.models);
  o.views = impl_->watch;
  o.metrics = std::make_shared<gateway::metrics_sources>(
    std::vector<std::shared_ptr<gateway::metrics_source>>{impl_->watch,
                                                          backend});
  o.limits.max_queued = g.max_queued;
  o.requests.max_tokens = g.ctx;
  o.authorize = make_authorize(rt, g);
  o.on_limit = make_on_limit(rt.audit());
  if (g.https) {
    auto& m = rt.tls_material();
    o.tls = {m.certificate, m.key, m.passphrase};
  }
  impl_->server = std::make_unique<gateway::server>(std::move(o));
  try {
    impl_->server->start();
  } catch (const std::exception& e) {
    throw startup_error(std::string{"gateway: "} + e.what());
  }
}

gateway_service::~gateway_service() {
  stop();
}

std::uint16_t gateway_service::port() const {
  return impl_->server ? impl_->server->port() : 0;
}

const std::vector<std::string>& gateway_service::model_ids() const {
  return impl_->ids;
}

void gateway_service::stop() {
  if (impl_->server)
    impl_->server->stop();
}

} // namespace exo
