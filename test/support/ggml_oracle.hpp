#pragma once

/// llama.cpp's own ggml as a test oracle, loaded at run time from the
/// prebuilt CPU binaries of the test-only npm package node-llama-cpp
/// (@node-llama-cpp/linux-x64/bins/<dir>/libggml-base.so and one
/// libggml-cpu-<variant>.so per CPU family). The variant is chosen as ggml
/// chooses it: every variant's ggml_backend_score() is asked and the
/// highest wins. Only the few C entry points the tests need are declared,
/// from ggml.h / ggml-cpu.h of the release node-llama-cpp bundles; the
/// struct layouts are checked against the known block sizes on load.
///
/// Header-only so that tests and benchmarks share it without a library.

#include <dirent.h>
#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace exo::test::ggml {

extern "C" {
using to_float_t = void (*)(const void* x, float* y, std::int64_t k);
using from_float_t = void (*)(const float* x, void* y, std::int64_t k);
using vec_dot_t = void (*)(int n, float* s, std::size_t bs, const void* x,
                           std::size_t bx, const void* y, std::size_t by,
                           int nrc);

/// ggml.h's struct ggml_type_traits.
struct type_traits {
  const char* type_name;
  std::int64_t blck_size;
  std::int64_t blck_size_interleave;
  std::size_t type_size;
  bool is_quantized;
  to_float_t to_float;
  from_float_t from_float_ref;
};

/// ggml-cpu.h's struct ggml_type_traits_cpu.
struct type_traits_cpu {
  from_float_t from_float;
  vec_dot_t vec_dot;
  int vec_dot_type; // enum ggml_type
  std::int64_t nrows;
};
}

/// The loaded libraries and their entry points.
struct oracle {
  std::string error;   ///< why loading failed ("" when it worked)
  std::string dir;     ///< the bins folder used
  std::string variant; ///< the libggml-cpu-*.so chosen
  void* base = nullptr;
  void* cpu = nullptr;
  const type_traits* (*get_type_traits)(int) = nullptr;
  const type_traits_cpu* (*get_type_traits_cpu)(int) = nullptr;
  std::size_t (*quantize_chunk)(int type, const float* src, void* dst,
                                std::int64_t start, std::int64_t nrows,
                                std::int64_t n_per_row,
                                const float* imatrix) = nullptr;

  bool ok() const { return error.empty(); }
};

inline std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..")
        names.push_back(n);
    }
    closedir(d);
  }
  return names;
}

/// Loads ggml from `tools` (the $EXO_TEST_TOOLS folder). Once per process.
inline oracle& load(const std::string& tools) {
  static oracle o = [&] {
    oracle r;
    const std::string bins =
        tools + "/node_modules/@node-llama-cpp/linux-x64/bins";
    for (const auto& sub : list_dir(bins)) {
      const std::string d = bins + "/" + sub;
      for (const auto& f : list_dir(d))
        if (f == "libggml-base.so")
          r.dir = d;
    }
    if (r.dir.empty()) {
      r.error = "no libggml-base.so under " + bins;
      return r;
    }
    r.base =
        dlopen((r.dir + "/libggml-base.so").c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!r.base) {
      r.error = std::string("dlopen libggml-base.so: ") + dlerror();
      return r;
    }
    int best = 0;
    for (const auto& f : list_dir(r.dir)) {
      if (f.rfind("libggml-cpu-", 0) != 0 || f.size() < 3 ||
          f.compare(f.size() - 3, 3, ".so") != 0)
        continue;
      void* h = dlopen((r.dir + "/" + f).c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!h)
        continue;
      auto score = reinterpret_cast<int (*)()>(dlsym(h, "ggml_backend_score"));
      int s = score ? score() : 0;
      if (s > best) {
        if (r.cpu)
          dlclose(r.cpu);
        r.cpu = h;
        r.variant = f;
        best = s;
      } else {
        dlclose(h);
      }
    }
    if (!r.cpu) {
      r.error = "no libggml-cpu-*.so in " + r.dir + " runs on this CPU";
      return r;
    }
    r.get_type_traits = reinterpret_cast<const type_traits* (*)(int)>(
        dlsym(r.base, "ggml_get_type_traits"));
    r.quantize_chunk = reinterpret_cast<decltype(r.quantize_chunk)>(
        dlsym(r.base, "ggml_quantize_chunk"));
    r.get_type_traits_cpu = reinterpret_cast<const type_traits_cpu* (*)(int)>(
        dlsym(r.cpu, "ggml_get_type_traits_cpu"));
    auto cpu_init = reinterpret_cast<void (*)()>(dlsym(r.cpu, "ggml_cpu_init"));
    if (!r.get_type_traits || !r.quantize_chunk || !r.get_type_traits_cpu ||
        !cpu_init) {
      r.error = "ggml entry points missing in " + r.dir;
      return r;
    }
    cpu_init();
    // The layouts declared above must match: Q4_K is 144 bytes per 256.
    const type_traits* q4k = r.get_type_traits(12);
    if (!q4k || q4k->blck_size != 256 || q4k->type_size != 144 ||
        !q4k->is_quantized) {
      r.error = "ggml_type_traits does not have the expected layout";
      return r;
    }
    const type_traits_cpu* c = r.get_type_traits_cpu(12);
    if (!c || c->vec_dot_type != 15 || !c->vec_dot || !c->from_float) {
      r.error = "ggml_type_traits_cpu does not have the expected layout";
      return r;
    }
    return r;
  }();
  return o;
}

} // namespace exo::test::ggml
