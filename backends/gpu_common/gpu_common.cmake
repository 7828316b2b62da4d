# exo_gpu_common: host logic shared by the CUDA and HIP backends (error
# tables, property parsing, launch geometry, dlopen telemetry, the kernels'
# host references). Plain C++; built whenever a GPU backend or its tests
# need it, whichever includes this file first.
include_guard(GLOBAL)

set(EXO_GPU_COMMON_DIR ${CMAKE_CURRENT_LIST_DIR})
add_library(exo_gpu_common STATIC
  ${EXO_GPU_COMMON_DIR}/gpu_errors.cpp
  ${EXO_GPU_COMMON_DIR}/gpu_properties.cpp
  ${EXO_GPU_COMMON_DIR}/launch_geometry.cpp
  ${EXO_GPU_COMMON_DIR}/shared_library.cpp
  ${EXO_GPU_COMMON_DIR}/kernel_reference.cpp
  ${EXO_GPU_COMMON_DIR}/telemetry_loader.cpp)
target_link_libraries(exo_gpu_common
  PUBLIC exo_backend_core ${CMAKE_DL_LIBS}
  PRIVATE exo_warnings)

# The GPU emulator (gpu_emulator.hpp): the shared kernels and the device
# logic of gpu_backend_impl.hpp on the host, for tests on machines without
# a GPU. Never linked into the product.
add_library(exo_gpu_emulator STATIC
  ${EXO_GPU_COMMON_DIR}/gpu_emulator.cpp
  ${EXO_GPU_COMMON_DIR}/emu_kernels.cpp
  ${EXO_GPU_COMMON_DIR}/emu_backend.cpp)
target_link_libraries(exo_gpu_emulator
  PUBLIC exo_gpu_common exo_backend_core Threads::Threads
  PRIVATE exo_warnings)
