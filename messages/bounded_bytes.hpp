#pragma once

/// Byte fields whose length a peer claims. CAF 0.17's deserializer resizes
/// a byte vector to the length the bytes claim (up to 4 GiB) before it
/// reads them, so a 40-byte message could make a node allocate and zero
/// gigabytes. A field wrapped in `bounded<Max>(field)` is loaded only when
/// its claimed length is at most Max; otherwise loading fails
/// (sec::invalid_argument) before anything is allocated. Saved exactly as
/// the plain vector, so the wire format does not change.
///
///   auto nonce = bounded<64>(x.nonce);
///   return f(caf::meta::type_name("exo.join_hello"), x.claimed, nonce);

#include <caf/error.hpp>
#include <caf/sec.hpp>

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace exo {

template<std::size_t Max>
struct bounded_bytes {
  std::vector<std::uint8_t>* xs;
};

template<std::size_t Max>
bounded_bytes<Max> bounded(std::vector<std::uint8_t>& xs) {
  return {&xs};
}

template<class Inspector, std::size_t Max>
typename std::enable_if<!Inspector::writes_state,
                        typename Inspector::result_type>::type
inspect(Inspector& f, bounded_bytes<Max>& x) {
  return f(*x.xs);
}

template<class Inspector, std::size_t Max>
typename std::enable_if<Inspector::writes_state,
                        typename Inspector::result_type>::type
inspect(Inspector& f, bounded_bytes<Max>& x) {
  std::size_t n = 0;
  if (auto err = f.begin_sequence(n))
    return err;
  if (n > Max)
    return caf::make_error(caf::sec::invalid_argument);
  x.xs->resize(n);
  if (n > 0)
    if (auto err = f.apply_raw(n, x.xs->data()))
      return err;
  return f.end_sequence();
}

} // namespace exo
