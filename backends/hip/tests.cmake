# Tests of the HIP backend that run on any machine (label unit): the
# no-device path here, device discovery on a GPU machine. Included by
# test/backends/CMakeLists.txt; the GPU conformance suite is declared in
# backends/gpu_common/tests.cmake.
if(TARGET exo_backend_hip)
  exo_add_test(NAME hip_backend_tests
    SOURCES ${CMAKE_SOURCE_DIR}/test/backends/gpu/gpu_backend_tests.cpp
    LIBS exo_backends
    LABELS unit)
  target_compile_definitions(hip_backend_tests PRIVATE EXO_TEST_HIP=1)
endif()
