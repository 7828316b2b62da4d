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
  # The run-time loading of cuBLAS (no GPU needed). Its own binary, so that
  # "not loaded at start" sees a fresh process.
  exo_add_test(NAME cublas_library_tests
    SOURCES ${CMAKE_SOURCE_DIR}/test/backends/gpu/cublas_library_tests.cpp
    LIBS exo_backends
    LABELS unit)
  target_include_directories(cublas_library_tests PRIVATE
    ${CUDAToolkit_INCLUDE_DIRS})
endif()
