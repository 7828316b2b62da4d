// The shared kernels (backends/gpu_common/kernels.cuh) compiled by nvcc.
#define EXO_GPU_KERNEL_NS cuda_kernels
#include "backends/gpu_common/kernels.cuh"
