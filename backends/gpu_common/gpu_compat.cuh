#pragma once

/// One kernel source for three compilers: the kernels are written against
/// the CUDA runtime's names; compiled by hipcc (EXO_GPU_HIP), these macros
/// map them to HIP's, as ggml's vendors/hip.h does; compiled by g++ for the
/// GPU emulator (EXO_GPU_EMULATE, gpu_emulator.hpp), to host functions.
/// Kernel syntax (__global__, __shared__, threadIdx ...) is the same in
/// CUDA and HIP; a launch is written EXO_LAUNCH(kernel, grid, block,
/// stream)(arguments...), CUDA's kernel<<<grid, block, 0, stream>>>(...),
/// and a butterfly shuffle within 32 lanes EXO_SHFL_XOR(v, mask) (CUDA's
/// __shfl_xor_sync over the full warp, HIP's __shfl_xor: masks below 32
/// keep a 64-wide wavefront's halves apart).

#if defined(EXO_GPU_EMULATE)
#  include "backends/gpu_common/gpu_emulator.hpp"
#  include <cmath>
#  define __global__
#  define __device__
#  define __shared__ static
#  define threadIdx (::exo::backend::gpu::emu::thread_idx())
#  define blockIdx (::exo::backend::gpu::emu::block_idx())
#  define blockDim (::exo::backend::gpu::emu::block_dim())
#  define gridDim (::exo::backend::gpu::emu::grid_dim())
#  define __syncthreads() ::exo::backend::gpu::emu::syncthreads()
#  define EXO_SHFL_XOR(v, mask) ::exo::backend::gpu::emu::shfl_xor((v), (mask))
#  define cudaStream_t ::exo::backend::gpu::emu::stream_t
#  define cudaGetLastError ::exo::backend::gpu::emu::get_last_error
using dim3 = ::exo::backend::gpu::emu::dim3;
#  define EXO_LAUNCH(kernel, grid, block, stream)                            \
    (::exo::backend::gpu::emu::launch_config{#kernel, as_stream(stream),   \
                                              (grid), (block)}             \
     * [](auto... exo_args) { kernel(exo_args...); })
#  define EXO_UNROLL
#else
#  if defined(EXO_GPU_HIP)
#    include <hip/hip_runtime.h>
#    define cudaError_t hipError_t
#    define cudaSuccess hipSuccess
#    define cudaStream_t hipStream_t
#    define cudaGetLastError hipGetLastError
#    define cudaPeekAtLastError hipPeekAtLastError
#  else
#    include <cuda_runtime.h>
#  endif
#  define EXO_LAUNCH(kernel, grid, block, stream)                            \
    kernel<<<(grid), (block), 0, as_stream(stream)>>>
#  define EXO_UNROLL _Pragma("unroll")
#  if defined(EXO_GPU_HIP)
#    define EXO_SHFL_XOR(v, mask) __shfl_xor((v), (mask))
#  else
#    define EXO_SHFL_XOR(v, mask) __shfl_xor_sync(0xffffffffu, (v), (mask))
#  endif
#endif
