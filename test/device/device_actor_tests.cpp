// The device actor: handles, bounds, chunked copies between device actors,
// pause, failure and loss — driven through real CAF messages.

#include "actors/device/device_actor.hpp"
#include "actors/device/device_task.hpp"
#include "backends/factory/factory.hpp"
#include "backends/host_device.hpp"
#include "backends/host_kernels.hpp"
#include "messages/errors.hpp"
#include "messages/registration.hpp"

#include <caf/all.hpp>
#include <catch2/catch.hpp>

#include <atomic>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>

using namespace exo;
using namespace std::chrono_literals;
using backend::op_kind;

namespace {

/// A kernel_call's op number.
constexpr std::uint8_t wire(op_kind k) {
  return backend::to_wire(k);
}

} // namespace

namespace {

struct config : caf::actor_system_config {
  config() {
    register_messages(*this);
  }
};

struct fixture {
  backend::registry reg;
  config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  exo::device_actor cpu;
  exo::device_actor sim;
  backend::sim_device* sim_dev = nullptr;

  fixture() {
    backend::factory_options opts;
    opts.use_environment = false;
    opts.include = {"cpu", "sim"};
    opts.sim.devices = {{"adreno-740", ""}};
    auto r = backend::registry::create(opts);
    REQUIRE(r.ok());
    reg = std::move(*r);
    auto devs = reg.devices();
    REQUIRE(devs.size() == 2);
    device::device_actor_config cfg;
    cfg.node = "n1";
    cpu = device::spawn_device_actor(sys, *devs[0], cfg);
    sim = device::spawn_device_actor(sys, *devs[1], cfg);
    sim_dev = dynamic_cast<backend::sim_device*>(devs[1]);
  }

  ~fixture() {
    self->send_exit(cpu, caf::exit_reason::user_shutdown);
    self->send_exit(sim, caf::exit_reason::user_shutdown);
    self->wait_for(cpu, sim);
  }

  template <class T, class... Ts>
  T ask(const exo::device_actor& dev, Ts&&... xs) {
    T out{};
    self->request(dev, 10s, std::forward<Ts>(xs)...)
      .receive([&](T& x) { out = std::move(x); },
               [&](caf::error& err) {
                 FAIL("unexpected error: " << sys.render(err));
               });
    return out;
  }

  caf::error ask_error(const exo::device_actor& dev, caf::message msg) {
    caf::error out;
    self->request(caf::actor_cast<caf::actor>(dev), 10s, std::move(msg))
      .receive([&](caf::message&) { FAIL("expected an error"); },
               [&](caf::error& err) { out = std::move(err); });
    return out;
  }
};

chunk bytes_of(std::size_t n, std::uint8_t seed) {
  chunk c;
  c.bytes.resize(n);
  std::iota(c.bytes.begin(), c.bytes.end(), seed);
  return c;
}

exo_errc code_of(const caf::error& err) {
  REQUIRE(err.category() == exo_error_category());
  return static_cast<exo_errc>(err.code());
}

} // namespace

TEST_CASE("a device actor describes its device and state") {
  fixture f;
  auto info = f.ask<device_info>(f.sim, info_atom::value);
  CHECK(info.id == "sim:adreno-740:0");
  CHECK(info.node == "n1");
  CHECK(info.backend == "sim");
  CHECK(info.simulated);
  CHECK(info.state == device_state::ready);
  CHECK(info.total_memory == 8ull << 30);
}

TEST_CASE("bytes written through a handle read back the same") {
  fixture f;
  auto h = f.ask<handle_id>(f.cpu, allocate_atom::value,
                            std::uint64_t{100000});
  auto data = bytes_of(5000, 3);
  f.ask<caf::atom_value>(f.cpu, write_atom::value, h, std::uint64_t{777},
                         data);
  auto back = f.ask<chunk>(f.cpu, read_atom::value, h, std::uint64_t{777},
                           std::uint64_t{5000});
  CHECK(back.bytes == data.bytes);
  f.ask<caf::atom_value>(f.cpu, free_atom::value, h);
}

TEST_CASE("a cpu device actor reads this process's memory in place, a "
          "simulated one says unsupported") {
  fixture f;
  auto mem = std::make_shared<chunk>(bytes_of(3000, 5));
  std::weak_ptr<chunk> alive = mem;
  auto h = f.ask<handle_id>(f.cpu, adopt_atom::value,
                            host_region{mem->bytes.data(), 3000, mem});
  auto back = f.ask<chunk>(f.cpu, read_atom::value, h, std::uint64_t{100},
                           std::uint64_t{2000});
  CHECK(std::equal(back.bytes.begin(), back.bytes.end(),
                   mem->bytes.begin() + 100));
  // Read-only: a write is refused and changes nothing.
  auto err = f.ask_error(f.cpu, caf::make_message(write_atom::value, h,
                                                  std::uint64_t{0},
                                                  bytes_of(10, 0)));
  CHECK(error_message(err).find("read-only") != std::string::npos);
  CHECK(mem->bytes == bytes_of(3000, 5).bytes);
  mem.reset();
  CHECK_FALSE(alive.expired()); // the device holds it while the handle lives
  f.ask<caf::atom_value>(f.cpu, free_atom::value, h);
  CHECK(alive.expired());

  auto other = std::make_shared<chunk>(bytes_of(64, 1));
  auto refused = f.ask_error(
    f.sim, caf::make_message(adopt_atom::value,
                             host_region{other->bytes.data(), 64, other}));
  CHECK(code_of(refused) == exo_errc::unsupported);
  // An answer, not a device failure.
  CHECK(f.ask<device_info>(f.sim, info_atom::value).state
        == device_state::ready);
}

TEST_CASE("a write past the end of an allocation is refused by name") {
  fixture f;
  auto h = f.ask<handle_id>(f.cpu, allocate_atom::value, std::uint64_t{100});
  auto err = f.ask_error(f.cpu, caf::make_message(write_atom::value, h,
                                                  std::uint64_t{90},
                                                  bytes_of(11, 0)));
  CHECK(code_of(err) == exo_errc::out_of_range);
  CHECK(error_message(err).find("exceeds allocation of 100 bytes")
        != std::string::npos);
}

TEST_CASE("a read larger than one chunk is refused, not allocated") {
  fixture f;
  auto h = f.ask<handle_id>(f.cpu, allocate_atom::value, std::uint64_t{100});
  auto err = f.ask_error(f.cpu, caf::make_message(read_atom::value, h,
                                                  std::uint64_t{0},
                                                  std::uint64_t{1} << 40));
  CHECK(code_of(err) == exo_errc::invalid_argument);
}

TEST_CASE("unknown and freed handles are refused") {
  fixture f;
  auto h = f.ask<handle_id>(f.cpu, allocate_atom::value, std::uint64_t{64});
  f.ask<caf::atom_value>(f.cpu, free_atom::value, h);
  auto err = f.ask_error(f.cpu, caf::make_message(free_atom::value, h));
  CHECK(code_of(err) == exo_errc::unknown_handle);
  err = f.ask_error(f.cpu, caf::make_message(read_atom::value, h + 1,
                                             std::uint64_t{0},
                                             std::uint64_t{1}));
  CHECK(code_of(err) == exo_errc::invalid_argument);
}

TEST_CASE("a copy to another device actor arrives whole, in chunks") {
  fixture f;
  std::uint64_t n = 3 * max_chunk_bytes + 12345;
  auto src = f.ask<handle_id>(f.cpu, allocate_atom::value, n);
  auto dst = f.ask<handle_id>(f.sim, allocate_atom::value, n + 8);
  std::mt19937 rng{5};
  std::vector<std::uint8_t> all(n);
  for (auto& b : all)
    b = static_cast<std::uint8_t>(rng());
  for (std::uint64_t off = 0; off < n; off += max_chunk_bytes) {
    chunk c;
    auto len = std::min<std::uint64_t>(max_chunk_bytes, n - off);
    c.bytes.assign(all.begin() + off, all.begin() + off + len);
    f.ask<caf::atom_value>(f.cpu, write_atom::value, src, off, c);
  }
  f.ask<caf::atom_value>(f.cpu, copy_atom::value, src, std::uint64_t{0},
                         caf::actor_cast<caf::actor>(f.sim), dst,
                         std::uint64_t{8}, n);
  for (std::uint64_t off = 0; off < n; off += max_chunk_bytes) {
    auto len = std::min<std::uint64_t>(max_chunk_bytes, n - off);
    auto back = f.ask<chunk>(f.sim, read_atom::value, dst, off + 8, len);
    REQUIRE(std::equal(back.bytes.begin(), back.bytes.end(),
                       all.begin() + off));
  }
}

TEST_CASE("a paused device refuses new compute but still serves reads") {
  fixture f;
  auto a = f.ask<handle_id>(f.sim, allocate_atom::value, std::uint64_t{16});
  auto b = f.ask<handle_id>(f.sim, allocate_atom::value, std::uint64_t{16});
  std::vector<float> x{1, 2, 3, 4};
  chunk c;
  c.bytes.resize(16);
  std::memcpy(c.bytes.data(), x.data(), 16);
  f.ask<caf::atom_value>(f.sim, write_atom::value, a, std::uint64_t{0}, c);
  kernel_call add{wire(op_kind::add), {a, a}, {0, 0}, b, 0, {4}, {}};
  f.ask<caf::atom_value>(f.sim, compute_atom::value, add);
  f.ask<caf::atom_value>(f.sim, pause_atom::value, std::string{"too hot"});
  auto info = f.ask<device_info>(f.sim, info_atom::value);
  CHECK(info.state == device_state::paused);
  CHECK(info.state_reason == "too hot");
  auto err = f.ask_error(f.sim, caf::make_message(compute_atom::value, add));
  CHECK(code_of(err) == exo_errc::paused);
  // The result of the work done before the pause is still there.
  auto back = f.ask<chunk>(f.sim, read_atom::value, b, std::uint64_t{0},
                           std::uint64_t{16});
  std::vector<float> y(4);
  std::memcpy(y.data(), back.bytes.data(), 16);
  CHECK(y == std::vector<float>{2, 4, 6, 8});
  f.ask<caf::atom_value>(f.sim, resume_atom::value);
  f.ask<caf::atom_value>(f.sim, compute_atom::value, add);
}

TEST_CASE("compute calls are checked against their operands") {
  fixture f;
  auto a = f.ask<handle_id>(f.cpu, allocate_atom::value, std::uint64_t{64});
  auto c = f.ask<handle_id>(f.cpu, allocate_atom::value, std::uint64_t{64});
  kernel_call mm{wire(op_kind::matmul), {a, a}, {0, 0}, c, 0, {4, 4, 4}, {}};
  CHECK(f.ask<caf::atom_value>(f.cpu, compute_atom::value, mm)
        == caf::ok_atom::value);
  // A would need 80 bytes: past the handle's 64 even where the pooled
  // buffer behind it is larger.
  mm.dims = {5, 4, 4};
  auto err = f.ask_error(f.cpu, caf::make_message(compute_atom::value, mm));
  CHECK(code_of(err) == exo_errc::out_of_range);
  CHECK(error_message(err).find("matmul a") != std::string::npos);
  // The output may not overlap an input (backend.hpp, rule 10).
  mm.dims = {4, 4, 4};
  mm.output = a;
  err = f.ask_error(f.cpu, caf::make_message(compute_atom::value, mm));
  CHECK(code_of(err) == exo_errc::invalid_argument);
  CHECK(error_message(err).find("overlaps") != std::string::npos);
  kernel_call odd{wire(op_kind::add), {a, a}, {2, 0}, c, 0, {4}, {}};
  err = f.ask_error(f.cpu, caf::make_message(compute_atom::value, odd));
  CHECK(code_of(err) == exo_errc::invalid_argument);
  CHECK(error_message(err).find("add a: offset 2") != std::string::npos);
}

TEST_CASE("a kernel_call is decoded with the op table and never trusted") {
  fixture f;
  auto a = f.ask<handle_id>(f.cpu, allocate_atom::value, std::uint64_t{64});
  auto c = f.ask<handle_id>(f.cpu, allocate_atom::value, std::uint64_t{64});
  auto refusal = [&](const kernel_call& k) {
    auto err = f.ask_error(f.cpu, caf::make_message(compute_atom::value, k));
    return std::make_pair(code_of(err), error_message(err));
  };
  // Numbers outside the table, 0 (a default kernel_call) among them.
  const auto past_table =
    static_cast<std::uint8_t>(backend::op_rules().size() + 1);
  for (std::uint8_t op : {std::uint8_t{0}, past_table, std::uint8_t{200}}) {
    auto [code, msg] = refusal({op, {a, a}, {0, 0}, c, 0, {4}, {}});
    CHECK(code == exo_errc::unsupported);
    CHECK(msg.find("unknown operation number " + std::to_string(op))
          != std::string::npos);
  }
  // Wrong counts of inputs, dims and scalars, each named.
  auto [code, msg] = refusal({wire(op_kind::add), {a}, {0}, c, 0, {4}, {}});
  CHECK(code == exo_errc::invalid_argument);
  CHECK(msg.find("add: expects 2 inputs (a, b), got 1") != std::string::npos);
  std::tie(code, msg) = refusal(
    {wire(op_kind::rope), {a, a, a}, {0, 0, 0}, c, 0, {1, 1, 2, 2}, {1e4f}});
  CHECK(code == exo_errc::invalid_argument);
  CHECK(msg.find("rope: expects 1 or 2 inputs (positions, freq_factors), "
                 "got 3")
        != std::string::npos);
  std::tie(code, msg) = refusal(
    {wire(op_kind::silu_mul), {a, a}, {0, 0}, c, 0, {4, 4}, {}});
  CHECK(code == exo_errc::invalid_argument);
  CHECK(msg.find("silu_mul: expects 1 dims (count), got 2")
        != std::string::npos);
  std::tie(code, msg) = refusal(
    {wire(op_kind::rms_norm), {a, a}, {0, 0}, c, 0, {2, 4}, {}});
  CHECK(code == exo_errc::invalid_argument);
  CHECK(msg.find("rms_norm: expects 1 scalars (eps), got 0")
        != std::string::npos);
  // More operands than any operation takes are refused the same way.
  std::tie(code, msg) = refusal({wire(op_kind::mul), {a, a, a, a},
                                 {0, 0, 0, 0}, c, 0, {4}, {}});
  CHECK(code == exo_errc::invalid_argument);
  CHECK(msg.find("mul: expects 2 inputs (a, b), got 4") != std::string::npos);
  // Inputs and their offsets must pair up.
  std::tie(code, msg)
    = refusal({wire(op_kind::add), {a, a}, {0}, c, 0, {4}, {}});
  CHECK(code == exo_errc::invalid_argument);
  CHECK(msg.find("2 inputs but 1 offsets") != std::string::npos);
  // A batch names the failing call by index and by the table's name.
  std::vector<kernel_call> batch{
    {wire(op_kind::add), {a, a}, {0, 0}, c, 0, {4}, {}},
    {wire(op_kind::mul), {a}, {0}, c, 0, {4}, {}}};
  auto err = f.ask_error(f.cpu, caf::make_message(compute_atom::value,
                                                  batch));
  CHECK(error_message(err).find("batch call 1 (mul)") != std::string::npos);
  batch[1].op = 99;
  err = f.ask_error(f.cpu, caf::make_message(compute_atom::value, batch));
  CHECK(error_message(err).find("batch call 1 (op 99)") != std::string::npos);
}

TEST_CASE("a batch of compute calls runs in order with one reply") {
  fixture f;
  auto a = f.ask<handle_id>(f.sim, allocate_atom::value, std::uint64_t{16});
  auto b = f.ask<handle_id>(f.sim, allocate_atom::value, std::uint64_t{16});
  std::vector<float> x{1, 2, 3, 4};
  chunk c;
  c.bytes.resize(16);
  std::memcpy(c.bytes.data(), x.data(), 16);
  f.ask<caf::atom_value>(f.sim, write_atom::value, a, std::uint64_t{0}, c);
  // b = a + a, then b = b * a: the second call sees the first's result.
  std::vector<kernel_call> calls{{wire(op_kind::add), {a, a}, {0, 0}, b, 0, {4}, {}},
                                 {wire(op_kind::mul), {b, a}, {0, 0}, b, 0, {4}, {}}};
  CHECK(f.ask<caf::atom_value>(f.sim, compute_atom::value, calls)
        == caf::ok_atom::value);
  auto back = f.ask<chunk>(f.sim, read_atom::value, b, std::uint64_t{0},
                           std::uint64_t{16});
  std::vector<float> y(4);
  std::memcpy(y.data(), back.bytes.data(), 16);
  CHECK(y == std::vector<float>{2, 8, 18, 32});
  auto snap = f.ask<actor_snapshot>(f.sim, inspect_atom::value);
  CHECK(snap.fields["kernel_calls"] == "2");
  // Each call is bounds-checked; the failing one is named by its index.
  calls.push_back({wire(op_kind::add), {a, a}, {0, 0}, b, 8, {4}, {}});
  auto err = f.ask_error(f.sim, caf::make_message(compute_atom::value, calls));
  CHECK(code_of(err) == exo_errc::out_of_range);
  CHECK(error_message(err).find("batch call 2") != std::string::npos);
  // Too many calls at once.
  std::vector<kernel_call> many(max_kernel_batch + 1, calls[0]);
  err = f.ask_error(f.sim, caf::make_message(compute_atom::value, many));
  CHECK(code_of(err) == exo_errc::invalid_argument);
  // A paused device refuses the batch.
  f.ask<caf::atom_value>(f.sim, pause_atom::value, std::string{"hot"});
  calls.pop_back();
  err = f.ask_error(f.sim, caf::make_message(compute_atom::value, calls));
  CHECK(code_of(err) == exo_errc::paused);
}

TEST_CASE("a device that vanishes is marked gone and refuses work") {
  fixture f;
  auto h = f.ask<handle_id>(f.sim, allocate_atom::value, std::uint64_t{64});
  f.sim_dev->vanish();
  auto err = f.ask_error(f.sim, caf::make_message(sync_atom::value));
  CHECK(code_of(err) == exo_errc::device_lost);
  auto info = f.ask<device_info>(f.sim, info_atom::value);
  CHECK(info.state == device_state::gone);
  err = f.ask_error(f.sim, caf::make_message(read_atom::value, h,
                                             std::uint64_t{0},
                                             std::uint64_t{1}));
  CHECK(code_of(err) == exo_errc::device_lost);
}

TEST_CASE("telemetry carries the readings the device can make") {
  fixture f;
  auto s = f.ask<telemetry_sample>(f.sim, telemetry_atom::value);
  CHECK(s.device == "sim:adreno-740:0");
  CHECK(s.temperature_c);
  CHECK(s.power_w);
  CHECK(s.memory_total == 8ull << 30);
  auto c = f.ask<telemetry_sample>(f.cpu, telemetry_atom::value);
  CHECK_FALSE(c.power_w); // the cpu backend cannot read power
}

TEST_CASE("an actor snapshot reports counters for the console") {
  fixture f;
  f.ask<handle_id>(f.cpu, allocate_atom::value, std::uint64_t{64});
  auto snap = f.ask<actor_snapshot>(f.cpu, inspect_atom::value);
  CHECK(snap.kind == "device");
  CHECK(snap.name == "device/cpu:0");
  CHECK(snap.fields.at("live_handles") == "1");
  CHECK(snap.fields.at("operations") == "1");
}

namespace {

/// Writes floats (or any trivially copyable values) into a handle at 0.
template <class T>
void put(fixture& f, const exo::device_actor& dev, handle_id h,
         const std::vector<T>& xs) {
  chunk c;
  c.bytes.resize(xs.size() * sizeof(T));
  std::memcpy(c.bytes.data(), xs.data(), c.bytes.size());
  f.ask<caf::atom_value>(dev, write_atom::value, h, std::uint64_t{0}, c);
}

std::vector<float> get(fixture& f, const exo::device_actor& dev, handle_id h,
                       std::size_t count) {
  auto back = f.ask<chunk>(dev, read_atom::value, h, std::uint64_t{0},
                           std::uint64_t{count * 4});
  std::vector<float> out(count);
  std::memcpy(out.data(), back.bytes.data(), count * 4);
  return out;
}

} // namespace

TEST_CASE("a shard runs a Llama layer's operations through compute calls") {
  fixture f;
  // rms_norm of 2 rows of 4, in place, then silu_mul, rope and attention.
  auto x = f.ask<handle_id>(f.sim, allocate_atom::value, std::uint64_t{32});
  auto w = f.ask<handle_id>(f.sim, allocate_atom::value, std::uint64_t{16});
  auto pos = f.ask<handle_id>(f.sim, allocate_atom::value, std::uint64_t{8});
  auto out = f.ask<handle_id>(f.sim, allocate_atom::value, std::uint64_t{32});
  std::vector<float> hx{1, 2, 3, 4, -1, 0.5f, 2, 0};
  std::vector<float> hw{1, 0.5f, 2, 1};
  put(f, f.sim, x, hx);
  put(f, f.sim, w, hw);
  put(f, f.sim, pos, std::vector<std::int32_t>{3, 4});
  kernel_call norm{wire(op_kind::rms_norm), {x, w}, {0, 0}, x, 0, {2, 4}, {1e-5f}};
  f.ask<caf::atom_value>(f.sim, compute_atom::value, norm);
  std::vector<float> want(8);
  backend::host::rms_norm(hx.data(), hw.data(), want.data(), 2, 4, 1e-5f);
  CHECK(get(f, f.sim, x, 8) == want);
  kernel_call rope{wire(op_kind::rope), {pos}, {0}, x, 0, {2, 2, 2, 2}, {10000.0f}};
  f.ask<caf::atom_value>(f.sim, compute_atom::value, rope);
  std::vector<std::int32_t> hp{3, 4};
  backend::host::rope(want.data(), hp.data(), nullptr, {2, 2, 2, 2, 10000});
  CHECK(get(f, f.sim, x, 8) == want);
  kernel_call silu{wire(op_kind::silu_mul), {x, w}, {0, 0}, out, 0, {4}, {}};
  f.ask<caf::atom_value>(f.sim, compute_atom::value, silu);
  std::vector<float> s(4);
  backend::host::silu_mul(want.data(), hw.data(), s.data(), 4);
  auto got = get(f, f.sim, out, 4);
  CHECK(got == s);
  // One query row at position 1 over a two-row cache (x holds K and V).
  kernel_call att{wire(op_kind::attention), {x, x, x}, {0, 0, 0}, out, 0,
                  {1, 1, 2, 1, 2, 4}, {0.5f}};
  f.ask<caf::atom_value>(f.sim, compute_atom::value, att);
  std::vector<float> a(4);
  backend::host::attention(want.data(), want.data(), want.data(), a.data(),
                           {1, 1, 2, 1, 2, 4, 0.5f}, 1);
  CHECK(get(f, f.sim, out, 4) == a);
}

TEST_CASE("Llama compute calls are checked against their operands") {
  fixture f;
  auto a = f.ask<handle_id>(f.cpu, allocate_atom::value, std::uint64_t{256});
  auto b = f.ask<handle_id>(f.cpu, allocate_atom::value, std::uint64_t{256});
  auto code = [&](const kernel_call& k) {
    return code_of(f.ask_error(f.cpu, caf::make_message(compute_atom::value,
                                                        k)));
  };
  // A missing scalar, a Q8_0 row that is no whole block, a weight past its
  // handle's end, an odd weight offset, heads that do not group.
  CHECK(code(kernel_call{wire(op_kind::rms_norm), {a, a}, {0, 0}, b, 0, {2, 4}, {}})
        == exo_errc::invalid_argument);
  CHECK(code(kernel_call{wire(op_kind::matmul_q8_0), {a, b}, {0, 0}, b, 0, {1, 1, 16}, {}})
        == exo_errc::invalid_argument);
  CHECK(code(kernel_call{wire(op_kind::matmul_q8_0), {a, b}, {0, 0}, a, 128, {1, 8, 32},
                         {}})
        == exo_errc::out_of_range);
  CHECK(code(kernel_call{wire(op_kind::matmul_f16), {a, b}, {0, 1}, a, 128, {1, 1, 32},
                         {}})
        == exo_errc::invalid_argument);
  CHECK(code(kernel_call{wire(op_kind::attention), {a, a, a}, {0, 0, 0}, b, 0,
                         {1, 0, 3, 2, 4, 8}, {1.0f}})
        == exo_errc::invalid_argument);
  // The same shapes, well formed, run.
  kernel_call ok{wire(op_kind::matmul_q8_0), {a, b}, {0, 0}, a, 128, {1, 2, 32}, {}};
  CHECK(f.ask<caf::atom_value>(f.cpu, compute_atom::value, ok)
        == caf::ok_atom::value);
}

// -- device tasks (messages/device.hpp, actors/device/device_task.hpp) -----

namespace {

/// A task that runs `f(ctx)` and answers with the string it returns.
template <class F>
device_task task_of(task_kind kind, F f) {
  device_task t;
  t.kind = kind;
  t.run = [f](device::task_context& ctx, caf::response_promise& rp) mutable {
    rp.deliver(f(ctx));
  };
  return t;
}

} // namespace

TEST_CASE("a device task computes with the actor's handles on its thread") {
  fixture f;
  auto a = f.ask<handle_id>(f.sim, allocate_atom::value, std::uint64_t{16});
  auto b = f.ask<handle_id>(f.sim, allocate_atom::value, std::uint64_t{16});
  auto before = f.ask<actor_snapshot>(f.sim, inspect_atom::value);
  // b = a + a, written, run and read inside one task.
  auto t = task_of(task_kind::compute, [a, b](device::task_context& ctx) {
    auto ops = ctx.ops();
    std::vector<float> x{1, 2, 3, 4}, y(4);
    if (!ops->write(a, 0, x.data(), 16))
      return std::string{"write failed"};
    model::device_op add{op_kind::add, {{a, 0}, {a, 0}}, {b, 0}, {4},
                         {}};
    if (auto r = ops->run({add}); !r)
      return r.err().to_string();
    if (!ops->read(b, 0, y.data(), 16))
      return std::string{"read failed"};
    return std::to_string(y[0]) + " " + std::to_string(y[3]);
  });
  std::string out;
  f.self->request(caf::actor_cast<caf::actor>(f.sim), 10s, task_atom::value,
                  std::move(t))
    .receive([&](std::string& s) { out = s; },
             [&](caf::error& err) { FAIL(f.sys.render(err)); });
  CHECK(out == "2.000000 8.000000");
  auto after = f.ask<actor_snapshot>(f.sim, inspect_atom::value);
  auto n = [](actor_snapshot& s, const char* k) {
    return std::stoull(s.fields[k]);
  };
  CHECK(n(after, "kernel_calls") == n(before, "kernel_calls") + 1);
  CHECK(n(after, "compute_tasks") == n(before, "compute_tasks") + 1);
  CHECK(n(after, "bytes_in") == n(before, "bytes_in") + 16);
  CHECK(n(after, "bytes_out") == n(before, "bytes_out") + 16);
  // What a task writes is checked against the handle's size, and a handle
  // the actor never gave out is refused; the same handles still work
  // through messages.
  t = task_of(task_kind::compute, [a](device::task_context& ctx) {
    std::vector<float> x(8);
    auto past = ctx.ops()->write(a, 8, x.data(), 16);
    auto unknown = ctx.ops()->write(a + 1000, 0, x.data(), 4);
    return (past ? std::string{"written"} : past.err().message) + " | "
           + (unknown ? std::string{"written"} : unknown.err().message);
  });
  f.self->request(caf::actor_cast<caf::actor>(f.sim), 10s, task_atom::value,
                  std::move(t))
    .receive([&](std::string& s) { out = s; },
             [&](caf::error& err) { FAIL(f.sys.render(err)); });
  INFO(out);
  CHECK(out.find("written") == std::string::npos);
  CHECK(get(f, f.sim, b, 4) == std::vector<float>{2, 4, 6, 8});
}

TEST_CASE("while a device is paused its compute tasks wait, ordered tasks "
          "stay behind them and immediate ones answer") {
  fixture f;
  auto dev = caf::actor_cast<caf::actor>(f.sim);
  f.ask<caf::atom_value>(f.sim, pause_atom::value, std::string{"hot"});
  // Appended to on the device's thread only; read here after the answers.
  auto order = std::make_shared<std::vector<std::string>>();
  auto note = [order](const char* name) {
    return [order, name](device::task_context& ctx) {
      order->push_back(name);
      return std::string{name} + (ctx.waited_for_resume() ? " waited" : "");
    };
  };
  f.self->send(dev, task_atom::value,
               task_of(task_kind::compute, note("step")));
  f.self->send(dev, task_atom::value,
               task_of(task_kind::ordered, note("release")));
  std::string out;
  f.self->request(dev, 10s, task_atom::value,
                  task_of(task_kind::immediate, note("inspect")))
    .receive([&](std::string& s) { out = s; },
             [&](caf::error& err) { FAIL(f.sys.render(err)); });
  CHECK(out == "inspect");
  auto snap = f.ask<actor_snapshot>(f.sim, inspect_atom::value);
  CHECK(snap.fields["held_tasks"] == "2");
  f.ask<caf::atom_value>(f.sim, resume_atom::value);
  std::vector<std::string> answers;
  for (int i = 0; i < 2; ++i)
    f.self->receive([&](std::string& s) { answers.push_back(s); },
                    caf::after(10s) >> [] { FAIL("no answer"); });
  CHECK(answers == std::vector<std::string>{"step waited", "release waited"});
  CHECK(*order == std::vector<std::string>{"inspect", "step", "release"});
  snap = f.ask<actor_snapshot>(f.sim, inspect_atom::value);
  CHECK(snap.fields["held_tasks"] == "0");
}

TEST_CASE("a task held when its device actor exits is answered with an "
          "error, and what it kept of the device stops working") {
  fixture f;
  auto dev = caf::actor_cast<caf::actor>(f.sim);
  auto a = f.ask<handle_id>(f.sim, allocate_atom::value, std::uint64_t{16});
  // A task keeps the device's ops past the actor, as a stage may.
  std::shared_ptr<model::device_ops> kept;
  f.self->request(dev, 10s, task_atom::value,
                  task_of(task_kind::ordered,
                          [&kept](device::task_context& ctx) {
                            kept = ctx.ops();
                            return std::string{"ok"};
                          }))
    .receive([](std::string&) {},
             [&](caf::error& err) { FAIL(f.sys.render(err)); });
  REQUIRE(kept);
  f.ask<caf::atom_value>(f.sim, pause_atom::value, std::string{"hot"});
  f.self->send(dev, task_atom::value,
               task_of(task_kind::compute, [](device::task_context&) {
                 return std::string{"ran"};
               }));
  auto held = f.ask<actor_snapshot>(f.sim, inspect_atom::value);
  REQUIRE(held.fields["held_tasks"] == "1");
  f.self->send_exit(dev, caf::exit_reason::user_shutdown);
  caf::error err;
  f.self->receive([&](std::string&) { FAIL("the held task ran"); },
                  [&](caf::error& e) { err = e; },
                  caf::after(10s) >> [] { FAIL("no answer"); });
  CHECK(code_of(err) == exo_errc::failed_state);
  CHECK(error_message(err).find("exited") != std::string::npos);
  f.self->wait_for(dev);
  // The pool is gone: the kept ops refuse, and a free does nothing.
  float x = 1;
  auto w = kept->write(a, 0, &x, 4);
  REQUIRE(!w);
  CHECK(w.err().code == backend::errc::device_lost);
  (void) kept->free(a);
}

namespace {

/// A host device that "measures" its rates by counting: each measurement
/// reports one more GFLOP/s than the last.
class counting_device final : public backend::host_device {
public:
  counting_device() {
    props_.id = "cpu:9";
    props_.kind = backend::backend_kind::cpu;
    props_.name = "counting";
    props_.total_memory = 64u << 20;
    props_.max_allocation = props_.total_memory;
    props_.peak_flops = 1e9;
  }
  backend::telemetry read_telemetry() override {
    return {};
  }
  bool measure_rates_again() override {
    ++measured;
    if (!measures)
      return false;
    props_.peak_flops = (1.0 + measured) * 1e9;
    return true;
  }
  std::atomic<int> measured{0}; ///< calls
  bool measures = true;         ///< false: a device that measures nothing
};

/// A device actor's config that measures again after `every` idle.
device::device_actor_config measuring(std::chrono::milliseconds every) {
  device::device_actor_config dc;
  dc.node = "n1";
  dc.measure_again = every;
  return dc;
}

} // namespace

TEST_CASE("a device that measures its rates measures them again when idle, "
          "and not while it works") {
  config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  counting_device dev;
  auto actor = device::spawn_device_actor(sys, dev, measuring(100ms));
  auto info = [&] {
    device_info out;
    self->request(actor, 10s, info_atom::value)
      .receive([&](device_info& x) { out = x; },
               [&](caf::error& err) { FAIL(sys.render(err)); });
    return out;
  };
  // Idle from the start: measured at the first look, then left alone (the
  // next at most every ten looks while it stays idle).
  std::this_thread::sleep_for(350ms);
  CHECK(dev.measured == 1);
  CHECK(info().peak_flops == Approx(2e9)); // placement sees the new figure
  // Busy: an operation every 20 ms — no measurement while it works.
  auto start = dev.measured.load();
  for (int i = 0; i < 25; ++i) {
    self->request(actor, 10s, allocate_atom::value, std::uint64_t{64})
      .receive([&](handle_id h) {
                 self->request(actor, 10s, free_atom::value, h)
                   .receive([](caf::atom_value) {},
                            [&](caf::error& err) { FAIL(sys.render(err)); });
               },
               [&](caf::error& err) { FAIL(sys.render(err)); });
    std::this_thread::sleep_for(20ms);
  }
  CHECK(dev.measured == start);
  // Idle again after that work: measured once more.
  std::this_thread::sleep_for(350ms);
  CHECK(dev.measured == start + 1);
  self->send_exit(actor, caf::exit_reason::user_shutdown);
  self->wait_for(actor);
}

TEST_CASE("a device that measures nothing of its own is asked once, and a "
          "tick from another actor is ignored") {
  config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  counting_device dev;
  dev.measures = false;
  auto actor = device::spawn_device_actor(sys, dev, measuring(50ms));
  std::this_thread::sleep_for(400ms);
  CHECK(dev.measured == 1); // its first look, then no timer any more
  self->send_exit(actor, caf::exit_reason::user_shutdown);
  self->wait_for(actor);
  // No remote may make a device spend its time measuring.
  counting_device other_dev;
  auto other = device::spawn_device_actor(sys, other_dev,
                                          measuring(std::chrono::hours{1}));
  self->send(other, tick_atom::value, measure_atom::value);
  std::this_thread::sleep_for(100ms);
  CHECK(other_dev.measured == 0);
  self->send_exit(other, caf::exit_reason::user_shutdown);
  self->wait_for(other);
}

// -- what tasks keep (task_context::keep) -------------------------------------

namespace {

/// A buffer a task keeps on the device; on destruction it frees the
/// buffer and records whether the device still had it (footprint > 0: the
/// actor's pool had not gone yet).
struct kept_buffer {
  std::shared_ptr<model::device_ops> ops;
  handle_id h = 0;
  std::shared_ptr<std::atomic<int>> freed_live;
  std::shared_ptr<std::atomic<int>> freed;
  ~kept_buffer() {
    if (ops->footprint(h) > 0 && ops->free(h))
      ++*freed_live;
    ++*freed;
  }
};

} // namespace

TEST_CASE("what a task keeps counts as free memory, gives way to an "
          "allocation that needs its room, and goes when its time is up, "
          "when let go or with the actor") {
  constexpr std::uint64_t mib = 1u << 20;
  backend::factory_options opts;
  opts.use_environment = false;
  opts.include = {"cpu"};
  opts.cpu.memory_limit = 8 * mib;
  auto reg = backend::registry::create(opts);
  REQUIRE(reg.ok());
  auto* dev = reg->devices().at(0);
  config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  device::device_actor_config dc;
  dc.node = "n1";
  dc.pool_cache_limit = 0; // freed buffers go back to the device
  auto actor = device::spawn_device_actor(sys, *dev, dc);
  auto target = caf::actor_cast<caf::actor>(actor);
  auto freed_live = std::make_shared<std::atomic<int>>(0);
  auto freed = std::make_shared<std::atomic<int>>(0);
  // Keeps a buffer of `bytes` for `keep_for`; answers its ticket.
  auto keep = [&](std::uint64_t bytes, std::chrono::milliseconds keep_for) {
    device_task t;
    t.run = [=](device::task_context& ctx, caf::response_promise& rp) {
      auto ops = ctx.ops();
      auto h = ops->allocate(bytes);
      if (!h) {
        rp.deliver(std::string{"allocate: "} + h.err().message);
        return;
      }
      auto obj = std::make_shared<kept_buffer>();
      obj->ops = ops;
      obj->h = *h;
      obj->freed_live = freed_live;
      obj->freed = freed;
      auto size = ops->footprint(*h);
      rp.deliver(std::to_string(ctx.keep(obj, size, keep_for)));
    };
    std::string out;
    self->request(target, 10s, task_atom::value, std::move(t))
      .receive([&](std::string& s) { out = s; },
               [&](caf::error& err) { out = sys.render(err); });
    return out;
  };
  auto field = [&](const char* k) {
    std::uint64_t v = 0;
    self->request(actor, 10s, inspect_atom::value)
      .receive([&](actor_snapshot& s) { v = std::stoull(s.fields[k]); },
               [&](caf::error& err) { FAIL(sys.render(err)); });
    return v;
  };
  auto free_memory = [&] {
    std::uint64_t v = 0;
    self->request(actor, 10s, info_atom::value)
      .receive([&](device_info& i) { v = i.free_memory; },
               [&](caf::error& err) { FAIL(sys.render(err)); });
    return v;
  };
  REQUIRE(free_memory() == 8 * mib);
  // Kept: the device counts its 4 MiB as free (placement may plan on it).
  CHECK(keep(4 * mib, std::chrono::hours{1}) == "1");
  CHECK(field("kept") == 1);
  CHECK(field("kept_bytes") == 4 * mib);
  CHECK(free_memory() == 8 * mib);
  // An allocation through a message that needs the room gets it.
  handle_id big = 0;
  self->request(actor, 10s, allocate_atom::value, 6 * mib)
    .receive([&](handle_id h) { big = h; },
             [&](caf::error& err) { FAIL(sys.render(err)); });
  CHECK(big != 0);
  CHECK(*freed_live == 1);
  CHECK(field("kept") == 0);
  CHECK(field("kept_released") == 1);
  CHECK(free_memory() == 0); // (6 MiB in the pool's 8 MiB size)
  self->request(actor, 10s, free_atom::value, big)
    .receive([](caf::atom_value) {},
             [&](caf::error& err) { FAIL(sys.render(err)); });
  // So does one inside a task (a stage's weights or KV cache), the oldest
  // kept first, only as much as it needs: of 2 + 4 MiB kept, a 3 MiB
  // buffer (4 MiB in the pool's sizes) takes the 2's room.
  CHECK(keep(2 * mib, std::chrono::hours{1}) == "2");
  CHECK(keep(4 * mib, std::chrono::hours{1}) == "3");
  CHECK(free_memory() == 8 * mib);
  CHECK(keep(3 * mib, std::chrono::hours{1}) == "4");
  CHECK(*freed_live == 2);
  CHECK(field("kept") == 2);
  CHECK(field("kept_bytes") == 8 * mib);
  // One that needs all of it gets all of it.
  self->request(actor, 10s, allocate_atom::value, 7 * mib)
    .receive([&](handle_id h) { big = h; },
             [&](caf::error& err) { FAIL(sys.render(err)); });
  CHECK(*freed_live == 4);
  CHECK(field("kept") == 0);
  CHECK(field("kept_released") == 4);
  self->request(actor, 10s, free_atom::value, big)
    .receive([](caf::atom_value) {},
             [&](caf::error& err) { FAIL(sys.render(err)); });
  // Let go by its ticket: it goes at once (nothing else holds it).
  auto ticket = std::stoull(keep(mib, std::chrono::hours{1}));
  device_task t;
  t.run = [ticket](device::task_context& ctx, caf::response_promise& rp) {
    ctx.let_go(ticket);
    ctx.let_go(ticket); // a second time: nothing
    ctx.let_go(12345);  // unknown: nothing
    rp.deliver(std::string{"ok"});
  };
  self->request(target, 10s, task_atom::value, std::move(t))
    .receive([](std::string&) {}, [&](caf::error& err) { FAIL(sys.render(err)); });
  CHECK(*freed_live == 5);
  CHECK(field("kept_bytes") == 0);
  // Its time up: it goes on the actor's thread, by itself.
  keep(mib, 100ms);
  for (int i = 0; i < 500 && field("kept_expired") == 0; ++i)
    std::this_thread::sleep_for(10ms);
  CHECK(field("kept_expired") == 1);
  CHECK(*freed_live == 6);
  CHECK(free_memory() == 8 * mib);
  // The actor exits: what it keeps goes first, while its buffers exist.
  keep(mib, std::chrono::hours{1});
  self->send_exit(actor, caf::exit_reason::user_shutdown);
  self->wait_for(actor);
  CHECK(*freed_live == 7);
  CHECK(*freed == 7);
}

TEST_CASE("host memory read in place counts as the device counts it: the "
          "cpu device without a limit gives none back when it goes") {
  // A kept stage's weights read in place from the mapped model file: the
  // cpu device without a memory limit reports the host's available memory,
  // which counts the mapped pages already; counting them again as the kept
  // stage's room made a node look freer than it was. With a limit, the
  // device counts them as used and gets them back.
  constexpr std::uint64_t mib = 1u << 20;
  auto data = std::make_shared<std::vector<float>>(mib / sizeof(float));
  for (std::uint64_t limit : {std::uint64_t{0}, 64 * mib}) {
    INFO("memory limit " << limit);
    backend::factory_options opts;
    opts.use_environment = false;
    opts.include = {"cpu"};
    opts.cpu.memory_limit = limit;
    opts.cpu.weights_in_place = true;
    auto reg = backend::registry::create(opts);
    REQUIRE(reg.ok());
    auto* dev = reg->devices().at(0);
    CHECK(dev->counts_adopted_memory() == (limit != 0));
    config cfg;
    caf::actor_system sys{cfg};
    caf::scoped_actor self{sys};
    device::device_actor_config dc;
    dc.node = "n1";
    auto actor = device::spawn_device_actor(sys, *dev, dc);
    device_task t;
    t.run = [data](device::task_context& ctx, caf::response_promise& rp) {
      auto ops = ctx.ops();
      auto a = ops->adopt_host(data->data(), mib, data);
      auto b = ops->allocate(mib);
      if (!a || !b) {
        rp.deliver(std::string{"no buffer"});
        return;
      }
      auto out = std::to_string(ops->footprint(*a)) + " "
                 + std::to_string(ops->footprint(*b) >= mib);
      (void) ops->free(*a);
      (void) ops->free(*b);
      rp.deliver(out);
    };
    std::string out;
    self->request(caf::actor_cast<caf::actor>(actor), 10s, task_atom::value,
                  std::move(t))
      .receive([&](std::string& s) { out = s; },
               [&](caf::error& err) { out = sys.render(err); });
    CHECK(out == (limit != 0 ? std::to_string(mib) : "0") + " 1");
    self->send_exit(actor, caf::exit_reason::user_shutdown);
    self->wait_for(actor);
  }
}
