# Finds exo's dependencies (all from Debian's packages) and exposes them as
# imported targets.
find_package(Threads REQUIRED)
find_package(OpenSSL REQUIRED)

# CAF 0.17 ships no CMake package and no pkg-config file.
find_path(CAF_INCLUDE_DIR caf/all.hpp REQUIRED)
find_library(CAF_CORE_LIBRARY caf_core REQUIRED)
find_library(CAF_IO_LIBRARY caf_io REQUIRED)
find_library(CAF_OPENSSL_LIBRARY caf_openssl REQUIRED)
add_library(CAF::core UNKNOWN IMPORTED)
set_target_properties(CAF::core PROPERTIES
  IMPORTED_LOCATION ${CAF_CORE_LIBRARY}
  INTERFACE_INCLUDE_DIRECTORIES ${CAF_INCLUDE_DIR}
  INTERFACE_LINK_LIBRARIES Threads::Threads)
add_library(CAF::io UNKNOWN IMPORTED)
set_target_properties(CAF::io PROPERTIES
  IMPORTED_LOCATION ${CAF_IO_LIBRARY}
  INTERFACE_LINK_LIBRARIES CAF::core)
add_library(CAF::openssl UNKNOWN IMPORTED)
set_target_properties(CAF::openssl PROPERTIES
  IMPORTED_LOCATION ${CAF_OPENSSL_LIBRARY}
  INTERFACE_LINK_LIBRARIES "CAF::io;OpenSSL::SSL;OpenSSL::Crypto")

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

# Gecode: no CMake package in Debian; libraries named gecodeXXX.
find_path(GECODE_INCLUDE_DIR gecode/int.hh REQUIRED)
set(_gecode_libs)
foreach(part driver flatzinc minimodel search int set float kernel support)
  find_library(GECODE_${part}_LIBRARY gecode${part} REQUIRED)
  list(APPEND _gecode_libs ${GECODE_${part}_LIBRARY})
endforeach()
add_library(Gecode::gecode INTERFACE IMPORTED)
set_target_properties(Gecode::gecode PROPERTIES
  INTERFACE_INCLUDE_DIRECTORIES ${GECODE_INCLUDE_DIR}
  INTERFACE_LINK_LIBRARIES "${_gecode_libs};Threads::Threads")

# OpenBLAS (CBLAS interface).
find_path(OPENBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas openblas-pthread
          PATHS /usr/include/x86_64-linux-gnu /usr/include REQUIRED)
find_library(OPENBLAS_LIBRARY openblas REQUIRED)
add_library(OpenBLAS::openblas UNKNOWN IMPORTED)
set_target_properties(OpenBLAS::openblas PROPERTIES
  IMPORTED_LOCATION ${OPENBLAS_LIBRARY}
  INTERFACE_INCLUDE_DIRECTORIES ${OPENBLAS_INCLUDE_DIR})

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
