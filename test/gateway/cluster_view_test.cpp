// The gateway's cluster views without a cluster: the snapshot built from
// console answers, the events between two snapshots, audit records as
// events, and the dcgm-exporter readings of the devices.

#include "core/gateway/cluster_view.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>

using namespace exo::gateway;
using exo::text::json;

namespace {

cluster_parts parts_with(json nodes, json devices, json thermal, json jobs) {
  cluster_parts p;
  p.node = "alpha";
  p.nodes = {{"coordinator", "alpha"}, {"nodes", std::move(nodes)}};
  p.devices = std::move(devices);
  p.links = json::array({{{"from", "alpha"}, {"to", "beta"},
                          {"rtt_p50_us", 80}, {"bandwidth_bps", 1e9}}});
  p.thermal = {{"devices", std::move(thermal)}};
  p.jobs = {{"node", "alpha"}, {"jobs", std::move(jobs)}};
  p.models = json::array({{{"id", "tiny"}, {"object", "model"}}});
  return p;
}

json node(const std::string& name, const std::string& status = "alive") {
  return {{"name", name}, {"status", status}, {"incarnation", 1}};
}

json device(const std::string& n, const std::string& id, double free,
            const std::string& state = "ready") {
  return {{"node", n},         {"id", id},
          {"backend", "sim"},  {"name", "Sim " + id},
          {"total_memory", 8 * 1048576.0}, {"free_memory", free},
          {"state", state}};
}

std::vector<std::string> types(const std::vector<json>& events) {
  std::vector<std::string> out;
  for (auto& e : events)
    out.push_back(e["type"].get<std::string>() + ":"
                  + (e["data"].contains("change")
                       ? e["data"]["change"].get<std::string>()
                       : e["data"].value("state", "")));
  return out;
}

} // namespace

TEST_CASE("the snapshot gathers the console's answers, bounded and typed") {
  auto p = parts_with(json::array({node("alpha"), 42, node("beta")}),
                      json::array({device("alpha", "sim:0", 1048576)}),
                      json::array(), json::array({{{"job", 1}}}));
  auto s = make_snapshot(p);
  CHECK(s["node"] == "alpha");
  CHECK(s["coordinator"] == "alpha");
  CHECK(s["nodes"].size() == 2); // 42 is not an entry
  CHECK(s["devices"].size() == 1);
  CHECK(s["links"][0]["to"] == "beta");
  CHECK(s["jobs"][0]["state"] == "running");
  CHECK(s["models"][0]["id"] == "tiny");
  CHECK(snapshot_part(s, "devices") == s["devices"]);
  CHECK(snapshot_part(s, "secrets").is_null());
  // Parts that did not come (null) are empty lists, not errors.
  cluster_parts none;
  auto e = make_snapshot(none);
  CHECK(e["nodes"].empty());
  CHECK(e["jobs"].is_array());
  // A huge list from the network is cut.
  json many = json::array();
  for (std::size_t i = 0; i < max_view_entries + 10; ++i)
    many.push_back(device("alpha", std::to_string(i), 0));
  cluster_parts big;
  big.devices = many;
  CHECK(make_snapshot(big)["devices"].size() == max_view_entries);
}

TEST_CASE("events tell one snapshot from the next") {
  auto before = make_snapshot(parts_with(
    json::array({node("alpha"), node("beta")}),
    json::array({device("alpha", "sim:0", 100), device("beta", "sim:0", 100)}),
    json::array({{{"node", "alpha"}, {"device", "sim:0"},
                  {"state", "normal"}}}),
    json::array({{{"job", 1}, {"tokens", 3}, {"stages", json::array()}}})));
  // First poll: everything is new.
  auto first = types(diff_events(json{}, before, 5));
  CHECK(std::count(first.begin(), first.end(), "node:joined") == 2);
  auto after = make_snapshot(parts_with(
    json::array({node("alpha"), node("gamma"), node("beta", "dead")}),
    json::array({device("alpha", "sim:0", 6 * 1048576.0),
                 device("beta", "sim:0", 100 + 524288.0)}),
    json::array({{{"node", "alpha"}, {"device", "sim:0"}, {"state", "warm"}}}),
    json::array({{{"job", 2},
                  {"tokens", 0},
                  {"stages", json::array({{{"node", "alpha"},
                                           {"device", "sim:0"},
                                           {"first_layer", 0},
                                           {"last_layer", 3}}})}}})));
  auto events = diff_events(before, after, 1234);
  auto t = types(events);
  auto has = [&](const std::string& x) {
    return std::find(t.begin(), t.end(), x) != t.end();
  };
  CHECK(has("node:joined"));    // gamma
  CHECK(has("node:status"));    // beta died
  CHECK(has("device:ready"));   // alpha's free memory moved 6 MiB of 8
  CHECK(has("thermal:warm"));
  CHECK(has("job:running"));    // job 2 started
  CHECK(has("job:finished"));   // job 1 left the list
  CHECK(has("placement:"));     // job 2's stages
  CHECK(t.size() == 7); // beta's device moved by less than a step
  for (auto& e : events)
    CHECK(e["time_ms"] == 1234);
  // Nothing changed: no events.
  CHECK(diff_events(after, after, 1).empty());
  // A job that started and ended between two polls is seen in "recent",
  // with its outcome and placement; one that moved from running to
  // recent reports its new state.
  auto p = parts_with(json::array({node("alpha")}), json::array(),
                      json::array(), json::array());
  p.jobs["recent"] = json::array(
    {{{"job", 2}, {"tokens", 9}, {"state", "cancelled"},
      {"stages", json::array({{{"node", "alpha"}, {"device", "sim:0"}}})}},
     {{"job", 3}, {"tokens", 4}, {"state", "finished"},
      {"stages", json::array({{{"node", "alpha"}, {"device", "sim:0"}}})}}});
  auto later = make_snapshot(p);
  CHECK(later["jobs"].size() == 2);
  auto t2 = types(diff_events(after, later, 2));
  auto has2 = [&](const std::string& x) {
    return std::count(t2.begin(), t2.end(), x);
  };
  CHECK(has2("job:cancelled") == 1); // job 2: running -> cancelled
  CHECK(has2("job:finished") == 1);  // job 3: never seen running
  CHECK(has2("placement:") == 1);    // job 3's stages (2's were known)
  // Ended jobs that drop out of "recent" make no event.
  p.jobs["recent"] = json::array();
  auto gone = diff_events(later, make_snapshot(p), 4);
  for (auto& e : gone)
    CHECK(e["type"] != "job");
}

TEST_CASE("audit records become events, other documents do not") {
  json rec = {{"seq", 7},
              {"time", 1},
              {"node", "alpha"},
              {"principal", "eve"},
              {"type", "access_denied"},
              {"details", {{"path", "/v1/models"}, {"via", "gateway"}}}};
  auto e = audit_event(rec, 9);
  CHECK(e["type"] == "audit");
  CHECK(e["data"]["seq"] == 7);
  CHECK(e["data"]["event"] == "access_denied");
  CHECK(e["data"]["principal"] == "eve");
  CHECK(e["data"]["detail"] == "path=/v1/models via=gateway");
  CHECK(audit_event(json{{"seq", -1}, {"type", "x"}}, 1).is_null());
  rec["severity"] = "debug";
  CHECK(audit_event(rec, 9).is_null());
  CHECK(audit_event(json::array(), 1).is_null());
}

TEST_CASE("a burst of audit records of one type is one event") {
  json records = json::array();
  for (int i = 1; i <= 50; ++i)
    records.push_back({{"seq", i}, {"type", "device_free"},
                       {"severity", "info"}, {"details", json::object()}});
  records.push_back({{"seq", 51}, {"type", "access_denied"},
                     {"severity", "warning"}, {"principal", "eve"}});
  records.push_back({{"seq", 52}, {"type", "device_list"},
                     {"severity", "debug"}});
  auto es = audit_events(records, 3);
  REQUIRE(es.size() == 2);
  CHECK(es[0]["data"]["event"] == "device_free");
  CHECK(es[0]["data"]["count"] == 50);
  CHECK(es[0]["data"]["detail"] == "50 records, seq 1 to 50");
  CHECK(es[1]["data"]["event"] == "access_denied");
  CHECK_FALSE(es[1]["data"].contains("count"));
  CHECK(audit_events(json::object(), 1).empty());
}

TEST_CASE("devices read as dcgm-exporter gauges with their temperatures") {
  auto s = make_snapshot(parts_with(
    json::array({node("alpha")}),
    json::array({device("alpha", "sim:0", 2 * 1048576.0),
                 device("alpha", "cpu:0", 8 * 1048576.0),
                 device("beta", "sim:0", 9 * 1048576.0)}),
    json::array({{{"node", "alpha"}, {"device", "sim:0"},
                  {"has_temperature", true}, {"temp_c", 61.5},
                  {"power_w", 212.0}},
                 {{"node", "alpha"}, {"device", "cpu:0"},
                  {"has_temperature", false}, {"temp_c", 0},
                  {"utilization", 0.25}, {"clock_mhz", 3000}}}),
    json::array()));
  auto r = device_readings(s);
  REQUIRE(r.size() == 3);
  CHECK(r[0].gpu == "0");
  CHECK(r[1].gpu == "1");
  CHECK(r[2].gpu == "0"); // ranks count per node
  CHECK(r[0].uuid == "alpha/sim:0");
  CHECK(r[0].hostname == "alpha");
  CHECK(r[0].backend == "sim");
  CHECK(r[0].temperature_c == Approx(61.5));
  CHECK(r[0].power_w == Approx(212));
  CHECK_FALSE(r[0].sm_clock_mhz.has_value()); // no clock reported
  CHECK_FALSE(r[1].temperature_c.has_value()); // no sensor: no sample
  CHECK(r[1].util_percent == Approx(25));      // load without a sensor
  CHECK(r[1].sm_clock_mhz == Approx(3000));
  CHECK_FALSE(r[0].util_percent.has_value());
  CHECK(r[0].fb_used_mib == Approx(6));
  CHECK(r[0].fb_free_mib == Approx(2));
  CHECK_FALSE(r[2].fb_used_mib.has_value()); // free > total: not a reading
}

TEST_CASE("a node's device stages become the serving metrics, a peer's "
          "bad entries left out") {
  auto stage = [](const std::string& device, std::uint64_t used,
                  std::uint64_t positions) {
    return json{{"device", device},       {"model", "d0804fd7562d"},
                {"first", 0},             {"last", 4},
                {"kv_type", "f16"},       {"jobs", 2},
                {"sequences", 3},         {"kv_bytes", 65536},
                {"kv_blocks", 8},         {"kv_blocks_used", used},
                {"kv_blocks_shared", 1},  {"kv_block_positions", positions},
                {"forwards", 40},         {"rows", 100},
                {"merged_steps", 12}};
  };
  std::map<std::string, std::string> fields{
    {"shards", "2"},
    {"stages", "6"},
    {"stage 0", exo::text::compact(stage("sim:0", 6, 32))},
    {"stage 1", exo::text::compact(stage("cpu:0", 0, 0))},
    {"stage 2", "{not json"},
    {"stage 3", exo::text::compact(json::array({1, 2}))},
    // A negative count, a count as text, an overlong label: left out.
    {"stage 4", [&] {
       auto j = stage("sim:1", 1, 32);
       j["rows"] = -5;
       return exo::text::compact(j);
     }()},
    {"stage 5", [&] {
       auto j = stage("sim:2", 1, 32);
       j["jobs"] = "2";
       return exo::text::compact(j);
     }()},
    {"stage 6", [&] {
       auto j = stage(std::string(300, 'x'), 1, 32);
       return exo::text::compact(j);
     }()}};
  auto entries = stage_entries("alpha", fields);
  REQUIRE(entries.size() == 2);
  CHECK(entries[0]["node"] == "alpha");
  CHECK(entries[0]["device"] == "sim:0");
  CHECK(entries[1]["device"] == "cpu:0");
  // A second node's copy of the first stage's labels (same node name: a
  // process with two mapped copies of one file) is summed, not repeated.
  auto twice = stage_entries("alpha", {{"stage 0",
                                        exo::text::compact(
                                          stage("sim:0", 2, 32))}});
  entries.push_back(twice[0]);
  prometheus::text_writer w;
  write_stage_metrics(w, entries);
  const auto& out = w.str();
  INFO(out);
  const std::string sim = "{node=\"alpha\",device=\"sim:0\",model="
                          "\"d0804fd7562d\",layers=\"0-3\",kv_type=\"f16\"}";
  const std::string cpu = "{node=\"alpha\",device=\"cpu:0\",model="
                          "\"d0804fd7562d\",layers=\"0-3\",kv_type=\"f16\"}";
  CHECK(out.find("# TYPE exo_stage_jobs gauge\n") != std::string::npos);
  CHECK(out.find("exo_stage_jobs" + sim + " 4\n") != std::string::npos);
  CHECK(out.find("exo_stage_jobs" + cpu + " 2\n") != std::string::npos);
  CHECK(out.find("exo_stage_sequences" + sim + " 6\n") != std::string::npos);
  CHECK(out.find("exo_kv_cache_bytes" + cpu + " 65536\n")
        != std::string::npos);
  // Paged families only for the paged stage (the cpu one is contiguous).
  CHECK(out.find("exo_kv_cache_blocks" + sim + " 16\n") != std::string::npos);
  CHECK(out.find("exo_kv_cache_blocks_used" + sim + " 8\n")
        != std::string::npos);
  CHECK(out.find("exo_kv_cache_usage_ratio" + sim + " 0.5\n")
        != std::string::npos);
  CHECK(out.find("exo_kv_cache_blocks" + cpu) == std::string::npos);
  CHECK(out.find("exo_kv_cache_usage_ratio" + cpu) == std::string::npos);
  CHECK(out.find("# TYPE exo_stage_forwards_total counter\n")
        != std::string::npos);
  CHECK(out.find("exo_stage_rows_total" + sim + " 200\n") != std::string::npos);
  CHECK(out.find("exo_stage_merged_steps_total" + cpu + " 12\n")
        != std::string::npos);
  // The snapshot (GET /v1/cluster, the dashboard) carries them too.
  cluster_parts parts;
  parts.stages = entries;
  CHECK(make_snapshot(parts)["stages"].size() == 3);
  parts.stages = json{{"not", "a list"}};
  CHECK(make_snapshot(parts)["stages"].empty());
  // The label names the first and the last layer, as the dashboard and a
  // job's stages do: one layer is "7-7"; no layer (a stage of the output
  // alone would be one) is its first; a peer's 2^64 - 1 stays an integer.
  {
    auto one = stage("sim:3", 1, 32);
    one["first"] = 7;
    one["last"] = 8;
    auto empty = stage("sim:4", 1, 32);
    empty["first"] = 5;
    empty["last"] = 5;
    auto huge = stage("sim:5", 1, 32);
    huge["first"] = std::numeric_limits<std::uint64_t>::max() - 1;
    huge["last"] = std::numeric_limits<std::uint64_t>::max();
    auto odd = stage_entries("beta", {{"stage 0", exo::text::compact(one)},
                                      {"stage 1", exo::text::compact(empty)},
                                      {"stage 2", exo::text::compact(huge)}});
    REQUIRE(odd.size() == 3);
    prometheus::text_writer labels;
    write_stage_metrics(labels, odd);
    INFO(labels.str());
    CHECK_THAT(labels.str(),
               Catch::Contains("device=\"sim:3\",model=\"d0804fd7562d\","
                               "layers=\"7-7\""));
    CHECK_THAT(labels.str(),
               Catch::Contains("device=\"sim:4\",model=\"d0804fd7562d\","
                               "layers=\"5\""));
    CHECK_THAT(labels.str(),
               Catch::Contains("layers=\"18446744073709551614-"
                               "18446744073709551614\""));
  }
  // No stage: no family at all.
  prometheus::text_writer none;
  write_stage_metrics(none, json::array());
  write_stage_metrics(none, json{{"not", "a list"}});
  CHECK(none.str().empty());
}

TEST_CASE("a stage's batch waits become a histogram summed by labels, "
          "a peer's malformed ones left out") {
  auto stage = [](const std::string& device) {
    return json{{"device", device},      {"model", "d0804fd7562d"},
                {"first", 0},            {"last", 4},
                {"kv_type", "f16"},      {"jobs", 1},
                {"sequences", 1},        {"kv_bytes", 4096},
                {"kv_blocks", 0},        {"kv_blocks_used", 0},
                {"kv_blocks_shared", 0}, {"kv_block_positions", 0},
                {"forwards", 10},        {"rows", 10},
                {"merged_steps", 0}};
  };
  auto waited = [&](const std::string& device, json le, json counts,
                    json sum) {
    auto j = stage(device);
    j["wait_le"] = std::move(le);
    j["wait_counts"] = std::move(counts);
    j["wait_sum_s"] = std::move(sum);
    return exo::text::compact(j);
  };
  std::map<std::string, std::string> fields{
    {"stage 0", waited("sim:0", {0.001, 0.01}, {3, 2, 1}, 0.5)},
    // No histogram at all (a node of an earlier version): kept.
    {"stage 1", exo::text::compact(stage("cpu:0"))},
    // Malformed: left out whole.
    {"stage 2", waited("bad:0", {0.01, 0.001}, {1, 1, 1}, 0)},
    {"stage 3", waited("bad:1", {0.001, 0.01}, {1, 1}, 0)},
    {"stage 4", waited("bad:2", {0.001, 0.01}, {1, 1, 1}, -1)},
    {"stage 5", waited("bad:3", {0.001, 0.01}, {"1", 1, 1}, 0)},
    {"stage 6", waited("bad:4", json::array(), {1}, 0)},
    {"stage 7", waited("bad:5", "0.001", {1, 1}, 0)},
    {"stage 8", [&] {
       json le = json::array(), counts = json::array({0});
       for (int i = 1; i <= 33; ++i) {
         le.push_back(i);
         counts.push_back(0);
       }
       return waited("bad:6", le, counts, 0);
     }()},
    {"stage 9", [&] {
       auto j = stage("bad:7");
       j["wait_le"] = json::array({0.001});
       return exo::text::compact(j);
     }()}};
  auto entries = stage_entries("alpha", fields);
  REQUIRE(entries.size() == 2);
  CHECK(entries[0]["device"] == "sim:0");
  CHECK(entries[1]["device"] == "cpu:0");
  // The same labels again: with the same bounds, summed; with others, left
  // out of the histogram (its other figures still summed).
  entries.push_back(stage_entries(
    "alpha", {{"stage 0", waited("sim:0", {0.001, 0.01}, {1, 0, 0},
                                 0.0005)}})[0]);
  entries.push_back(stage_entries(
    "alpha", {{"stage 0", waited("sim:0", {0.002}, {7, 7}, 9)}})[0]);
  prometheus::text_writer w;
  write_stage_metrics(w, entries);
  const auto& out = w.str();
  INFO(out);
  const std::string sim = "{node=\"alpha\",device=\"sim:0\",model="
                          "\"d0804fd7562d\",layers=\"0-3\",kv_type=\"f16\"";
  CHECK(out.find("# TYPE exo_stage_batch_wait_seconds histogram\n")
        != std::string::npos);
  CHECK(out.find("exo_stage_batch_wait_seconds_bucket" + sim
                 + ",le=\"0.001\"} 4\n")
        != std::string::npos);
  CHECK(out.find("exo_stage_batch_wait_seconds_bucket" + sim
                 + ",le=\"0.01\"} 6\n")
        != std::string::npos);
  CHECK(out.find("exo_stage_batch_wait_seconds_bucket" + sim
                 + ",le=\"+Inf\"} 7\n")
        != std::string::npos);
  CHECK(out.find("exo_stage_batch_wait_seconds_sum" + sim + "} 0.5005\n")
        != std::string::npos);
  CHECK(out.find("exo_stage_batch_wait_seconds_count" + sim + "} 7\n")
        != std::string::npos);
  CHECK(out.find("le=\"0.002\"") == std::string::npos);
  CHECK(out.find("exo_stage_forwards_total" + sim + "} 30\n")
        != std::string::npos);
  CHECK(out.find("exo_stage_batch_wait_seconds_count{node=\"alpha\","
                 "device=\"cpu:0\"")
        == std::string::npos);
  // No stage with a histogram: no family.
  prometheus::text_writer plain;
  write_stage_metrics(plain, json::array({entries[1]}));
  CHECK(plain.str().find("exo_stage_batch_wait_seconds") == std::string::npos);
  CHECK(plain.str().find("exo_stage_jobs") != std::string::npos);
}

TEST_CASE("the jobs running and waiting for memory are counted apart from "
          "the ones that ended lately") {
  cluster_parts p = parts_with(json::array({node("alpha")}), json::array(),
                               json::array(),
                               json::array({{{"job", 1}, {"model", "m"}},
                                            {{"job", 2}, {"model", "m"}}}));
  p.jobs["recent"] = json::array({{{"job", 0}, {"state", "cancelled"}},
                                  {{"job", 7}}});
  p.jobs["waiting"] = json::array({{{"model", "m"}, {"seconds", 0.5}},
                                   {{"model", "m"}, {"seconds", 0.1}},
                                   "not an object"});
  auto s = make_snapshot(p);
  CHECK(s["jobs"].size() == 4); // the views show the recent ones too
  auto c = count_jobs(s);
  CHECK(c.running == 2);
  CHECK(c.waiting == 2);
  // Nothing waiting, or a peer's junk: 0.
  p.jobs["waiting"] = "junk";
  CHECK(count_jobs(make_snapshot(p)).waiting == 0);
  CHECK(count_jobs(json{}).running == 0);
  CHECK(count_jobs(json{{"jobs", 3}, {"jobs_waiting", -1}}).waiting == 0);
}
