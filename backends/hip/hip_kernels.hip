// The shared kernels (backends/gpu_common/kernels.cuh) compiled by hipcc.
#define EXO_GPU_HIP 1
#define EXO_GPU_KERNEL_NS hip_kernels
#include "backends/gpu_common/kernels.cuh"
