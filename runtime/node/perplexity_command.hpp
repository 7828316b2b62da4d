#pragma once

/// `exo-node perplexity`: llama.cpp's perplexity (llama-perplexity -f
/// FILE) of a served model, through its OpenAI gateway: the text is
/// tokenized by the gateway (/tokenize, with the BOS a completion gets),
/// cut into chunks of --ctx tokens (core/gateway/perplexity.hpp), and the
/// chunks go --batch at a time as the prompts of one completion (echo,
/// logprobs 0, max_tokens 0: every prompt token scored); the second half of
/// each chunk counts, as in llama.cpp. Prints llama-perplexity's lines:
/// "[1]PPL,[2]PPL,..." as the chunks come and "Final estimate: PPL = X
/// +/- E". The model runs wherever the gateway's cluster places it (a model
/// larger than any one machine too).
///
///   exo-node perplexity --url http://127.0.0.1:8080 --model ID
///     --file TEXT [--ctx 512] [--chunks N] [--batch 4] [--api-key KEY]
///
/// Plain HTTP (a gateway on loopback, or behind a proxy); exit 0 after the
/// estimate, 2 on bad arguments, 1 when the text is too short or the
/// gateway refuses (its error printed).

#include <iosfwd>

namespace exo {

int run_perplexity_command(int argc, char** argv, std::ostream& out,
                           std::ostream& err);

} // namespace exo
