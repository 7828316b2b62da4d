// The CUDA or HIP backend (EXO_TEST_CUDA / EXO_TEST_HIP) on whatever machine
// runs the tests: without a driver or device, initialize() must return a
// clear no_device value, print nothing, and leave the backend usable; with a
// device, it must find it. The factory must report the reason and go on.

#include "backends/factory/factory.hpp"

#if defined(EXO_TEST_CUDA)
#  include "backends/cuda/cuda_backend.hpp"
#elif defined(EXO_TEST_HIP)
#  include "backends/hip/hip_backend.hpp"
#else
#  error "define EXO_TEST_CUDA or EXO_TEST_HIP"
#endif

#include <catch2/catch.hpp>

#include <cstdio>
#include <string>
#include <unistd.h>

using namespace exo::backend;

namespace {

#if defined(EXO_TEST_CUDA)
constexpr backend_kind tested = backend_kind::cuda;
constexpr const char* kind_name = "cuda";
constexpr const char* absent_heads[] = {"CUDA driver not found (",
                                        "no CUDA device ("};
constexpr const char* count_call = "cudaGetDeviceCount";
std::unique_ptr<backend> make() {
  return make_cuda_backend();
}
#else
constexpr backend_kind tested = backend_kind::hip;
constexpr const char* kind_name = "hip";
constexpr const char* absent_heads[] = {"no ROCm device (",
                                        "ROCm driver not found ("};
constexpr const char* count_call = "hipGetDeviceCount";
std::unique_ptr<backend> make() {
  return make_hip_backend();
}
#endif

bool starts_with_absent_head(const std::string& msg) {
  for (auto* head : absent_heads)
    if (msg.rfind(head, 0) == 0)
      return true;
  return false;
}

/// Runs f with stdout and stderr redirected to a temporary file; returns
/// what was written.
template <class F>
std::string captured_output(F&& f) {
  std::fflush(stdout);
  std::fflush(stderr);
  char path[] = "/tmp/exo_gpu_test_XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  int saved_out = dup(1);
  int saved_err = dup(2);
  dup2(fd, 1);
  dup2(fd, 2);
  f();
  std::fflush(stdout);
  std::fflush(stderr);
  dup2(saved_out, 1);
  dup2(saved_err, 2);
  close(saved_out);
  close(saved_err);
  std::string text;
  lseek(fd, 0, SEEK_SET);
  char buf[256];
  for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;)
    text.append(buf, static_cast<std::size_t>(n));
  close(fd);
  unlink(path);
  return text;
}

} // namespace

TEST_CASE("initialize finds devices or returns a no_device value with the "
          "reason") {
  auto be = make();
  REQUIRE(be->kind() == tested);
  status st;
  auto printed = captured_output([&] { st = be->initialize(); });
  if (st.ok()) {
    WARN(kind_name << ": " << be->device_count() << " device(s) present");
    CHECK(be->device_count() > 0);
    CHECK(be->device_at(0) != nullptr);
  } else {
    INFO(st.err().message);
    CHECK(st.err().code == errc::no_device);
    CHECK(starts_with_absent_head(st.err().message));
    CHECK(st.err().message.find(count_call) != std::string::npos);
    CHECK(be->device_count() == 0);
    CHECK(be->device_at(0) == nullptr);
    CHECK(printed.empty());
  }
}

TEST_CASE("a backend without devices can be initialized again and shut "
          "down") {
  auto be = make();
  auto first = be->initialize();
  auto second = be->initialize();
  CHECK(first.ok() == second.ok());
  if (!first.ok())
    CHECK(first.err().message == second.err().message);
  be->shutdown();
  CHECK(be->device_count() == 0);
  CHECK(be->device_at(0) == nullptr);
}

TEST_CASE("the factory reports the backend's reason and falls back") {
  factory_options opts;
  opts.use_environment = false;
  opts.include = {kind_name, "cpu"};
  auto reg = registry::create(opts);
  REQUIRE(reg.ok());
  bool seen = false;
  for (auto& rep : reg->reports()) {
    if (rep.kind != tested)
      continue;
    seen = true;
    CHECK(rep.built);
    CHECK(rep.tried);
    if (!rep.active) {
      INFO(rep.reason);
      CHECK(starts_with_absent_head(rep.reason));
      CHECK_FALSE(reg->devices().empty()); // the cpu took over
    }
  }
  CHECK(seen);
}
