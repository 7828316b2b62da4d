# Tests of the CUDA backend that run on any machine (label unit): the
# absent-driver path here, device discovery on a GPU machine. Included by
# test/backends/CMakeLists.txt; the GPU conformance suite is declared in
# backends/gpu_common/tests.cmake.
if(TARGET exo_backend_cuda)
  exo_add_test(NAME cuda_backend_tests
    SOURCES ${CMAKE_SOURCE_DIR}/test/backends/gpu/gpu_backend_tests.cpp
    LIBS exo_backends
    LABELS unit)
  target_compile_definitions(cuda_backend_tests PRIVATE EXO_TEST_CUDA=1)
endif()
