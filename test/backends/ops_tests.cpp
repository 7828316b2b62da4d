// The op table (backends/ops.hpp) and the checks of device's public compute
// methods: each rule is checked there once, before any do_* method runs.

#include "backends/backend.hpp"

#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <vector>

using namespace exo::backend;

namespace {

/// A device whose compute methods only record what reaches them: a bad
/// operand that got past the public methods would show up here.
class recording_device final : public device {
public:
  struct call {
    std::string op;
    std::vector<std::size_t> offsets; ///< inputs', then the output's
    matmul_dims mm;
    weight_type type = weight_type::f32;
    bool freq_factors = false;
  };

  recording_device() {
    props_.id = "recording:0";
    props_.total_memory = props_.max_allocation = 1 << 20;
  }

  std::vector<call> calls;

  const device_properties& properties() const override {
    return props_;
  }
  result<std::unique_ptr<buffer>> allocate(std::size_t bytes) override {
    return std::make_unique<buffer>(*this, bytes);
  }
  std::unique_ptr<buffer> read_only(std::size_t bytes) {
    return std::make_unique<buffer>(*this, bytes, true);
  }
  memory_info memory() override {
    return {};
  }
  status write(buffer&, std::size_t, const void*, std::size_t) override {
    return fail(errc::unsupported, "no memory");
  }
  status read(const buffer&, std::size_t, void*, std::size_t) override {
    return fail(errc::unsupported, "no memory");
  }
  status copy(const buffer&, std::size_t, buffer&, std::size_t,
              std::size_t) override {
    return fail(errc::unsupported, "no memory");
  }
  status synchronize() override {
    return {};
  }
  result<event> record() override {
    return event{uid(), 0};
  }
  status wait(const event&) override {
    return {};
  }
  result<bool> completed(const event&) override {
    return true;
  }
  telemetry read_telemetry() override {
    return {};
  }
  bool runs_weights(weight_type) const noexcept override {
    return true; // it records calls: every weight type reaches do_*
  }

protected:
  status do_elementwise(binary_op op, const_view a, const_view b,
                        mut_view out, std::size_t) override {
    calls.push_back({op == binary_op::add ? "add" : "mul",
                     {a.offset, b.offset, out.offset}, {}, {}, false});
    return {};
  }
  status do_matmul(const_view a, const_view b, mut_view c,
                   const matmul_dims& dims) override {
    calls.push_back({dims.transpose_b ? "matmul_t" : "matmul",
                     {a.offset, b.offset, c.offset}, dims, {}, false});
    return {};
  }
  status do_matmul_weights(const_view a, const_view w, weight_type type,
                           mut_view c, const matmul_dims& dims) override {
    calls.push_back({std::string{dims.rows_apart ? "matmul_rows_" : "matmul_"}
                       + to_string(type),
                     {a.offset, w.offset, c.offset}, dims, type, false});
    return {};
  }
  status do_rms_norm(const_view x, const_view weight, mut_view out,
                     std::size_t, std::size_t, float) override {
    calls.push_back(
      {"rms_norm", {x.offset, weight.offset, out.offset}, {}, {}, false});
    return {};
  }
  status do_rope(mut_view x, const_view positions, const_view freq_factors,
                 const rope_dims& d) override {
    calls.push_back({d.neox ? "rope_neox" : "rope",
                     {positions.offset, x.offset}, {}, {},
                     freq_factors.buf != nullptr});
    return {};
  }
  status do_rope_cached(mut_view x, const_view cache,
                        const rope_dims& d) override {
    calls.push_back({d.neox ? "rope_cached neox" : "rope_cached",
                     {cache.offset, x.offset}, {}, {}, false});
    return {};
  }
  status do_attention(const_view q, const_view k, const_view v, mut_view out,
                      const attention_dims& d) override {
    calls.push_back({d.kv == kv_type::f16    ? "attention_f16"
                     : d.kv == kv_type::q8_0 ? "attention_q8_0"
                                             : "attention",
                     {q.offset, k.offset, v.offset, out.offset}, {}, {},
                     false});
    return {};
  }
  status do_attention_paged(const_view q, const_view k, const_view v,
                            const_view table, mut_view out,
                            const attention_dims&) override {
    calls.push_back({"attention_paged",
                     {q.offset, k.offset, v.offset, table.offset, out.offset},
                     {}, {}, false});
    return {};
  }
  status do_attention_paged_rows(const_view q, const_view k, const_view v,
                                 const_view tables, mut_view out,
                                 const attention_dims&, std::size_t) override {
    calls.push_back({"attention_paged_rows",
                     {q.offset, k.offset, v.offset, tables.offset, out.offset},
                     {}, {}, false});
    return {};
  }
  status do_store_kv_rows(const_view a, const_view tables, mut_view kv,
                          const kv_rows_dims&) override {
    calls.push_back({"store_kv_rows", {a.offset, tables.offset, kv.offset},
                     {}, {}, false});
    return {};
  }
  status do_to_f16(const_view a, mut_view out, std::size_t) override {
    calls.push_back({"to_f16", {a.offset, out.offset}, {}, {}, false});
    return {};
  }
  status do_to_q8_0(const_view a, mut_view out, std::size_t) override {
    calls.push_back({"to_q8_0", {a.offset, out.offset}, {}, {}, false});
    return {};
  }
  status do_hadamard(mut_view out, const_view a, std::size_t,
                     std::size_t) override {
    calls.push_back({"hadamard", {a.offset, out.offset}, {}, {}, false});
    return {};
  }
  status do_silu_mul(const_view gate, const_view up, mut_view out,
                     std::size_t) override {
    calls.push_back(
      {"silu_mul", {gate.offset, up.offset, out.offset}, {}, {}, false});
    return {};
  }

private:
  device_properties props_;
};

/// The buffer an allocation made.
std::unique_ptr<buffer> take(result<std::unique_ptr<buffer>> r) {
  REQUIRE(r.ok());
  return std::move(*r);
}

/// A well-formed call of `kind` on small shapes, with each operand's bytes
/// and alignment: what the mutations below break one at a time.
struct sample {
  op_call call;
  std::vector<std::size_t> in_bytes;
  std::size_t out_bytes = 0;
  std::vector<std::size_t> in_align;
  std::size_t out_align = 4;
};

sample sample_of(op_kind kind) {
  sample s;
  s.call.kind = kind;
  auto dims = [&](std::initializer_list<std::uint64_t> d) {
    s.call.n_dims = d.size();
    std::copy(d.begin(), d.end(), s.call.dims.begin());
  };
  auto scalar = [&](float f) {
    s.call.n_scalars = 1;
    s.call.scalars[0] = f;
  };
  switch (kind) {
    case op_kind::add:
    case op_kind::mul:
    case op_kind::silu_mul:
      dims({8});
      s.in_bytes = {32, 32};
      s.out_bytes = 32;
      break;
    case op_kind::matmul:
    case op_kind::matmul_t:
      dims({2, 3, 4});
      s.in_bytes = {32, 48};
      s.out_bytes = 24;
      break;
    case op_kind::matmul_f32:
    case op_kind::matmul_f16:
    case op_kind::matmul_q8_0:
    case op_kind::matmul_bf16:
    case op_kind::matmul_q4_0:
    case op_kind::matmul_q4_1:
    case op_kind::matmul_q5_0:
    case op_kind::matmul_q5_1:
    case op_kind::matmul_q2_k:
    case op_kind::matmul_q3_k:
    case op_kind::matmul_q4_k:
    case op_kind::matmul_q5_k:
    case op_kind::matmul_q6_k:
    case op_kind::matmul_rows_f32:
    case op_kind::matmul_rows_f16:
    case op_kind::matmul_rows_q4_k: {
      // k: one block of the format (32 elements, 256 for the K-quants).
      const weight_type wt = *weights_of(kind);
      const std::size_t k = weight_block_elements(wt) == 256 ? 256 : 32;
      dims({2, 3, k});
      s.in_bytes = {2 * k * 4, 3 * *weight_row_bytes(wt, k)};
      s.out_bytes = 24;
      break;
    }
    case op_kind::matmul_q4_k_x16:
    case op_kind::matmul_rows_q4_k_x16:
    case op_kind::matmul_q6_k_x16:
      // One group of 16 packed rows, one super-block each.
      dims({2, 16, 256});
      s.in_bytes = {2 * 256 * 4,
                    16 * *weight_row_bytes(*weights_of(kind), 256)};
      s.out_bytes = 2 * 16 * 4;
      break;
    case op_kind::rms_norm:
      dims({2, 4});
      scalar(1e-5f);
      s.in_bytes = {32, 16};
      s.out_bytes = 32;
      break;
    case op_kind::rope:
    case op_kind::rope_neox:
      dims({2, 2, 4, 4});
      scalar(10000.0f);
      s.in_bytes = {8, 8}; // positions, freq_factors
      s.out_bytes = 64;
      break;
    case op_kind::attention:
      dims({1, 1, 2, 1, 4, 4});
      scalar(0.5f);
      s.in_bytes = {32, 32, 32};
      s.out_bytes = 32;
      break;
    case op_kind::attention_f16: // k and v: two rows of four halves
      dims({1, 1, 2, 1, 4, 4});
      scalar(0.5f);
      s.in_bytes = {32, 16, 16};
      s.out_bytes = 32;
      break;
    case op_kind::to_f16:
      dims({8});
      s.in_bytes = {32};
      s.out_bytes = 16;
      s.out_align = 2;
      break;
    case op_kind::attention_q8_0: // k and v: two rows of one Q8_0 block
      dims({1, 1, 1, 1, 32, 32});
      scalar(0.5f);
      s.in_bytes = {128, 68, 68};
      s.out_bytes = 128;
      break;
    case op_kind::to_q8_0:
      dims({32});
      s.in_bytes = {128};
      s.out_bytes = 34;
      s.out_align = 2;
      break;
    case op_kind::hadamard:
      dims({8, 4});
      s.in_bytes = {32};
      s.out_bytes = 32;
      break;
    case op_kind::attention_paged: // blocks of two f32 rows, a table of 2
      dims({1, 3, 2, 1, 4, 4, 0, 2, 8});
      scalar(0.5f);
      s.in_bytes = {32, 32, 32, 8};
      s.out_bytes = 32;
      break;
    case op_kind::attention_paged_rows: // one row, a position and 2 blocks
      dims({1, 2, 1, 4, 4, 0, 2, 8, 2});
      scalar(0.5f);
      s.in_bytes = {32, 32, 32, 12};
      s.out_bytes = 32;
      break;
    case op_kind::rope_cached: // rows 2, heads 2, head_dim 4, n_rot 4
      dims({2, 2, 4, 4, 0});
      s.in_bytes = {32}; // 2 rows x n_rot f32
      s.out_bytes = 64;
      break;
    case op_kind::store_kv_rows: // one f32 row of 4, blocks of two rows
      dims({1, 4, 4, 0, 2, 8, 2});
      s.in_bytes = {16, 12};
      s.out_bytes = 32;
      break;
  }
  s.call.n_inputs = s.in_bytes.size();
  for (std::size_t i = 0; i < s.in_bytes.size(); ++i)
    s.in_align.push_back(
      (i == 1 && weights_of(kind) && kind != op_kind::matmul_f32)
          || (i >= 1
              && (kind == op_kind::attention_f16
                  || kind == op_kind::attention_q8_0))
        ? 2
        : 4);
  return s;
}

/// Buffers for a sample's operands, each with room to spare.
struct operands {
  std::vector<std::unique_ptr<buffer>> bufs;

  operands(recording_device& dev, sample& s) {
    for (std::size_t i = 0; i < s.in_bytes.size(); ++i) {
      bufs.push_back(take(dev.allocate(s.in_bytes[i] + 128)));
      s.call.inputs[i] = {bufs.back().get(), 0};
    }
    bufs.push_back(take(dev.allocate(s.out_bytes + 128)));
    s.call.output = {bufs.back().get(), 0};
  }
};

errc code_of(const status& st) {
  REQUIRE_FALSE(st.ok());
  return st.err().code;
}

} // namespace

TEST_CASE("the op table round-trips every operation through its number") {
  std::set<std::string> names;
  for (const auto& r : op_rules()) {
    CHECK(op_from_wire(to_wire(r.kind)) == r.kind);
    CHECK(&rule_of(r.kind) == &r);
    CHECK(std::string{to_string(r.kind)} == r.name);
    CHECK(names.insert(r.name).second); // one name per operation
    CHECK(r.min_inputs >= 1);
    CHECK(r.min_inputs <= r.max_inputs);
    CHECK(r.max_inputs <= max_op_inputs);
    CHECK(r.n_dims <= max_op_dims);
    CHECK(r.n_scalars <= max_op_scalars);
    for (std::size_t i = 0; i < r.max_inputs; ++i)
      CHECK(r.inputs[i] != nullptr);
    for (std::size_t i = 0; i < r.n_dims; ++i)
      CHECK(r.dims[i] != nullptr);
    CHECK(check_counts(r.kind, r.max_inputs, r.n_dims, r.n_scalars).ok());
    CHECK(check_counts(r.kind, r.min_inputs, r.n_dims, r.n_scalars).ok());
  }
  CHECK(names.size() == op_count);
  CHECK(names.size() == 37);
  CHECK(names.count("attention_paged_rows") == 1);
  CHECK(names.count("store_kv_rows") == 1);
  CHECK(names.count("rope_cached") == 1);
  CHECK(names.count("matmul_q8_0") == 1);
  CHECK(names.count("matmul_q4_k") == 1);
  CHECK(names.count("matmul_rows_q4_k") == 1);
  CHECK(names.count("matmul_q4_k_x16") == 1);
  CHECK(names.count("matmul_rows_q4_k_x16") == 1);
  CHECK(names.count("matmul_q6_k_x16") == 1);
  // Every number outside the table is none, 0 included.
  for (int n = 0; n < 256; ++n)
    CHECK(op_from_wire(static_cast<std::uint8_t>(n)).has_value()
          == (n >= 1 && n <= 37));
  CHECK(std::string{to_string(static_cast<op_kind>(0))} == "unknown");
}

TEST_CASE("check_counts names the operation, what it expects and got") {
  auto msg = [](const status& st) {
    REQUIRE_FALSE(st.ok());
    CHECK(st.err().code == errc::invalid_argument);
    return st.err().message;
  };
  CHECK(msg(check_counts(op_kind::attention, 2, 6, 1))
        == "attention: expects 3 inputs (q, k, v), got 2");
  CHECK(msg(check_counts(op_kind::rope, 0, 4, 1))
        == "rope: expects 1 or 2 inputs (positions, freq_factors), got 0");
  CHECK(msg(check_counts(op_kind::matmul_f16, 2, 2, 0))
        == "matmul_f16: expects 3 dims (m, n, k), got 2");
  CHECK(msg(check_counts(op_kind::rms_norm, 2, 2, 0))
        == "rms_norm: expects 1 scalars (eps), got 0");
  CHECK(msg(check_counts(op_kind::add, 2, 1, 1))
        == "add: expects 0 scalars, got 1");
  auto unknown = check_counts(static_cast<op_kind>(42), 2, 1, 0);
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.err().code == errc::unsupported);
  CHECK(unknown.err().message == "unknown operation number 42");
}

TEST_CASE("run dispatches each operation to its device method") {
  recording_device dev;
  for (const auto& r : op_rules()) {
    auto s = sample_of(r.kind);
    operands ops{dev, s};
    dev.calls.clear();
    REQUIRE(run(dev, s.call).ok());
    REQUIRE(dev.calls.size() == 1);
    CHECK(dev.calls[0].op == r.name);
  }
  // The dims reach the device as the kind says.
  auto s = sample_of(op_kind::matmul_t);
  operands ops{dev, s};
  dev.calls.clear();
  REQUIRE(run(dev, s.call).ok());
  CHECK(dev.calls[0].mm.transpose_b);
  CHECK(dev.calls[0].mm.m == 2);
  CHECK(dev.calls[0].mm.n == 3);
  CHECK(dev.calls[0].mm.k == 4);
  // rope without its optional input has no factors; with it, it does.
  auto r = sample_of(op_kind::rope);
  operands rops{dev, r};
  dev.calls.clear();
  REQUIRE(run(dev, r.call).ok());
  r.call.n_inputs = 1;
  REQUIRE(run(dev, r.call).ok());
  REQUIRE(dev.calls.size() == 2);
  CHECK(dev.calls[0].freq_factors);
  CHECK_FALSE(dev.calls[1].freq_factors);
  // rope_cached's neox dim picks the pairs; anything but 0 or 1 is
  // refused before the device.
  auto rc = sample_of(op_kind::rope_cached);
  operands rcops{dev, rc};
  dev.calls.clear();
  rc.call.dims[4] = 1;
  REQUIRE(run(dev, rc.call).ok());
  REQUIRE(dev.calls.size() == 1);
  CHECK(dev.calls[0].op == "rope_cached neox");
  rc.call.dims[4] = 2;
  auto bad_neox = run(dev, rc.call);
  CHECK(code_of(bad_neox) == errc::invalid_argument);
  CHECK(bad_neox.err().message == "rope_cached: neox must be 0 or 1, got 2");
  // Wrong counts never reach the device.
  dev.calls.clear();
  r.call.n_scalars = 0;
  CHECK(code_of(run(dev, r.call)) == errc::invalid_argument);
  r.call.kind = static_cast<op_kind>(0);
  CHECK(code_of(run(dev, r.call)) == errc::unsupported);
  CHECK(dev.calls.empty());
}

TEST_CASE("every operand rule is checked once, before any do_* method") {
  recording_device dev;
  recording_device other;
  auto foreign = take(other.allocate(4096));
  auto locked = dev.read_only(4096);
  for (const auto& r : op_rules()) {
    INFO(r.name);
    dev.calls.clear();
    auto base = sample_of(r.kind);
    operands ops{dev, base};
    // Each mutation of a good call, with the error it must get.
    auto refused = [&](const char* what, auto mutate, errc want) {
      INFO(what);
      sample s = base;
      mutate(s);
      CHECK(code_of(run(dev, s.call)) == want);
    };
    for (std::size_t i = 0; i < base.in_bytes.size(); ++i) {
      INFO("input " << i);
      const auto size = base.call.inputs[i].buf->size();
      // A null optional input (rope's freq_factors) means none.
      if (i < r.min_inputs)
        refused("null",
                [&](sample& s) { s.call.inputs[i].buf = nullptr; },
                errc::invalid_argument);
      refused("another device's",
              [&](sample& s) { s.call.inputs[i].buf = foreign.get(); },
              errc::wrong_device);
      refused("past the end",
              [&](sample& s) {
                s.call.inputs[i].offset = size - s.in_bytes[i] + 4;
              },
              errc::out_of_range);
      refused("past the limit",
              [&](sample& s) { s.call.inputs[i].limit = s.in_bytes[i] - 2; },
              errc::out_of_range);
      refused("misaligned",
              [&](sample& s) {
                s.call.inputs[i].offset = s.in_align[i] / 2;
              },
              errc::invalid_argument);
      // The output over part of the input.
      refused("overlapping",
              [&](sample& s) {
                s.call.output = {const_cast<buffer*>(s.call.inputs[i].buf),
                                 4};
              },
              errc::invalid_argument);
    }
    refused("null output", [](sample& s) { s.call.output.buf = nullptr; },
            errc::invalid_argument);
    refused("output of another device",
            [&](sample& s) { s.call.output.buf = foreign.get(); },
            errc::wrong_device);
    refused("output past the end",
            [&](sample& s) {
              s.call.output.offset = s.call.output.buf->size();
            },
            errc::out_of_range);
    refused("misaligned output",
            [](sample& s) { s.call.output.offset = s.out_align / 2; },
            errc::invalid_argument);
    refused("read-only output",
            [&](sample& s) { s.call.output.buf = locked.get(); },
            errc::invalid_argument);
    refused("an overflowing dim",
            [](sample& s) { s.call.dims[0] = ~std::uint64_t{0} / 2; },
            errc::invalid_argument);
    // add and mul of nothing are a valid no-op; nothing else is empty.
    if (r.kind != op_kind::add && r.kind != op_kind::mul)
      refused("a zero dim", [](sample& s) { s.call.dims[0] = 0; },
              errc::invalid_argument);
    CHECK(dev.calls.empty());
    // In place (the output the very same view as the first input) is
    // allowed exactly where the table says.
    sample s = base;
    s.call.output = {const_cast<buffer*>(s.call.inputs[0].buf), 0};
    if (r.kind != op_kind::rope && r.kind != op_kind::rope_neox
        && r.kind != op_kind::rope_cached && s.out_bytes == s.in_bytes[0]) {
      auto st = run(dev, s.call);
      CHECK(st.ok() == r.in_place);
    }
    // The good call reaches the device once, as given.
    dev.calls.clear();
    REQUIRE(run(dev, base.call).ok());
    CHECK(dev.calls.size() == 1);
  }
}

TEST_CASE("the public methods check the same rules as run") {
  recording_device dev;
  auto a = take(dev.allocate(256));
  auto q8 = take(dev.allocate(3 * 34));
  auto c = take(dev.allocate(64));
  // A Q8_0 row that is no whole block, then a weight offset of 1.
  CHECK(code_of(dev.matmul_weights({a.get(), 0}, {q8.get(), 0},
                                   weight_type::q8_0, {c.get(), 0},
                                   {1, 3, 16}))
        == errc::invalid_argument);
  auto st = dev.matmul_weights({a.get(), 0}, {q8.get(), 1}, weight_type::f16,
                               {c.get(), 0}, {1, 1, 32});
  REQUIRE_FALSE(st.ok());
  CHECK(st.err().message == "matmul_f16 w: offset 1 is not a multiple of 2");
  // Heads that do not group; rope with an odd n_rot; silu_mul of nothing.
  CHECK(code_of(dev.attention({a.get(), 0}, {a.get(), 0}, {a.get(), 0},
                              {c.get(), 0}, {1, 0, 3, 2, 4, 8, 1.0f}))
        == errc::invalid_argument);
  CHECK(code_of(dev.rope({c.get(), 0}, {a.get(), 0}, {},
                         {1, 1, 4, 3, 10000.0f}))
        == errc::invalid_argument);
  CHECK(code_of(dev.silu_mul({a.get(), 0}, {a.get(), 0}, {c.get(), 0}, 0))
        == errc::invalid_argument);
  // A KV cache of no known type; to_f16 of nothing.
  attention_dims bad_kv{1, 0, 2, 1, 4, 4, 1.0f};
  bad_kv.kv = static_cast<kv_type>(7);
  st = dev.attention({a.get(), 0}, {a.get(), 0}, {a.get(), 0}, {c.get(), 0},
                     bad_kv);
  REQUIRE_FALSE(st.ok());
  CHECK(st.err().message == "attention: unknown KV cache type");
  CHECK(code_of(dev.to_f16({a.get(), 0}, {c.get(), 0}, 0))
        == errc::invalid_argument);
  CHECK(code_of(dev.elementwise(static_cast<binary_op>(7), {a.get(), 0},
                                {a.get(), 0}, {c.get(), 0}, 4))
        == errc::invalid_argument);
  // A view's limit names the allocation it stands for.
  st = dev.elementwise(binary_op::add, {a.get(), 0, 16}, {a.get(), 0},
                       {c.get(), 0}, 8);
  REQUIRE_FALSE(st.ok());
  CHECK(st.err().code == errc::out_of_range);
  CHECK(st.err().message
        == "add a: range [0, 0+32) exceeds allocation of 16 bytes");
  CHECK(dev.calls.empty());
}
