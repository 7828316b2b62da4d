#pragma once

/// The options of a job, shared by `exo-node run` and the console's `run`:
///   --model FILE --prompt TEXT [-n N] [--seed S] [--temperature T]
///   [--top-k K] [--top-p P] [--min-p P] [--repetition-penalty R]
///   [--frequency-penalty F]
///   [--presence-penalty F] [--logit-bias ID=B,...] [--json] [--stages K]
///   [--sequences M] [--ctx C]
///   [--chat [--system TEXT]] [--kv-type TYPE] [--logits-out FILE]
/// and, for `exo-node run` only, [--config FILE] [--state-dir DIR]
/// [--llama-threads N].

#include "core/model/sampler.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace exo::workload {

struct run_options {
  std::string model;
  std::string prompt;
  std::uint32_t n_gen = 16;
  model::sampler_params sampling;
  std::uint32_t stages = 0;    ///< 0: the solver's plan (cluster or node)
                               ///< (local); K: an even split
  std::uint32_t sequences = 1; ///< M copies of the prompt, in flight at once
  /// --batch B: at most B sequences per step (1: each on its own); 0: as
  /// many as a step carries.
  std::uint32_t batch = 0;
  /// --no-prompt-sharing: every sequence computes its copy of the prompt
  /// (job_request::share_prompt).
  bool no_prompt_sharing = false;
  /// --no-prefix-cache: no prompt rows are copied from the stages' prefix
  /// cache (job_request::prefix_cache).
  bool no_prefix_cache = false;
  /// --draft FILE: a draft model with the same vocabulary for speculative
  /// decoding (greedy or sampled runs), --draft-tokens K proposals a
  /// round.
  std::string draft;
  std::uint32_t draft_tokens = 4;
  std::uint32_t n_ctx = 0;     ///< 0: prompt + n, at most the model's
  /// --chat: the prompt is the user's message of a chat, rendered with the
  /// model's chat template (core/workload/chat_prompt.hpp); --system adds
  /// a system message.
  bool chat = false;
  std::string system;
  std::string logits_out;
  std::string name; ///< --id NAME (console run): what attach finds it by
  /// --kv-type f16|q8_0|f32: how the KV caches store keys and values
  /// ("" = f16; job_request::kv_type).
  std::string kv_type;
  std::string config;          ///< local runs: node config file
  std::string state_dir;       ///< local runs: state directory override
  /// local runs: the cpu device gives llama.cpp -t N's attention bits
  /// (devices.cpu_llama_threads); 0: the config's.
  std::uint32_t llama_threads = 0;
  bool help = false; ///< -h/--help was given: print run_options_help
};

/// Parses the words after "run" (CLI11, core/cli); throws
/// std::invalid_argument with a message naming the option. `local` allows
/// --config/--state-dir/--logits-out/--llama-threads. -h/--help sets `help`
/// and checks nothing else.
run_options parse_run_options(const std::vector<std::string>& words,
                              bool local);

/// The usage text of `run` (`local`: exo-node run's).
std::string run_options_help(bool local);

} // namespace exo::workload
