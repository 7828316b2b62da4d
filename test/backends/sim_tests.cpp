// Simulated devices: profiles, capacity, simulated time, heat, and faults.

#include "backends/sim/sim_backend.hpp"
#include "backends/cpu/cpu_backend.hpp"
#include "backends/host_kernels.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <future>
#include <thread>

using namespace exo::backend;

namespace {

struct sim_fixture {
  std::unique_ptr<backend> be;
  sim_device* dev = nullptr;

  explicit sim_fixture(const std::string& profile = "adreno-740") {
    sim_options opts;
    opts.devices = {{profile, ""}};
    be = make_sim_backend(opts);
    REQUIRE(be->initialize().ok());
    dev = dynamic_cast<sim_device*>(be->device_at(0));
    REQUIRE(dev != nullptr);
  }
};

} // namespace

TEST_CASE("the built-in profiles cover the documented device kinds") {
  auto& profiles = builtin_sim_profiles();
  for (auto name : {"a100-40g", "rtx-4090", "mi300x", "m2-max", "adreno-740",
                    "arc-a770"}) {
    INFO(name);
    CHECK(std::any_of(profiles.begin(), profiles.end(),
                      [&](auto& p) { return p.name == name; }));
  }
}

TEST_CASE("a simulated device says it is simulated and mirrors its profile") {
  sim_fixture f{"a100-40g"};
  auto& p = f.dev->properties();
  CHECK(p.simulated);
  CHECK(p.kind == backend_kind::sim);
  CHECK(p.id == "sim:a100-40g:0");
  CHECK(p.name.find("Simulated") == 0);
  CHECK(p.total_memory == 40ull << 30);
  REQUIRE(p.peak_flops);
  CHECK(*p.peak_flops == Approx(19.5e12));
}

TEST_CASE("a simulated device enforces its memory capacity") {
  sim_fixture f{"adreno-740"}; // 8 GiB
  auto a = f.dev->allocate(5ull << 30);
  REQUIRE(a.ok());
  auto b = f.dev->allocate(4ull << 30);
  REQUIRE_FALSE(b.ok());
  CHECK(b.err().code == errc::out_of_memory);
  a->reset();
  CHECK(f.dev->allocate(4ull << 30).ok());
}

TEST_CASE("work advances the simulated clock in proportion to the profile") {
  sim_fixture slow{"adreno-740"};
  sim_fixture fast{"rtx-4090"};
  for (auto* dev : {slow.dev, fast.dev}) {
    auto a = dev->allocate(1024 * 1024 * 4);
    auto c = dev->allocate(1024 * 1024 * 4);
    REQUIRE(a.ok());
    REQUIRE(c.ok());
    // The output may not overlap an input (backend.hpp, rule 10).
    REQUIRE(dev->matmul({a->get(), 0}, {a->get(), 0}, {c->get(), 0},
                        {1024, 1024, 1024, false})
              .ok());
  }
  // A roofline: max(FLOPs / peak FLOP/s, bytes / bandwidth). At 1024^3 both
  // profiles are compute-bound: 2*1024^3 FLOP at 2 versus 82.6 TFLOP/s.
  double flops = 2.0 * 1024 * 1024 * 1024;
  CHECK(slow.dev->now() == Approx(flops / 2e12));
  CHECK(slow.dev->now() / fast.dev->now() == Approx(82.6 / 2.0));
}

TEST_CASE("the temperature follows the RC model of the power drawn") {
  sim_fixture f{"adreno-740"};
  auto& p = f.dev->profile();
  double idle_steady = p.ambient_c + p.idle_power_w * p.thermal_resistance;
  CHECK(f.dev->temperature() == Approx(idle_steady));
  double tau = p.thermal_resistance * p.thermal_capacitance;
  f.dev->run_load(p.peak_power_w, tau);
  double hot = p.ambient_c + p.peak_power_w * p.thermal_resistance;
  double want = hot + (idle_steady - hot) * std::exp(-1.0);
  CHECK(f.dev->temperature() == Approx(want).epsilon(1e-9));
  auto t = f.dev->read_telemetry();
  REQUIRE(t.temperature_c);
  CHECK(*t.temperature_c == Approx(want));
  REQUIRE(t.power_w);
  CHECK(*t.power_w == Approx(p.peak_power_w));
  // Cooling at idle goes back toward the idle steady state.
  f.dev->advance(20 * tau);
  CHECK(f.dev->temperature() == Approx(idle_steady).epsilon(1e-6));
}

TEST_CASE("a cooler that works worse heats the device toward a higher "
          "steady state, with a longer time constant") {
  sim_fixture f{"rtx-4090"};
  auto& p = f.dev->profile();
  auto said = f.dev->inject_fault("cooling:3");
  REQUIRE(said.ok());
  // 28 + 450 * 0.3 busy, 28 + 25 * 0.3 idle.
  CHECK(*said == "sim:rtx-4090:0's cooler works at 1/3.0: it heads for "
                 "163.0 C busy, 35.5 C idle");
  double r = 3 * p.thermal_resistance;
  double tau = r * p.thermal_capacitance;
  double start = f.dev->temperature();
  f.dev->run_load(p.peak_power_w, tau);
  double hot = p.ambient_c + p.peak_power_w * r;
  CHECK(f.dev->temperature()
        == Approx(hot + (start - hot) * std::exp(-1.0)).epsilon(1e-9));
  // Repaired: back toward the profile's idle steady state.
  REQUIRE(f.dev->inject_fault("cooling:1").ok());
  f.dev->advance(50 * p.thermal_resistance * p.thermal_capacitance);
  CHECK(f.dev->temperature()
        == Approx(p.ambient_c + p.idle_power_w * p.thermal_resistance)
             .epsilon(1e-6));
  for (auto bad : {"cooling:0", "cooling:21", "cooling:", "cooling:2x",
                   "cooling:nan"})
    CHECK_FALSE(f.dev->inject_fault(bad).ok());
  CHECK(sim_fault_error("cooling:2").empty()); // also from the start
}

TEST_CASE("on a clock that follows the wall, the host's time computing for "
          "the device counts as busy, and the power read is the mean since "
          "the last reading") {
  sim_options opts;
  opts.devices = {{"rtx-4090", ""}};
  opts.time_scale = 1;
  auto be = make_sim_backend(opts);
  REQUIRE(be->initialize().ok());
  auto* dev = dynamic_cast<sim_device*>(be->device_at(0));
  REQUIRE(dev != nullptr);
  auto& p = dev->profile();
  (void) dev->read_telemetry();
  // Matrix products whose profile time is nothing (82.6 TFLOP/s) but
  // whose host time is not: back to back, the device is busy nearly all
  // the time.
  const std::size_t n = 192;
  auto a = dev->allocate(n * n * 4);
  auto c = dev->allocate(n * n * 4);
  REQUIRE(a.ok());
  REQUIRE(c.ok());
  auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(300))
    REQUIRE(dev->matmul({a->get(), 0}, {a->get(), 0}, {c->get(), 0},
                        {n, n, n, false})
              .ok());
  auto busy = dev->read_telemetry();
  REQUIRE(busy.utilization);
  REQUIRE(busy.power_w);
  CHECK(*busy.utilization > 0.5);
  CHECK(*busy.power_w > p.idle_power_w + 0.5 * (p.peak_power_w - p.idle_power_w));
  CHECK(*busy.power_w <= p.peak_power_w + 1e-9);
  // Idle for a while: the mean falls to the idle power.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto idle = dev->read_telemetry();
  REQUIRE(idle.power_w);
  CHECK(*idle.power_w == Approx(p.idle_power_w).epsilon(0.05));
  CHECK(*idle.utilization < 0.05);
}

TEST_CASE("a simulated device sleeps its time once it adds up to a "
          "millisecond, and oversleeps are credited") {
  wall_pacer p; // 1 ms
  // 49 operations of 20 us: nothing to sleep yet; the 50th owes 1 ms.
  for (int i = 0; i < 49; ++i)
    CHECK(p.owe(20e-6) == 0);
  CHECK(p.owe(20e-6) == Approx(1e-3));
  // The sleep took 1.06 ms: 60 us of credit against the next ones.
  p.slept(1.06e-3);
  CHECK(p.owed() == Approx(-0.06e-3));
  CHECK(p.owe(1e-3) == 0);
  CHECK(p.owe(0.06e-3) == Approx(1e-3));
  p.slept(1e-3);
  CHECK(p.owed() == Approx(0).margin(1e-12));
  // A long operation sleeps its whole time at once.
  CHECK(p.owe(5e-3) == Approx(5e-3));
  // A host that stalled (a 50 ms sleep for 5) is credited one quantum at
  // most: the device is not run faster than its profile for long.
  p.slept(50e-3);
  CHECK(p.owed() == Approx(-1e-3));
  CHECK(p.owe(1.5e-3) == 0);
  CHECK(p.owe(0.5e-3) == Approx(1e-3));
  // Over many operations the sleeps add up to the device's time, less
  // at most the credit of the last oversleep.
  wall_pacer q;
  double asked = 0, total = 0;
  for (int i = 0; i < 10000; ++i) {
    total += 7e-6;
    if (double s = q.owe(7e-6); s > 0) {
      asked += s + 20e-6; // each sleep oversleeps by 20 us
      q.slept(s + 20e-6);
    }
  }
  CHECK(asked <= total + 1e-3);
  CHECK(asked >= total - 1e-3);
}

TEST_CASE("an injected allocation failure hits exactly the next allocation") {
  sim_fixture f;
  f.dev->fail_next_allocation("test fault");
  auto a = f.dev->allocate(64);
  REQUIRE_FALSE(a.ok());
  CHECK(a.err().code == errc::out_of_memory);
  CHECK(a.err().message.find("test fault") != std::string::npos);
  CHECK(f.dev->allocate(64).ok());
}

TEST_CASE("a fault named in the spec is there from the start") {
  sim_options opts;
  opts.devices = {{"m2-max", "", "fail_allocations"},
                  {"m2-max", "", "vanished"}};
  auto be = make_sim_backend(opts);
  REQUIRE(be->initialize().ok());
  for (int i = 0; i < 2; ++i) {
    auto a = be->device_at(0)->allocate(64);
    REQUIRE_FALSE(a.ok());
    CHECK(a.err().code == errc::out_of_memory);
    CHECK(a.err().message.find("every allocation fails") != std::string::npos);
  }
  CHECK(be->device_at(1)->allocate(64).err().code == errc::device_lost);
  sim_options bad;
  bad.devices = {{"m2-max", "", "melt"}};
  CHECK(make_sim_backend(bad)->initialize().err().code
        == errc::invalid_argument);
}

TEST_CASE("a vanished device fails every operation with device_lost") {
  sim_fixture f;
  auto a = f.dev->allocate(64);
  REQUIRE(a.ok());
  f.dev->vanish();
  char tmp[8] = {};
  CHECK(f.dev->write(**a, 0, tmp, 8).err().code == errc::device_lost);
  CHECK(f.dev->allocate(8).err().code == errc::device_lost);
  CHECK(f.dev->synchronize().err().code == errc::device_lost);
  CHECK_FALSE(f.dev->read_telemetry().temperature_c.has_value());
}

TEST_CASE("vanish_after:N works for N - 1 operations, then the device is "
          "gone") {
  sim_fixture f;
  f.dev->vanish_after(3);
  auto a = f.dev->allocate(64); // 1
  REQUIRE(a.ok());
  char tmp[8] = {};
  CHECK(f.dev->write(**a, 0, tmp, 8).ok()); // 2
  CHECK_FALSE(f.dev->vanished());
  CHECK(f.dev->synchronize().err().code == errc::device_lost); // 3
  CHECK(f.dev->vanished());
  CHECK(f.dev->allocate(8).err().code == errc::device_lost);
  // The names a config or scenario may give.
  CHECK(sim_fault_error("vanish_after:1").empty());
  CHECK(sim_fault_error("vanish_after:1000000000").empty());
  CHECK(sim_fault_error("fail_allocations").empty());
  CHECK(sim_fault_error("vanished").empty());
  for (auto bad : {"vanish_after:", "vanish_after:0", "vanish_after:-3",
                   "vanish_after:1000000001", "vanish_after:99999999999",
                   "vanish_after:3x", "explode"})
    CHECK_THAT(sim_fault_error(bad),
               Catch::Matchers::Contains("expected fail_allocations, "
                                         "vanished, vanish_after:N, "
                                         "heat_after:N:C or cooling:F"));
}

TEST_CASE("heat_after:N:C heats the device by C degrees at its N-th "
          "operation") {
  sim_fixture f;
  auto t0 = *f.dev->read_telemetry().temperature_c;
  f.dev->heat_after(2, 70);
  auto a = f.dev->allocate(64); // 1
  REQUIRE(a.ok());
  CHECK(*f.dev->read_telemetry().temperature_c == Approx(t0).margin(0.5));
  char tmp[8] = {};
  CHECK(f.dev->write(**a, 0, tmp, 8).ok()); // 2: the spike
  CHECK(*f.dev->read_telemetry().temperature_c
        == Approx(t0 + 70).margin(0.5));
  CHECK(f.dev->write(**a, 0, tmp, 8).ok()); // once only
  CHECK(*f.dev->read_telemetry().temperature_c
        == Approx(t0 + 70).margin(0.5));
  CHECK_FALSE(f.dev->vanished());
  CHECK(sim_fault_error("heat_after:1:1").empty());
  CHECK(sim_fault_error("heat_after:1000000000:500").empty());
  for (auto bad : {"heat_after:", "heat_after:5", "heat_after:0:10",
                   "heat_after:5:0", "heat_after:5:501", "heat_after:5:10x",
                   "heat_after:5:nan"})
    CHECK_FALSE(sim_fault_error(bad).empty());
}

TEST_CASE("faults injected at run time take effect at once") {
  sim_fixture f;
  auto t0 = f.dev->temperature();
  auto hot = f.dev->inject_fault("heat:80");
  REQUIRE(hot.ok());
  CHECK_THAT(*hot, Catch::Matchers::Contains("is now at"));
  CHECK(*f.dev->read_telemetry().temperature_c == Approx(t0 + 80).margin(0.5));
  REQUIRE(f.dev->inject_fault("heat:-80").ok());
  CHECK(f.dev->temperature() == Approx(t0).margin(0.5));

  REQUIRE(f.dev->inject_fault("fail_next_allocation").ok());
  CHECK_FALSE(f.dev->allocate(64).ok());
  CHECK(f.dev->allocate(64).ok()); // only the next one
  auto grown = f.dev->allocate(1 << 20);
  REQUIRE(grown.ok());
  REQUIRE(f.dev->inject_fault("fail_allocations").ok());
  CHECK_FALSE(f.dev->allocate(64).ok());
  CHECK_FALSE(f.dev->allocate(64).ok());
  // A buffer's growth takes memory as an allocation does; a shrink only
  // gives some back (a failed growth's undo must work).
  auto st = f.dev->resize(**grown, 2 << 20);
  REQUIRE_FALSE(st.ok());
  CHECK(st.err().code == errc::out_of_memory);
  CHECK_THAT(st.err().message, Catch::Matchers::Contains("injected fault"));
  CHECK((*grown)->size() == (1u << 20));
  CHECK(f.dev->resize(**grown, 1 << 19).ok());
  REQUIRE(f.dev->inject_fault("fail_allocations:off").ok());
  CHECK(f.dev->allocate(64).ok());
  REQUIRE(f.dev->inject_fault("fail_next_allocation").ok());
  CHECK_FALSE(f.dev->resize(**grown, 1 << 20).ok());
  CHECK(f.dev->resize(**grown, 1 << 20).ok()); // only the next one

  REQUIRE(f.dev->inject_fault("vanish_after:2").ok());
  CHECK(f.dev->synchronize().ok());
  CHECK(f.dev->synchronize().err().code == errc::device_lost);
  CHECK(f.dev->vanished());

  for (auto bad : {"heat:0", "heat:501", "heat:-501", "heat:x", "heat:",
                   "fail_allocations:on", "melt"}) {
    auto r = f.dev->inject_fault(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.err().code == errc::invalid_argument);
    CHECK_THAT(r.err().message, Catch::Matchers::Contains("unknown fault"));
  }
  CHECK(sim_runtime_fault_error("heat:-12.5").empty());
  CHECK(sim_runtime_fault_error("vanished").empty());
}

TEST_CASE("a real device refuses an injected fault") {
  auto cpu = make_cpu_backend();
  REQUIRE(cpu);
  REQUIRE(cpu->initialize().ok());
  REQUIRE(cpu->device_count() > 0);
  auto r = cpu->device_at(0)->inject_fault("vanished");
  REQUIRE_FALSE(r.ok());
  CHECK(r.err().code == errc::unsupported);
  CHECK_THAT(r.err().message,
             Catch::Matchers::Contains("is not a simulated device"));
}

TEST_CASE("a hung device blocks operations until the hang is released") {
  sim_fixture f;
  auto a = f.dev->allocate(64);
  REQUIRE(a.ok());
  f.dev->hang(true);
  auto pending = std::async(std::launch::async,
                            [&] { return f.dev->synchronize(); });
  CHECK(pending.wait_for(std::chrono::milliseconds(50))
        == std::future_status::timeout);
  f.dev->hang(false);
  CHECK(pending.get().ok());
}

TEST_CASE("a hang blocks the operations it names until hang:off") {
  using namespace std::chrono_literals;
  sim_fixture f;
  auto a = f.dev->allocate(64);
  auto b = f.dev->allocate(64);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  auto kernel = [&] {
    return f.dev->silu_mul({a->get(), 0}, {a->get(), 0}, {b->get(), 0}, 16);
  };
  // Allocations only: kernels and copies go on.
  REQUIRE(f.dev->inject_fault("hang:allocate").ok());
  CHECK(kernel().ok());
  CHECK(f.dev->synchronize().ok());
  auto alloc = std::async(std::launch::async,
                          [&] { return f.dev->allocate(64).ok(); });
  CHECK(alloc.wait_for(50ms) == std::future_status::timeout);
  auto off = f.dev->inject_fault("hang:off");
  REQUIRE(off.ok());
  CHECK_THAT(*off, Catch::Matchers::Contains("operations go on"));
  CHECK(alloc.get());
  // Kernels only: a stage starts (allocations, writes), its step blocks.
  REQUIRE(f.dev->inject_fault("hang:compute").ok());
  CHECK(f.dev->allocate(64).ok());
  CHECK(f.dev->synchronize().ok());
  auto step = std::async(std::launch::async, kernel);
  CHECK(step.wait_for(50ms) == std::future_status::timeout);
  // A device that vanishes ends the hang with its error.
  f.dev->vanish();
  CHECK(step.get().err().code == errc::device_lost);
  // Vanishing at the next allocation or kernel (a device lost at a chosen
  // moment of a stage: as it gets its weights, at its next step).
  sim_fixture g;
  auto ga = g.dev->allocate(64);
  REQUIRE(ga.ok());
  REQUIRE(g.dev->inject_fault("vanish_at:compute").ok());
  CHECK(g.dev->allocate(64).ok());
  CHECK(g.dev->synchronize().ok());
  CHECK_FALSE(g.dev->vanished());
  CHECK(g.dev->silu_mul({ga->get(), 0}, {ga->get(), 0}, {ga->get(), 0}, 16)
          .err()
          .code
        == errc::device_lost);
  CHECK(g.dev->vanished());
  sim_fixture h;
  REQUIRE(h.dev->inject_fault("vanish_at:allocate").ok());
  CHECK(h.dev->synchronize().ok());
  CHECK(h.dev->allocate(64).err().code == errc::device_lost);
  // At run time only (a node's start verifies its devices).
  CHECK(sim_runtime_fault_error("hang").empty());
  CHECK_THAT(sim_fault_error("hang:allocate"),
             Catch::Matchers::Contains("unknown fault"));
  CHECK_THAT(sim_runtime_fault_error("hang:sometimes"),
             Catch::Matchers::Contains("hang:compute"));
}

TEST_CASE("hang_after:N lets N - 1 operations through and blocks from the "
          "N-th on until hang:off, which also disarms one pending") {
  using namespace std::chrono_literals;
  sim_fixture f;
  auto set = f.dev->inject_fault("hang_after:3");
  REQUIRE(set.ok());
  CHECK_THAT(*set, Catch::Matchers::Contains("hangs from its 3th operation"));
  auto a = f.dev->allocate(64); // 1
  REQUIRE(a.ok());
  char tmp[8] = {};
  CHECK(f.dev->write(**a, 0, tmp, 8).ok()); // 2
  auto third = std::async(std::launch::async,
                          [&] { return f.dev->synchronize(); });
  CHECK(third.wait_for(50ms) == std::future_status::timeout);
  // Every kind of operation blocks once it has struck.
  auto alloc = std::async(std::launch::async,
                          [&] { return f.dev->allocate(64).ok(); });
  CHECK(alloc.wait_for(50ms) == std::future_status::timeout);
  REQUIRE(f.dev->inject_fault("hang:off").ok());
  CHECK(third.get().ok());
  CHECK(alloc.get());
  // hang:off before it strikes disarms it.
  REQUIRE(f.dev->inject_fault("hang_after:2").ok());
  REQUIRE(f.dev->inject_fault("hang:off").ok());
  for (int i = 0; i < 4; ++i)
    CHECK(f.dev->synchronize().ok());
  // At run time only; N in [1, 10^9].
  CHECK(sim_runtime_fault_error("hang_after:1000000000").empty());
  CHECK_THAT(sim_fault_error("hang_after:3"),
             Catch::Matchers::Contains("unknown fault"));
  for (auto bad : {"hang_after:", "hang_after:0", "hang_after:-1",
                   "hang_after:1000000001", "hang_after:2s"})
    CHECK_THAT(sim_runtime_fault_error(bad),
               Catch::Matchers::Contains("hang_after:N"));
}

TEST_CASE("a temperature jump is visible at once") {
  sim_fixture f;
  double before = f.dev->temperature();
  f.dev->jump_temperature(30);
  CHECK(f.dev->temperature() == Approx(before + 30));
}

TEST_CASE("profile documents with errors are refused with the key path") {
  auto bad = [](const std::string& json) {
    auto r = parse_sim_profiles(json);
    REQUIRE_FALSE(r.ok());
    return r.err().message;
  };
  CHECK(bad("{").find("not valid JSON") != std::string::npos);
  CHECK(bad(R"({"profiles": 3})").find("must be an array")
        != std::string::npos);
  auto base = std::string{R"({"name":"x","memory_gib":1,"tflops":1,)"
                          R"("bandwidth_gbs":1,"peak_power_w":10,)"
                          R"("thermal_resistance_c_per_w":1,)"
                          R"("thermal_capacitance_j_per_c":1)"};
  CHECK(parse_sim_profiles(R"({"profiles":[)" + base + "}]}").ok());
  CHECK(bad(R"({"profiles":[)" + base + R"(,"colour":"red"}]})")
        == "profiles[0].colour: unknown key");
  CHECK(bad(R"({"profiles":[)" + base + R"(,"tflops":"fast"}]})")
        == "profiles[0].tflops: must be a number");
  CHECK(bad(R"({"profiles":[)" + base + R"(,"tflops":-1}]})")
        == "profiles[0].tflops: must be a positive number");
  CHECK(bad(R"({"profiles":[)" + base + "}," + base + "}]}").find("duplicate")
        != std::string::npos);
}

TEST_CASE("the cpu device asks for Q4_K and Q6_K packed where its CPU "
          "gains, a simulated device for what it is given, and both run the "
          "packed layouts") {
  const bool gains = host::have_vnni() && !host::have_amx();
  const bool gains6 = host::have_vnni();
  for (const bool pack : {true, false}) {
    cpu_options o;
    o.pack_weights = pack;
    auto be = make_cpu_backend(o);
    REQUIRE(be->initialize().ok());
    const device& cpu = *be->device_at(0);
    CHECK(cpu.preferred_weights(weight_type::q4_k, 32, 512)
          == (pack && gains ? weight_type::q4_k_x16 : weight_type::q4_k));
    CHECK(cpu.preferred_weights(weight_type::q6_k, 32, 512)
          == (pack && gains6 ? weight_type::q6_k_x16 : weight_type::q6_k));
    // Only whole groups of 16 rows of whole super-blocks; only Q4_K and
    // Q6_K.
    CHECK(cpu.preferred_weights(weight_type::q4_k, 24, 512)
          == weight_type::q4_k);
    // Q6_K: rows past the last group stay as stored inside the packed
    // matrix; fewer than 16 rows are not worth it.
    CHECK(cpu.preferred_weights(weight_type::q6_k, 100002, 512)
          == (pack && gains6 ? weight_type::q6_k_x16 : weight_type::q6_k));
    CHECK(cpu.preferred_weights(weight_type::q6_k, 8, 512)
          == weight_type::q6_k);
    CHECK(cpu.preferred_weights(weight_type::q5_k, 32, 512)
          == weight_type::q5_k);
    CHECK(cpu.preferred_weights(weight_type::f32, 32, 512)
          == weight_type::f32);
    CHECK(cpu.runs_weights(weight_type::q4_k_x16));
    CHECK(cpu.runs_weights(weight_type::q6_k_x16));
  }
  {
    // Q6_K packed by default where the CPU gains; pack_q6_k = false keeps
    // it as stored (Q4_K still packed).
    auto be = make_cpu_backend({});
    REQUIRE(be->initialize().ok());
    CHECK(be->device_at(0)->preferred_weights(weight_type::q6_k, 32, 512)
          == (gains6 ? weight_type::q6_k_x16 : weight_type::q6_k));
    cpu_options o;
    o.pack_q6_k = false;
    auto stored = make_cpu_backend(o);
    REQUIRE(stored->initialize().ok());
    CHECK(stored->device_at(0)->preferred_weights(weight_type::q6_k, 32, 512)
          == weight_type::q6_k);
    CHECK(stored->device_at(0)->preferred_weights(weight_type::q4_k, 32, 512)
          == (gains ? weight_type::q4_k_x16 : weight_type::q4_k));
  }
  if (!gains)
    WARN("this CPU does not gain from packed Q4_K (no AVX-512 VNNI, or AMX "
         "tiles): the cpu device keeps Q4_K as stored");
  sim_fixture f{"a100-40g"};
  CHECK(f.dev->preferred_weights(weight_type::q4_k, 32, 512)
        == weight_type::q4_k);
  CHECK(f.dev->preferred_weights(weight_type::q6_k, 32, 512)
        == weight_type::q6_k);
  CHECK(f.dev->runs_weights(weight_type::q4_k_x16));
  CHECK(f.dev->runs_weights(weight_type::q6_k_x16));
}
