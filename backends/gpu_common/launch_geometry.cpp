#include "backends/gpu_common/launch_geometry.hpp"

#include "backends/gpu_common/kernel_quant.hpp"

#include <algorithm>

namespace exo::backend::gpu {

namespace {

std::uint32_t capped_blocks(std::size_t work, std::size_t per_block) {
  auto blocks = (work + per_block - 1) / per_block;
  return static_cast<std::uint32_t>(
    std::min<std::size_t>(blocks, max_grid_extent));
}

} // namespace

launch_1d elementwise_launch(std::size_t count, std::uint32_t block) {
  if (count == 0 || block == 0)
    return {};
  return {capped_blocks(count, block), block};
}

launch_1d row_launch(std::size_t rows, std::size_t cols) {
  if (rows == 0 || cols == 0)
    return {};
  std::uint32_t threads = 32;
  while (threads < cols && threads < 1024)
    threads *= 2;
  return {capped_blocks(rows, 1), threads};
}

launch_2d matmul_launch(const matmul_dims& d) {
  launch_2d g;
  if (d.m == 0 || d.n == 0 || d.k == 0)
    return g;
  constexpr std::size_t t = math::matmul_tile;
  g.tiles_x = (d.n + t - 1) / t;
  g.tiles_y = (d.m + t - 1) / t;
  g.tiles_k = (d.k + t - 1) / t;
  g.grid_x = capped_blocks(d.n, t);
  g.grid_y = capped_blocks(d.m, t);
  g.block_x = g.block_y = static_cast<std::uint32_t>(t);
  return g;
}

launch_1d attention_launch(const attention_dims& d) {
  if (d.n_tokens == 0 || d.n_heads == 0 || d.head_dim == 0)
    return {};
  return {capped_blocks(d.n_tokens * d.n_heads, 1), math::attention_threads};
}

launch_1d weights_launch(weight_type type, const matmul_dims& d) {
  if (d.m == 0 || d.n == 0 || d.k == 0)
    return {};
  (void)type;
  std::uint32_t threads = 32;
  while (threads < d.k && threads < weights_max_threads)
    threads *= 2;
  return {capped_blocks(d.n, 1), threads};
}

launch_1d warp_rows_launch(const matmul_dims& d) {
  if (d.m == 0 || d.n == 0 || d.k == 0)
    return {};
  return warps_launch((d.n + vecdot_rows_per_warp - 1) / vecdot_rows_per_warp);
}

launch_1d warps_launch(std::size_t items) {
  if (items == 0)
    return {};
  return {capped_blocks(items, warp_rows_per_block), warp_rows_per_block * 32};
}

launch_1d lanes_launch(const matmul_dims& d) {
  if (d.m == 0 || d.n == 0 || d.k == 0)
    return {};
  return {capped_blocks(d.n, lanes_rows_per_block),
          lanes_rows_per_block * math::dot_lanes};
}

std::size_t act_scratch_bytes(weight_type type, const matmul_dims& d) {
  const auto f = math::act_format_of(ggml_type_id(type));
  if (f == math::act_format::none) // F16 and BF16: A rounded, as floats
    return type == weight_type::f32 ? 0 : d.m * d.k * sizeof(float);
  return d.m * (d.k / math::act_block_elements(f)) * math::act_block_bytes(f);
}

act_form scratch_act_form(weight_type type, const matmul_dims& d) {
  if (d.m == 0 || d.n == 0 || d.k == 0)
    return act_form::none;
  switch (math::act_format_of(ggml_type_id(type))) {
    case math::act_format::q8_0:
      return act_form::q8_0;
    case math::act_format::q8_1:
      return act_form::q8_1;
    case math::act_format::q8_k:
      return act_form::q8_k;
    case math::act_format::none:
      break;
  }
  if (type == weight_type::f32 || d.m == 1)
    return act_form::none;
  return type == weight_type::f16 ? act_form::f16_rounded
                                  : act_form::bf16_rounded;
}

column_major_gemm row_major_as_column_major(const matmul_dims& d) {
  column_major_gemm g;
  g.transpose_first = d.transpose_b;
  g.rows = static_cast<int>(d.n);
  g.cols = static_cast<int>(d.m);
  g.inner = static_cast<int>(d.k);
  // B is [k x n] row-major (column-major n x k^T, ld n) or, transposed,
  // [n x k] row-major (column-major k x n, ld k, used as op = T).
  g.ld_first = static_cast<int>(d.transpose_b ? d.k : d.n);
  g.ld_second = static_cast<int>(d.k);
  g.ld_result = static_cast<int>(d.n);
  return g;
}

} // namespace exo::backend::gpu
