#pragma once

/// One kernel source for two compilers: the kernels are written against the
/// CUDA runtime's names; compiled by hipcc (EXO_GPU_HIP), these macros map
/// them to HIP's, as ggml's vendors/hip.h does. Kernel syntax (__global__,
/// <<<>>>, __shared__, threadIdx ...) is the same in both.

#if defined(EXO_GPU_HIP)
#  include <hip/hip_runtime.h>
#  define cudaError_t hipError_t
#  define cudaSuccess hipSuccess
#  define cudaStream_t hipStream_t
#  define cudaGetLastError hipGetLastError
#  define cudaPeekAtLastError hipPeekAtLastError
#else
#  include <cuda_runtime.h>
#endif
