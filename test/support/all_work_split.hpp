#pragma once

// While alive, every weight product and attention of the host kernels is
// split over the threads it is given, even those product_splits and
// attention_splits keep on the calling thread: tests that compare thread
// counts on small operands run the threaded paths so.

#include "backends/host_kernels.hpp"

namespace exo::test {

struct all_work_split {
  all_work_split() { backend::host::split_all_work(true); }
  ~all_work_split() { backend::host::split_all_work(false); }
  all_work_split(const all_work_split&) = delete;
  all_work_split& operator=(const all_work_split&) = delete;
};

} // namespace exo::test
