#pragma once

/// `exo-node serve`: a node that serves models over the OpenAI API, like
/// `llama-server -m model.gguf`.
///
///   exo-node serve --model FILE.gguf [--model FILE2.gguf ...]
///     [--model-id ID ...] [--host 127.0.0.1] [--port 8080]
///     [--api-key KEY] [--ctx C] [--config FILE] [--state-dir DIR]
///
/// Without --config the node runs alone (its cluster port picked freely);
/// with it, it is the configured node and joins that cluster (the config's
/// `gateway` section gives the defaults the options override). Each
/// --model is served under its --model-id (in order) or its file name
/// without ".gguf". A host other than loopback is refused (exit 2) unless
/// --https and --auth access_token are given.

#include "core/config/node_config.hpp"

#include <iosfwd>
#include <optional>

namespace exo {

/// Parses `serve`'s options (argv[0] is "serve") into the node's settings,
/// the gateway section filled in. Returns the settings, or the exit status
/// after printing the help (0) or the error (2) on `out` / `err`.
struct serve_settings {
  std::optional<config::node_config> cfg;
  int exit_code = 0;
};
serve_settings parse_serve_command(int argc, char** argv, std::ostream& out,
                                   std::ostream& err);

} // namespace exo
