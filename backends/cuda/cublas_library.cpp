#include "backends/cuda/cublas_library.hpp"

#include "backends/gpu_common/shared_library.hpp"

#include <mutex>
#include <type_traits>

#ifndef EXO_CUDA_LIBRARY_DIR
#define EXO_CUDA_LIBRARY_DIR ""
#endif

namespace exo::backend::cuda {

const std::vector<std::string>& cublas_library_names() {
  static const std::vector<std::string> names = [] {
    const std::string soname =
      "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
    std::vector<std::string> out{soname};
    const std::string dir = EXO_CUDA_LIBRARY_DIR;
    if (!dir.empty())
      out.push_back(dir + "/" + soname);
    out.push_back("libcublas.so");
    return out;
  }();
  return names;
}

namespace {

/// The API plus the library it points into (which must outlive it).
struct loaded_cublas {
  std::unique_ptr<gpu::shared_library> lib;
  cublas_api api;
};

} // namespace

result<std::shared_ptr<const cublas_api>>
load_cublas(const std::vector<std::string>& names) {
  auto lib = gpu::open_first("cuBLAS", names);
  if (!lib)
    return lib.err();
  auto out = std::make_shared<loaded_cublas>();
  out->lib = std::move(*lib);
  auto& a = out->api;
  const char* missing = nullptr;
  auto resolve = [&](auto& fn, const char* name) {
    fn = out->lib->symbol<std::remove_reference_t<decltype(fn)>>(name);
    if (fn == nullptr && missing == nullptr)
      missing = name;
  };
  resolve(a.create, "cublasCreate_v2");
  resolve(a.set_stream, "cublasSetStream_v2");
  resolve(a.destroy, "cublasDestroy_v2");
  resolve(a.sgemm, "cublasSgemm_v2");
  resolve(a.status_name, "cublasGetStatusName");
  resolve(a.status_string, "cublasGetStatusString");
  if (missing != nullptr)
    return fail(errc::unsupported,
                std::string{"cuBLAS: the library has no "} + missing);
  // The API's lifetime is the library's: alias the shared pointer.
  return std::shared_ptr<const cublas_api>(out, &out->api);
}

result<std::shared_ptr<const cublas_api>> process_cublas() {
  static std::mutex mtx;
  static std::shared_ptr<const cublas_api> loaded;
  std::lock_guard<std::mutex> guard{mtx};
  if (loaded)
    return loaded;
  auto r = load_cublas();
  if (!r)
    return r.err();
  loaded = *r;
  return loaded;
}

} // namespace exo::backend::cuda
