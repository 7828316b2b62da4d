// cuBLAS is opened at run time (backends/cuda/cublas_library.hpp): the
// toolkit's library loads and every call exo makes resolves, on any machine
// with the toolkit (no GPU needed); a missing library is an error naming
// each attempt; and the processes that do not compute on a GPU no longer
// load it at start.

#include "backends/cuda/cublas_library.hpp"

#include <catch2/catch.hpp>

#include <fstream>
#include <string>

using namespace exo::backend;

namespace {

bool maps_cublas() {
  std::ifstream maps{"/proc/self/maps"};
  std::string line;
  while (std::getline(maps, line))
    if (line.find("libcublas") != std::string::npos)
      return true;
  return false;
}

} // namespace

TEST_CASE("cuBLAS is not loaded until a CUDA device needs it") {
  // This test binary links the CUDA backend (exo_backends).
  CHECK_FALSE(maps_cublas());
}

TEST_CASE("cuBLAS loads from the toolkit and every call resolves") {
  auto api = cuda::load_cublas();
  INFO((api ? "" : api.err().to_string()));
  REQUIRE(api.ok());
  CHECK((*api)->create != nullptr);
  CHECK((*api)->set_stream != nullptr);
  CHECK((*api)->destroy != nullptr);
  CHECK((*api)->sgemm != nullptr);
  REQUIRE((*api)->status_name != nullptr);
  CHECK(std::string{(*api)->status_name(CUBLAS_STATUS_NOT_INITIALIZED)}
        == "CUBLAS_STATUS_NOT_INITIALIZED");
  CHECK(maps_cublas());
  // The process-wide copy is loaded once.
  auto a = cuda::process_cublas();
  auto b = cuda::process_cublas();
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->get() == b->get());
}

TEST_CASE("a missing cuBLAS is an error that names every attempt") {
  auto r = cuda::load_cublas({"libcublas-nonexistent.so.99", "/nowhere/x.so"});
  REQUIRE_FALSE(r.ok());
  CHECK(r.err().code == errc::unsupported);
  CHECK_THAT(r.err().message, Catch::Contains("cuBLAS not available"));
  CHECK_THAT(r.err().message, Catch::Contains("libcublas-nonexistent.so.99"));
  CHECK_THAT(r.err().message, Catch::Contains("/nowhere/x.so"));
  CHECK(cuda::cublas_library_names().front()
        == "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR));
}
