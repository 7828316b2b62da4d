#pragma once

/// exo's CAF-free API (docs/embedding.md): link exo::core (or exo::core_static,
/// or pkg-config's exo-core); no actor system needed.
///
///   exo::gguf::...        reading GGUF model files (core/gguf/gguf.hpp)
///   exo::model::...       a model's facts: exo-model info (model_info.hpp)
///   exo::tokenizer::...   the tokenizers llama.cpp selects from a file
///   exo::chat::...        rendering a file's chat template (Jinja)
///   exo::placement::...   placing a model's layers on devices: problems
///                         (built in code or read from JSON), the proven-
///                         optimal solver, plans and their explanation
///   exo::config::...      exo-node's config files
///
/// Each of these headers may also be included on its own, by its path
/// under exo/ (e.g. <exo/core/placement/solve.hpp>).

#include "exo/version.hpp"

#include "core/chat/chat.hpp"
#include "core/config/node_config.hpp"
#include "core/gguf/gguf.hpp"
#include "core/model/model_info.hpp"
#include "core/placement/model_spec.hpp"
#include "core/placement/plan.hpp"
#include "core/placement/problem.hpp"
#include "core/placement/problem_json.hpp"
#include "core/placement/solve.hpp"
#include "core/tokenizer/tokenizer.hpp"
