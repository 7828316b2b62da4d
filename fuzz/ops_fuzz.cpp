// Compute operations as a peer sends them (backend::run: an op number, its
// operand views, dims and scalars, device_actor's kernel_call), on the cpu
// device and on the GPU emulator's device, whose kernels clamp what they
// cannot check (paged tables, positions). Any bytes give an operation that
// runs or a documented refusal: never a read or write outside a buffer (the
// sanitizers), a crash or an unbounded allocation. Buffers hold at most
// 16 KiB, and their contents are the input's bytes, so block tables,
// positions and quantized weights are whatever the fuzzer writes.
//
// Input: op number, device (bit 0), then per view (4 inputs, the output)
// buffer, offset and limit bytes, dims count and 3 bytes per dim (a tag:
// small, 16-bit, near 2^40 or the largest u64), 4 bytes of scalar, four
// buffer sizes; the rest fills the buffers.
#include "backends/backend.hpp"
#include "backends/cpu/cpu_backend.hpp"
#include "backends/gpu_common/gpu_emulator_backend.hpp"
#include "backends/ops.hpp"
#include "fuzz/fuzz_target.hpp"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

namespace {

using namespace exo::backend;

void check(bool ok) {
  if (!ok)
    std::abort();
}

struct devices {
  std::unique_ptr<backend> cpu, gpu;
  device* cpu_dev = nullptr;
  device* gpu_dev = nullptr;
};

devices& the_devices() {
  static devices d = [] {
    devices r;
    cpu_options co;
    co.threads = 1;
    r.cpu = make_cpu_backend(co);
    check(r.cpu->initialize().ok() && r.cpu->device_count() > 0);
    r.cpu_dev = r.cpu->device_at(0);
    r.gpu = make_gpu_emulator_backend();
    check(r.gpu->initialize().ok() && r.gpu->device_count() > 0);
    r.gpu_dev = r.gpu->device_at(0);
    return r;
  }();
  return d;
}

/// Reads the input front to back; past its end, zeros.
struct reader {
  const std::uint8_t* p;
  std::size_t n;
  std::uint8_t byte() {
    if (n == 0)
      return 0;
    --n;
    return *p++;
  }
  std::uint64_t dim() {
    const std::uint8_t tag = byte();
    const std::uint64_t lo = byte(), hi = byte();
    switch (tag % 4) {
      case 0:
        return lo;
      case 1:
        return lo | hi << 8;
      case 2:
        return (std::uint64_t{1} << 40) + (lo | hi << 8);
      default:
        return ~std::uint64_t{0} - lo;
    }
  }
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data,
                                      std::size_t size) {
  auto& devs = the_devices();
  reader in{data, size};
  op_call call;
  call.kind = static_cast<op_kind>(in.byte());
  device& dev = (in.byte() & 1) != 0 ? *devs.gpu_dev : *devs.cpu_dev;
  struct view_bytes {
    std::uint8_t buf, offset, limit;
  };
  std::array<view_bytes, max_op_inputs + 1> views{};
  for (auto& v : views)
    v = {in.byte(), in.byte(), in.byte()};
  call.n_inputs = in.byte() % (max_op_inputs + 1);
  call.n_dims = in.byte() % (max_op_dims + 1);
  for (std::size_t i = 0; i < max_op_dims; ++i)
    call.dims[i] = in.dim();
  call.n_scalars = in.byte() % (max_op_scalars + 1);
  std::uint8_t scalar[4];
  for (auto& x : scalar)
    x = in.byte();
  std::memcpy(&call.scalars[0], scalar, 4);
  // Four buffers of 64 B to 16 KiB, filled with the rest of the input.
  std::array<std::size_t, 4> sizes;
  for (auto& n : sizes)
    n = (std::size_t{in.byte()} + 1) * 64;
  std::array<std::unique_ptr<buffer>, 4> bufs;
  for (std::size_t i = 0; i < bufs.size(); ++i) {
    auto& b = bufs[i];
    auto r = dev.allocate(sizes[i]);
    check(r.ok());
    b = std::move(*r);
    std::vector<std::uint8_t> fill(b->size());
    for (auto& x : fill)
      x = in.byte();
    check(dev.write(*b, 0, fill.data(), fill.size()).ok());
  }
  for (std::size_t i = 0; i < max_op_inputs; ++i)
    call.inputs[i] = {bufs[views[i].buf % 4].get(), views[i].offset,
                      std::size_t{views[i].limit} * 64};
  const auto& o = views[max_op_inputs];
  call.output = {bufs[o.buf % 4].get(), o.offset, std::size_t{o.limit} * 64};
  auto st = run(dev, call);
  if (std::getenv("EXO_OPS_FUZZ_VERBOSE") != nullptr) // for seeding
    std::fprintf(stderr, "%s on %s: %s\n", to_string(call.kind),
                 dev.properties().id.c_str(),
                 st.ok() ? "ran" : st.err().message.c_str());
  if (!st.ok()) {
    // A refusal names what it refuses, in bounded words.
    check(!st.err().message.empty() && st.err().message.size() < 1024);
  }
  // Whatever ran is finished before the buffers go (the GPU's queue).
  (void)dev.synchronize();
  return 0;
}
