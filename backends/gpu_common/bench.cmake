# Included by bench/backends/CMakeLists.txt: transfer bandwidth and matmul
# throughput of the CUDA and HIP backends (prints the reason and exits 0
# without a device).
if(TARGET exo_backend_cuda OR TARGET exo_backend_hip)
  add_executable(gpu_bench ${CMAKE_SOURCE_DIR}/bench/backends/gpu_bench.cpp)
  target_link_libraries(gpu_bench PRIVATE exo_backend_core exo_warnings)
  foreach(b cuda hip)
    string(TOUPPER ${b} B)
    if(TARGET exo_backend_${b})
      target_link_libraries(gpu_bench PRIVATE exo_backend_${b})
      target_compile_definitions(gpu_bench PRIVATE EXO_BENCH_${B}=1)
    endif()
  endforeach()
  if(TARGET bench_all)
    add_custom_target(bench_gpu COMMAND $<TARGET_FILE:gpu_bench>
                      DEPENDS gpu_bench)
    add_dependencies(bench_all bench_gpu)
  endif()
endif()
