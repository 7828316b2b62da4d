# Included by bench/backends/CMakeLists.txt: copy bandwidth, latencies and
# matmul throughput of the Vulkan backend.
if(TARGET exo_backend_vulkan)
  add_executable(vulkan_bench
    ${CMAKE_SOURCE_DIR}/bench/backends/vulkan_bench.cpp)
  target_link_libraries(vulkan_bench PRIVATE exo_backend_vulkan exo_warnings)
  if(TARGET bench_all)
    add_custom_target(bench_vulkan
      COMMAND ${CMAKE_COMMAND} -E env XDG_RUNTIME_DIR=/tmp
              $<TARGET_FILE:vulkan_bench>
      DEPENDS vulkan_bench)
    add_dependencies(bench_all bench_vulkan)
  endif()
endif()
