// JSON mode's state machine (core/model/json_constraint.hpp) against a real
// JSON parser: any bytes are taken up to the first one that breaks JSON,
// and text it calls a whole object parses as one (nlohmann::json, strict
// RFC 8259). Byte by byte and in the pieces tokens would be (the first
// input byte sets their length) the verdict is the same.
#include "core/model/json_constraint.hpp"
#include "fuzz/fuzz_target.hpp"

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data,
                                      std::size_t size) {
  if (size == 0)
    return 0;
  const std::size_t piece = 1 + data[0] % 8;
  std::string_view text{reinterpret_cast<const char*>(data) + 1, size - 1};
  exo::model::json_prefix bytewise;
  std::size_t taken = 0;
  while (taken < text.size() && bytewise.feed(text[taken]))
    ++taken;
  // In pieces: a piece is taken exactly when all its bytes are.
  exo::model::json_prefix pieces;
  for (std::size_t at = 0; at < text.size(); at += piece) {
    const auto p = text.substr(at, piece);
    exo::model::json_prefix trial = pieces;
    const bool ok = trial.feed(p);
    if (ok != (at + p.size() <= taken))
      std::abort();
    if (!ok)
      break;
    pieces = trial;
  }
  if (taken == text.size() && bytewise.complete()) {
    try {
      if (!nlohmann::json::parse(text).is_object())
        std::abort();
    } catch (const nlohmann::json::out_of_range& e) {
      // A number beyond a double (1e999): valid JSON that nlohmann does
      // not hold (error 406); JavaScript and Python read it as Infinity.
      if (e.id != 406)
        std::abort();
    } catch (...) {
      std::abort();
    }
  }
  return 0;
}
