# Finds exo's dependencies (all from Debian's packages) and exposes them as
# imported targets.
find_package(Threads REQUIRED)
find_package(OpenSSL REQUIRED)

# CAF, Gecode: imported targets of our own (also installed).
include(${CMAKE_CURRENT_LIST_DIR}/exo_imported_targets.cmake)

find_package(simdjson REQUIRED)
# nlohmann-json: the one JSON writer (core/text/json.hpp), tokenizer.json
# files, the gateway's requests; CLI11: the programs' arguments.
find_package(nlohmann_json 3 REQUIRED)
find_package(CLI11 REQUIRED)

# PCRE2 (8-bit, Unicode properties): the tokenizers' pre-tokenizer regexes.
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)

# CLI11 (header-only): the programs' command lines (core/cli).
find_package(CLI11 CONFIG REQUIRED)

# OpenMP (GCC's libgomp): the engine's row splits (backends/, core/model).
# Found here, at the top, so the installed package's libraries see it.
find_package(OpenMP COMPONENTS CXX)

# Vulkan: the loader, headers and glslc.
set(EXO_HAVE_VULKAN OFF)
if(NOT EXO_WITH_VULKAN STREQUAL "OFF")
  find_package(Vulkan QUIET)
  find_program(GLSLC_EXECUTABLE glslc)
  if(Vulkan_FOUND AND GLSLC_EXECUTABLE)
    set(EXO_HAVE_VULKAN ON)
  elseif(EXO_WITH_VULKAN STREQUAL "ON")
    message(FATAL_ERROR "EXO_WITH_VULKAN=ON but the Vulkan loader or glslc is missing")
  endif()
endif()

# CUDA: the preinstalled toolkit (nvcc, cudart, cuBLAS).
set(EXO_HAVE_CUDA OFF)
if(NOT EXO_WITH_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    find_package(CUDAToolkit QUIET)
    if(CUDAToolkit_FOUND)
      set(EXO_HAVE_CUDA ON)
    endif()
  endif()
  if(EXO_WITH_CUDA STREQUAL "ON" AND NOT EXO_HAVE_CUDA)
    message(FATAL_ERROR "EXO_WITH_CUDA=ON but no CUDA toolkit was found")
  endif()
endif()

# HIP: Debian's hipcc + libamdhip64 (CMake's HIP language does not work with
# Debian's layout, so kernels are compiled by hipcc through custom commands).
set(EXO_HAVE_HIP OFF)
if(NOT EXO_WITH_HIP STREQUAL "OFF")
  find_program(HIPCC_EXECUTABLE hipcc)
  find_library(AMDHIP64_LIBRARY amdhip64)
  find_path(HIP_INCLUDE_DIR hip/hip_runtime_api.h)
  if(HIPCC_EXECUTABLE AND AMDHIP64_LIBRARY AND HIP_INCLUDE_DIR)
    set(EXO_HAVE_HIP ON)
  elseif(EXO_WITH_HIP STREQUAL "ON")
    message(FATAL_ERROR "EXO_WITH_HIP=ON but hipcc or libamdhip64 is missing")
  endif()
endif()
