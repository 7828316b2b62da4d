// The gateway's OpenAI request parsers: the first byte picks completions,
// chat completions, /tokenize or /detokenize (its value mod 4), the rest is
// the body. A request or an api_error with a 4xx status; never anything
// else.
#include "core/gateway/request.hpp"
#include "fuzz/fuzz_target.hpp"

#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data,
                                      std::size_t size) {
  if (size == 0)
    return 0;
  using namespace exo::gateway;
  std::string_view body{reinterpret_cast<const char*>(data) + 1, size - 1};
  request_limits limits;
  limits.max_body_bytes = 1 << 16;
  auto known = [](const std::string& id) { return id == "tiny"; };
  if (data[0] % 4 >= 2) {
    auto t = parse_tokenize(data[0] % 4 == 3, body, limits, known);
    if (!t.request && (t.error.status < 400 || t.error.status > 499))
      __builtin_trap();
    return 0;
  }
  auto kind = data[0] % 2 ? endpoint_kind::chat_completions
                          : endpoint_kind::completions;
  auto r = parse_request(kind, body, limits, known);
  if (!r.request && (r.error.status < 400 || r.error.status > 499))
    __builtin_trap();
  return 0;
}
