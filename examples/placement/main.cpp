// exo's placement solver alone, without an actor system (docs/embedding.md).
//
//   placement_example [PROBLEM.json]
//
// With a problem file (the format of exo-plan and config/placement/), it
// solves that; without one, a cluster built in code: a desktop GPU, two
// laptops on Wi-Fi and a phone, and a 32-layer model. It prints the plan
// (proven optimal or not, with its lower bound) and how much slower the
// memory-proportional split that exo and llama.cpp use would be.
// Exit status 0 with a plan, 1 without one, 2 on a bad problem.

#include <exo/core.hpp>

#include <iostream>
#include <string>

namespace {

exo::placement::problem built_in() {
  using namespace exo::placement;
  problem p;
  p.model_name = "llama-32-layers";
  auto gib = [](double x) { return static_cast<std::uint64_t>(x * (1ull << 30)); };
  auto add = [&](std::string id, std::string node, double mem_gib,
                 double tflops, double gbps) {
    device d;
    d.id = std::move(id);
    d.node = std::move(node);
    d.memory_bytes = gib(mem_gib);
    d.flops = tflops * 1e12;
    d.memory_bandwidth = gbps * 1e9;
    p.devices.push_back(d);
  };
  add("desktop/rtx4090", "desktop", 24, 80, 1000);
  add("laptop1/m2", "laptop1", 12, 7, 100);
  add("laptop2/igpu", "laptop2", 8, 2, 60);
  add("phone/adreno", "phone", 4, 1.5, 50);
  // Wi-Fi between everyone: 20 ms, 100 Mbit/s.
  p.default_link = link_spec{0.020, 100e6 / 8};
  for (int l = 0; l < 32; ++l) {
    layer x;
    x.weight_bytes = gib(0.5);
    x.kv_bytes_per_token = 128 * 1024;
    x.flops_per_token = 0.5 * (1ull << 30); // 2 FLOPs per 2-byte weight
    x.activation_bytes = 8192;
    p.layers.push_back(x);
  }
  p.request.context_length = 4096;
  p.objective.kind = objective_kind::latency;
  return p;
}

} // namespace

int main(int argc, char** argv) {
  using namespace exo::placement;
  problem p;
  try {
    p = argc > 1 ? read_problem_file(argv[1]) : built_in();
  } catch (const std::exception& e) {
    std::cerr << "placement_example: " << e.what() << "\n";
    return 2;
  }
  solve_options opts;
  opts.time_limit = std::chrono::milliseconds(2000);
  solve_result r;
  try {
    r = solve(p, opts);
  } catch (const problem_error& e) {
    std::cerr << "placement_example: " << e.what() << "\n";
    return 2;
  }
  std::cout << "exo " << exo::library_version() << ": " << p.devices.size()
            << " devices, " << p.layers.size() << " layers: "
            << to_string(r.status) << "\n";
  if (!r.best) {
    for (auto& line : r.explanation)
      std::cout << "  " << line << "\n";
    return 1;
  }
  print_plan_table(std::cout, *r.best);
  std::cout << "objective " << r.best->objective_seconds * 1e3 << " ms/token, "
            << (r.best->proven_optimal ? "proven optimal"
                                       : "not proven optimal")
            << ", lower bound " << r.best->lower_bound_seconds * 1e3
            << " ms\n";
  if (r.baseline && r.baseline_violations.empty())
    std::cout << "memory-proportional split: "
              << r.baseline->objective_seconds * 1e3 << " ms/token ("
              << r.baseline->objective_seconds / r.best->objective_seconds
              << "x slower)\n";
  else if (r.baseline)
    std::cout << "memory-proportional split: invalid ("
              << r.baseline_violations.front() << ")\n";
  return 0;
}
