// Bounds the sequence lengths CAF's binary deserializer accepts (see
// messages/sequence_bound.hpp for why).
//
// How: this object defines caf::binary_deserializer::begin_sequence. The
// vtable of libcaf_core refers to that function by its (default
// visibility) symbol, so the dynamic linker binds it, and libcaf_core's
// and libcaf_io's calls, to this definition, which the executable exports
// and which comes first in symbol lookup -- the same interposition as
// core/tls/ssl_error_queue_guard.cpp for libssl. It reads the length with
// CAF's own function (found with dlsym(RTLD_NEXT, ...)) and refuses a
// length greater than the bytes left: every element takes at least one
// byte on the wire. The refusal is CAF's own end_of_stream error, so the
// message is dropped exactly as a truncated one is.
//
// sequence_bound_in_force() lets a program check at start that the
// binding took (it does not with a static libcaf_core, where this
// definition would not link).

#include "messages/sequence_bound.hpp"

#include <caf/binary_deserializer.hpp>
#include <caf/sec.hpp>

#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

std::atomic<std::uint64_t> refused{0};
thread_local bool self_test = false; // sequence_bound_in_force() is asking
std::atomic<std::int64_t> last_said_ms{0};

/// Tells the operator, at most once a second (a peer could send many).
void say_refused(std::size_t claimed, std::size_t left) {
  using namespace std::chrono;
  auto now = duration_cast<milliseconds>(steady_clock::now().time_since_epoch())
               .count();
  auto last = last_said_ms.load(std::memory_order_relaxed);
  if (now - last < 1000
      || !last_said_ms.compare_exchange_strong(last, now,
                                               std::memory_order_relaxed))
    return;
  std::fprintf(stderr,
               "exo: dropped a message that claims a sequence of %zu "
               "elements with %zu bytes left (%llu such claims so far)\n",
               claimed, left,
               static_cast<unsigned long long>(
                 refused.load(std::memory_order_relaxed)));
}

// CAF's own begin_sequence. A member function returning a class by value
// is called as a free function taking the return slot, then `this`, then
// the arguments (Itanium C++ ABI), which is this signature.
using begin_sequence_fn = caf::error (*)(caf::binary_deserializer*,
                                         std::size_t&);

begin_sequence_fn caf_begin_sequence() {
  static const begin_sequence_fn fn = [] {
    auto* sym = dlsym(RTLD_NEXT, "_ZN3caf19binary_deserializer14begin_"
                                 "sequenceERm");
    if (sym == nullptr) {
      std::fprintf(stderr,
                   "exo: CAF's binary_deserializer::begin_sequence not "
                   "found (%s); exo needs libcaf_core as a shared library\n",
                   dlerror());
      std::abort();
    }
    return reinterpret_cast<begin_sequence_fn>(sym);
  }();
  return fn;
}

} // namespace

namespace caf {

error binary_deserializer::begin_sequence(size_t& list_size) {
  if (auto err = caf_begin_sequence()(this, list_size))
    return err;
  if (list_size > remaining()) {
    if (!self_test) {
      refused.fetch_add(1, std::memory_order_relaxed);
      say_refused(list_size, remaining());
    }
    list_size = 0;
    return sec::end_of_stream;
  }
  return none;
}

} // namespace caf

namespace exo {

std::uint64_t refused_sequence_claims() noexcept {
  return refused.load(std::memory_order_relaxed);
}

bool sequence_bound_in_force() {
  // A length of 100 (one varbyte) followed by 10 bytes.
  std::vector<char> buf(11, 0);
  buf[0] = 100;
  caf::binary_deserializer src{nullptr, buf};
  std::size_t n = 0;
  self_test = true;
  auto refused_here = static_cast<bool>(src.begin_sequence(n));
  self_test = false;
  return refused_here;
}

} // namespace exo
