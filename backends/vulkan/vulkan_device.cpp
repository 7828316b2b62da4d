#include "backends/vulkan/vulkan_device.hpp"

#include "backends/device_rates.hpp"
#include "backends/host_kernels.hpp"
#include "backends/vulkan/vulkan_spirv.hpp"
#include "backends/vulkan/vulkan_util.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

/// How a Vulkan device works:
///
/// - One queue. Asynchronous operations (copy, elementwise, matmul, staged
///   writes) are recorded into the open *batch*: one command buffer plus a
///   descriptor pool. Consecutive commands are separated by a global memory
///   barrier, so each sees the results of the ones before (rule 4). A batch
///   is submitted ("flushed") by record, synchronize, read, staged transfers,
///   or once it holds `batch_commands` commands.
/// - Each submission signals the next value of one timeline semaphore. An
///   event is {uid, value}: it completes when the semaphore reaches value.
///   The open batch will signal submitted_ + 1.
/// - Every buffer remembers the last value that uses it (`last_use`). A
///   host-side write into mapped memory first waits for that value, so it
///   cannot overtake queued work on the same buffer (rule 1); freeing a
///   buffer with pending work is deferred until its value completes.
/// - Kernels bind buffers whole or by windows aligned down to
///   minStorageBufferOffsetAlignment and get element offsets as push
///   constants, so any offset that is a multiple of 4 bytes works. F16 and
///   Q8_0 weights are read as 32-bit words from a word-aligned window with
///   a byte offset, so their offsets need only be even.
/// - The Llama operations run natively (rms_norm, rope, attention,
///   silu_mul through the element-wise shader, F16/Q8_0 products through
///   matrix-vector shaders that walk the rows of A); attention heads wider
///   than 256 fall back to the host path.

namespace exo::backend::vk {

namespace {

constexpr std::uint32_t batch_commands = 64;
constexpr std::uint32_t max_batches = 8;
constexpr std::uint32_t push_bytes = 64;
/// Storage buffers per descriptor set; a kernel that uses fewer leaves the
/// rest unwritten (allowed: they are not statically used).
constexpr std::uint32_t max_bindings = 5;
constexpr std::uint32_t no_type = std::numeric_limits<std::uint32_t>::max();

/// Push constants of elementwise.comp.
struct elementwise_push {
  /// groups: silu's elements (of this dispatch) below it take ggml's expf
  /// (the operation's whole groups of 16).
  std::uint32_t a_off, b_off, c_off, count, op, groups;
};

/// Push constants of matmul.comp and matvec.comp.
struct matmul_push {
  std::uint32_t a_off, b_off, c_off, m, n, k, transpose_b, row_tile0, col_tile0;
};

/// Push constants of matvec_f16.comp and matvec_q8_0.comp (w_off in bytes).
struct weights_push {
  std::uint32_t a_off, w_off, c_off, m, n, k;
};

/// Push constants of matvec_quant.comp: weights_push, then the GGUF type
/// id and its block's elements and bytes.
struct quant_push {
  std::uint32_t a_off, w_off, c_off, m, n, k, type, block_elems, block_bytes;
};

/// Push constants of rms_norm.comp.
struct rms_norm_push {
  std::uint32_t x_off, w_off, o_off, rows, dim;
  float eps;
};

/// Push constants of rope.comp.
struct rope_push {
  std::uint32_t x_off, pos_off, ff_off, rows, heads, head_dim, n_rot, has_ff;
  float freq_base;
  std::uint32_t neox;
};

/// Push constants of rope_cached.comp.
struct rope_cached_push {
  std::uint32_t x_off, cs_off, rows, heads, head_dim, n_rot, neox;
};

/// Push constants of attention.comp.
struct attention_push {
  std::uint32_t q_off, k_off, v_off, o_off, n_tokens, pos0, n_heads, n_kv_heads,
      head_dim, kv_stride;
  float scale;
  /// The *_paged variants: the table's offset (words), log2 of the
  /// positions per block, values between blocks, the last block inside
  /// the views.
  std::uint32_t tab_off = 0, block_shift = 0, block_stride = 0,
                max_block = 0;
  /// The *_paged_rows variants: block indices per row's table.
  std::uint32_t row_table_len = 0;
};
static_assert(sizeof(attention_push) <= push_bytes, "push constants");

/// A cache view's offset in the attention shaders' units from its
/// binding's start: halves for an f16 cache (the binding starts at a
/// min_align multiple, so at an even number of halves), bytes for q8_0,
/// else the binding's float offset.
std::uint32_t kv_offset(kv_type kv, std::size_t binding_start,
                        std::uint32_t elem_off, std::size_t offset) {
  return kv == kv_type::f16    ? static_cast<std::uint32_t>(
                                   (offset - binding_start) / 2)
         : kv == kv_type::q8_0 ? static_cast<std::uint32_t>(
                                   offset - binding_start)
                               : elem_off;
}

/// attention_push of dims, the views' offsets given (in the shader's
/// units: floats, halves or bytes).
attention_push attention_push_of(const attention_dims& dims,
                                 std::uint32_t q_off, std::uint32_t k_off,
                                 std::uint32_t v_off, std::uint32_t o_off) {
  return {q_off,
          k_off,
          v_off,
          o_off,
          static_cast<std::uint32_t>(dims.n_tokens),
          static_cast<std::uint32_t>(dims.pos0),
          static_cast<std::uint32_t>(dims.n_heads),
          static_cast<std::uint32_t>(dims.n_kv_heads),
          static_cast<std::uint32_t>(dims.head_dim),
          static_cast<std::uint32_t>(dims.kv_stride),
          dims.scale};
}

/// Push constants of to_f16.comp (o_off in 32-bit words, two halves each).
struct to_f16_push {
  std::uint32_t a_off, o_off, words;
};

/// Push constants of to_q8_0.comp (o_off in 32-bit words; pairs of 34-byte
/// blocks, 17 words each).
struct to_q8_0_push {
  std::uint32_t a_off, o_off, pairs;
};

/// Push constants of store_kv_rows.comp.
struct store_kv_rows_push {
  std::uint32_t a_off, tab_off, kv_off, rows, width, kv_stride, block_shift,
      block_stride, table_len, max_block, kv_type;
};
static_assert(sizeof(store_kv_rows_push) <= push_bytes, "push constants");

/// Push constants of hadamard.comp.
struct hadamard_push {
  std::uint32_t a_off, o_off, runs, n;
  float scale;
};

/// The longest run hadamard.comp rotates (its shared memory).
constexpr std::size_t hadamard_max_n = 2048;

/// attention.comp's workgroup: an invocation owns two output dimensions.
constexpr std::size_t attention_max_head_dim = 256;

/// Rows of W one workgroup of matvec_f16 / matvec_q8_0 / matvec_quant owns
/// at a time, and rows of A the _x4 pipelines (matvec_f16, matvec_quant)
/// take at a time (weight_tiles.glsl: R and T).
constexpr std::size_t weight_rows_per_group = 4;
constexpr std::size_t weight_tile_rows = 4;

std::string hex(const std::uint8_t* bytes, std::size_t n) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < n; ++i) {
    out += digits[bytes[i] >> 4];
    out += digits[bytes[i] & 0xF];
  }
  return out;
}

std::string version_string(std::uint32_t v) {
  return std::to_string(VK_API_VERSION_MAJOR(v)) + "." +
         std::to_string(VK_API_VERSION_MINOR(v)) + "." +
         std::to_string(VK_API_VERSION_PATCH(v));
}

} // namespace

class vulkan_device final : public device {
 public:
  vulkan_device(VkPhysicalDevice physical, const vulkan_options& opts)
      : phys_(physical), opts_(opts) {}

  ~vulkan_device() override;

  status init(const std::vector<std::string>& taken_ids);

  /// Where the device has shaderFloat64: whether its own fma() is fused
  /// (rope_cached's plain pipeline on rows where a product and a sum
  /// would round otherwise, against the host's bits). If it is, the plain
  /// pipelines give the host's bits at no cost and run silu_mul and
  /// rope_cached; if not, the _fp64 ones (exact_fma.glsl) do.
  void settle_fma();

  const device_properties& properties() const override { return props_; }

  bool measure_rates_again() override {
    if (!opts_.measure_rates)
      return false;
    auto r = measure_device_rates(*this);
    auto given = [](double x) -> std::optional<double> {
      return x > 0 ? std::optional<double>{x} : std::nullopt;
    };
    props_.peak_flops = given(r.flops);
    props_.memory_bandwidth = given(r.bytes_per_second);
    props_.launch_seconds = given(r.launch_seconds);
    return true;
  }

  result<std::unique_ptr<buffer>> allocate(std::size_t bytes) override;
  memory_info memory() override;

  status write(buffer& dst, std::size_t offset, const void* src,
               std::size_t bytes) override;
  status read(const buffer& src, std::size_t offset, void* dst,
              std::size_t bytes) override;
  status copy(const buffer& src, std::size_t src_offset, buffer& dst,
              std::size_t dst_offset, std::size_t bytes) override;
  void* host_pointer(buffer& buf) override;

  status synchronize() override;
  result<event> record() override;
  status wait(const event& e) override;
  result<bool> completed(const event& e) override;
  /// Every weight type: f16 and q8_0 have their own shaders, the other
  /// ggml formats are dequantized in matvec_quant.comp.
  /// Every format files store; not the cpu device's packed layouts.
  bool runs_weights(weight_type t) const noexcept override {
    return t != weight_type::q4_k_x16 && t != weight_type::q6_k_x16;
  }
  /// The *_paged attention shaders read a paged cache where it lies.
  bool reads_kv_blocks() const noexcept override {
    return true;
  }
  /// A decode batch's attention and K/V writes in one dispatch each
  /// (*_paged_rows.comp, store_kv_rows.comp).
  bool runs_paged_rows() const noexcept override {
    return true;
  }

protected:
  // Operands arrive checked (device's public methods).
  status do_elementwise(binary_op op, const_view a, const_view b,
                        mut_view out, std::size_t count) override;
  status do_matmul(const_view a, const_view b, mut_view c,
                   const matmul_dims& dims) override;
  status do_matmul_weights(const_view a, const_view w, weight_type type,
                           mut_view c, const matmul_dims& dims) override;
  status do_rms_norm(const_view x, const_view weight, mut_view out,
                     std::size_t rows, std::size_t dim, float eps) override;
  status do_rope(mut_view x, const_view positions, const_view freq_factors,
                 const rope_dims& dims) override;
  status do_rope_cached(mut_view x, const_view cache,
                        const rope_dims& dims) override;
  status do_attention(const_view q, const_view k, const_view v, mut_view out,
                      const attention_dims& dims) override;
  status do_attention_paged(const_view q, const_view k, const_view v,
                            const_view table, mut_view out,
                            const attention_dims& dims) override;
  status do_attention_paged_rows(const_view q, const_view k, const_view v,
                                 const_view tables, mut_view out,
                                 const attention_dims& dims,
                                 std::size_t table_len) override;
  status do_store_kv_rows(const_view a, const_view tables, mut_view kv,
                          const kv_rows_dims& dims) override;
  /// attention_paged (row_table_len 0) and attention_paged_rows: one
  /// dispatch of the *_paged or *_paged_rows shaders (takes mtx_).
  status paged_attention(const_view q, const_view k, const_view v,
                         const_view table, mut_view out,
                         const attention_dims& dims,
                         std::size_t row_table_len);
  status do_to_f16(const_view a, mut_view out, std::size_t count) override;
  status do_to_q8_0(const_view a, mut_view out, std::size_t count) override;
  status do_hadamard(mut_view out, const_view a, std::size_t count,
                     std::size_t n) override;
  status do_silu_mul(const_view gate, const_view up, mut_view out,
                     std::size_t count) override;

public:
  telemetry read_telemetry() override {
    telemetry t;
    t.memory = memory();
    return t;
  }

 private:
  /// A VkBuffer with its own VkDeviceMemory, mapped when host-visible.
  struct allocation {
    VkBuffer buf = VK_NULL_HANDLE;
    VkDeviceMemory mem = VK_NULL_HANDLE;
    void* mapped = nullptr;
    VkDeviceSize size = 0; ///< bytes of the memory object
  };

  class vk_buffer;

  /// One command buffer and the descriptor sets its dispatches use.
  struct batch {
    VkCommandBuffer cmd = VK_NULL_HANDLE;
    VkDescriptorPool pool = VK_NULL_HANDLE;
    std::uint64_t value = 0; ///< timeline value it signals (0: never used)
    std::uint32_t sets = 0;
    std::uint32_t commands = 0;
  };

  /// Memory to free once the timeline reaches `value`.
  struct pending_free {
    allocation alloc;
    std::uint64_t value;
    std::uint64_t bytes; ///< counted in used_
  };

  /// A storage-buffer binding window and the view's element offset in it.
  struct binding {
    VkBuffer buf;
    VkDeviceSize offset;
    VkDeviceSize range;
    std::uint32_t elem_off;
  };

  enum kernel : std::uint8_t {
    k_elementwise,
    k_matmul,
    k_matvec,
    k_matvec_subgroup,
    k_rms_norm,
    k_rope,
    k_attention,
    k_matvec_f16,
    k_matvec_q8_0,
    k_matvec_quant,
    k_attention_f16,
    k_to_f16,
    k_attention_q8_0,
    k_to_q8_0,
    k_hadamard,
    k_attention_paged,
    k_attention_f16_paged,
    k_attention_q8_0_paged,
    k_attention_paged_rows,
    k_attention_f16_paged_rows,
    k_attention_q8_0_paged_rows,
    k_store_kv_rows,
    k_matvec_f16_x4,
    k_matvec_quant_x4,
    k_matvec_f32w,
    k_matvec_f32w_x4,
    k_matvec_subgroup_x4,
    k_rope_cached,
    k_elementwise_fp64,
    k_rope_cached_fp64,
    k_rms_norm_fp64,
    k_count
  };

  // All private helpers run with mtx_ held.
  status usable(const char* what);
  /// C = A * B^T (F32) on a device with subgroup arithmetic: matmul's one
  /// row and matmul_weights' F32 weights, through matvec_subgroup, whole
  /// tiles of 4 rows of A through its _x4 pipeline.
  status matvec_rows_subgroup(const_view a, const_view b, mut_view c,
                              const matmul_dims& dims);
  status note(VkResult r, const std::string& what);
  void init_properties();
  status choose_memory_types();
  result<allocation> create_allocation(VkDeviceSize size, std::uint32_t type,
                                       bool map);
  void destroy_allocation(allocation& a);
  void release(allocation alloc, std::uint64_t last_use, std::uint64_t bytes);
  status poll();
  void retire();
  status wait_value(std::uint64_t value);
  result<batch*> open_batch();
  void command(batch& b);
  status flush();
  status finish(batch& b);
  status ensure_staging();
  void flush_range(const allocation& a, VkDeviceSize off, VkDeviceSize n,
                   bool coherent);
  void invalidate_range(const allocation& a, VkDeviceSize off, VkDeviceSize n,
                        bool coherent);
  status ensure_pipeline(kernel k);
  result<binding> bind(const buffer& buf, std::size_t offset, std::size_t bytes,
                       const char* what);
  result<batch*> prepare(kernel k, std::initializer_list<binding> bs);
  status run_elementwise(std::uint32_t op, const_view a, const_view b,
                         mut_view out, std::size_t count, const char* what);
  /// Marks the buffers of a dispatch as used by the open batch `bt`.
  void used_by(const batch& bt, std::initializer_list<const buffer*> bufs);

  VkPhysicalDevice phys_;
  vulkan_options opts_;
  device_properties props_;

  VkDevice dev_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  std::uint32_t family_ = 0;
  VkCommandPool cmd_pool_ = VK_NULL_HANDLE;
  VkSemaphore timeline_ = VK_NULL_HANDLE;
  VkDescriptorSetLayout set_layout_ = VK_NULL_HANDLE;
  VkPipelineLayout pipe_layout_ = VK_NULL_HANDLE;
  VkPipeline pipelines_[k_count] = {};

  std::uint32_t mem_type_ = no_type;
  std::uint32_t staging_type_ = no_type;
  std::uint32_t heap_ = 0;
  VkDeviceSize heap_size_ = 0;
  bool mappable_ = false; ///< buffer memory is host-visible
  bool direct_ = false;   ///< transfers memcpy into mapped buffers
  bool coherent_ = false;
  bool staging_coherent_ = false;
  bool budget_ext_ = false;
  bool subgroup_add_ = false; ///< subgroup arithmetic in compute shaders
  /// shaderFloat64, enabled: rms_norm_fp64 sums in double as the host.
  bool float64_ = false;
  /// float64_ and the device's own fma() not fused (settle_fma): the
  /// _fp64 pipelines of silu_mul and rope_cached (exact fused
  /// multiply-adds) run them.
  bool exact_fma_ = false;
  std::uint32_t subgroup_size_ = 1;
  VkDeviceSize atom_ = 1;
  VkDeviceSize min_align_ = 1;
  VkDeviceSize max_range_ = 0;
  std::uint32_t max_groups_[3] = {1, 1, 1};

  std::mutex mtx_;
  std::uint64_t used_ = 0;
  std::uint64_t submitted_ = 0; ///< last timeline value submitted
  std::uint64_t completed_ = 0; ///< last timeline value seen complete
  std::vector<batch> batches_;
  int open_ = -1; ///< index of the open batch in batches_, or -1
  std::vector<pending_free> deferred_;
  allocation staging_[2];
  std::uint64_t staging_use_[2] = {0, 0};
  int staging_next_ = 0;
  std::optional<error> fatal_; ///< once set, every operation fails with it
};

class vulkan_device::vk_buffer final : public buffer {
 public:
  vk_buffer(vulkan_device& owner, std::size_t size, allocation a)
      : buffer(owner, size), alloc(a), dev_(owner) {}

  ~vk_buffer() override { dev_.release(alloc, last_use, size()); }

  allocation alloc;
  mutable std::uint64_t last_use = 0; ///< last timeline value using it

 private:
  vulkan_device& dev_;
};

// -- setup -------------------------------------------------------------------

status vulkan_device::init(const std::vector<std::string>& taken_ids) {
  VkPhysicalDeviceProperties base;
  vkGetPhysicalDeviceProperties(phys_, &base);
  std::string label = base.deviceName;
  if (base.apiVersion < VK_API_VERSION_1_2)
    return fail(errc::unsupported, label + ": Vulkan " +
                                       version_string(base.apiVersion) +
                                       " is older than the 1.2 exo needs");
  VkPhysicalDeviceVulkan12Features f12{};
  f12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
  VkPhysicalDeviceFeatures2 f2{};
  f2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
  f2.pNext = &f12;
  vkGetPhysicalDeviceFeatures2(phys_, &f2);
  if (!f12.timelineSemaphore)
    return fail(errc::unsupported, label + ": no timeline semaphores");

  std::uint32_t nfam = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(phys_, &nfam, nullptr);
  std::vector<VkQueueFamilyProperties> fams(nfam);
  vkGetPhysicalDeviceQueueFamilyProperties(phys_, &nfam, fams.data());
  bool found = false;
  for (std::uint32_t i = 0; i < nfam && !found; ++i)
    if ((fams[i].queueFlags & VK_QUEUE_COMPUTE_BIT) && fams[i].queueCount) {
      family_ = i;
      found = true;
    }
  if (!found)
    return fail(errc::unsupported, label + ": no compute queue");

  std::uint32_t next = 0;
  vkEnumerateDeviceExtensionProperties(phys_, nullptr, &next, nullptr);
  std::vector<VkExtensionProperties> exts(next);
  vkEnumerateDeviceExtensionProperties(phys_, nullptr, &next, exts.data());
  auto has_ext = [&](const char* name) {
    return std::any_of(exts.begin(), exts.end(), [&](auto& e) {
      return std::strcmp(e.extensionName, name) == 0;
    });
  };
  budget_ext_ = has_ext(VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
  std::vector<const char*> enabled;
  if (budget_ext_)
    enabled.push_back(VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);

  float priority = 1.0f;
  VkDeviceQueueCreateInfo qci{};
  qci.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO;
  qci.queueFamilyIndex = family_;
  qci.queueCount = 1;
  qci.pQueuePriorities = &priority;
  VkPhysicalDeviceVulkan12Features want{};
  want.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
  want.timelineSemaphore = VK_TRUE;
  VkPhysicalDeviceFeatures want_base{};
  float64_ = f2.features.shaderFloat64 == VK_TRUE && !opts_.no_float64;
  want_base.shaderFloat64 = float64_ ? VK_TRUE : VK_FALSE;
  VkDeviceCreateInfo dci{};
  dci.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO;
  dci.pNext = &want;
  dci.pEnabledFeatures = &want_base;
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &qci;
  dci.enabledExtensionCount = static_cast<std::uint32_t>(enabled.size());
  dci.ppEnabledExtensionNames = enabled.data();
  if (auto r = vkCreateDevice(phys_, &dci, nullptr, &dev_); r != VK_SUCCESS) {
    dev_ = VK_NULL_HANDLE;
    return to_error(r, label + ": vkCreateDevice");
  }
  vkGetDeviceQueue(dev_, family_, 0, &queue_);

  min_align_ =
      std::max<VkDeviceSize>(1, base.limits.minStorageBufferOffsetAlignment);
  max_range_ = base.limits.maxStorageBufferRange;
  atom_ = std::max<VkDeviceSize>(1, base.limits.nonCoherentAtomSize);
  for (int i = 0; i < 3; ++i)
    max_groups_[i] =
        std::max<std::uint32_t>(1, base.limits.maxComputeWorkGroupCount[i]);

  VkCommandPoolCreateInfo cpi{};
  cpi.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
  cpi.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  cpi.queueFamilyIndex = family_;
  if (auto r = vkCreateCommandPool(dev_, &cpi, nullptr, &cmd_pool_);
      r != VK_SUCCESS)
    return to_error(r, label + ": vkCreateCommandPool");

  VkSemaphoreTypeCreateInfo sti{};
  sti.sType = VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO;
  sti.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
  sti.initialValue = 0;
  VkSemaphoreCreateInfo sci{};
  sci.sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO;
  sci.pNext = &sti;
  if (auto r = vkCreateSemaphore(dev_, &sci, nullptr, &timeline_);
      r != VK_SUCCESS)
    return to_error(r, label + ": vkCreateSemaphore");

  VkDescriptorSetLayoutBinding binds[max_bindings]{};
  for (std::uint32_t i = 0; i < max_bindings; ++i) {
    binds[i].binding = i;
    binds[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    binds[i].descriptorCount = 1;
    binds[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
  }
  VkDescriptorSetLayoutCreateInfo dli{};
  dli.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO;
  dli.bindingCount = max_bindings;
  dli.pBindings = binds;
  if (auto r = vkCreateDescriptorSetLayout(dev_, &dli, nullptr, &set_layout_);
      r != VK_SUCCESS)
    return to_error(r, label + ": vkCreateDescriptorSetLayout");
  VkPushConstantRange pcr{VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes};
  VkPipelineLayoutCreateInfo pli{};
  pli.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO;
  pli.setLayoutCount = 1;
  pli.pSetLayouts = &set_layout_;
  pli.pushConstantRangeCount = 1;
  pli.pPushConstantRanges = &pcr;
  if (auto r = vkCreatePipelineLayout(dev_, &pli, nullptr, &pipe_layout_);
      r != VK_SUCCESS)
    return to_error(r, label + ": vkCreatePipelineLayout");

  EXO_TRY(choose_memory_types());
  init_properties();
  auto dups = std::count_if(
      taken_ids.begin(), taken_ids.end(),
      [&](const std::string& id) { return id.rfind(props_.id, 0) == 0; });
  if (dups > 0)
    props_.id += "#" + std::to_string(dups);
  return {};
}

status vulkan_device::choose_memory_types() {
  // The memory types a storage/transfer buffer may live in.
  VkBufferCreateInfo bci{};
  bci.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
  bci.size = 256;
  bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
              VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
              VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  bci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  VkBuffer probe = VK_NULL_HANDLE;
  if (auto r = vkCreateBuffer(dev_, &bci, nullptr, &probe); r != VK_SUCCESS)
    return to_error(r, "vkCreateBuffer");
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(dev_, probe, &req);
  vkDestroyBuffer(dev_, probe, nullptr);

  VkPhysicalDeviceMemoryProperties mp;
  vkGetPhysicalDeviceMemoryProperties(phys_, &mp);
  // The main heap: the largest device-local one (the largest of all if none
  // is device-local).
  bool any_local = false;
  for (std::uint32_t h = 0; h < mp.memoryHeapCount; ++h) {
    bool local = mp.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT;
    if ((local && !any_local) ||
        (local == any_local && mp.memoryHeaps[h].size > heap_size_)) {
      heap_ = h;
      heap_size_ = mp.memoryHeaps[h].size;
      any_local = any_local || local;
    }
  }
  auto allowed = [&](std::uint32_t t) {
    return (req.memoryTypeBits & (1u << t)) != 0;
  };
  auto flags = [&](std::uint32_t t) { return mp.memoryTypes[t].propertyFlags; };
  // Buffers: on the main heap, host-visible there if possible (lavapipe,
  // integrated GPUs, resizable BAR).
  for (std::uint32_t t = 0; t < mp.memoryTypeCount; ++t) {
    if (!allowed(t) || mp.memoryTypes[t].heapIndex != heap_)
      continue;
    bool visible = flags(t) & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT;
    if (mem_type_ == no_type ||
        (visible && !(flags(mem_type_) & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT)))
      mem_type_ = t;
  }
  if (mem_type_ == no_type)
    return fail(errc::unsupported, "no memory type for storage buffers");
  mappable_ = flags(mem_type_) & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT;
  coherent_ = flags(mem_type_) & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  direct_ = mappable_ && !opts_.force_staging;
  // Staging: host-visible, coherent and cached preferred.
  int best = -1;
  for (std::uint32_t t = 0; t < mp.memoryTypeCount; ++t) {
    if (!allowed(t) || !(flags(t) & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT))
      continue;
    int score = ((flags(t) & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT) ? 2 : 0) +
                ((flags(t) & VK_MEMORY_PROPERTY_HOST_CACHED_BIT) ? 1 : 0);
    if (score > best) {
      best = score;
      staging_type_ = t;
    }
  }
  if (!direct_ && staging_type_ == no_type)
    return fail(errc::unsupported, "no host-visible memory for staging");
  if (staging_type_ != no_type)
    staging_coherent_ =
        flags(staging_type_) & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  return {};
}

void vulkan_device::init_properties() {
  std::uint32_t next = 0;
  vkEnumerateDeviceExtensionProperties(phys_, nullptr, &next, nullptr);
  std::vector<VkExtensionProperties> exts(next);
  vkEnumerateDeviceExtensionProperties(phys_, nullptr, &next, exts.data());
  auto has_ext = [&](const char* name) {
    return std::any_of(exts.begin(), exts.end(), [&](auto& e) {
      return std::strcmp(e.extensionName, name) == 0;
    });
  };
  VkPhysicalDeviceProperties2 p2{};
  p2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
  VkPhysicalDeviceIDProperties idp{};
  idp.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES;
  VkPhysicalDeviceDriverProperties drv{};
  drv.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES;
  VkPhysicalDeviceMaintenance3Properties m3{};
  m3.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES;
  VkPhysicalDevicePCIBusInfoPropertiesEXT pci{};
  pci.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PCI_BUS_INFO_PROPERTIES_EXT;
  VkPhysicalDeviceShaderSMBuiltinsPropertiesNV sm{};
  sm.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SM_BUILTINS_PROPERTIES_NV;
  VkPhysicalDeviceShaderCorePropertiesAMD amd{};
  amd.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CORE_PROPERTIES_AMD;
  p2.pNext = &idp;
  idp.pNext = &drv;
  drv.pNext = &m3;
  void** tail = &m3.pNext;
  bool has_pci = has_ext(VK_EXT_PCI_BUS_INFO_EXTENSION_NAME);
  bool has_sm = has_ext(VK_NV_SHADER_SM_BUILTINS_EXTENSION_NAME);
  bool has_amd = has_ext(VK_AMD_SHADER_CORE_PROPERTIES_EXTENSION_NAME);
  if (has_pci) {
    *tail = &pci;
    tail = &pci.pNext;
  }
  if (has_sm) {
    *tail = &sm;
    tail = &sm.pNext;
  }
  if (has_amd) {
    *tail = &amd;
    tail = &amd.pNext;
  }
  VkPhysicalDeviceSubgroupProperties sub{};
  sub.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES;
  *tail = &sub;
  vkGetPhysicalDeviceProperties2(phys_, &p2);
  const auto& base = p2.properties;
  subgroup_add_ =
      !opts_.no_subgroup_arithmetic &&
      (sub.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
      (sub.supportedOperations & VK_SUBGROUP_FEATURE_BASIC_BIT) &&
      (sub.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT);
  subgroup_size_ = std::max<std::uint32_t>(1, sub.subgroupSize);

  props_.id = "vulkan:" + hex(idp.deviceUUID, VK_UUID_SIZE);
  props_.kind = backend_kind::vulkan;
  props_.name = base.deviceName;
  props_.vendor = vendor_name(base.vendorID);
  props_.architecture = device_type_name(base.deviceType);
  props_.driver_version = std::string{drv.driverName};
  if (drv.driverInfo[0] != '\0')
    props_.driver_version += std::string{" "} + drv.driverInfo;
  if (has_pci) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%04x:%02x:%02x.%x", pci.pciDomain,
                  pci.pciBus, pci.pciDevice, pci.pciFunction);
    props_.pci_bus_id = buf;
  }
  props_.total_memory = heap_size_;
  props_.max_allocation =
      std::min<std::uint64_t>(m3.maxMemoryAllocationSize, heap_size_);
  if (has_sm)
    props_.compute_units = sm.shaderSMCount;
  else if (has_amd)
    props_.compute_units = amd.shaderEngineCount *
                           amd.shaderArraysPerEngineCount *
                           amd.computeUnitsPerShaderArray;
  switch (base.deviceType) {
  case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
  case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
    props_.support = support_level::full;
    break;
  default:
    props_.support = support_level::experimental;
  }
  props_.capabilities =
      cap_async | cap_elementwise | cap_matmul | cap_model_ops;
  if (direct_)
    props_.capabilities |= cap_host_visible;
}

vulkan_device::~vulkan_device() {
  if (dev_ == VK_NULL_HANDLE)
    return;
  vkDeviceWaitIdle(dev_);
  for (auto& p : deferred_)
    destroy_allocation(p.alloc);
  for (auto& s : staging_)
    destroy_allocation(s);
  for (auto& b : batches_)
    vkDestroyDescriptorPool(dev_, b.pool, nullptr);
  for (auto p : pipelines_)
    vkDestroyPipeline(dev_, p, nullptr);
  vkDestroyPipelineLayout(dev_, pipe_layout_, nullptr);
  vkDestroyDescriptorSetLayout(dev_, set_layout_, nullptr);
  vkDestroyCommandPool(dev_, cmd_pool_, nullptr);
  vkDestroySemaphore(dev_, timeline_, nullptr);
  vkDestroyDevice(dev_, nullptr);
}

// -- helpers -----------------------------------------------------------------

status vulkan_device::usable(const char* what) {
  if (fatal_)
    return fail(fatal_->code, std::string{what} + ": " + fatal_->message);
  return {};
}

status vulkan_device::note(VkResult r, const std::string& what) {
  if (r == VK_SUCCESS)
    return {};
  auto err = to_error(r, what);
  if (r == VK_ERROR_DEVICE_LOST)
    fatal_ = err;
  return err;
}

result<vulkan_device::allocation>
vulkan_device::create_allocation(VkDeviceSize size, std::uint32_t type,
                                 bool map) {
  allocation a;
  VkBufferCreateInfo bci{};
  bci.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
  bci.size = (size + 3) / 4 * 4; // whole f32 words for the shaders
  bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
              VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
              VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  bci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  if (auto r = vkCreateBuffer(dev_, &bci, nullptr, &a.buf); r != VK_SUCCESS)
    return to_error(r, "allocate: vkCreateBuffer");
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(dev_, a.buf, &req);
  if (!(req.memoryTypeBits & (1u << type))) {
    destroy_allocation(a);
    return fail(errc::driver_error, "allocate: memory type not allowed");
  }
  VkMemoryAllocateInfo mai{};
  mai.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
  mai.allocationSize = req.size;
  mai.memoryTypeIndex = type;
  if (auto r = vkAllocateMemory(dev_, &mai, nullptr, &a.mem); r != VK_SUCCESS) {
    a.mem = VK_NULL_HANDLE;
    destroy_allocation(a);
    return to_error(r, "allocate: vkAllocateMemory of " +
                           std::to_string(req.size) + " bytes");
  }
  a.size = req.size;
  if (auto r = vkBindBufferMemory(dev_, a.buf, a.mem, 0); r != VK_SUCCESS) {
    destroy_allocation(a);
    return to_error(r, "allocate: vkBindBufferMemory");
  }
  if (map) {
    if (auto r = vkMapMemory(dev_, a.mem, 0, VK_WHOLE_SIZE, 0, &a.mapped);
        r != VK_SUCCESS) {
      destroy_allocation(a);
      return to_error(r, "allocate: vkMapMemory");
    }
  }
  return a;
}

void vulkan_device::destroy_allocation(allocation& a) {
  // Freeing memory unmaps it.
  if (a.buf != VK_NULL_HANDLE)
    vkDestroyBuffer(dev_, a.buf, nullptr);
  if (a.mem != VK_NULL_HANDLE)
    vkFreeMemory(dev_, a.mem, nullptr);
  a = allocation{};
}

void vulkan_device::release(allocation alloc, std::uint64_t last_use,
                            std::uint64_t bytes) {
  std::lock_guard<std::mutex> guard{mtx_};
  (void)poll();
  if (fatal_ || last_use <= completed_) {
    destroy_allocation(alloc);
    used_ -= bytes;
    return;
  }
  if (last_use > submitted_)
    (void)flush(); // start the work so that the memory comes back
  deferred_.push_back({alloc, last_use, bytes});
}

status vulkan_device::poll() {
  std::uint64_t v = 0;
  auto r = vkGetSemaphoreCounterValue(dev_, timeline_, &v);
  EXO_TRY(note(r, "vkGetSemaphoreCounterValue"));
  completed_ = std::max(completed_, v);
  retire();
  return {};
}

void vulkan_device::retire() {
  auto it = std::remove_if(deferred_.begin(), deferred_.end(),
                           [this](pending_free& p) {
                             if (p.value > completed_)
                               return false;
                             destroy_allocation(p.alloc);
                             used_ -= p.bytes;
                             return true;
                           });
  deferred_.erase(it, deferred_.end());
}

status vulkan_device::wait_value(std::uint64_t value) {
  if (value <= completed_)
    return {};
  if (value > submitted_)
    EXO_TRY(flush());
  VkSemaphoreWaitInfo wi{};
  wi.sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO;
  wi.semaphoreCount = 1;
  wi.pSemaphores = &timeline_;
  wi.pValues = &value;
  auto r = vkWaitSemaphores(dev_, &wi, std::numeric_limits<uint64_t>::max());
  EXO_TRY(note(r, "vkWaitSemaphores"));
  completed_ = std::max(completed_, value);
  retire();
  return {};
}

result<vulkan_device::batch*> vulkan_device::open_batch() {
  if (open_ >= 0)
    return &batches_[static_cast<std::size_t>(open_)];
  EXO_TRY(poll());
  int pick = -1;
  for (std::size_t i = 0; i < batches_.size() && pick < 0; ++i)
    if (batches_[i].value <= completed_)
      pick = static_cast<int>(i);
  if (pick < 0 && batches_.size() < max_batches) {
    batch b;
    VkCommandBufferAllocateInfo cai{};
    cai.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
    cai.commandPool = cmd_pool_;
    cai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    cai.commandBufferCount = 1;
    EXO_TRY(note(vkAllocateCommandBuffers(dev_, &cai, &b.cmd),
                 "vkAllocateCommandBuffers"));
    VkDescriptorPoolSize ps{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                            max_bindings * batch_commands};
    VkDescriptorPoolCreateInfo dpi{};
    dpi.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO;
    dpi.maxSets = batch_commands;
    dpi.poolSizeCount = 1;
    dpi.pPoolSizes = &ps;
    if (auto r = vkCreateDescriptorPool(dev_, &dpi, nullptr, &b.pool);
        r != VK_SUCCESS) {
      vkFreeCommandBuffers(dev_, cmd_pool_, 1, &b.cmd);
      return note(r, "vkCreateDescriptorPool").err();
    }
    batches_.push_back(b);
    pick = static_cast<int>(batches_.size() - 1);
  }
  if (pick < 0) {
    // Every batch is in flight: wait for the oldest.
    auto oldest =
        std::min_element(batches_.begin(), batches_.end(),
                         [](auto& x, auto& y) { return x.value < y.value; });
    EXO_TRY(wait_value(oldest->value));
    pick = static_cast<int>(oldest - batches_.begin());
  }
  auto& b = batches_[static_cast<std::size_t>(pick)];
  EXO_TRY(
      note(vkResetDescriptorPool(dev_, b.pool, 0), "vkResetDescriptorPool"));
  EXO_TRY(note(vkResetCommandBuffer(b.cmd, 0), "vkResetCommandBuffer"));
  VkCommandBufferBeginInfo bi{};
  bi.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  EXO_TRY(note(vkBeginCommandBuffer(b.cmd, &bi), "vkBeginCommandBuffer"));
  b.value = submitted_ + 1;
  b.sets = 0;
  b.commands = 0;
  open_ = pick;
  return &b;
}

void vulkan_device::command(batch& b) {
  if (b.commands++ == 0)
    return;
  VkMemoryBarrier mb{};
  mb.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                     VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  auto stages =
      VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
  vkCmdPipelineBarrier(b.cmd, stages, stages, 0, 1, &mb, 0, nullptr, 0,
                       nullptr);
}

status vulkan_device::flush() {
  if (open_ < 0)
    return {};
  auto& b = batches_[static_cast<std::size_t>(open_)];
  open_ = -1;
  // Make the batch's writes visible to the host once it completes.
  VkMemoryBarrier mb{};
  mb.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT | VK_ACCESS_HOST_WRITE_BIT;
  vkCmdPipelineBarrier(
      b.cmd,
      VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
      VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, nullptr, 0, nullptr);
  auto r = vkEndCommandBuffer(b.cmd);
  if (r == VK_SUCCESS) {
    VkTimelineSemaphoreSubmitInfo ts{};
    ts.sType = VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO;
    ts.signalSemaphoreValueCount = 1;
    ts.pSignalSemaphoreValues = &b.value;
    VkSubmitInfo si{};
    si.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
    si.pNext = &ts;
    si.commandBufferCount = 1;
    si.pCommandBuffers = &b.cmd;
    si.signalSemaphoreCount = 1;
    si.pSignalSemaphores = &timeline_;
    r = vkQueueSubmit(queue_, 1, &si, VK_NULL_HANDLE);
  }
  if (r != VK_SUCCESS) {
    // Work that was promised is lost: nothing can be trusted any more, and
    // waiting for its value would never end.
    auto err = to_error(r, "vkQueueSubmit");
    fatal_ = err;
    b.value = 0;
    return err;
  }
  submitted_ = b.value;
  return {};
}

status vulkan_device::finish(batch& b) {
  if (b.commands >= batch_commands || b.sets >= batch_commands)
    return flush();
  return {};
}

status vulkan_device::ensure_staging() {
  for (auto& s : staging_) {
    if (s.buf != VK_NULL_HANDLE)
      continue;
    auto a = create_allocation(opts_.staging_chunk, staging_type_, true);
    if (!a)
      return a.err();
    s = *a;
  }
  return {};
}

void vulkan_device::flush_range(const allocation& a, VkDeviceSize off,
                                VkDeviceSize n, bool coherent) {
  if (coherent)
    return;
  VkMappedMemoryRange mr{};
  mr.sType = VK_STRUCTURE_TYPE_MAPPED_MEMORY_RANGE;
  mr.memory = a.mem;
  mr.offset = off / atom_ * atom_;
  auto end = (off + n + atom_ - 1) / atom_ * atom_;
  mr.size = end >= a.size ? VK_WHOLE_SIZE : end - mr.offset;
  vkFlushMappedMemoryRanges(dev_, 1, &mr);
}

void vulkan_device::invalidate_range(const allocation& a, VkDeviceSize off,
                                     VkDeviceSize n, bool coherent) {
  if (coherent)
    return;
  VkMappedMemoryRange mr{};
  mr.sType = VK_STRUCTURE_TYPE_MAPPED_MEMORY_RANGE;
  mr.memory = a.mem;
  mr.offset = off / atom_ * atom_;
  auto end = (off + n + atom_ - 1) / atom_ * atom_;
  mr.size = end >= a.size ? VK_WHOLE_SIZE : end - mr.offset;
  vkInvalidateMappedMemoryRanges(dev_, 1, &mr);
}

status vulkan_device::ensure_pipeline(kernel k) {
  if (pipelines_[k] != VK_NULL_HANDLE)
    return {};
  const vulkan_spirv::blob* blobs[k_count] = {
      &vulkan_spirv::elementwise, &vulkan_spirv::matmul,
      &vulkan_spirv::matvec,      &vulkan_spirv::matvec_subgroup,
      &vulkan_spirv::rms_norm,    &vulkan_spirv::rope,
      &vulkan_spirv::attention,   &vulkan_spirv::matvec_f16,
      &vulkan_spirv::matvec_q8_0, &vulkan_spirv::matvec_quant,
      &vulkan_spirv::attention_f16, &vulkan_spirv::to_f16,
      &vulkan_spirv::attention_q8_0, &vulkan_spirv::to_q8_0,
      &vulkan_spirv::hadamard,    &vulkan_spirv::attention_paged,
      &vulkan_spirv::attention_f16_paged,
      &vulkan_spirv::attention_q8_0_paged,
      &vulkan_spirv::attention_paged_rows,
      &vulkan_spirv::attention_f16_paged_rows,
      &vulkan_spirv::attention_q8_0_paged_rows,
      &vulkan_spirv::store_kv_rows,
      &vulkan_spirv::matvec_f16_x4,
      &vulkan_spirv::matvec_quant_x4,
      &vulkan_spirv::matvec_f32w,
      &vulkan_spirv::matvec_f32w_x4,
      &vulkan_spirv::matvec_subgroup_x4,
      &vulkan_spirv::rope_cached,
      &vulkan_spirv::elementwise_fp64,
      &vulkan_spirv::rope_cached_fp64,
      &vulkan_spirv::rms_norm_fp64};
  VkShaderModuleCreateInfo smi{};
  smi.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO;
  smi.codeSize = blobs[k]->count * sizeof(std::uint32_t);
  smi.pCode = blobs[k]->words;
  VkShaderModule mod = VK_NULL_HANDLE;
  EXO_TRY(note(vkCreateShaderModule(dev_, &smi, nullptr, &mod),
               "vkCreateShaderModule"));
  VkComputePipelineCreateInfo cpi{};
  cpi.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO;
  cpi.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
  cpi.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  cpi.stage.module = mod;
  cpi.stage.pName = "main";
  cpi.layout = pipe_layout_;
  auto r = vkCreateComputePipelines(dev_, VK_NULL_HANDLE, 1, &cpi, nullptr,
                                    &pipelines_[k]);
  vkDestroyShaderModule(dev_, mod, nullptr);
  if (r != VK_SUCCESS)
    pipelines_[k] = VK_NULL_HANDLE;
  return note(r, "vkCreateComputePipelines");
}

result<vulkan_device::binding> vulkan_device::bind(const buffer& buf,
                                                   std::size_t offset,
                                                   std::size_t bytes,
                                                   const char* what) {
  VkDeviceSize start = offset / min_align_ * min_align_;
  VkDeviceSize range = offset - start + bytes;
  if (range > max_range_)
    return fail(errc::unsupported,
                std::string{what} + ": " + std::to_string(bytes) +
                    " bytes exceed the device's largest storage binding of " +
                    std::to_string(max_range_) + " bytes");
  auto& vb = static_cast<const vk_buffer&>(buf);
  return binding{vb.alloc.buf, start, range,
                 static_cast<std::uint32_t>((offset - start) / 4)};
}

result<vulkan_device::batch*>
vulkan_device::prepare(kernel k, std::initializer_list<binding> bs) {
  EXO_TRY(ensure_pipeline(k));
  auto b = open_batch();
  if (!b)
    return b.err();
  if ((*b)->sets >= batch_commands) {
    EXO_TRY(flush());
    b = open_batch();
    if (!b)
      return b.err();
  }
  auto& bt = **b;
  VkDescriptorSetAllocateInfo dai{};
  dai.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO;
  dai.descriptorPool = bt.pool;
  dai.descriptorSetCount = 1;
  dai.pSetLayouts = &set_layout_;
  VkDescriptorSet set = VK_NULL_HANDLE;
  EXO_TRY(note(vkAllocateDescriptorSets(dev_, &dai, &set),
               "vkAllocateDescriptorSets"));
  ++bt.sets;
  VkDescriptorBufferInfo infos[max_bindings];
  VkWriteDescriptorSet writes[max_bindings]{};
  auto count = static_cast<std::uint32_t>(
      std::min<std::size_t>(bs.size(), max_bindings));
  for (std::uint32_t i = 0; i < count; ++i) {
    auto& b = bs.begin()[i];
    infos[i] = {b.buf, b.offset, b.range};
    writes[i].sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
    writes[i].dstSet = set;
    writes[i].dstBinding = i;
    writes[i].descriptorCount = 1;
    writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    writes[i].pBufferInfo = &infos[i];
  }
  vkUpdateDescriptorSets(dev_, count, writes, 0, nullptr);
  command(bt);
  vkCmdBindPipeline(bt.cmd, VK_PIPELINE_BIND_POINT_COMPUTE, pipelines_[k]);
  vkCmdBindDescriptorSets(bt.cmd, VK_PIPELINE_BIND_POINT_COMPUTE, pipe_layout_,
                          0, 1, &set, 0, nullptr);
  return &bt;
}

// -- memory ------------------------------------------------------------------

result<std::unique_ptr<buffer>> vulkan_device::allocate(std::size_t bytes) {
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(usable("allocate"));
  if (bytes == 0)
    return fail(errc::invalid_argument, "allocate: size must be > 0");
  if (bytes > props_.max_allocation)
    return fail(errc::out_of_memory,
                "allocate: " + std::to_string(bytes) +
                    " bytes exceeds the device's largest allocation of " +
                    std::to_string(props_.max_allocation));
  EXO_TRY(poll());
  if (!budget_ext_ && used_ + bytes > heap_size_)
    return fail(errc::out_of_memory,
                "allocate: " + std::to_string(bytes) + " bytes requested, " +
                    std::to_string(heap_size_ - std::min(used_, heap_size_)) +
                    " free");
  auto a = create_allocation(bytes, mem_type_, mappable_);
  if (!a)
    return a.err();
  used_ += bytes;
  return std::unique_ptr<buffer>{new vk_buffer(*this, bytes, *a)};
}

memory_info vulkan_device::memory() {
  std::lock_guard<std::mutex> guard{mtx_};
  if (!fatal_)
    (void)poll();
  memory_info info;
  info.total = heap_size_;
  info.used_by_exo = used_;
  info.free = heap_size_ > used_ ? heap_size_ - used_ : 0;
  if (budget_ext_) {
    VkPhysicalDeviceMemoryBudgetPropertiesEXT bp{};
    bp.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT;
    VkPhysicalDeviceMemoryProperties2 mp{};
    mp.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2;
    mp.pNext = &bp;
    vkGetPhysicalDeviceMemoryProperties2(phys_, &mp);
    auto budget = bp.heapBudget[heap_];
    auto usage = bp.heapUsage[heap_];
    info.free = budget > usage ? budget - usage : 0;
  }
  return info;
}

void* vulkan_device::host_pointer(buffer& buf) {
  if (&buf.owner() != this || !direct_)
    return nullptr;
  return static_cast<vk_buffer&>(buf).alloc.mapped;
}

// -- transfers ---------------------------------------------------------------

status vulkan_device::write(buffer& dst, std::size_t offset, const void* src,
                            std::size_t bytes) {
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(usable("write"));
  EXO_TRY(check_range(dst, offset, bytes, "write"));
  if (bytes > 0 && src == nullptr)
    return fail(errc::invalid_argument, "write: null host pointer");
  if (bytes == 0)
    return {};
  auto& d = static_cast<vk_buffer&>(dst);
  if (direct_) {
    // Queued work on this buffer goes first (it may read the old data).
    EXO_TRY(wait_value(d.last_use));
    std::memcpy(static_cast<char*>(d.alloc.mapped) + offset, src, bytes);
    flush_range(d.alloc, offset, bytes, coherent_);
    return {};
  }
  EXO_TRY(ensure_staging());
  auto* from = static_cast<const char*>(src);
  for (std::size_t done = 0; done < bytes;) {
    auto n = std::min(opts_.staging_chunk, bytes - done);
    int slot = staging_next_;
    staging_next_ ^= 1;
    auto& s = staging_[slot];
    EXO_TRY(wait_value(staging_use_[slot]));
    std::memcpy(s.mapped, from + done, n);
    flush_range(s, 0, n, staging_coherent_);
    auto b = open_batch();
    if (!b)
      return b.err();
    command(**b);
    VkBufferCopy region{0, offset + done, n};
    vkCmdCopyBuffer((*b)->cmd, s.buf, d.alloc.buf, 1, &region);
    staging_use_[slot] = d.last_use = (*b)->value;
    EXO_TRY(flush());
    done += n;
  }
  return {};
}

status vulkan_device::read(const buffer& src, std::size_t offset, void* dst,
                           std::size_t bytes) {
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(usable("read"));
  EXO_TRY(check_range(src, offset, bytes, "read"));
  if (bytes > 0 && dst == nullptr)
    return fail(errc::invalid_argument, "read: null host pointer");
  auto& s = static_cast<const vk_buffer&>(src);
  // Rule 3: everything submitted before the read completes first.
  EXO_TRY(flush());
  EXO_TRY(wait_value(submitted_));
  if (bytes == 0)
    return {};
  auto* to = static_cast<char*>(dst);
  if (direct_) {
    invalidate_range(s.alloc, offset, bytes, coherent_);
    std::memcpy(to, static_cast<const char*>(s.alloc.mapped) + offset, bytes);
    return {};
  }
  EXO_TRY(ensure_staging());
  // Two slots: the device fills one while the host drains the other.
  int prev_slot = -1;
  std::size_t prev_done = 0, prev_n = 0;
  auto drain = [&]() -> status {
    if (prev_slot < 0)
      return {};
    auto& st = staging_[prev_slot];
    EXO_TRY(wait_value(staging_use_[prev_slot]));
    invalidate_range(st, 0, prev_n, staging_coherent_);
    std::memcpy(to + prev_done, st.mapped, prev_n);
    return {};
  };
  for (std::size_t done = 0; done < bytes;) {
    auto n = std::min(opts_.staging_chunk, bytes - done);
    int slot = staging_next_;
    staging_next_ ^= 1;
    EXO_TRY(wait_value(staging_use_[slot]));
    auto b = open_batch();
    if (!b)
      return b.err();
    command(**b);
    VkBufferCopy region{offset + done, 0, n};
    vkCmdCopyBuffer((*b)->cmd, s.alloc.buf, staging_[slot].buf, 1, &region);
    staging_use_[slot] = s.last_use = (*b)->value;
    EXO_TRY(flush());
    EXO_TRY(drain());
    prev_slot = slot;
    prev_done = done;
    prev_n = n;
    done += n;
  }
  return drain();
}

status vulkan_device::copy(const buffer& src, std::size_t src_offset,
                           buffer& dst, std::size_t dst_offset,
                           std::size_t bytes) {
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(usable("copy"));
  EXO_TRY(check_range(src, src_offset, bytes, "copy source"));
  EXO_TRY(check_range(dst, dst_offset, bytes, "copy destination"));
  if (bytes == 0)
    return {};
  auto& s = static_cast<const vk_buffer&>(src);
  auto& d = static_cast<vk_buffer&>(dst);
  bool overlap = &src == &dst && src_offset < dst_offset + bytes &&
                 dst_offset < src_offset + bytes;
  if (overlap && src_offset == dst_offset)
    return {};
  auto b = open_batch();
  if (!b)
    return b.err();
  auto& bt = **b;
  if (!overlap) {
    command(bt);
    VkBufferCopy region{src_offset, dst_offset, bytes};
    vkCmdCopyBuffer(bt.cmd, s.alloc.buf, d.alloc.buf, 1, &region);
  } else {
    // vkCmdCopyBuffer forbids overlapping regions: go through a scratch
    // buffer, freed once the batch completes.
    auto tmp = create_allocation(bytes, mem_type_, false);
    if (!tmp)
      return tmp.err();
    command(bt);
    VkBufferCopy in{src_offset, 0, bytes};
    vkCmdCopyBuffer(bt.cmd, s.alloc.buf, tmp->buf, 1, &in);
    command(bt);
    VkBufferCopy out{0, dst_offset, bytes};
    vkCmdCopyBuffer(bt.cmd, tmp->buf, d.alloc.buf, 1, &out);
    deferred_.push_back({*tmp, bt.value, 0});
  }
  s.last_use = d.last_use = bt.value;
  return finish(bt);
}

// -- synchronization ---------------------------------------------------------

status vulkan_device::synchronize() {
  std::uint64_t target = 0;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    EXO_TRY(usable("synchronize"));
    EXO_TRY(flush());
    target = submitted_;
    if (target <= completed_)
      return {};
  }
  // Wait without the lock: other threads may go on queueing work.
  VkSemaphoreWaitInfo wi{};
  wi.sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO;
  wi.semaphoreCount = 1;
  wi.pSemaphores = &timeline_;
  wi.pValues = &target;
  auto r = vkWaitSemaphores(dev_, &wi, std::numeric_limits<uint64_t>::max());
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(note(r, "synchronize: vkWaitSemaphores"));
  completed_ = std::max(completed_, target);
  retire();
  return {};
}

result<event> vulkan_device::record() {
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(usable("record"));
  EXO_TRY(flush());
  return event{uid(), submitted_};
}

status vulkan_device::wait(const event& e) {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    EXO_TRY(check_event(e, submitted_));
    EXO_TRY(usable("wait"));
    if (e.sequence <= completed_)
      return {};
  }
  VkSemaphoreWaitInfo wi{};
  wi.sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO;
  wi.semaphoreCount = 1;
  wi.pSemaphores = &timeline_;
  wi.pValues = &e.sequence;
  auto r = vkWaitSemaphores(dev_, &wi, std::numeric_limits<uint64_t>::max());
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(note(r, "wait: vkWaitSemaphores"));
  completed_ = std::max(completed_, e.sequence);
  retire();
  return {};
}

result<bool> vulkan_device::completed(const event& e) {
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(check_event(e, submitted_));
  EXO_TRY(usable("completed"));
  EXO_TRY(poll());
  return e.sequence <= completed_;
}

// -- compute -----------------------------------------------------------------

status vulkan_device::do_elementwise(binary_op op, const_view a,
                                     const_view b, mut_view out,
                                     std::size_t count) {
  return run_elementwise(op == binary_op::add ? 0u : 1u, a, b, out, count,
                         "elementwise");
}

status vulkan_device::do_silu_mul(const_view gate, const_view up,
                                  mut_view out, std::size_t count) {
  return run_elementwise(2u, gate, up, out, count, "silu_mul");
}

status vulkan_device::run_elementwise(std::uint32_t op, const_view a,
                                      const_view b, mut_view out,
                                      std::size_t count, const char* what) {
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(usable(what));
  // Each dispatch binds windows of at most maxStorageBufferRange bytes.
  std::size_t chunk = static_cast<std::size_t>((max_range_ - min_align_) / 4);
  chunk =
      std::min<std::size_t>(chunk, std::numeric_limits<std::int32_t>::max());
  for (std::size_t done = 0; done < count;) {
    auto n = std::min(chunk, count - done);
    auto at = done * 4;
    auto ba = bind(*a.buf, a.offset + at, n * 4, what);
    auto bb = bind(*b.buf, b.offset + at, n * 4, what);
    auto bc = bind(*out.buf, out.offset + at, n * 4, what);
    if (!ba || !bb || !bc)
      return !ba ? ba.err() : !bb ? bb.err() : bc.err();
    auto bt = prepare(op == 2u && exact_fma_ ? k_elementwise_fp64
                                             : k_elementwise,
                      {*ba, *bb, *bc});
    if (!bt)
      return bt.err();
    const std::size_t whole = count - count % 16; // silu's groups of 16
    const std::size_t in_groups = whole > done ? std::min(n, whole - done)
                                               : 0;
    elementwise_push pc{ba->elem_off,
                        bb->elem_off,
                        bc->elem_off,
                        static_cast<std::uint32_t>(n),
                        op,
                        static_cast<std::uint32_t>(in_groups)};
    vkCmdPushConstants((*bt)->cmd, pipe_layout_, VK_SHADER_STAGE_COMPUTE_BIT, 0,
                       sizeof(pc), &pc);
    auto groups = std::min<std::size_t>((n + 255) / 256, max_groups_[0]);
    vkCmdDispatch((*bt)->cmd, static_cast<std::uint32_t>(groups), 1, 1);
    used_by(**bt, {a.buf, b.buf, out.buf});
    EXO_TRY(finish(**bt));
    done += n;
  }
  return {};
}

void vulkan_device::used_by(const batch& bt,
                            std::initializer_list<const buffer*> bufs) {
  for (auto* b : bufs)
    if (b != nullptr)
      static_cast<const vk_buffer*>(b)->last_use = bt.value;
}

status vulkan_device::do_matmul(const_view a, const_view b, mut_view c,
                                const matmul_dims& dims) {
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(usable("matmul"));
  // One row of B^T with subgroups: the pipeline F32 weights take, so a
  // row's bits are the same whichever way it comes.
  if (dims.m == 1 && dims.transpose_b && subgroup_add_)
    return matvec_rows_subgroup(a, b, c, dims);
  auto sz = host::bytes_of(dims);
  auto ba = bind(*a.buf, a.offset, sz.a, "matmul a");
  auto bb = bind(*b.buf, b.offset, sz.b, "matmul b");
  auto bc = bind(*c.buf, c.offset, sz.c, "matmul c");
  if (!ba || !bb || !bc)
    return !ba ? ba.err() : !bb ? bb.err() : bc.err();
  bool vec = dims.m == 1;
  auto bt = prepare(vec ? k_matvec : k_matmul, {*ba, *bb, *bc});
  if (!bt)
    return bt.err();
  auto cmd = (*bt)->cmd;
  matmul_push pc{ba->elem_off,
                 bb->elem_off,
                 bc->elem_off,
                 static_cast<std::uint32_t>(dims.m),
                 static_cast<std::uint32_t>(dims.n),
                 static_cast<std::uint32_t>(dims.k),
                 dims.transpose_b ? 1u : 0u,
                 0,
                 0};
  if (vec) {
    auto want = dims.transpose_b ? dims.n : (dims.n + 255) / 256;
    auto groups = std::min<std::size_t>(want, max_groups_[0]);
    vkCmdPushConstants(cmd, pipe_layout_, VK_SHADER_STAGE_COMPUTE_BIT, 0,
                       sizeof(pc), &pc);
    vkCmdDispatch(cmd, static_cast<std::uint32_t>(groups), 1, 1);
  } else {
    // 64x64 tiles, dispatched in slices within the group-count limits.
    auto tiles_x = (dims.n + 63) / 64;
    auto tiles_y = (dims.m + 63) / 64;
    for (std::size_t y0 = 0; y0 < tiles_y; y0 += max_groups_[1])
      for (std::size_t x0 = 0; x0 < tiles_x; x0 += max_groups_[0]) {
        pc.row_tile0 = static_cast<std::uint32_t>(y0);
        pc.col_tile0 = static_cast<std::uint32_t>(x0);
        vkCmdPushConstants(cmd, pipe_layout_, VK_SHADER_STAGE_COMPUTE_BIT, 0,
                           sizeof(pc), &pc);
        auto gx = std::min<std::size_t>(tiles_x - x0, max_groups_[0]);
        auto gy = std::min<std::size_t>(tiles_y - y0, max_groups_[1]);
        vkCmdDispatch(cmd, static_cast<std::uint32_t>(gx),
                      static_cast<std::uint32_t>(gy), 1);
      }
  }
  auto v = (*bt)->value;
  static_cast<const vk_buffer*>(a.buf)->last_use = v;
  static_cast<const vk_buffer*>(b.buf)->last_use = v;
  static_cast<vk_buffer*>(c.buf)->last_use = v;
  return finish(**bt);
}

// -- the operations of a Llama layer ------------------------------------------

namespace {

/// Whether every value fits the 32-bit push constants of the shaders.
bool fits_u32(std::initializer_list<std::size_t> xs) {
  for (auto x : xs)
    if (x > std::numeric_limits<std::uint32_t>::max())
      return false;
  return true;
}

} // namespace

status vulkan_device::do_matmul_weights(const_view a, const_view w,
                                        weight_type type, mut_view c,
                                        const matmul_dims& dims) {
  auto sz = host::check_matmul_weights(type, dims); // sizes only: checked
  if (!sz)
    return sz.err();
  if (!fits_u32({sz->a / 4, sz->c / 4, dims.k * 4, sz->w}))
    return device::do_matmul_weights(a, w, type, c, dims);
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(usable("matmul_weights"));
  if (type == weight_type::f32 && subgroup_add_)
    return matvec_rows_subgroup(a, w, c, dims);
  // The shader reads the weights as 32-bit words from the window's start:
  // the window starts on a word (and the device's alignment) and ends on a
  // word (buffers are whole words long); w_off is the byte offset in it
  // (even; a multiple of 4 for F32: weight_align).
  auto align = std::max<VkDeviceSize>(min_align_, 4);
  VkDeviceSize wstart = w.offset / align * align;
  VkDeviceSize wend = (w.offset + sz->w + 3) / 4 * 4;
  result<binding> wb = binding{static_cast<const vk_buffer*>(w.buf)->alloc.buf,
                               wstart, wend - wstart, 0};
  if (wend - wstart > max_range_)
    wb = fail(errc::unsupported,
              "matmul_weights w: " + std::to_string(sz->w) +
                  " bytes exceed the device's largest storage binding of " +
                  std::to_string(max_range_) + " bytes");
  auto ba = bind(*a.buf, a.offset, sz->a, "matmul_weights a");
  auto bc = bind(*c.buf, c.offset, sz->c, "matmul_weights c");
  if (!ba || !wb || !bc)
    return !ba ? ba.err() : !wb ? wb.err() : bc.err();
  const bool quant = type != weight_type::f32 && type != weight_type::f16
                     && type != weight_type::q8_0;
  const kernel one = type == weight_type::f32    ? k_matvec_f32w
                     : type == weight_type::f16  ? k_matvec_f16
                     : type == weight_type::q8_0 ? k_matvec_q8_0
                                                 : k_matvec_quant;
  const kernel four = type == weight_type::f32   ? k_matvec_f32w_x4
                      : type == weight_type::f16 ? k_matvec_f16_x4
                                                 : k_matvec_quant_x4;
  // Whole tiles of 4 rows of A through the _x4 pipeline (each weight read
  // once for 4 rows), the rest row by row: the same bits for every row
  // (weight_tiles.glsl), F32 included (matmul.comp's 64 x 64 tiles sum in
  // another order than one row's). Q8_0 goes row by row: on lavapipe its
  // tiles were slower (docs/benchmarks.md, "Products with stored weights
  // on lavapipe").
  const std::size_t tiled = type == weight_type::q8_0
                              ? 0
                              : dims.m / weight_tile_rows * weight_tile_rows;
  for (const bool tiles : {true, false}) {
    const std::size_t m0 = tiles ? 0 : tiled;
    const std::size_t rows = tiles ? tiled : dims.m - tiled;
    if (rows == 0)
      continue;
    auto bt = prepare(tiles ? four : one, {*ba, *wb, *bc});
    if (!bt)
      return bt.err();
    quant_push pc{static_cast<std::uint32_t>(ba->elem_off + m0 * dims.k),
                  static_cast<std::uint32_t>(w.offset - wb->offset),
                  static_cast<std::uint32_t>(bc->elem_off + m0 * dims.n),
                  static_cast<std::uint32_t>(rows),
                  static_cast<std::uint32_t>(dims.n),
                  static_cast<std::uint32_t>(dims.k),
                  ggml_type_id(type),
                  static_cast<std::uint32_t>(weight_block_elements(type)),
                  static_cast<std::uint32_t>(*weight_row_bytes(
                    type, weight_block_elements(type)))};
    // matvec_f16 (and f32w) and matvec_q8_0 read the first six words
    // (weights_push).
    static_assert(sizeof(weights_push) == 6 * sizeof(std::uint32_t));
    vkCmdPushConstants((*bt)->cmd, pipe_layout_, VK_SHADER_STAGE_COMPUTE_BIT,
                       0, quant ? sizeof(quant_push) : sizeof(weights_push),
                       &pc);
    auto groups = std::min<std::size_t>(
      (dims.n + weight_rows_per_group - 1) / weight_rows_per_group,
      max_groups_[0]);
    vkCmdDispatch((*bt)->cmd, static_cast<std::uint32_t>(groups), 1, 1);
    used_by(**bt, {a.buf, w.buf, c.buf});
    EXO_TRY(finish(**bt));
  }
  return {};
}

status vulkan_device::matvec_rows_subgroup(const_view a, const_view b,
                                           mut_view c,
                                           const matmul_dims& dims) {
  auto sz = host::bytes_of({dims.m, dims.n, dims.k, true});
  auto ba = bind(*a.buf, a.offset, sz.a, "matmul a");
  auto bb = bind(*b.buf, b.offset, sz.b, "matmul b");
  auto bc = bind(*c.buf, c.offset, sz.c, "matmul c");
  if (!ba || !bb || !bc)
    return !ba ? ba.err() : !bb ? bb.err() : bc.err();
  const std::size_t tiled = dims.m / weight_tile_rows * weight_tile_rows;
  // One output per subgroup at a time.
  const std::size_t per_group =
    std::max<std::uint32_t>(1, 256 / subgroup_size_);
  for (const bool tiles : {true, false}) {
    const std::size_t m0 = tiles ? 0 : tiled;
    const std::size_t rows = tiles ? tiled : dims.m - tiled;
    if (rows == 0)
      continue;
    auto bt = prepare(tiles ? k_matvec_subgroup_x4 : k_matvec_subgroup,
                      {*ba, *bb, *bc});
    if (!bt)
      return bt.err();
    matmul_push pc{static_cast<std::uint32_t>(ba->elem_off + m0 * dims.k),
                   bb->elem_off,
                   static_cast<std::uint32_t>(bc->elem_off + m0 * dims.n),
                   static_cast<std::uint32_t>(rows),
                   static_cast<std::uint32_t>(dims.n),
                   static_cast<std::uint32_t>(dims.k),
                   1u,
                   0,
                   0};
    vkCmdPushConstants((*bt)->cmd, pipe_layout_, VK_SHADER_STAGE_COMPUTE_BIT,
                       0, sizeof(pc), &pc);
    auto groups = std::min<std::size_t>((dims.n + per_group - 1) / per_group,
                                        max_groups_[0]);
    vkCmdDispatch((*bt)->cmd, static_cast<std::uint32_t>(groups), 1, 1);
    used_by(**bt, {a.buf, b.buf, c.buf});
    EXO_TRY(finish(**bt));
  }
  return {};
}

status vulkan_device::do_rms_norm(const_view x, const_view weight,
                                  mut_view out, std::size_t rows,
                                  std::size_t dim, float eps) {
  auto bytes = host::check_rms_norm(rows, dim); // sizes only: checked
  if (!bytes)
    return bytes.err();
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(usable("rms_norm"));
  if (!fits_u32({*bytes / 4}))
    return fail(errc::unsupported, "rms_norm: more than 2^32 elements");
  auto bx = bind(*x.buf, x.offset, *bytes, "rms_norm x");
  auto bw = bind(*weight.buf, weight.offset, dim * 4, "rms_norm weight");
  auto bo = bind(*out.buf, out.offset, *bytes, "rms_norm out");
  if (!bx || !bw || !bo)
    return !bx ? bx.err() : !bw ? bw.err() : bo.err();
  auto bt = prepare(float64_ ? k_rms_norm_fp64 : k_rms_norm, {*bx, *bw, *bo});
  if (!bt)
    return bt.err();
  rms_norm_push pc{bx->elem_off,
                   bw->elem_off,
                   bo->elem_off,
                   static_cast<std::uint32_t>(rows),
                   static_cast<std::uint32_t>(dim),
                   eps};
  vkCmdPushConstants((*bt)->cmd, pipe_layout_, VK_SHADER_STAGE_COMPUTE_BIT, 0,
                     sizeof(pc), &pc);
  auto groups = std::min<std::size_t>(rows, max_groups_[0]);
  vkCmdDispatch((*bt)->cmd, static_cast<std::uint32_t>(groups), 1, 1);
  used_by(**bt, {x.buf, weight.buf, out.buf});
  return finish(**bt);
}

status vulkan_device::do_rope(mut_view x, const_view positions,
                              const_view freq_factors,
                              const rope_dims& dims) {
  auto sz = host::check_rope(dims); // sizes only: checked
  if (!sz)
    return sz.err();
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(usable("rope"));
  const bool has_ff = freq_factors.buf != nullptr;
  if (!fits_u32({sz->x / 4}))
    return fail(errc::unsupported, "rope: more than 2^32 elements");
  auto bx = bind(*x.buf, x.offset, sz->x, "rope x");
  auto bp =
      bind(*positions.buf, positions.offset, sz->positions, "rope positions");
  // Without factors the positions stand in for the unused binding.
  auto bf = has_ff ? bind(*freq_factors.buf, freq_factors.offset,
                          sz->freq_factors, "rope freq_factors")
                   : bp;
  if (!bx || !bp || !bf)
    return !bx ? bx.err() : !bp ? bp.err() : bf.err();
  auto bt = prepare(k_rope, {*bx, *bp, *bf});
  if (!bt)
    return bt.err();
  rope_push pc{bx->elem_off,
               bp->elem_off,
               bf->elem_off,
               static_cast<std::uint32_t>(dims.rows),
               static_cast<std::uint32_t>(dims.heads),
               static_cast<std::uint32_t>(dims.head_dim),
               static_cast<std::uint32_t>(dims.n_rot),
               has_ff ? 1u : 0u,
               dims.freq_base,
               dims.neox ? 1u : 0u};
  vkCmdPushConstants((*bt)->cmd, pipe_layout_, VK_SHADER_STAGE_COMPUTE_BIT, 0,
                     sizeof(pc), &pc);
  auto pairs = dims.rows * dims.heads * (dims.n_rot / 2);
  auto groups = std::min<std::size_t>((pairs + 255) / 256, max_groups_[0]);
  vkCmdDispatch((*bt)->cmd, static_cast<std::uint32_t>(groups), 1, 1);
  used_by(**bt, {x.buf, positions.buf, freq_factors.buf});
  return finish(**bt);
}

status vulkan_device::do_rope_cached(mut_view x, const_view cache,
                                     const rope_dims& dims) {
  auto sz = host::check_rope(dims); // sizes only: checked
  if (!sz)
    return sz.err();
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(usable("rope_cached"));
  if (!fits_u32({sz->x / 4, sz->cache / 4}))
    return fail(errc::unsupported, "rope_cached: more than 2^32 elements");
  auto bx = bind(*x.buf, x.offset, sz->x, "rope x");
  auto bc = bind(*cache.buf, cache.offset, sz->cache, "rope cache");
  if (!bx || !bc)
    return !bx ? bx.err() : bc.err();
  auto bt = prepare(exact_fma_ ? k_rope_cached_fp64 : k_rope_cached,
                    {*bx, *bc});
  if (!bt)
    return bt.err();
  rope_cached_push pc{bx->elem_off,
                      bc->elem_off,
                      static_cast<std::uint32_t>(dims.rows),
                      static_cast<std::uint32_t>(dims.heads),
                      static_cast<std::uint32_t>(dims.head_dim),
                      static_cast<std::uint32_t>(dims.n_rot),
                      dims.neox ? 1u : 0u};
  vkCmdPushConstants((*bt)->cmd, pipe_layout_, VK_SHADER_STAGE_COMPUTE_BIT, 0,
                     sizeof(pc), &pc);
  auto pairs = dims.rows * dims.heads * (dims.n_rot / 2);
  auto groups = std::min<std::size_t>((pairs + 255) / 256, max_groups_[0]);
  vkCmdDispatch((*bt)->cmd, static_cast<std::uint32_t>(groups), 1, 1);
  used_by(**bt, {x.buf, cache.buf});
  return finish(**bt);
}

status vulkan_device::do_attention(const_view q, const_view k,
                                   const_view v, mut_view out,
                                   const attention_dims& dims) {
  auto sz = host::check_attention(dims); // sizes only: checked
  if (!sz)
    return sz.err();
  // Heads wider than the shader's workgroup covers go through the host; so
  // does a q8_0 cache whose blocks end inside a 32-bit word at the end of
  // its buffer (the shader reads whole words).
  const bool q8 = dims.kv == kv_type::q8_0;
  auto padded = [&](const const_view& x) {
    return (x.offset + sz->kv + 3) / 4 * 4 - x.offset;
  };
  if (dims.head_dim > attention_max_head_dim
      || !fits_u32({sz->q / 4, sz->kv, dims.n_tokens * dims.n_heads})
      || (q8 && (k.offset + padded(k) > k.buf->size()
                 || v.offset + padded(v) > v.buf->size())))
    return device::do_attention(q, k, v, out, dims);
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(usable("attention"));
  auto bq = bind(*q.buf, q.offset, sz->q, "attention q");
  auto bk = bind(*k.buf, k.offset, q8 ? padded(k) : sz->kv, "attention k");
  auto bv = bind(*v.buf, v.offset, q8 ? padded(v) : sz->kv, "attention v");
  auto bo = bind(*out.buf, out.offset, sz->q, "attention out");
  for (auto* r : {&bq, &bk, &bv, &bo})
    if (!*r)
      return r->err();
  const bool f16 = dims.kv == kv_type::f16;
  auto kv_off = [&](const binding& b, std::size_t offset) {
    return kv_offset(dims.kv, b.offset, b.elem_off, offset);
  };
  auto bt = prepare(f16  ? k_attention_f16
                    : q8 ? k_attention_q8_0
                         : k_attention,
                    {*bq, *bk, *bv, *bo});
  if (!bt)
    return bt.err();
  auto pc = attention_push_of(dims, bq->elem_off, kv_off(*bk, k.offset),
                              kv_off(*bv, v.offset), bo->elem_off);
  vkCmdPushConstants((*bt)->cmd, pipe_layout_, VK_SHADER_STAGE_COMPUTE_BIT, 0,
                     sizeof(pc), &pc);
  auto groups =
      std::min<std::size_t>(dims.n_tokens * dims.n_heads, max_groups_[0]);
  vkCmdDispatch((*bt)->cmd, static_cast<std::uint32_t>(groups), 1, 1);
  used_by(**bt, {q.buf, k.buf, v.buf, out.buf});
  return finish(**bt);
}

status vulkan_device::do_attention_paged(const_view q, const_view k,
                                         const_view v, const_view table,
                                         mut_view out,
                                         const attention_dims& dims) {
  return paged_attention(q, k, v, table, out, dims, 0);
}

status vulkan_device::do_attention_paged_rows(const_view q, const_view k,
                                              const_view v,
                                              const_view tables,
                                              mut_view out,
                                              const attention_dims& dims,
                                              std::size_t table_len) {
  return paged_attention(q, k, v, tables, out, dims, table_len);
}

status vulkan_device::paged_attention(const_view q, const_view k,
                                      const_view v, const_view table,
                                      mut_view out,
                                      const attention_dims& dims,
                                      std::size_t row_table_len) {
  // attention_paged_rows (row_table_len != 0): sized as one row at the
  // last position its table covers, its tables a row's each.
  const bool rows = row_table_len != 0;
  auto widest = dims;
  if (rows) {
    widest.n_tokens = 1;
    widest.pos0 = row_table_len * dims.block_positions - 1;
  }
  auto sz = host::check_paged_attention(widest); // sizes only: checked
  if (!sz)
    return sz.err();
  const std::size_t q_bytes = rows ? sz->q * dims.n_tokens : sz->q;
  const std::size_t t_bytes =
    rows ? (1 + row_table_len) * 4 * dims.n_tokens : sz->table;
  // k and v are bound from their offsets to their buffers' ends (every
  // block the table may name), in whole 32-bit words for the halves and
  // Q8_0 blocks the shaders read word by word.
  const std::size_t ek = host::view_extent(k) / 4 * 4,
                    ev = host::view_extent(v) / 4 * 4;
  const std::size_t e = std::min(ek, ev);
  const bool q8 = dims.kv == kv_type::q8_0;
  const bool f16 = dims.kv == kv_type::f16;
  auto host_path = [&] {
    return rows ? device::do_attention_paged_rows(q, k, v, table, out, dims,
                                                  row_table_len)
                : device::do_attention_paged(q, k, v, table, out, dims);
  };
  if (dims.head_dim > attention_max_head_dim || e < sz->block_rows
      || dims.block_positions > (std::size_t{1} << 31)
      || !fits_u32({q_bytes / 4, ek, ev, t_bytes / 4,
                    dims.n_tokens * dims.n_heads, dims.block_stride,
                    widest.pos0 + widest.n_tokens}))
    return host_path();
  std::uint32_t shift = 0;
  while ((std::size_t{1} << shift) < dims.block_positions)
    ++shift;
  const char* what = rows ? "attention_paged_rows" : "attention_paged";
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(usable(what));
  auto bq = bind(*q.buf, q.offset, q_bytes, what);
  auto bk = bind(*k.buf, k.offset, ek, what);
  auto bv = bind(*v.buf, v.offset, ev, what);
  auto bo = bind(*out.buf, out.offset, q_bytes, what);
  auto bt = bind(*table.buf, table.offset, t_bytes, what);
  for (auto* r : {&bq, &bk, &bv, &bo, &bt})
    if (!*r)
      return r->err();
  auto kv_off = [&](const binding& b, std::size_t offset) {
    return kv_offset(dims.kv, b.offset, b.elem_off, offset);
  };
  const kernel kk = rows ? (f16  ? k_attention_f16_paged_rows
                            : q8 ? k_attention_q8_0_paged_rows
                                 : k_attention_paged_rows)
                         : (f16  ? k_attention_f16_paged
                            : q8 ? k_attention_q8_0_paged
                                 : k_attention_paged);
  auto batch = prepare(kk, {*bq, *bk, *bv, *bo, *bt});
  if (!batch)
    return batch.err();
  auto pc = attention_push_of(dims, bq->elem_off, kv_off(*bk, k.offset),
                              kv_off(*bv, v.offset), bo->elem_off);
  pc.tab_off = bt->elem_off;
  pc.block_shift = shift;
  pc.block_stride = static_cast<std::uint32_t>(dims.block_stride);
  pc.max_block = static_cast<std::uint32_t>((e - sz->block_rows) / sz->block);
  pc.row_table_len = static_cast<std::uint32_t>(row_table_len);
  vkCmdPushConstants((*batch)->cmd, pipe_layout_, VK_SHADER_STAGE_COMPUTE_BIT,
                     0, sizeof(pc), &pc);
  auto groups =
      std::min<std::size_t>(dims.n_tokens * dims.n_heads, max_groups_[0]);
  vkCmdDispatch((*batch)->cmd, static_cast<std::uint32_t>(groups), 1, 1);
  used_by(**batch, {q.buf, k.buf, v.buf, out.buf, table.buf});
  return finish(**batch);
}

status vulkan_device::do_store_kv_rows(const_view a, const_view tables,
                                       mut_view kv,
                                       const kv_rows_dims& dims) {
  auto sz = host::check_paged_attention(kv_rows_attention(dims)); // checked
  if (!sz)
    return sz.err();
  // The shader writes whole 32-bit words: every row of an f16 cache must
  // start at an even half, a q8_0 cache's at a pair of blocks on a word
  // (strides, width and the view's offset below); other shapes, and a
  // view shorter than a block in whole words, take the generic path.
  const std::size_t e = host::view_extent({kv.buf, kv.offset, kv.limit}) / 4
                        * 4;
  const std::size_t unit = dims.kv == kv_type::q8_0 ? 64
                           : dims.kv == kv_type::f16 ? 2
                                                     : 1;
  const std::size_t a_bytes = dims.rows * dims.width * 4;
  const std::size_t t_bytes = dims.rows * (1 + dims.table_len) * 4;
  const std::size_t start = kv.offset / min_align_ * min_align_;
  const std::size_t lead = kv.offset - start; // bytes before the view
  const bool aligned = dims.width % unit == 0 && dims.kv_stride % unit == 0
                       && dims.block_stride % unit == 0 && lead % 4 == 0;
  if (!aligned || e < sz->block_rows
      || dims.block_positions > (std::size_t{1} << 31)
      || !fits_u32({a_bytes / 4, t_bytes / 4, e + lead,
                    dims.rows * dims.width, dims.block_stride}))
    return device::do_store_kv_rows(a, tables, kv, dims);
  std::uint32_t shift = 0;
  while ((std::size_t{1} << shift) < dims.block_positions)
    ++shift;
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(usable("store_kv_rows"));
  auto ba = bind(*a.buf, a.offset, a_bytes, "store_kv_rows a");
  auto bt = bind(*tables.buf, tables.offset, t_bytes, "store_kv_rows tables");
  auto bk = bind(*kv.buf, kv.offset, e, "store_kv_rows kv");
  for (auto* r : {&ba, &bt, &bk})
    if (!*r)
      return r->err();
  auto batch = prepare(k_store_kv_rows, {*ba, *bt, *bk});
  if (!batch)
    return batch.err();
  store_kv_rows_push pc{};
  pc.a_off = ba->elem_off;
  pc.tab_off = bt->elem_off;
  pc.kv_off = kv_offset(dims.kv, bk->offset, bk->elem_off, kv.offset);
  pc.rows = static_cast<std::uint32_t>(dims.rows);
  pc.width = static_cast<std::uint32_t>(dims.width);
  pc.kv_stride = static_cast<std::uint32_t>(dims.kv_stride);
  pc.block_shift = shift;
  pc.block_stride = static_cast<std::uint32_t>(dims.block_stride);
  pc.table_len = static_cast<std::uint32_t>(dims.table_len);
  pc.max_block = static_cast<std::uint32_t>((e - sz->block_rows) / sz->block);
  pc.kv_type = static_cast<std::uint32_t>(dims.kv);
  vkCmdPushConstants((*batch)->cmd, pipe_layout_, VK_SHADER_STAGE_COMPUTE_BIT,
                     0, sizeof(pc), &pc);
  const std::size_t units = dims.rows * (dims.width / unit);
  auto groups = std::min<std::size_t>((units + 63) / 64, max_groups_[0]);
  vkCmdDispatch((*batch)->cmd, static_cast<std::uint32_t>(groups), 1, 1);
  used_by(**batch, {a.buf, tables.buf, kv.buf});
  return finish(**batch);
}

status vulkan_device::do_to_f16(const_view a, mut_view out,
                                std::size_t count) {
  // The shader writes whole 32-bit words: other shapes take the generic
  // path.
  if (count % 2 != 0 || out.offset % 4 != 0 || !fits_u32({count}))
    return device::do_to_f16(a, out, count);
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(usable("to_f16"));
  auto ba = bind(*a.buf, a.offset, count * 4, "to_f16 a");
  auto bo = bind(*out.buf, out.offset, count * 2, "to_f16 out");
  for (auto* r : {&ba, &bo})
    if (!*r)
      return r->err();
  auto bt = prepare(k_to_f16, {*ba, *bo});
  if (!bt)
    return bt.err();
  to_f16_push pc{ba->elem_off, bo->elem_off,
                 static_cast<std::uint32_t>(count / 2)};
  vkCmdPushConstants((*bt)->cmd, pipe_layout_, VK_SHADER_STAGE_COMPUTE_BIT, 0,
                     sizeof(pc), &pc);
  auto groups = std::min<std::size_t>((count / 2 + 255) / 256, max_groups_[0]);
  vkCmdDispatch((*bt)->cmd, static_cast<std::uint32_t>(groups), 1, 1);
  used_by(**bt, {a.buf, out.buf});
  return finish(**bt);
}

status vulkan_device::do_to_q8_0(const_view a, mut_view out,
                                 std::size_t count) {
  // The shader writes pairs of blocks as 17 whole 32-bit words: other
  // shapes take the generic path.
  if (count % 64 != 0 || out.offset % 4 != 0 || !fits_u32({count}))
    return device::do_to_q8_0(a, out, count);
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(usable("to_q8_0"));
  const std::size_t pairs = count / 64;
  auto ba = bind(*a.buf, a.offset, count * 4, "to_q8_0 a");
  auto bo = bind(*out.buf, out.offset, pairs * 68, "to_q8_0 out");
  for (auto* r : {&ba, &bo})
    if (!*r)
      return r->err();
  auto bt = prepare(k_to_q8_0, {*ba, *bo});
  if (!bt)
    return bt.err();
  to_q8_0_push pc{ba->elem_off, bo->elem_off,
                  static_cast<std::uint32_t>(pairs)};
  vkCmdPushConstants((*bt)->cmd, pipe_layout_, VK_SHADER_STAGE_COMPUTE_BIT, 0,
                     sizeof(pc), &pc);
  auto groups = std::min<std::size_t>((pairs + 63) / 64, max_groups_[0]);
  vkCmdDispatch((*bt)->cmd, static_cast<std::uint32_t>(groups), 1, 1);
  used_by(**bt, {a.buf, out.buf});
  return finish(**bt);
}

status vulkan_device::do_hadamard(mut_view out, const_view a,
                                  std::size_t count, std::size_t n) {
  if (n > hadamard_max_n || !fits_u32({count}))
    return device::do_hadamard(out, a, count, n);
  std::lock_guard<std::mutex> guard{mtx_};
  EXO_TRY(usable("hadamard"));
  auto ba = bind(*a.buf, a.offset, count * 4, "hadamard a");
  auto bo = bind(*out.buf, out.offset, count * 4, "hadamard out");
  for (auto* r : {&ba, &bo})
    if (!*r)
      return r->err();
  auto bt = prepare(k_hadamard, {*ba, *bo});
  if (!bt)
    return bt.err();
  hadamard_push pc{ba->elem_off, bo->elem_off,
                   static_cast<std::uint32_t>(count / n),
                   static_cast<std::uint32_t>(n),
                   1.0f / std::sqrt(static_cast<float>(n))};
  vkCmdPushConstants((*bt)->cmd, pipe_layout_, VK_SHADER_STAGE_COMPUTE_BIT, 0,
                     sizeof(pc), &pc);
  auto groups = std::min<std::size_t>(count / n, max_groups_[0]);
  vkCmdDispatch((*bt)->cmd, static_cast<std::uint32_t>(groups), 1, 1);
  used_by(**bt, {a.buf, out.buf});
  return finish(**bt);
}

// -- opening -----------------------------------------------------------------

void vulkan_device::settle_fma() {
  if (!float64_)
    return;
  // Rows of one pair: y0 = fma(x0, c, -(x1 s)), y1 = fma(x0, s, x1 c).
  // The first row's exact x0 c is 1 + 2^-11 + 2^-24, which a separate
  // product rounds to 1 + 2^-11 = x1 s: fused 2^-24, unfused 0.
  const float e = 1.0f + 0x1p-12f;
  std::vector<float> x{e, 1.0f}, cs{e, 1.0f + 0x1p-11f};
  std::uint32_t state = 12345;
  for (int r = 1; r < 64; ++r)
    for (int i = 0; i < 2; ++i) {
      state = state * 1664525u + 1013904223u;
      x.push_back(static_cast<float>(state >> 8) * 0x1p-23f - 1.0f);
      state = state * 1664525u + 1013904223u;
      cs.push_back(static_cast<float>(state >> 8) * 0x1p-23f - 1.0f);
    }
  const rope_dims d{x.size() / 2, 1, 2, 2, 10000.0f, false};
  std::vector<float> want = x, got(x.size());
  host::rope_cached(want.data(), cs.data(), d);
  auto bx = allocate(x.size() * 4);
  auto bc = allocate(cs.size() * 4);
  exact_fma_ = false; // the plain pipeline
  const bool fused =
      bx && bc && write(**bx, 0, x.data(), x.size() * 4).ok()
      && write(**bc, 0, cs.data(), cs.size() * 4).ok()
      && rope_cached({bx->get(), 0}, {bc->get(), 0}, d).ok()
      && read(**bx, 0, got.data(), got.size() * 4).ok()
      && std::memcmp(got.data(), want.data(), got.size() * 4) == 0;
  exact_fma_ = !fused;
}

result<std::unique_ptr<device>>
open_device(VkPhysicalDevice physical, const vulkan_options& opts,
            const std::vector<std::string>& taken_ids) {
  auto dev = std::make_unique<vulkan_device>(physical, opts);
  if (auto st = dev->init(taken_ids); !st.ok())
    return st.err();
  dev->settle_fma();
  dev->measure_rates_again();
  return std::unique_ptr<device>{std::move(dev)};
}

} // namespace exo::backend::vk
