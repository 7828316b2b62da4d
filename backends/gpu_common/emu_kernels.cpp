// The shared kernels (kernels.cuh) compiled by g++ for the GPU emulator.
#define EXO_GPU_EMULATE 1
#define EXO_GPU_KERNEL_NS emu_kernels
#include "backends/gpu_common/kernels.cuh"
