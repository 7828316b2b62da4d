# Included by test/backends/CMakeLists.txt: the Vulkan backend's tests, run
# on whatever Vulkan device the machine has (Mesa's lavapipe on CI).
if(TARGET exo_backend_vulkan)
  exo_add_test(NAME vulkan_tests
    SOURCES ${CMAKE_SOURCE_DIR}/test/backends/vulkan_tests.cpp
    LIBS exo_backend_vulkan exo_backend_cpu
    LABELS backend
    TIMEOUT 300)
endif()
