// The GPU emulator (gpu_emulator.hpp): blocks as fibers, streams as worker
// threads.

#include "backends/gpu_common/gpu_emulator.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string_view>
#include <thread>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#  define EXO_EMU_ASAN 1
#elif defined(__has_feature)
#  if __has_feature(address_sanitizer)
#    define EXO_EMU_ASAN 1
#  endif
#endif
#ifdef EXO_EMU_ASAN
#  include <sanitizer/common_interface_defs.h>
#endif

#if !defined(__x86_64__)
#  include <ucontext.h>
#endif

#if defined(__x86_64__)
extern "C" void exo_emu_switch(void** save, void* next);
#endif
extern "C" void exo_emu_fiber_entry();

namespace exo::backend::gpu::emu {

namespace {

// -- fibers -------------------------------------------------------------------

constexpr std::size_t stack_bytes = std::size_t{256} << 10;
constexpr unsigned max_block_threads = 1024;

#if defined(__x86_64__)
// Saves the callee-saved registers, MXCSR and the x87 control word on the
// current stack, stores the stack pointer in *save and continues on next
// (glibc's swapcontext makes a system call for the signal mask: 100 times
// slower, and a block of 256 threads switches at every barrier).
asm(R"(
  .text
  .p2align 4
  .type exo_emu_switch, @function
exo_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size exo_emu_switch, .-exo_emu_switch
)");
#endif

struct fiber {
  char* stack = nullptr; // lowest usable byte (a guard page below)
#if defined(__x86_64__)
  void* sp = nullptr;
#else
  ucontext_t ctx;
#endif
  dim3 tid;
  bool done = false;
  std::uint64_t barriers = 0;
  bool shuffling = false; ///< waits in a shuffle, not at __syncthreads
  std::uint32_t lane_value = 0; ///< the bits it offers to a shuffle
#ifdef EXO_EMU_ASAN
  void* fake_stack = nullptr;
#endif
};

/// The blocks of one host thread: its fibers and their stacks.
struct runner {
  std::vector<fiber> fibers;
#if defined(__x86_64__)
  void* main_sp = nullptr;
#else
  ucontext_t main_ctx;
#endif
  std::size_t current = 0;
  std::size_t threads = 0; ///< of the running block
  bool in_block = false;
  dim3 grid, block, bidx;
  const std::function<void()>* body = nullptr;
#ifdef EXO_EMU_ASAN
  const void* main_bottom = nullptr;
  std::size_t main_size = 0;
  void* main_fake = nullptr;
#endif

  ~runner() {
    for (auto& f : fibers)
      if (f.stack != nullptr)
        ::munmap(f.stack - page(), stack_bytes + page());
  }

  static std::size_t page() {
    static const std::size_t p = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    return p;
  }

  bool ensure(std::size_t n) {
    if (fibers.size() < n)
      fibers.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      if (fibers[i].stack != nullptr)
        continue;
      void* p = ::mmap(nullptr, stack_bytes + page(), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED)
        return false;
      (void)::mprotect(p, page(), PROT_NONE); // overflow faults
      fibers[i].stack = static_cast<char*>(p) + page();
    }
    return true;
  }
};

thread_local runner* this_runner = nullptr;
thread_local thread_order order_of_threads = thread_order::forward;
std::mutex order_mtx;
thread_order process_order = thread_order::forward;

runner& my_runner() {
  thread_local runner r;
  this_runner = &r;
  return r;
}

// Switches between the scheduler (main) and fiber i, with AddressSanitizer
// told about each change of stack.
void to_fiber(runner& r, std::size_t i) {
  r.current = i;
  auto& f = r.fibers[i];
#ifdef EXO_EMU_ASAN
  __sanitizer_start_switch_fiber(&r.main_fake, f.stack, stack_bytes);
#endif
#if defined(__x86_64__)
  exo_emu_switch(&r.main_sp, f.sp);
#else
  swapcontext(&r.main_ctx, &f.ctx);
#endif
#ifdef EXO_EMU_ASAN
  __sanitizer_finish_switch_fiber(r.main_fake, nullptr, nullptr);
#endif
}

void to_main(runner& r, bool dying) {
  auto& f = r.fibers[r.current];
#ifdef EXO_EMU_ASAN
  __sanitizer_start_switch_fiber(dying ? nullptr : &f.fake_stack,
                                 r.main_bottom, r.main_size);
#else
  (void)dying;
#endif
#if defined(__x86_64__)
  exo_emu_switch(&f.sp, r.main_sp);
#else
  swapcontext(&f.ctx, &r.main_ctx);
#endif
#ifdef EXO_EMU_ASAN
  __sanitizer_finish_switch_fiber(f.fake_stack, &r.main_bottom, &r.main_size);
#endif
}

} // namespace
} // namespace exo::backend::gpu::emu

extern "C" void exo_emu_fiber_entry() {
  using namespace exo::backend::gpu::emu;
  runner& r = *this_runner;
#ifdef EXO_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &r.main_bottom, &r.main_size);
#endif
  (*r.body)();
  r.fibers[r.current].done = true;
  to_main(r, true);
  std::abort(); // never resumed
}

namespace exo::backend::gpu::emu {
namespace {

void start_fiber(runner& r, fiber& f) {
  f.done = false;
  f.barriers = 0;
  f.shuffling = false;
#ifdef EXO_EMU_ASAN
  f.fake_stack = nullptr;
#endif
#if defined(__x86_64__)
  auto top = reinterpret_cast<std::uintptr_t>(f.stack + stack_bytes) & ~std::uintptr_t{15};
  auto* slot = reinterpret_cast<std::uint64_t*>(top - 16);
  slot[0] = reinterpret_cast<std::uint64_t>(&exo_emu_fiber_entry);
  slot[1] = 0;
  auto* regs = slot - 7; // MXCSR and control word, r15 .. rbp
  std::uint32_t mxcsr = 0;
  std::uint16_t cw = 0;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(cw));
  std::memset(regs, 0, 7 * sizeof(std::uint64_t));
  std::memcpy(regs, &mxcsr, 4);
  std::memcpy(reinterpret_cast<char*>(regs) + 4, &cw, 2);
  f.sp = regs;
  (void)r;
#else
  getcontext(&f.ctx);
  f.ctx.uc_stack.ss_sp = f.stack;
  f.ctx.uc_stack.ss_size = stack_bytes;
  f.ctx.uc_link = nullptr;
  makecontext(&f.ctx, &exo_emu_fiber_entry, 0);
  (void)r;
#endif
}

std::mutex stats_mtx;
runtime_stats all_stats;

template <class F>
void count(F f) {
  std::lock_guard<std::mutex> g{stats_mtx};
  f(all_stats);
}

/// Runs one block; false for a divergent barrier. phases: how many times
/// its threads ran from one barrier (or the start) to the next.
bool run_block(runner& r, std::size_t n, std::uint64_t& phases) {
  for (std::size_t i = 0; i < n; ++i)
    start_fiber(r, r.fibers[i]);
  for (;;) {
    ++phases;
    if (order_of_threads == thread_order::forward) {
      for (std::size_t i = 0; i < n; ++i)
        if (!r.fibers[i].done)
          to_fiber(r, i);
    } else {
      for (std::size_t i = n; i-- > 0;)
        if (!r.fibers[i].done)
          to_fiber(r, i);
    }
    std::size_t done = 0;
    for (std::size_t i = 0; i < n; ++i)
      done += r.fibers[i].done;
    if (done == n)
      return true;
    if (done != 0)
      return false; // some ended while the others wait at a barrier
    for (std::size_t i = 1; i < n; ++i)
      if (r.fibers[i].barriers != r.fibers[0].barriers
          || r.fibers[i].shuffling != r.fibers[0].shuffling)
        return false;
  }
}

bool valid(dim3 grid, dim3 block) {
  const auto threads = std::uint64_t{block.x} * block.y * block.z;
  return grid.x != 0 && grid.y != 0 && grid.z != 0 && grid.x <= 0x7fffffffu
         && grid.y <= 65535 && grid.z <= 65535 && block.x != 0
         && block.y != 0 && block.z != 0 && block.x <= 1024
         && block.y <= 1024 && block.z <= 64 && threads <= max_block_threads;
}

/// One grid at a time in the process: __shared__ arrays are statics.
std::mutex& kernel_mutex() {
  static std::mutex m;
  return m;
}

thread_local error_t last_error = success;

void set_error(error_t e) {
  if (e != success)
    last_error = e;
}

} // namespace

void set_thread_order(thread_order order) noexcept {
  std::lock_guard<std::mutex> g{order_mtx};
  process_order = order;
}

const dim3& thread_idx() noexcept {
  return this_runner->fibers[this_runner->current].tid;
}
const dim3& block_idx() noexcept {
  return this_runner->bidx;
}
const dim3& block_dim() noexcept {
  return this_runner->block;
}
const dim3& grid_dim() noexcept {
  return this_runner->grid;
}

void syncthreads() {
  runner& r = *this_runner;
  ++r.fibers[r.current].barriers;
  r.fibers[r.current].shuffling = false;
  to_main(r, false);
}

namespace {
/// The shuffle itself: moves 32 bits, whatever they mean.
std::uint32_t shfl_xor_bits(std::uint32_t v, unsigned mask) {
  runner& r = *this_runner;
  const std::size_t me = r.current;
  // Offer v, wait until every thread has, take the partner's, and wait
  // again before anyone offers the next value.
  r.fibers[me].lane_value = v;
  r.fibers[me].shuffling = true;
  ++r.fibers[me].barriers;
  to_main(r, false);
  const std::size_t lane = me % warp_lanes;
  const std::size_t partner = me - lane + ((lane ^ mask) % warp_lanes);
  const std::uint32_t got =
    partner < r.threads ? r.fibers[partner].lane_value : v;
  ++r.fibers[me].barriers;
  to_main(r, false);
  return got;
}

/// shfl_xor_bits for any 32-bit value: its bits, moved whole.
template <class T> T shfl_xor_as(T v, unsigned mask) {
  static_assert(sizeof(T) == sizeof(std::uint32_t), "a 32-bit value");
  std::uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  bits = shfl_xor_bits(bits, mask);
  std::memcpy(&v, &bits, sizeof v);
  return v;
}
} // namespace

float shfl_xor(float v, unsigned mask) {
  return shfl_xor_as(v, mask);
}

int shfl_xor(int v, unsigned mask) {
  return shfl_xor_as(v, mask);
}

int run_grid(dim3 grid, dim3 block, const std::function<void()>& body,
             std::uint64_t* phases_out) {
  if (!valid(grid, block))
    return error_invalid_configuration;
  std::lock_guard<std::mutex> guard{kernel_mutex()};
  {
    std::lock_guard<std::mutex> g{order_mtx};
    order_of_threads = process_order;
  }
  runner& r = my_runner();
  const std::size_t n = std::size_t{block.x} * block.y * block.z;
  if (!r.ensure(n))
    return error_memory_allocation;
  r.grid = grid;
  r.block = block;
  r.body = &body;
  r.threads = n;
  std::uint64_t local_phases = 0;
  std::uint64_t& phases = phases_out != nullptr ? *phases_out : local_phases;
  std::size_t i = 0;
  for (unsigned z = 0; z < block.z; ++z)
    for (unsigned y = 0; y < block.y; ++y)
      for (unsigned x = 0; x < block.x; ++x)
        r.fibers[i++].tid = dim3{x, y, z};
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        r.bidx = dim3{bx, by, bz};
        if (!run_block(r, n, phases))
          return error_launch_failure;
      }
  return success;
}

// -- runtime -------------------------------------------------------------------

struct pool_state {
  int device;
};

namespace {

struct device_state {
  std::size_t total = 0;
  std::size_t in_use = 0;
  std::set<int> peers;
  std::shared_ptr<pool_state> pool; // cudaDeviceGetDefaultMemPool's
};

struct allocation {
  std::size_t bytes;
  int device; // -1: host (malloc_host)
};

struct runtime_state {
  std::mutex mtx;
  std::vector<device_state> devices;
  std::map<const char*, allocation> live; // by start address
};

runtime_state& rt() {
  static runtime_state* s = [] {
    auto* p = new runtime_state; // lives to the end: streams may outlive main
    p->devices.resize(1);
    p->devices[0].total = machine{}.memory_per_device;
    return p;
  }();
  return *s;
}

thread_local int current_device = 0;

bool valid_device(int d) {
  std::lock_guard<std::mutex> g{rt().mtx};
  return d >= 0 && static_cast<std::size_t>(d) < rt().devices.size();
}

} // namespace

struct event_core {
  std::mutex mtx;
  std::condition_variable cv;
  std::uint64_t recorded = 0;
  std::uint64_t completed = 0;
};

struct event_state {
  std::shared_ptr<event_core> core = std::make_shared<event_core>();
};

struct stream_state {
  int device;
  std::mutex mtx;
  std::condition_variable cv;
  std::deque<std::function<error_t()>> queue;
  bool busy = false;
  bool stop = false;
  error_t error = success; // sticky: a kernel failed
  std::thread worker;

  explicit stream_state(int d) : device(d) {
    worker = std::thread([this] { run(); });
  }

  ~stream_state() {
    {
      std::lock_guard<std::mutex> g{mtx};
      stop = true;
    }
    cv.notify_all();
    worker.join();
  }

  void push(std::function<error_t()> op) {
    {
      std::lock_guard<std::mutex> g{mtx};
      queue.push_back(std::move(op));
    }
    cv.notify_all();
  }

  error_t drain() {
    std::unique_lock<std::mutex> lk{mtx};
    cv.wait(lk, [this] { return queue.empty() && !busy; });
    return error;
  }

  void run() {
    std::unique_lock<std::mutex> lk{mtx};
    for (;;) {
      cv.wait(lk, [this] { return stop || !queue.empty(); });
      if (queue.empty())
        return;
      auto op = std::move(queue.front());
      queue.pop_front();
      busy = true;
      lk.unlock();
      current_device = device;
      auto e = op();
      lk.lock();
      busy = false;
      if (e != success && error == success)
        error = e;
      cv.notify_all();
    }
  }
};

namespace {

/// Runs op on the stream (after its earlier work) or, on the null stream,
/// now.
error_t enqueue(stream_t s, std::function<error_t()> op) {
  if (s == nullptr) {
    auto e = op();
    set_error(e);
    return e;
  }
  s->push(std::move(op));
  return success;
}

/// Whether [p, p + n) lies inside one live allocation.
bool inside_allocation(const void* p, std::size_t n) {
  auto* c = static_cast<const char*>(p);
  std::lock_guard<std::mutex> g{rt().mtx};
  auto it = rt().live.upper_bound(c);
  if (it == rt().live.begin())
    return false;
  --it;
  return c >= it->first && c + n <= it->first + it->second.bytes;
}

error_t fail_now(error_t e) {
  set_error(e);
  return e;
}

} // namespace

void launch_on_stream(const char* name, void* stream, dim3 grid, dim3 block,
                      std::function<void()> body) {
  if (!valid(grid, block)) {
    set_error(error_invalid_configuration);
    return;
  }
  (void)enqueue(static_cast<stream_t>(stream),
                [name, grid, block, body = std::move(body)] {
                  std::uint64_t phases = 0;
                  auto e = static_cast<error_t>(
                    run_grid(grid, block, body, &phases));
                  const std::uint64_t blocks =
                    std::uint64_t{grid.x} * grid.y * grid.z;
                  count([&](runtime_stats& s) {
                    // By the kernel's name, template arguments left off.
                    const std::string_view n{name};
                    auto& k = s.kernels[std::string{n.substr(0, n.find('<'))}];
                    ++k.launches;
                    k.blocks += blocks;
                    k.threads += blocks * block.x * block.y * block.z;
                    k.phases += phases;
                  });
                  return e;
                });
}

runtime_stats stats() {
  std::lock_guard<std::mutex> g{stats_mtx};
  return all_stats;
}

void reset_stats() {
  std::lock_guard<std::mutex> g{stats_mtx};
  all_stats = {};
}

void configure(const machine& m) {
  std::lock_guard<std::mutex> g{rt().mtx};
  rt().devices.assign(static_cast<std::size_t>(std::max(m.devices, 0)), {});
  for (auto& d : rt().devices)
    d.total = m.memory_per_device;
}

std::size_t bytes_in_use(int ordinal) {
  std::lock_guard<std::mutex> g{rt().mtx};
  if (ordinal < 0 || static_cast<std::size_t>(ordinal) >= rt().devices.size())
    return 0;
  return rt().devices[static_cast<std::size_t>(ordinal)].in_use;
}

error_t get_device_count(int* count) {
  std::lock_guard<std::mutex> g{rt().mtx};
  *count = static_cast<int>(rt().devices.size());
  return *count == 0 ? fail_now(error_no_device) : success;
}

error_t set_device(int ordinal) {
  if (!valid_device(ordinal))
    return fail_now(error_invalid_device);
  current_device = ordinal;
  return success;
}

error_t get_device_properties(device_prop* prop, int ordinal) {
  if (!valid_device(ordinal))
    return fail_now(error_invalid_device);
  std::memset(prop, 0, sizeof(*prop));
  std::snprintf(prop->name, sizeof(prop->name),
                "exo GPU emulator (the CUDA kernels on the host)");
  {
    std::lock_guard<std::mutex> g{rt().mtx};
    prop->totalGlobalMem = rt().devices[static_cast<std::size_t>(ordinal)].total;
  }
  prop->multiProcessorCount = 4;
  prop->memoryBusWidth = 256;
  prop->major = 9;
  prop->minor = 0;
  return success;
}

error_t device_get_attribute(int* value, device_attr attr, int ordinal) {
  if (!valid_device(ordinal))
    return fail_now(error_invalid_device);
  *value = attr == attr_clock_rate ? 1000000 : 1000000;
  return success;
}

error_t device_get_pci_bus_id(char* bus, int len, int ordinal) {
  if (!valid_device(ordinal) || len <= 0)
    return fail_now(error_invalid_value);
  std::snprintf(bus, static_cast<std::size_t>(len), "0000:%02x:00.0",
                0xe0 + ordinal);
  return success;
}

error_t driver_get_version(int* version) {
  *version = 13000;
  return success;
}

error_t device_get_default_mem_pool(mem_pool_t* pool, int ordinal) {
  if (!valid_device(ordinal))
    return fail_now(error_invalid_device);
  std::lock_guard<std::mutex> g{rt().mtx};
  auto& d = rt().devices[static_cast<std::size_t>(ordinal)];
  if (d.pool == nullptr)
    d.pool = std::make_shared<pool_state>(pool_state{ordinal});
  *pool = d.pool.get();
  return success;
}

error_t mem_pool_set_attribute(mem_pool_t pool, mem_pool_attr, void* value) {
  return pool == nullptr || value == nullptr ? fail_now(error_invalid_value)
                                             : success;
}

error_t device_can_access_peer(int* can, int device, int peer) {
  if (!valid_device(device) || !valid_device(peer))
    return fail_now(error_invalid_device);
  *can = device != peer ? 1 : 0;
  return success;
}

error_t device_enable_peer_access(int peer, unsigned) {
  if (!valid_device(peer) || peer == current_device)
    return fail_now(error_invalid_device);
  std::lock_guard<std::mutex> g{rt().mtx};
  auto& d = rt().devices[static_cast<std::size_t>(current_device)];
  if (!d.peers.insert(peer).second) {
    last_error = error_peer_access_already_enabled;
    return error_peer_access_already_enabled;
  }
  return success;
}

error_t mem_get_info(std::size_t* free_bytes, std::size_t* total_bytes) {
  if (!valid_device(current_device))
    return fail_now(error_invalid_device);
  std::lock_guard<std::mutex> g{rt().mtx};
  auto& d = rt().devices[static_cast<std::size_t>(current_device)];
  *total_bytes = d.total;
  *free_bytes = d.total - std::min(d.total, d.in_use);
  return success;
}

error_t stream_create_with_flags(stream_t* stream, unsigned) {
  if (!valid_device(current_device))
    return fail_now(error_invalid_device);
  *stream = new stream_state(current_device);
  return success;
}

error_t stream_destroy(stream_t stream) {
  if (stream == nullptr)
    return fail_now(error_invalid_handle);
  (void)stream->drain();
  delete stream;
  return success;
}

error_t stream_synchronize(stream_t stream) {
  if (stream == nullptr)
    return success;
  count([](runtime_stats& st) { ++st.host_waits; });
  auto e = stream->drain();
  return e == success ? success : fail_now(e);
}

error_t stream_wait_event(stream_t stream, event_t event, unsigned) {
  if (event == nullptr)
    return fail_now(error_invalid_handle);
  auto core = event->core;
  std::uint64_t target;
  {
    std::lock_guard<std::mutex> g{core->mtx};
    target = core->recorded;
  }
  return enqueue(stream, [core, target] {
    std::unique_lock<std::mutex> lk{core->mtx};
    core->cv.wait(lk, [&] { return core->completed >= target; });
    return success;
  });
}

error_t event_create_with_flags(event_t* event, unsigned) {
  *event = new event_state;
  return success;
}

error_t event_destroy(event_t event) {
  if (event == nullptr)
    return fail_now(error_invalid_handle);
  delete event; // a pending record keeps the core alive
  return success;
}

error_t event_record(event_t event, stream_t stream) {
  if (event == nullptr)
    return fail_now(error_invalid_handle);
  auto core = event->core;
  std::uint64_t gen;
  {
    std::lock_guard<std::mutex> g{core->mtx};
    gen = ++core->recorded;
  }
  return enqueue(stream, [core, gen] {
    {
      std::lock_guard<std::mutex> g{core->mtx};
      core->completed = std::max(core->completed, gen);
    }
    core->cv.notify_all();
    return success;
  });
}

error_t event_synchronize(event_t event) {
  if (event == nullptr)
    return fail_now(error_invalid_handle);
  count([](runtime_stats& st) { ++st.host_waits; });
  auto& core = *event->core;
  std::unique_lock<std::mutex> lk{core.mtx};
  core.cv.wait(lk, [&] { return core.completed >= core.recorded; });
  return success;
}

error_t event_query(event_t event) {
  if (event == nullptr)
    return fail_now(error_invalid_handle);
  auto& core = *event->core;
  std::lock_guard<std::mutex> g{core.mtx};
  if (core.completed >= core.recorded)
    return success;
  last_error = error_not_ready;
  return error_not_ready;
}

error_t malloc_async(void** ptr, std::size_t bytes, stream_t stream) {
  if (ptr == nullptr || bytes == 0)
    return fail_now(error_invalid_value);
  const int dev = stream != nullptr ? stream->device : current_device;
  {
    std::lock_guard<std::mutex> g{rt().mtx};
    if (dev < 0 || static_cast<std::size_t>(dev) >= rt().devices.size())
      return fail_now(error_invalid_device);
    auto& d = rt().devices[static_cast<std::size_t>(dev)];
    if (bytes > d.total - std::min(d.total, d.in_use))
      return fail_now(error_memory_allocation);
    d.in_use += bytes;
  }
  // Exactly the bytes asked for (AddressSanitizer sees the end), and NaN
  // patterns where nothing was written yet, as uninitialized device memory
  // has no promised value.
  auto* p = static_cast<char*>(std::malloc(bytes));
  if (p == nullptr) {
    std::lock_guard<std::mutex> g{rt().mtx};
    rt().devices[static_cast<std::size_t>(dev)].in_use -= bytes;
    return fail_now(error_memory_allocation);
  }
  std::memset(p, 0xff, bytes);
  count([](runtime_stats& st) { ++st.allocations; });
  {
    std::lock_guard<std::mutex> g{rt().mtx};
    rt().live[p] = {bytes, dev};
  }
  *ptr = p;
  return success;
}

error_t free_async(void* ptr, stream_t stream) {
  if (ptr == nullptr)
    return success;
  {
    std::lock_guard<std::mutex> g{rt().mtx};
    auto it = rt().live.find(static_cast<const char*>(ptr));
    if (it == rt().live.end() || it->second.device < 0)
      return fail_now(error_invalid_value);
  }
  return enqueue(stream, [ptr] {
    {
      std::lock_guard<std::mutex> g{rt().mtx};
      auto it = rt().live.find(static_cast<const char*>(ptr));
      const auto dev = static_cast<std::size_t>(it->second.device);
      if (dev < rt().devices.size()) { // configure may have dropped it
        auto& d = rt().devices[dev];
        d.in_use -= std::min(d.in_use, it->second.bytes);
      }
      rt().live.erase(it);
    }
    std::free(ptr);
    return success;
  });
}

error_t malloc_host(void** ptr, std::size_t bytes) {
  if (ptr == nullptr || bytes == 0)
    return fail_now(error_invalid_value);
  *ptr = std::malloc(bytes);
  return *ptr == nullptr ? fail_now(error_memory_allocation) : success;
}

error_t free_host(void* ptr) {
  std::free(ptr);
  return success;
}

namespace {

/// A copy of `bytes` in the stats, by direction.
void count_copy(memcpy_kind kind, std::size_t bytes) {
  count([&](runtime_stats& st) {
    auto* n = kind == host_to_device   ? &st.to_device
              : kind == device_to_host ? &st.to_host
                                       : &st.on_device;
    auto* b = kind == host_to_device   ? &st.to_device_bytes
              : kind == device_to_host ? &st.to_host_bytes
                                       : &st.on_device_bytes;
    ++*n;
    *b += bytes;
  });
}

} // namespace

error_t memcpy_async(void* dst, const void* src, std::size_t bytes,
                     memcpy_kind kind, stream_t stream) {
  if (bytes == 0)
    return success;
  if (dst == nullptr || src == nullptr)
    return fail_now(error_invalid_value);
  const bool dst_dev = kind != device_to_host;
  const bool src_dev = kind != host_to_device;
  if ((dst_dev && !inside_allocation(dst, bytes))
      || (src_dev && !inside_allocation(src, bytes)))
    return fail_now(error_invalid_value);
  count_copy(kind, bytes);
  return enqueue(stream, [dst, src, bytes] {
    std::memmove(dst, src, bytes);
    return success;
  });
}

error_t memcpy_2d_async(void* dst, std::size_t dpitch, const void* src,
                        std::size_t spitch, std::size_t width,
                        std::size_t height, memcpy_kind kind,
                        stream_t stream) {
  if (width == 0 || height == 0)
    return success;
  if (dst == nullptr || src == nullptr || width > dpitch || width > spitch)
    return fail_now(error_invalid_value);
  const std::size_t dspan = (height - 1) * dpitch + width;
  const std::size_t sspan = (height - 1) * spitch + width;
  if ((kind != device_to_host && !inside_allocation(dst, dspan))
      || (kind != host_to_device && !inside_allocation(src, sspan)))
    return fail_now(error_invalid_value);
  count_copy(kind, width * height);
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  return enqueue(stream, [d, s, dpitch, spitch, width, height] {
    for (std::size_t r = 0; r < height; ++r)
      std::memmove(d + r * dpitch, s + r * spitch, width);
    return success;
  });
}

error_t memcpy_peer_async(void* dst, int dst_device, const void* src,
                          int src_device, std::size_t bytes,
                          stream_t stream) {
  if (!valid_device(dst_device) || !valid_device(src_device))
    return fail_now(error_invalid_device);
  return memcpy_async(dst, src, bytes, device_to_device, stream);
}

error_t get_last_error() {
  auto e = last_error;
  last_error = success;
  return e;
}

const char* get_error_string(error_t e) {
  switch (e) {
    case success: return "no error";
    case error_invalid_value: return "invalid argument";
    case error_memory_allocation: return "out of memory (emulated device)";
    case error_invalid_configuration: return "invalid configuration argument";
    case error_no_device: return "no emulated device configured";
    case error_invalid_device: return "invalid device ordinal";
    case error_invalid_handle: return "invalid resource handle";
    case error_not_ready: return "device not ready";
    case error_peer_access_already_enabled:
      return "peer access is already enabled";
    case error_launch_failure:
      return "unspecified launch failure (emulated: a __syncthreads that "
             "not every thread of a block reached)";
  }
  return "unknown error";
}

} // namespace exo::backend::gpu::emu
