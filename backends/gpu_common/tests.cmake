# Tests of the GPU backends' shared code. Included by
# test/backends/CMakeLists.txt (after backends/cuda and backends/hip tests).

# Shared host logic (label unit): needs no GPU.
include(${CMAKE_SOURCE_DIR}/backends/gpu_common/gpu_common.cmake)
exo_add_test(NAME gpu_common_tests
  SOURCES ${CMAKE_SOURCE_DIR}/test/backends/gpu/gpu_common_tests.cpp
          ${CMAKE_SOURCE_DIR}/test/backends/gpu/gpu_model_kernel_tests.cpp
  LIBS exo_gpu_common
  LABELS unit)

# Conformance on real GPUs (label backend): every check WARNs for a
# backend that finds no device, and runs on the GPU emulator's devices.
exo_add_test(NAME gpu_conformance
  SOURCES ${CMAKE_SOURCE_DIR}/test/backends/gpu/gpu_conformance_tests.cpp
  LIBS exo_gpu_common exo_backend_core exo_gpu_emulator
  LABELS backend)
foreach(b cuda hip)
  string(TOUPPER ${b} B)
  if(TARGET exo_backend_${b})
    target_link_libraries(gpu_conformance PRIVATE exo_backend_${b})
    target_compile_definitions(gpu_conformance PRIVATE EXO_TEST_${B}=1)
  endif()
endforeach()

# The GPU emulator, and the shared kernels run through it (label unit):
# needs no GPU.
exo_add_test(NAME gpu_emulator_tests
  SOURCES ${CMAKE_SOURCE_DIR}/test/backends/gpu/gpu_emulator_tests.cpp
  LIBS exo_gpu_emulator
  LABELS unit)
