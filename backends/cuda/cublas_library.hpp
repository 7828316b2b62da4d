#pragma once

/// cuBLAS, loaded with dlopen when a CUDA device first needs it instead of
/// linked: libcublasLt's static initializers copy hundreds of MB at every
/// process start (0.5 s of each exo-node, exo-console or test start here,
/// with or without a GPU). The CUDA runtime stays linked. Only the calls
/// exo makes are resolved; their types come from cublas_v2.h.

#include "backends/result.hpp"

#include <cublas_v2.h>

#include <memory>
#include <string>
#include <vector>

namespace exo::backend::cuda {

/// The cuBLAS calls of the CUDA backend.
struct cublas_api {
  decltype(&::cublasCreate_v2) create = nullptr;
  decltype(&::cublasSetStream_v2) set_stream = nullptr;
  decltype(&::cublasDestroy_v2) destroy = nullptr;
  decltype(&::cublasSgemm_v2) sgemm = nullptr;
  decltype(&::cublasGetStatusName) status_name = nullptr;
  decltype(&::cublasGetStatusString) status_string = nullptr;
};

/// The names tried, in order: the soname of the toolkit exo was built
/// against, the same in the toolkit's library directory, then the
/// unversioned name.
const std::vector<std::string>& cublas_library_names();

/// Loads cuBLAS from the first of `names` that dlopen finds and resolves
/// every call; an error (errc::unsupported) names the library, each name
/// tried and why, or the missing symbol.
result<std::shared_ptr<const cublas_api>>
load_cublas(const std::vector<std::string>& names = cublas_library_names());

/// load_cublas() once per process (thread-safe); the library stays loaded.
result<std::shared_ptr<const cublas_api>> process_cublas();

} // namespace exo::backend::cuda
