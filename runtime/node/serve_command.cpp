#include "runtime/node/serve_command.hpp"

#include "core/cli/program.hpp"
#include "core/text/number.hpp"

#include <ostream>
#include <stdexcept>

namespace exo {

namespace {

constexpr const char* serve_description
  = "Runs a node that serves models over the OpenAI API (/v1/models, "
    "/v1/completions, /v1/chat/completions, /health, /metrics).";

/// The one strict parser (core/text/number.hpp): digits only, in range.
std::uint64_t to_uint(const std::string& key, const std::string& v,
                      std::uint64_t lo, std::uint64_t hi) {
  try {
    return text::parse_integer<std::uint64_t>(v, lo, hi, key);
  } catch (const text::number_error& e) {
    throw std::invalid_argument(e.what());
  }
}

} // namespace

serve_settings parse_serve_command(int argc, char** argv, std::ostream& out,
                                   std::ostream& err) {
  serve_settings result;
  std::vector<std::string> models, ids, drafts;
  std::string host, port, api_key, auth, ctx, config_file, state_dir;
  std::string kv_type;
  bool https = false;
  CLI::App app{serve_description, "exo-node serve"};
  cli::configure(app);
  app.add_option("--model", models, "a model to serve (GGUF; repeatable)")
    ->type_name("FILE")
    ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--model-id", ids,
                 "the id of the --model of the same rank (default: the "
                 "file name without .gguf)")
    ->type_name("ID")
    ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--draft", drafts,
                 "a draft model for the requests of the --model of the "
                 "same rank (speculative decoding; same vocabulary)")
    ->type_name("FILE")
    ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--host", host, "address to listen on (127.0.0.1)")
    ->type_name("HOST");
  app.add_option("--port", port, "HTTP port (8080; 0: a free one)")
    ->type_name("PORT");
  app.add_option("--api-key", api_key,
                 "the one bearer token clients must send (loopback only)")
    ->type_name("KEY");
  app.add_option("--auth", auth,
                 "how bearer tokens are checked: none, api_key (the "
                 "default with --api-key) or access_token (exo's tokens: "
                 "roles, limits, revocation)")
    ->type_name("MODE")
    ->check(CLI::IsMember({"none", "api_key", "access_token"}));
  app.add_flag("--https", https,
               "serve HTTPS with the node's certificate (the cluster CA's)");
  app.add_option("--ctx", ctx,
                 "context per request, prompt + completion (4096)")
    ->type_name("C");
  app.add_option("--kv-type", kv_type,
                 "the KV cache's type: f16 (default), q8_0 (llama.cpp's "
                 "--cache-type-k/-v q8_0: 53% of the memory) or f32")
    ->type_name("TYPE")
    ->check(CLI::IsMember({"f16", "q8_0", "f32"}));
  app.add_option("--config", config_file,
                 "node settings (JSON): the node and cluster to join")
    ->type_name("FILE");
  app.add_option("--state-dir", state_dir, "override node.state_dir")
    ->type_name("DIR");
  app.footer("A host other than loopback needs --https and --auth "
             "access_token.\nExit "
             "status: 0 after SIGINT/SIGTERM, 2 on bad arguments or "
             "settings, 1 when the node or the gateway cannot start.");
  if (auto code = cli::parse(app, argc, argv, out, err, "exo-node serve: ")) {
    result.exit_code = *code;
    return result;
  }
  try {
    auto cfg = config_file.empty() ? config::defaults()
                                   : config::load(config_file);
    if (config_file.empty()) {
      cfg.network.port = 0; // alone: any free cluster port
      cfg.network.seeds.clear();
    }
    if (!state_dir.empty())
      cfg.node.state_dir = state_dir;
    auto& g = cfg.gateway;
    if (ids.size() > models.size())
      throw std::invalid_argument("more --model-id than --model options");
    if (drafts.size() > models.size())
      throw std::invalid_argument("more --draft than --model options");
    if (!models.empty()) {
      g.models.clear();
      for (std::size_t i = 0; i < models.size(); ++i)
        g.models.push_back({i < ids.size() ? ids[i] : "", models[i],
                            i < drafts.size() ? drafts[i] : ""});
    }
    for (auto& id : ids)
      if (id.empty())
        throw std::invalid_argument("--model-id may not be empty");
    if (!host.empty())
      g.host = host;
    if (!port.empty())
      g.port = static_cast<std::uint16_t>(to_uint("--port", port, 0, 65535));
    if (!api_key.empty()) {
      g.api_key = api_key;
      if (auth.empty())
        g.auth = config::gateway_auth::api_key;
    }
    if (auth == "none")
      g.auth = config::gateway_auth::none;
    else if (auth == "api_key")
      g.auth = config::gateway_auth::api_key;
    else if (auth == "access_token")
      g.auth = config::gateway_auth::access_token;
    if (https)
      g.https = true;
    if (!ctx.empty())
      g.ctx = static_cast<std::uint32_t>(to_uint("--ctx", ctx, 16, 1 << 24));
    if (!kv_type.empty())
      g.kv_type = kv_type;
    if (g.models.empty())
      throw std::invalid_argument(
        "serve needs --model FILE (or models in the config's gateway "
        "section)");
    if (auto why = config::gateway_exposure_problem(g); !why.empty())
      throw std::invalid_argument(why);
    result.cfg = std::move(cfg);
  } catch (const std::exception& e) {
    err << "exo-node serve: " << e.what() << "\n";
    result.exit_code = 2;
  }
  return result;
}

} // namespace exo
