# Unit tests of the GPU backends' shared host logic; they need no GPU.
# Included by test/backends/CMakeLists.txt.
include(${CMAKE_SOURCE_DIR}/backends/gpu_common/gpu_common.cmake)
exo_add_test(NAME gpu_common_tests
  SOURCES ${CMAKE_SOURCE_DIR}/test/backends/gpu/gpu_common_tests.cpp
  LIBS exo_gpu_common
  LABELS unit)
