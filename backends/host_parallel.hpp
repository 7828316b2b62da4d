#pragma once

/// Loops of the host kernels over independent rows or jobs, on OpenMP
/// threads where the build has OpenMP and more than one thread is asked
/// for, else on the calling thread without entering the OpenMP runtime: a
/// parallel region of one thread still sets up a team (about 0.3 us), and a
/// decoded token runs about a hundred regions on one thread. Each index runs
/// the same code either way, so results do not depend on the path.

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

} // namespace exo::backend::host
