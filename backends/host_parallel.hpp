#pragma once

/// Loops of the host kernels over independent rows or jobs, on OpenMP
/// threads where the build has OpenMP and more than one thread is asked
/// for, else on the calling thread without entering the OpenMP runtime: a
/// parallel region of one thread still sets up a team (about 0.3 us), and a
/// decoded token runs about a hundred regions on one thread. Each index runs
/// the same code either way, so results do not depend on the path.

#include <algorithm>
#include <cstddef>

namespace exo::backend::host {

/// body(i) for i in [0, n), statically split over `threads`.
template <class F>
inline void for_each_index(long n, int threads, F&& body) {
#if defined(_OPENMP)
  if (threads > 1 && n > 1) {
#  pragma omp parallel for num_threads(threads) schedule(static)
    for (long i = 0; i < n; ++i)
      body(i);
    return;
  }
#else
  (void) threads;
#endif
  for (long i = 0; i < n; ++i)
    body(i);
}

/// body(i, scratch) for i in [0, n) handed out dynamically over `threads`;
/// each thread makes its own scratch with make_scratch() once.
template <class MakeScratch, class F>
inline void for_each_job(long n, int threads, MakeScratch make_scratch,
                         F&& body) {
#if defined(_OPENMP)
  if (threads > 1 && n > 1) {
#  pragma omp parallel num_threads(threads)
    {
      auto scratch = make_scratch();
#  pragma omp for schedule(dynamic)
      for (long i = 0; i < n; ++i)
        body(i, scratch);
    }
    return;
  }
#else
  (void) threads;
#endif
  auto scratch = make_scratch();
  for (long i = 0; i < n; ++i)
    body(i, scratch);
}

/// Elements below which an elementwise or row operation stays on the
/// calling thread (for_each_range's min_split): a decode step's rows (a
/// few thousand floats) cost less than waking the other threads; a
/// prompt's (rows x width) do not.
constexpr std::size_t split_elements = std::size_t{1} << 15;

/// body(begin, end) over [0, n) cut into one range per thread, each but
/// the last a multiple of `grain` long; on the calling thread alone (one
/// range) when n is below `min_split` or one thread is asked for. For the
/// elementwise and row operations of a prompt (norms, rope, gated units,
/// conversions): each element or row is computed as it is alone, so the
/// bits do not depend on the split, and a decode step's single rows stay
/// off the OpenMP runtime.
template <class F>
inline void for_each_range(std::size_t n, int threads, std::size_t grain,
                           std::size_t min_split, F&& body) {
  grain = grain == 0 ? 1 : grain;
  const std::size_t units = (n + grain - 1) / grain;
  if (threads < 2 || n < min_split || units < 2) {
    if (n > 0)
      body(std::size_t{0}, n);
    return;
  }
  const long parts = static_cast<long>(
    std::min<std::size_t>(units, static_cast<std::size_t>(threads)));
  const std::size_t per = (units + static_cast<std::size_t>(parts) - 1)
                          / static_cast<std::size_t>(parts) * grain;
  for_each_index(parts, threads, [&](long i) {
    const std::size_t b = static_cast<std::size_t>(i) * per;
    const std::size_t e = std::min(n, b + per);
    if (b < e)
      body(b, e);
  });
}

} // namespace exo::backend::host
