#pragma once

/// Floating-point numbers on the wire, as their IEEE-754 bit patterns.
///
/// Why: CAF 0.17's serializer packs a float or double with a loop that
/// halves it until it is below 2 (caf/detail/ieee_754.hpp, pack754): for
/// +-Inf the loop never ends, so a message holding an infinity (an
/// overflowing activation, a thermal estimate, a placement cost) would hang
/// the thread that serializes it — a node's multiplexer, and with it every
/// connection of the node. Found by fuzz/messages_fuzz.cpp.
///
/// exo's inspect() functions call `wire(f, ...)` instead of `f(...)`: every
/// double, float, optional<double>, vector<float> and vector<double> among
/// the fields goes as its bits (exact, Inf and NaN included, and cheaper: a
/// vector is one block of bytes); everything else as CAF would send it.
/// Other inspectors (to_string) see the plain values. A vector a peer
/// sends is refused past max_wire_floats floats' bytes before anything is
/// allocated.
/// The bits go in the host's order: exo runs on little-endian hosts only.

#include <caf/deserializer.hpp>
#include <caf/error.hpp>
#include <caf/optional.hpp>
#include <caf/sec.hpp>
#include <caf/serializer.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "exo sends floats in the host's byte order: little-endian only");

namespace exo {

/// The most floats one vector<float> field may claim, half as many doubles
/// for a vector<double> (64 MiB, the largest message a node may announce).
constexpr std::size_t max_wire_floats = 16u << 20;

template<class T>
struct real_bits {
  T* x;
};

struct optional_real_bits {
  caf::optional<double>* x;
};

template<class T>
struct reals_bits {
  std::vector<T>* xs;
};

template<class Inspector>
constexpr bool saves = std::is_base_of<caf::serializer, Inspector>::value;

template<class Inspector>
constexpr bool loads = std::is_base_of<caf::deserializer, Inspector>::value;

template<class Inspector, class T>
typename Inspector::result_type inspect(Inspector& f, real_bits<T>& r) {
  using bits = std::conditional_t<sizeof(T) == 8, std::uint64_t, std::uint32_t>;
  static_assert(sizeof(bits) == sizeof(T));
  if constexpr (saves<Inspector>) {
    bits u;
    std::memcpy(&u, r.x, sizeof u);
    return f(u);
  } else if constexpr (loads<Inspector>) {
    bits u = 0;
    auto err = f(u);
    if (!err)
      std::memcpy(r.x, &u, sizeof u);
    return err;
  } else {
    return f(*r.x);
  }
}

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, optional_real_bits& r) {
  if constexpr (saves<Inspector>) {
    bool has = static_cast<bool>(*r.x);
    double v = has ? **r.x : 0.0;
    real_bits<double> b{&v};
    return f(has, b);
  } else if constexpr (loads<Inspector>) {
    bool has = false;
    double v = 0;
    real_bits<double> b{&v};
    auto err = f(has, b);
    if (!err)
      *r.x = has ? caf::optional<double>{v} : caf::optional<double>{};
    return err;
  } else {
    return f(*r.x);
  }
}

template<class Inspector, class T>
typename Inspector::result_type inspect(Inspector& f, reals_bits<T>& r) {
  auto& xs = *r.xs;
  if constexpr (saves<Inspector>) {
    auto n = xs.size();
    if (auto err = f.begin_sequence(n))
      return err;
    if (n > 0)
      if (auto err = f.apply_raw(n * sizeof(T), xs.data()))
        return err;
    return f.end_sequence();
  } else if constexpr (loads<Inspector>) {
    std::size_t n = 0;
    if (auto err = f.begin_sequence(n))
      return err;
    if (n > max_wire_floats * sizeof(float) / sizeof(T))
      return caf::make_error(caf::sec::invalid_argument);
    xs.resize(n);
    if (n > 0)
      if (auto err = f.apply_raw(n * sizeof(T), xs.data()))
        return err;
    return f.end_sequence();
  } else {
    return f(xs);
  }
}

/// A field as it goes on the wire: floating-point fields as their bits,
/// every other field unchanged.
template<class T>
decltype(auto) on_wire(T&& x) {
  return std::forward<T>(x);
}
inline real_bits<double> on_wire(double& x) {
  return {&x};
}
inline real_bits<float> on_wire(float& x) {
  return {&x};
}
inline optional_real_bits on_wire(caf::optional<double>& x) {
  return {&x};
}
inline reals_bits<float> on_wire(std::vector<float>& x) {
  return {&x};
}
inline reals_bits<double> on_wire(std::vector<double>& x) {
  return {&x};
}

/// `f(xs...)` with every floating-point field as its bits (see above).
template<class Inspector, class... Ts>
typename Inspector::result_type wire(Inspector& f, Ts&&... xs) {
  return f(on_wire(std::forward<Ts>(xs))...);
}

} // namespace exo
