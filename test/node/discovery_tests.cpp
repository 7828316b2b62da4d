// Discovery: verification, the persistent registry, appeared/vanished.

#include "core/discovery/discovery.hpp"
#include "test/support/process.hpp"

#include <catch2/catch.hpp>

using namespace exo;

namespace {

backend::registry make(std::vector<backend::sim_device_spec> sims) {
  backend::factory_options o;
  o.use_environment = false;
  o.include = {"cpu", "sim"};
  o.sim.devices = std::move(sims);
  auto r = backend::registry::create(o);
  REQUIRE(r.ok());
  return std::move(*r);
}

} // namespace

TEST_CASE("every offered device is verified with a copy round trip") {
  auto reg = make({{"m2-max", ""}});
  discovery::device_registry known;
  auto r = discovery::discover(reg, known, false);
  REQUIRE(r.devices.size() == 2);
  for (auto& d : r.devices) {
    CHECK(d.verified);
    CHECK(d.reason.empty());
  }
  CHECK_FALSE(r.warm);
}

TEST_CASE("a device that fails verification is listed as failed with the "
          "reason") {
  auto reg = make({{"m2-max", ""}});
  auto* sim = dynamic_cast<backend::sim_device*>(reg.devices()[1]);
  REQUIRE(sim != nullptr);
  sim->fail_next_allocation("broken memory controller");
  discovery::device_registry known;
  auto r = discovery::discover(reg, known, false);
  REQUIRE(r.devices.size() == 2);
  CHECK(r.devices[0].verified);
  CHECK_FALSE(r.devices[1].verified);
  CHECK_THAT(r.devices[1].reason, Catch::Contains("broken memory controller"));
  CHECK_THAT(discovery::format_table(r), Catch::Contains("FAILED"));
}

TEST_CASE("the registry survives a round trip through JSON") {
  auto reg = make({{"a100-40g", ""}, {"a100-40g", "sim:\"odd\"\\id"}});
  discovery::device_registry known;
  discovery::discover(reg, known, false);
  std::string err;
  auto back = discovery::device_registry::from_json(known.to_json(), err);
  CHECK(err.empty());
  REQUIRE(back.records().size() == 3);
  CHECK(back.records()[2].id == "sim:\"odd\"\\id");
  CHECK(back.records()[1].total_memory == 40ull << 30);
}

TEST_CASE("a restart notices devices that appeared and disappeared") {
  auto dir = test::temp_dir("exo-disc");
  auto path = dir + "/devices.json";
  {
    auto reg = make({{"a100-40g", ""}, {"adreno-740", ""}});
    std::string note;
    auto known = discovery::device_registry::load(path, note);
    auto r = discovery::discover(reg, known, true);
    CHECK_FALSE(r.warm); // nothing known yet
    std::string err;
    REQUIRE(known.save(path, err));
  }
  auto reg = make({{"a100-40g", ""}, {"rtx-4090", ""}});
  std::string note;
  auto known = discovery::device_registry::load(path, note);
  CHECK(note.empty());
  auto first_seen = known.find("sim:a100-40g:0")->first_seen;
  auto r = discovery::discover(reg, known, true);
  CHECK(r.warm);
  CHECK(r.appeared == std::vector<std::string>{"sim:rtx-4090:0"});
  CHECK(r.disappeared == std::vector<std::string>{"sim:adreno-740:0"});
  CHECK(known.find("sim:a100-40g:0")->first_seen == first_seen);
  auto table = discovery::format_table(r);
  CHECK_THAT(table, Catch::Contains("new since last start: sim:rtx-4090:0"));
  CHECK_THAT(table, Catch::Contains("gone since last start: sim:adreno-740:0"));
}

TEST_CASE("a corrupt registry is ignored with a note, never fatal") {
  auto dir = test::temp_dir("exo-disc");
  auto path = dir + "/devices.json";
  test::write_file(path, "{\"version\": 1, \"devices\": [{\"id\": 3}]}");
  std::string note;
  auto known = discovery::device_registry::load(path, note);
  CHECK(known.empty());
  CHECK_THAT(note, Catch::Contains("ignored corrupt device registry"));
  test::write_file(path, "garbage");
  known = discovery::device_registry::load(path, note);
  CHECK(known.empty());
  CHECK_THAT(note, Catch::Contains("not valid JSON"));
}
