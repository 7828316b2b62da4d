#include "runtime/node/gateway_service.hpp"

#include "core/gateway/job_mapping.hpp"
#include "core/workload/model_cache.hpp"
#include "runtime/gateway/job_backend.hpp"
#include "runtime/gateway/server.hpp"
#include "runtime/node/runtime.hpp"

#include <openssl/crypto.h>

#include <set>

namespace exo {

struct gateway_service::impl {
  std::unique_ptr<gateway::server> server;
  std::vector<std::string> ids;
};

namespace {

/// Compares without an early exit (the token's length still shows).
bool same_token(std::string_view a, const std::string& b) {
  return a.size() == b.size()
         && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
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
  auto backend = std::make_shared<gateway::job_backend>(
    rt.system(), coordinator, std::move(models), limits);
  gateway::server_options o;
  o.host = g.host;
  o.port = g.port;
  o.models = backend->entries();
  o.backend = backend;
  o.limits.max_queued = g.max_queued;
  o.requests.max_tokens = g.ctx;
  if (!g.api_key.empty()) {
    auto key = g.api_key;
    o.verify_token = [key](std::string_view t) { return same_token(t, key); };
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
