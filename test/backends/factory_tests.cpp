// The factory's choices: priority, include/exclude, environment override,
// the CPU fallback and clear reports for absent backends.

#include "backends/factory/factory.hpp"

#include <catch2/catch.hpp>

#include <cstdlib>

using namespace exo::backend;

namespace {

const backend_report& report_of(const registry& reg, backend_kind k) {
  for (auto& r : reg.reports())
    if (r.kind == k)
      return r;
  FAIL("no report for " << to_string(k));
  throw 0;
}

factory_options no_env() {
  factory_options o;
  o.use_environment = false;
  return o;
}

} // namespace

TEST_CASE("the factory reports every backend in platform priority order") {
  auto reg = registry::create(no_env());
  REQUIRE(reg.ok());
  REQUIRE(reg->reports().size() == platform_priority().size());
  for (std::size_t i = 0; i < platform_priority().size(); ++i)
    CHECK(reg->reports()[i].kind == platform_priority()[i]);
  // Devices come out in the same order as their backends.
  auto devs = reg->devices();
  for (std::size_t i = 1; i < devs.size(); ++i)
    CHECK(static_cast<int>(devs[i - 1]->properties().kind)
          <= static_cast<int>(devs[i]->properties().kind));
}

TEST_CASE("a backend without devices is reported with a reason, not fatal") {
  auto reg = registry::create(no_env());
  REQUIRE(reg.ok());
  for (auto& r : reg->reports()) {
    if (!r.active) {
      INFO(to_string(r.kind));
      CHECK_FALSE(r.reason.empty());
    }
  }
  // No NVIDIA/AMD GPU on CI machines: cuda and hip say why.
  CHECK(report_of(*reg, backend_kind::cpu).active);
}

TEST_CASE("the cpu is always offered, even beside other devices") {
  auto reg = registry::create(no_env());
  REQUIRE(reg.ok());
  int cpus = 0;
  for (auto* d : reg->devices())
    cpus += d->properties().kind == backend_kind::cpu;
  CHECK(cpus == 1);
}

TEST_CASE("exclude removes a backend and include narrows the choice") {
  auto opts = no_env();
  opts.exclude = {"vulkan"};
  auto reg = registry::create(opts);
  REQUIRE(reg.ok());
  for (auto* d : reg->devices())
    CHECK(d->properties().kind != backend_kind::vulkan);
  CHECK(report_of(*reg, backend_kind::vulkan).reason != "");
  CHECK_FALSE(report_of(*reg, backend_kind::vulkan).tried);

  opts = no_env();
  opts.include = {"sim"};
  opts.sim.devices = {{"rtx-4090", ""}};
  reg = registry::create(opts);
  REQUIRE(reg.ok());
  // Only simulated devices were asked for: the cpu still comes as fallback.
  auto devs = reg->devices();
  REQUIRE(devs.size() == 2);
  CHECK(devs[0]->properties().kind == backend_kind::cpu);
  CHECK(devs[1]->properties().kind == backend_kind::sim);
  CHECK(report_of(*reg, backend_kind::cpu).reason.find("fallback")
        != std::string::npos);
}

TEST_CASE("the EXO_BACKENDS variable overrides the include list") {
  ::setenv("EXO_BACKENDS", "cpu", 1);
  factory_options opts;
  opts.include = {"vulkan"};
  auto reg = registry::create(opts);
  ::unsetenv("EXO_BACKENDS");
  REQUIRE(reg.ok());
  auto devs = reg->devices();
  REQUIRE(devs.size() == 1);
  CHECK(devs[0]->properties().kind == backend_kind::cpu);
}

TEST_CASE("an unknown backend name is an error that names it") {
  auto opts = no_env();
  opts.include = {"cpu", "metal"};
  auto reg = registry::create(opts);
  REQUIRE_FALSE(reg.ok());
  CHECK(reg.err().message.find("\"metal\"") != std::string::npos);
  ::setenv("EXO_BACKENDS", "quantum", 1);
  auto reg2 = registry::create(factory_options{});
  ::unsetenv("EXO_BACKENDS");
  REQUIRE_FALSE(reg2.ok());
  CHECK(reg2.err().message.find("EXO_BACKENDS") != std::string::npos);
}

TEST_CASE("an unknown simulated profile is reported, not fatal") {
  auto opts = no_env();
  opts.sim.devices = {{"h9000", ""}};
  auto reg = registry::create(opts);
  REQUIRE(reg.ok());
  auto& rep = report_of(*reg, backend_kind::sim);
  CHECK_FALSE(rep.active);
  CHECK(rep.reason.find("h9000") != std::string::npos);
}
