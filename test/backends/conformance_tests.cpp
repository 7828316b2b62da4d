// Backend conformance: the same checks against every device the factory
// finds (cpu, simulated, vulkan on lavapipe, and GPUs where present).

#include "backends/cpu/cpu_backend.hpp"
#include "backends/factory/factory.hpp"
#include "backends/host_kernels.hpp"
#include "test/support/random.hpp"

#include "test/support/emulated_gpu.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>
#include <thread>

#include <sched.h>

using namespace exo::backend;

using exo::test::random_floats;

namespace {

registry& all_devices() {
  static registry reg = [] {
    factory_options opts;
    opts.use_environment = false;
    opts.sim.devices = {{"a100-40g", ""}, {"adreno-740", ""}};
    auto r = registry::create(opts);
    REQUIRE(r.ok());
    return std::move(*r);
  }();
  return reg;
}

/// The registry's devices and the emulated GPU (test/support/emulated_gpu.hpp).
std::vector<device*> every_device() {
  return exo::test::with_emulated_gpu(all_devices());
}

std::vector<std::uint8_t> random_bytes(std::mt19937& rng, std::size_t n) {
  std::vector<std::uint8_t> v(n);
  for (auto& b : v)
    b = static_cast<std::uint8_t>(rng());
  return v;
}

std::unique_ptr<buffer> alloc(device& dev, std::size_t n) {
  auto r = dev.allocate(n);
  REQUIRE(r.ok());
  return std::move(*r);
}

void upload(device& dev, buffer& buf, const std::vector<float>& v) {
  REQUIRE(dev.write(buf, 0, v.data(), v.size() * sizeof(float)).ok());
}

std::vector<float> download(device& dev, buffer& buf, std::size_t n) {
  std::vector<float> v(n);
  REQUIRE(dev.read(buf, 0, v.data(), n * sizeof(float)).ok());
  return v;
}

void require_close(const std::vector<float>& got,
                   const std::vector<float>& want, double rel) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    double tol = rel * std::max(1.0, std::fabs(static_cast<double>(want[i])));
    INFO("element " << i);
    REQUIRE(std::fabs(got[i] - want[i]) <= tol);
  }
}

} // namespace

TEST_CASE("the factory finds a cpu device and the configured simulated ones") {
  auto devs = every_device();
  int cpu = 0, sim = 0;
  for (auto* d : devs) {
    cpu += d->properties().kind == backend_kind::cpu;
    sim += d->properties().kind == backend_kind::sim;
  }
  CHECK(cpu == 1);
  CHECK(sim == 2);
}

TEST_CASE("every device describes itself completely and honestly") {
  for (auto* dev : every_device()) {
    auto& p = dev->properties();
    DYNAMIC_SECTION(p.id) {
      CHECK_FALSE(p.id.empty());
      CHECK_FALSE(p.name.empty());
      CHECK_FALSE(p.vendor.empty());
      CHECK(p.total_memory > 0);
      CHECK(p.max_allocation > 0);
      CHECK(p.max_allocation <= p.total_memory);
      CHECK(p.simulated == (p.kind == backend_kind::sim));
      if (p.simulated)
        CHECK(p.name.find("imulated") != std::string::npos);
      auto t = dev->read_telemetry();
      CHECK(t.memory.total == p.total_memory);
      // A reading is present exactly when the device claims it can make it.
      CHECK(t.temperature_c.has_value() == p.has(cap_temperature));
      CHECK(t.power_w.has_value() == p.has(cap_power));
      if (t.utilization)
        CHECK((*t.utilization >= 0.0 && *t.utilization <= 1.0));
    }
  }
}

TEST_CASE("allocation of zero fails, small and unaligned sizes work") {
  for (auto* dev : every_device()) {
    DYNAMIC_SECTION(dev->properties().id) {
      auto zero = dev->allocate(0);
      REQUIRE_FALSE(zero.ok());
      CHECK(zero.err().code == errc::invalid_argument);
      for (std::size_t n : {1u, 3u, 7u, 64u, 1000u, 4097u, 65537u}) {
        auto b = alloc(*dev, n);
        CHECK(b->size() == n);
        CHECK(&b->owner() == dev);
      }
    }
  }
}

TEST_CASE("an allocation larger than the device is an out-of-memory value") {
  for (auto* dev : every_device()) {
    DYNAMIC_SECTION(dev->properties().id) {
      auto too_big = dev->properties().total_memory + 1;
      auto r = dev->allocate(static_cast<std::size_t>(too_big));
      REQUIRE_FALSE(r.ok());
      CHECK(r.err().code == errc::out_of_memory);
      CHECK_FALSE(r.err().message.empty());
      // The device is still usable afterwards.
      CHECK(dev->allocate(16).ok());
    }
  }
}

TEST_CASE("allocated bytes show up in the device's memory info") {
  for (auto* dev : every_device()) {
    DYNAMIC_SECTION(dev->properties().id) {
      auto before = dev->memory().used_by_exo;
      {
        auto b = alloc(*dev, 1 << 20);
        CHECK(dev->memory().used_by_exo >= before + (1 << 20));
      }
      CHECK(dev->memory().used_by_exo == before);
    }
  }
}

TEST_CASE("a resized buffer keeps its first bytes and its memory is "
          "counted, and a device that cannot resize says so") {
  std::mt19937 rng{5};
  for (auto* dev : every_device()) {
    DYNAMIC_SECTION(dev->properties().id) {
      auto buf = alloc(*dev, 100000);
      auto data = random_bytes(rng, 100000);
      REQUIRE(dev->write(*buf, 0, data.data(), data.size()).ok());
      const auto used = dev->memory().used_by_exo;
      if (!dev->resizes()) {
        auto st = dev->resize(*buf, 200000);
        REQUIRE_FALSE(st.ok());
        CHECK(st.err().code == errc::unsupported);
        CHECK(buf->size() == 100000);
        continue;
      }
      // Small (from malloc), large (the huge-page arena), larger, smaller:
      // the bytes both sizes hold stay, the new ones are writable.
      std::size_t had = 100000;
      for (std::size_t n : {std::size_t{3} << 20, std::size_t{9} << 20,
                            std::size_t{5000}, std::size_t{1} << 20}) {
        REQUIRE(dev->resize(*buf, n).ok());
        CHECK(buf->size() == n);
        CHECK(dev->memory().used_by_exo == used - 100000 + n);
        const auto keep = std::min({had, n, data.size()});
        std::vector<std::uint8_t> back(keep);
        REQUIRE(dev->read(*buf, 0, back.data(), keep).ok());
        CHECK(std::equal(back.begin(), back.end(), data.begin()));
        if (n > had) {
          auto more = random_bytes(rng, n - had);
          REQUIRE(dev->write(*buf, had, more.data(), more.size()).ok());
          data.resize(had);
          data.insert(data.end(), more.begin(), more.end());
        }
        data.resize(std::min(data.size(), n));
        had = n;
      }
      CHECK(dev->write(*buf, 0, data.data(), (1 << 20) + 1).err().code
            == errc::out_of_range);
      // Refused, and nothing changes: size 0, past the device, another
      // device's buffer, a read-only buffer.
      CHECK(dev->resize(*buf, 0).err().code == errc::invalid_argument);
      CHECK(dev->resize(*buf, dev->properties().max_allocation + 1)
              .err().code
            == errc::out_of_memory);
      // One byte more than the device has free beside the buffer, where
      // free is the device's own bookkeeping. Where it is the host's live
      // available memory (the cpu device without a limit), other processes
      // move it between memory() and resize (a CI run freed memory there
      // and the resize succeeded): ask for the whole device instead, which
      // the host never has available beside the buffer.
      const auto mem = dev->memory();
      const bool booked = mem.free == mem.total - mem.used_by_exo;
      const std::size_t too_much
        = booked ? (1u << 20) + mem.free + 1 : dev->properties().max_allocation;
      INFO("free " << mem.free << ", asked " << too_much);
      auto st = dev->resize(*buf, too_much);
      REQUIRE_FALSE(st.ok());
      CHECK(st.err().code == errc::out_of_memory);
      CHECK(buf->size() == (1u << 20));
      for (auto* other : every_device())
        if (other != dev) {
          auto theirs = alloc(*other, 64);
          CHECK(dev->resize(*theirs, 128).err().code == errc::wrong_device);
          break;
        }
      {
        static const std::vector<float> host(1024, 2.0f);
        auto adopted = dev->adopt_host(
          host.data(), 4096, std::shared_ptr<const void>(&host, [](auto*) {}));
        if (adopted) {
          CHECK(dev->resize(**adopted, 8192).err().code
                == errc::invalid_argument);
          CHECK((*adopted)->size() == 4096);
        }
      }
      buf.reset();
      CHECK(dev->memory().used_by_exo == used - 100000);
    }
  }
}

TEST_CASE("copy round trips keep every byte at random sizes and offsets") {
  std::mt19937 rng{42};
  for (auto* dev : every_device()) {
    DYNAMIC_SECTION(dev->properties().id) {
      auto buf = alloc(*dev, 1 << 20);
      for (int round = 0; round < 40; ++round) {
        std::size_t n = 1 + rng() % 70000;
        std::size_t off = rng() % ((1 << 20) - n);
        auto data = random_bytes(rng, n);
        REQUIRE(dev->write(*buf, off, data.data(), n).ok());
        std::vector<std::uint8_t> back(n);
        REQUIRE(dev->read(*buf, off, back.data(), n).ok());
        REQUIRE(back == data);
      }
    }
  }
}

TEST_CASE("ranges outside a buffer are refused and change nothing") {
  for (auto* dev : every_device()) {
    DYNAMIC_SECTION(dev->properties().id) {
      auto buf = alloc(*dev, 256);
      std::vector<std::uint8_t> data(256, 7);
      REQUIRE(dev->write(*buf, 0, data.data(), 256).ok());
      std::vector<std::uint8_t> junk(512, 9);
      auto w = dev->write(*buf, 200, junk.data(), 57);
      REQUIRE_FALSE(w.ok());
      CHECK(w.err().code == errc::out_of_range);
      CHECK(dev->write(*buf, 257, junk.data(), 0).err().code
            == errc::out_of_range);
      CHECK(dev->write(*buf, SIZE_MAX, junk.data(), 2).err().code
            == errc::out_of_range);
      CHECK(dev->read(*buf, 1, junk.data(), 256).err().code
            == errc::out_of_range);
      CHECK(dev->copy(*buf, 0, *buf, 128, 129).err().code
            == errc::out_of_range);
      std::vector<std::uint8_t> back(256);
      REQUIRE(dev->read(*buf, 0, back.data(), 256).ok());
      CHECK(back == data);
    }
  }
}

TEST_CASE("a buffer of another device is refused with wrong_device") {
  auto devs = every_device();
  REQUIRE(devs.size() >= 2);
  auto a = alloc(*devs[0], 64);
  auto b = alloc(*devs[1], 64);
  CHECK(devs[0]->copy(*a, 0, *b, 0, 16).err().code == errc::wrong_device);
  char tmp[16];
  CHECK(devs[1]->read(*a, 0, tmp, 16).err().code == errc::wrong_device);
}

TEST_CASE("copies within a device move the bytes") {
  std::mt19937 rng{7};
  for (auto* dev : every_device()) {
    DYNAMIC_SECTION(dev->properties().id) {
      auto a = alloc(*dev, 100000);
      auto b = alloc(*dev, 100000);
      auto data = random_bytes(rng, 100000);
      REQUIRE(dev->write(*a, 0, data.data(), data.size()).ok());
      REQUIRE(dev->copy(*a, 1000, *b, 3, 50000).ok());
      std::vector<std::uint8_t> back(50000);
      REQUIRE(dev->read(*b, 3, back.data(), back.size()).ok());
      CHECK(std::equal(back.begin(), back.end(), data.begin() + 1000));
    }
  }
}

TEST_CASE("copies between every pair of devices move the bytes") {
  std::mt19937 rng{9};
  auto devs = every_device();
  for (auto* src : devs)
    for (auto* dst : devs) {
      DYNAMIC_SECTION(src->properties().id << " -> " << dst->properties().id) {
        // Larger than one staging chunk to exercise the chunked path.
        std::size_t n = (9u << 20) + 123;
        auto a = alloc(*src, n + 16);
        auto b = alloc(*dst, n + 16);
        auto data = random_bytes(rng, n);
        REQUIRE(src->write(*a, 16, data.data(), n).ok());
        REQUIRE(copy_between(*src, *a, 16, *dst, *b, 5, n).ok());
        std::vector<std::uint8_t> back(n);
        REQUIRE(dst->read(*b, 5, back.data(), n).ok());
        CHECK(back == data);
      }
    }
}

TEST_CASE("element-wise kernels match the host") {
  std::mt19937 rng{1};
  for (auto* dev : every_device()) {
    DYNAMIC_SECTION(dev->properties().id) {
      for (std::size_t n : {1u, 17u, 1000u, 65537u}) {
        auto x = random_floats(rng, n), y = random_floats(rng, n);
        auto a = alloc(*dev, n * 4), b = alloc(*dev, n * 4),
             c = alloc(*dev, n * 4);
        upload(*dev, *a, x);
        upload(*dev, *b, y);
        for (auto op : {binary_op::add, binary_op::mul}) {
          REQUIRE(dev->elementwise(op, {a.get(), 0}, {b.get(), 0},
                                   {c.get(), 0}, n)
                    .ok());
          std::vector<float> want(n);
          host::elementwise(op, x.data(), y.data(), want.data(), n);
          require_close(download(*dev, *c, n), want, 1e-6);
        }
      }
    }
  }
}

TEST_CASE("matrix products match a double-precision reference") {
  std::mt19937 rng{2};
  struct shape {
    std::size_t m, n, k;
    bool t;
  };
  std::vector<shape> shapes{{1, 1, 1, false},   {1, 300, 257, true},
                            {7, 5, 3, false},   {33, 65, 17, true},
                            {64, 64, 64, false}, {100, 37, 129, true},
                            // Past one block of 256 columns, on threads.
                            {9, 600, 70, false}, {3, 520, 300, true}};
  for (auto* dev : every_device()) {
    DYNAMIC_SECTION(dev->properties().id) {
      for (auto s : shapes) {
        matmul_dims d{s.m, s.n, s.k, s.t};
        auto x = random_floats(rng, s.m * s.k);
        auto w = random_floats(rng, s.k * s.n);
        auto a = alloc(*dev, x.size() * 4), b = alloc(*dev, w.size() * 4),
             c = alloc(*dev, s.m * s.n * 4);
        upload(*dev, *a, x);
        upload(*dev, *b, w);
        REQUIRE(dev->matmul({a.get(), 0}, {b.get(), 0}, {c.get(), 0}, d).ok());
        std::vector<float> want(s.m * s.n);
        host::matmul_reference(x.data(), w.data(), want.data(), d);
        INFO("m=" << s.m << " n=" << s.n << " k=" << s.k << " t=" << s.t);
        require_close(download(*dev, *c, s.m * s.n), want, 1e-4);
      }
    }
  }
}

TEST_CASE("no backend loads OpenBLAS") {
  // Debian's pthread OpenBLAS races its exiting workers at process exit
  // (one exo process in a few dozen aborted with "double free or
  // corruption"): the kernels are exo's own.
  std::ifstream maps{"/proc/self/maps"};
  std::string line;
  bool found = false;
  while (std::getline(maps, line))
    found = found || line.find("libopenblas") != std::string::npos;
  CHECK_FALSE(found);
}

TEST_CASE("a matrix product with an undersized output is refused") {
  for (auto* dev : every_device()) {
    DYNAMIC_SECTION(dev->properties().id) {
      auto a = alloc(*dev, 16 * 4), b = alloc(*dev, 16 * 4),
           c = alloc(*dev, 15 * 4);
      auto st = dev->matmul({a.get(), 0}, {b.get(), 0}, {c.get(), 0},
                            {4, 4, 4, false});
      REQUIRE_FALSE(st.ok());
      CHECK(st.err().code == errc::out_of_range);
      CHECK(dev->matmul({a.get(), 0}, {b.get(), 0}, {c.get(), 0},
                        {0, 4, 4, false})
              .err()
              .code
            == errc::invalid_argument);
    }
  }
}

TEST_CASE("an event recorded after work completes after it, in order") {
  std::mt19937 rng{3};
  for (auto* dev : every_device()) {
    DYNAMIC_SECTION(dev->properties().id) {
      std::size_t n = 128;
      auto x = random_floats(rng, n * n);
      auto a = alloc(*dev, n * n * 4), c = alloc(*dev, n * n * 4);
      upload(*dev, *a, x);
      REQUIRE(dev->matmul({a.get(), 0}, {a.get(), 0}, {c.get(), 0},
                          {n, n, n, false})
                .ok());
      auto e1 = dev->record();
      REQUIRE(e1.ok());
      CHECK(e1->device_uid == dev->uid());
      // Work after the event, then a second event: sequences increase.
      REQUIRE(dev->copy(*c, 0, *a, 0, n * 4).ok());
      auto e2 = dev->record();
      REQUIRE(e2.ok());
      CHECK(e2->sequence > e1->sequence);
      REQUIRE(dev->wait(*e2).ok());
      auto done = dev->completed(*e1);
      REQUIRE(done.ok());
      CHECK(*done);
      // The copy after the matmul saw the matmul's result.
      std::vector<float> want(n * n);
      host::matmul_reference(x.data(), x.data(), want.data(),
                             {n, n, n, false});
      auto row = download(*dev, *a, n);
      require_close(row, std::vector<float>(want.begin(), want.begin() + n),
                    1e-4);
      REQUIRE(dev->synchronize().ok());
    }
  }
}

TEST_CASE("an event of another device, or from the future, is refused") {
  auto devs = every_device();
  REQUIRE(devs.size() >= 2);
  auto e = devs[0]->record();
  REQUIRE(e.ok());
  CHECK(devs[1]->wait(*e).err().code == errc::wrong_device);
  CHECK(devs[1]->completed(*e).err().code == errc::wrong_device);
  event future{devs[0]->uid(), e->sequence + 1000};
  CHECK(devs[0]->wait(future).err().code == errc::invalid_argument);
}

TEST_CASE("host memory adopted in place is read, counted, never written, and "
          "kept alive, devices that cannot say unsupported") {
  std::mt19937 rng{9};
  const std::size_t m = 3, n = 40, k = 24;
  for (auto* dev : every_device()) {
    DYNAMIC_SECTION(dev->properties().id) {
      auto w = std::make_shared<std::vector<float>>(random_floats(rng, n * k));
      const auto original = *w;
      std::weak_ptr<std::vector<float>> alive = w;
      auto before = dev->memory().used_by_exo;
      auto adopted = dev->adopt_host(w->data(), w->size() * 4, w);
      const float* data = w->data();
      w.reset(); // the buffer alone keeps the weights alive
      if (dev->properties().kind != backend_kind::cpu) {
        REQUIRE_FALSE(adopted.ok());
        CHECK(adopted.err().code == errc::unsupported);
        CHECK(alive.expired());
        continue;
      }
      REQUIRE(adopted.ok());
      auto& wb = **adopted;
      CHECK(wb.read_only());
      CHECK_FALSE(alive.expired());
      CHECK(dev->memory().used_by_exo == before + n * k * 4);
      CHECK(dev->host_pointer(wb) == nullptr); // no writable pointer

      // Products read it like any buffer.
      auto x = random_floats(rng, m * k);
      auto a = alloc(*dev, x.size() * 4), c = alloc(*dev, m * n * 4);
      upload(*dev, *a, x);
      matmul_dims d{m, n, k, true};
      REQUIRE(dev->matmul_weights({a.get(), 0}, {&wb, 0}, weight_type::f32,
                                  {c.get(), 0}, d)
                .ok());
      std::vector<float> want(m * n);
      host::matmul_reference(x.data(), original.data(), want.data(), d);
      require_close(download(*dev, *c, m * n), want, 1e-4);
      std::vector<float> back(n * k);
      REQUIRE(dev->read(wb, 0, back.data(), back.size() * 4).ok());
      CHECK(back == original);

      // Every way of writing into it is refused, naming why.
      auto is_read_only = [](const status& s) {
        return !s.ok() && s.err().code == errc::invalid_argument
               && s.err().message.find("read-only") != std::string::npos;
      };
      CHECK(is_read_only(dev->write(wb, 0, x.data(), 4)));
      CHECK(is_read_only(dev->copy(*a, 0, wb, 0, 4)));
      CHECK(is_read_only(copy_between(*dev, *a, 0, *dev, wb, 0, 4)));
      CHECK(is_read_only(
        dev->elementwise(binary_op::add, {a.get(), 0}, {a.get(), 0},
                         {&wb, 0}, 4)));
      CHECK(is_read_only(dev->matmul_weights({a.get(), 0}, {c.get(), 0},
                                             weight_type::f32, {&wb, 0},
                                             {1, 1, 4, true})));
      CHECK(is_read_only(dev->rms_norm({a.get(), 0}, {a.get(), 0}, {&wb, 0},
                                       1, 4, 1e-5f)));
      CHECK(is_read_only(dev->silu_mul({a.get(), 0}, {a.get(), 0}, {&wb, 0},
                                       4)));
      CHECK(std::equal(original.begin(), original.end(), data));

      // Bad regions.
      CHECK(dev->adopt_host(nullptr, 16, std::make_shared<int>(0)).err().code
            == errc::invalid_argument);
      CHECK(dev->adopt_host(data, 16, nullptr).err().code
            == errc::invalid_argument);
      CHECK(dev->adopt_host(data, 0, std::make_shared<int>(0)).err().code
            == errc::invalid_argument);

      adopted->reset(); // freeing it hands the memory back, uncounted
      CHECK(alive.expired());
      CHECK(dev->memory().used_by_exo == before + m * k * 4 + m * n * 4);
    }
  }
}

TEST_CASE("a cpu device configured to copy weights does not adopt host "
          "memory") {
  cpu_options o;
  o.weights_in_place = false;
  auto be = make_cpu_backend(o);
  REQUIRE(be->initialize().ok());
  auto mem = std::make_shared<std::vector<float>>(16, 1.0f);
  auto r = be->device_at(0)->adopt_host(mem->data(), 64, mem);
  REQUIRE_FALSE(r.ok());
  CHECK(r.err().code == errc::unsupported);
}

TEST_CASE("a cpu device reports no rates unless it measures them and "
          "given figures win over measured ones") {
  {
    auto be = make_cpu_backend({});
    REQUIRE(be->initialize().ok());
    auto& props = be->device_at(0)->properties();
    CHECK_FALSE(props.peak_flops.has_value());
    CHECK_FALSE(props.memory_bandwidth.has_value());
    CHECK_FALSE(props.launch_seconds.has_value());
  }
  {
    cpu_options o;
    o.measure_rates = true;
    auto be = make_cpu_backend(o);
    REQUIRE(be->initialize().ok());
    auto& props = be->device_at(0)->properties();
    REQUIRE(props.peak_flops.has_value());
    REQUIRE(props.memory_bandwidth.has_value());
    REQUIRE(props.launch_seconds.has_value());
    std::printf("cpu device measured %.1f GFLOP/s (F32 matrix product), "
                "%.1f GB/s (F32 matrix-vector product from memory) and "
                "%.1f us an operation\n",
                *props.peak_flops / 1e9, *props.memory_bandwidth / 1e9,
                *props.launch_seconds * 1e6);
    CHECK(*props.launch_seconds > 0);
    CHECK(*props.launch_seconds < 0.1);
    // Sanity bounds of any machine exo runs on, loaded or not (ASan too).
    CHECK(*props.peak_flops > 1e7);
    CHECK(*props.peak_flops < 1e14);
    CHECK(*props.memory_bandwidth > 1e7);
    CHECK(*props.memory_bandwidth < 1e13);
  }
  {
    cpu_options o;
    o.measure_rates = true;
    o.peak_flops = 123e9;
    o.memory_bandwidth = 45e9;
    auto be = make_cpu_backend(o);
    REQUIRE(be->initialize().ok());
    auto& props = be->device_at(0)->properties();
    CHECK(props.peak_flops == 123e9);
    CHECK(props.memory_bandwidth == 45e9);
  }
}

TEST_CASE("a cpu device configured to bind its threads pins each thread "
          "that runs its operations, and leaves them alone by default") {
  cpu_set_t all;
  CPU_ZERO(&all);
  REQUIRE(sched_getaffinity(0, sizeof all, &all) == 0);
  REQUIRE(CPU_COUNT(&all) >= 2); // the project's machines have two or more
  // CPUs the thread may run on after its first operation on the device.
  auto cpus_after_an_operation = [](bool bind) {
    cpu_options o;
    o.bind_threads = bind;
    auto be = make_cpu_backend(o);
    REQUIRE(be->initialize().ok());
    auto* dev = be->device_at(0);
    int cpus = 0;
    bool ran = false;
    std::thread t{[&] { // Catch2's assertions stay on the test's thread
      auto a = dev->allocate(64);
      ran = a.ok()
            && dev->elementwise(binary_op::add, {a->get(), 0},
                                {a->get(), 0}, {a->get(), 0}, 16)
                 .ok();
      cpu_set_t now;
      CPU_ZERO(&now);
      if (sched_getaffinity(0, sizeof now, &now) == 0)
        cpus = CPU_COUNT(&now);
    }};
    t.join();
    CHECK(ran);
    return cpus;
  };
  CHECK(cpus_after_an_operation(false) == CPU_COUNT(&all));
  CHECK(cpus_after_an_operation(true) == 1);
}

TEST_CASE("a cpu device gives the attention bits of the llama.cpp thread "
          "count it is configured with") {
  // One token at position 300: 512 padded cells, llama.cpp's split-KV
  // path, whose bits depend on its thread count (host::attention).
  attention_dims d{1, 300, 4, 2, 64, 128, 0.125f};
  std::mt19937 rng{5};
  auto q = random_floats(rng, 4 * 64, -3.0f, 3.0f);
  auto kv = random_floats(rng, 301 * 128, -3.0f, 3.0f);
  auto on_device = [&](int llama_threads) {
    cpu_options o;
    o.llama_threads = llama_threads;
    auto be = make_cpu_backend(o);
    REQUIRE(be->initialize().ok());
    auto* dev = be->device_at(0);
    auto qb = dev->allocate(q.size() * 4);
    auto kb = dev->allocate(kv.size() * 4);
    auto ob = dev->allocate(q.size() * 4);
    REQUIRE((qb.ok() && kb.ok() && ob.ok()));
    REQUIRE(dev->write(**qb, 0, q.data(), q.size() * 4).ok());
    REQUIRE(dev->write(**kb, 0, kv.data(), kv.size() * 4).ok());
    REQUIRE(dev->attention({qb->get(), 0}, {kb->get(), 0}, {kb->get(), 0},
                           {ob->get(), 0}, d)
              .ok());
    std::vector<float> out(q.size());
    REQUIRE(dev->read(**ob, 0, out.data(), out.size() * 4).ok());
    return out;
  };
  for (int lt : {1, 2, 3}) {
    INFO("llama.cpp threads " << lt);
    std::vector<float> want(q.size());
    host::attention(q.data(), kv.data(), kv.data(), want.data(), d, 1, lt);
    auto got = on_device(lt);
    CHECK(std::memcmp(got.data(), want.data(), want.size() * 4) == 0);
  }
  // The split path does differ from one thread's here.
  auto one = on_device(1);
  auto two = on_device(2);
  CHECK(std::memcmp(one.data(), two.data(), one.size() * 4) != 0);
}

TEST_CASE("a cpu device on several threads runs a decode batch's attention "
          "rows over them, each row with its own bits, and checks every row "
          "first") {
  // Six sequences' decode rows over one paged f16 pool (blocks of 32, each
  // sequence its own run of blocks), 16 heads on 4 KV heads of 64: about
  // 1.3 M multiply-adds in all, past host::attention_split_macs, while
  // every row alone is below it (each would stay on one thread).
  const std::size_t B = 32, heads = 16, kvh = 4, hd = 64, stride = kvh * hd;
  const std::vector<std::size_t> pos = {100, 400, 7, 250, 333, 180};
  const std::size_t R = pos.size(), L = (400 + B) / B;
  std::mt19937 rng{23};
  std::vector<std::vector<std::uint16_t>> own_k(R), own_v(R);
  std::vector<std::int32_t> tables;
  for (std::size_t r = 0; r < R; ++r) {
    const std::size_t cells = pos[r] + 1;
    auto kf = random_floats(rng, cells * stride, -2.0f, 2.0f);
    auto vf = random_floats(rng, cells * stride, -2.0f, 2.0f);
    own_k[r].resize(kf.size());
    own_v[r].resize(vf.size());
    host::to_f16(kf.data(), own_k[r].data(), kf.size());
    host::to_f16(vf.data(), own_v[r].data(), vf.size());
    tables.push_back(static_cast<std::int32_t>(pos[r]));
    for (std::size_t i = 0; i < L; ++i)
      tables.push_back(static_cast<std::int32_t>(r * L + i));
  }
  // K and V in pools of their own, the same block numbers: sequence r's
  // cell c in block r * L + c / B.
  std::vector<std::uint16_t> kpool(R * L * B * stride, 0), vpool(kpool);
  for (std::size_t r = 0; r < R; ++r)
    for (std::size_t c = 0; c <= pos[r]; ++c) {
      const std::size_t at = ((r * L + c / B) * B + c % B) * stride;
      std::copy_n(own_k[r].data() + c * stride, stride, kpool.data() + at);
      std::copy_n(own_v[r].data() + c * stride, stride, vpool.data() + at);
    }
  auto q = random_floats(rng, R * heads * hd, -2.0f, 2.0f);
  // Each row alone, as host::attention computes it over its own cells.
  std::vector<float> want(q.size());
  double macs = 0.0;
  for (std::size_t r = 0; r < R; ++r) {
    attention_dims d{1, pos[r], heads, kvh, hd, stride, 0.125f};
    d.kv = kv_type::f16;
    host::attention(q.data() + r * heads * hd, own_k[r].data(),
                    own_v[r].data(), want.data() + r * heads * hd, d, 1);
    macs += static_cast<double>(pos[r] + 1) * heads * hd;
  }
  REQUIRE(macs >= static_cast<double>(host::attention_split_macs));
  attention_dims d{R, 0, heads, kvh, hd, stride, 0.125f};
  d.kv = kv_type::f16;
  d.block_positions = B;
  d.block_stride = B * stride;
  for (int threads : {1, 2, 3}) {
    INFO("threads " << threads);
    cpu_options o;
    o.threads = threads;
    auto be = make_cpu_backend(o);
    REQUIRE(be->initialize().ok());
    auto* dev = be->device_at(0);
    REQUIRE(dev->runs_paged_rows());
    auto buf = [&](std::size_t bytes) {
      auto b = dev->allocate(bytes);
      REQUIRE(b.ok());
      return std::move(*b);
    };
    auto qb = buf(q.size() * 4), kb = buf(kpool.size() * 2),
         vb = buf(vpool.size() * 2), tb = buf(tables.size() * 4),
         ob = buf(q.size() * 4);
    REQUIRE(dev->write(*qb, 0, q.data(), q.size() * 4).ok());
    REQUIRE(dev->write(*kb, 0, kpool.data(), kpool.size() * 2).ok());
    REQUIRE(dev->write(*vb, 0, vpool.data(), vpool.size() * 2).ok());
    REQUIRE(dev->write(*tb, 0, tables.data(), tables.size() * 4).ok());
    REQUIRE(dev->attention_paged_rows({qb.get(), 0}, {kb.get(), 0},
                                      {vb.get(), 0}, {tb.get(), 0},
                                      {ob.get(), 0}, d, L)
              .ok());
    std::vector<float> got(q.size());
    REQUIRE(dev->read(*ob, 0, got.data(), got.size() * 4).ok());
    CHECK(std::memcmp(got.data(), want.data(), want.size() * 4) == 0);
    // Row 4's last block past the pool: refused, naming the row, before
    // any row ran (the output as it was).
    auto bad = tables;
    bad[4 * (1 + L) + 1 + pos[4] / B] = static_cast<std::int32_t>(R * L);
    const std::vector<float> marker(q.size(), -7.0f);
    REQUIRE(dev->write(*tb, 0, bad.data(), bad.size() * 4).ok());
    REQUIRE(dev->write(*ob, 0, marker.data(), marker.size() * 4).ok());
    auto st = dev->attention_paged_rows({qb.get(), 0}, {kb.get(), 0},
                                        {vb.get(), 0}, {tb.get(), 0},
                                        {ob.get(), 0}, d, L);
    REQUIRE_FALSE(st.ok());
    CHECK(st.err().code == errc::out_of_range);
    CHECK(st.err().message.find("row 4") != std::string::npos);
    std::vector<float> after(q.size());
    REQUIRE(dev->read(*ob, 0, after.data(), after.size() * 4).ok());
    CHECK(after == marker);
  }
}

TEST_CASE("a cpu device on several threads splits a prompt's row and "
          "elementwise operations and gives one thread's bits") {
  // 1201 rows of 96 (a prompt's): above the split bound (32768 elements),
  // with a tail that is not a whole group of 16, 32 or a thread's share.
  const std::size_t rows = 1201, dim = 96, count = rows * dim;
  std::mt19937 rng{11};
  auto a = random_floats(rng, count, -4.0f, 4.0f);
  auto b = random_floats(rng, count, -4.0f, 4.0f);
  auto w = random_floats(rng, dim, 0.5f, 1.5f);
  std::vector<std::int32_t> pos(rows);
  std::iota(pos.begin(), pos.end(), 7);
  struct outputs {
    std::vector<float> add, norm, rope, silu, rotated;
    std::vector<std::uint16_t> half;
    std::vector<unsigned char> q8;
  };
  auto on_device = [&](int threads) {
    cpu_options o;
    o.threads = threads;
    auto be = make_cpu_backend(o);
    REQUIRE(be->initialize().ok());
    auto* dev = be->device_at(0);
    auto buf = [&](std::size_t bytes) {
      auto r = dev->allocate(bytes);
      REQUIRE(r.ok());
      return std::move(*r);
    };
    auto ab = buf(count * 4), bb = buf(count * 4), wb = buf(dim * 4),
         pb = buf(rows * 4), ob = buf(count * 4), hb = buf(count * 2),
         qb = buf(count / 32 * 34);
    REQUIRE(dev->write(*ab, 0, a.data(), count * 4).ok());
    REQUIRE(dev->write(*bb, 0, b.data(), count * 4).ok());
    REQUIRE(dev->write(*wb, 0, w.data(), dim * 4).ok());
    REQUIRE(dev->write(*pb, 0, pos.data(), rows * 4).ok());
    auto read = [&](std::vector<float>& out) {
      out.resize(count);
      REQUIRE(dev->read(*ob, 0, out.data(), count * 4).ok());
    };
    outputs out;
    REQUIRE(dev->elementwise(binary_op::add, {ab.get(), 0}, {bb.get(), 0},
                             {ob.get(), 0}, count)
              .ok());
    read(out.add);
    REQUIRE(dev->rms_norm({ab.get(), 0}, {wb.get(), 0}, {ob.get(), 0}, rows,
                          dim, 1e-5f)
              .ok());
    read(out.norm);
    REQUIRE(dev->write(*ob, 0, a.data(), count * 4).ok());
    rope_dims rd{rows, 3, 32, 32, 10000.0f, false};
    REQUIRE(
      dev->rope({ob.get(), 0}, {pb.get(), 0}, {nullptr, 0}, rd).ok());
    read(out.rope);
    REQUIRE(dev->silu_mul({ab.get(), 0}, {bb.get(), 0}, {ob.get(), 0}, count)
              .ok());
    read(out.silu);
    REQUIRE(dev->hadamard({ab.get(), 0}, {ob.get(), 0}, count, 32).ok());
    read(out.rotated);
    REQUIRE(dev->to_f16({ab.get(), 0}, {hb.get(), 0}, count).ok());
    out.half.resize(count);
    REQUIRE(dev->read(*hb, 0, out.half.data(), count * 2).ok());
    REQUIRE(dev->to_q8_0({ab.get(), 0}, {qb.get(), 0}, count).ok());
    out.q8.resize(count / 32 * 34);
    REQUIRE(dev->read(*qb, 0, out.q8.data(), out.q8.size()).ok());
    return out;
  };
  // One thread's bits are the host kernels' over the whole operand.
  outputs want;
  want.add.resize(count);
  host::elementwise(binary_op::add, a.data(), b.data(), want.add.data(),
                    count);
  want.norm.resize(count);
  host::rms_norm(a.data(), w.data(), want.norm.data(), rows, dim, 1e-5f);
  want.rope = a;
  host::rope(want.rope.data(), pos.data(), nullptr,
             {rows, 3, 32, 32, 10000.0f, false});
  want.silu.resize(count);
  host::silu_mul(a.data(), b.data(), want.silu.data(), count);
  want.rotated.resize(count);
  host::hadamard(a.data(), want.rotated.data(), count, 32);
  want.half.resize(count);
  host::to_f16(a.data(), want.half.data(), count);
  want.q8.resize(count / 32 * 34);
  host::quantize_q8_0_activations(
    a.data(), reinterpret_cast<host::block_q8_0*>(want.q8.data()), count);
  auto same = [](const auto& x, const auto& y) {
    return x.size() == y.size()
           && std::memcmp(x.data(), y.data(),
                          x.size() * sizeof(x[0]))
                == 0;
  };
  for (int threads : {1, 2, 3}) {
    INFO("threads " << threads);
    auto got = on_device(threads);
    CHECK(same(got.add, want.add));
    CHECK(same(got.norm, want.norm));
    CHECK(same(got.rope, want.rope));
    CHECK(same(got.silu, want.silu));
    CHECK(same(got.rotated, want.rotated));
    CHECK(same(got.half, want.half));
    CHECK(same(got.q8, want.q8));
  }
}
