#include "core/gateway/prometheus.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

using namespace exo::gateway::prometheus;

TEST_CASE("a counter and a gauge with HELP, TYPE and escaped labels") {
  text_writer w;
  w.family("exo_requests_total", "Requests answered.\nBy status.",
           metric_type::counter);
  w.sample({{"endpoint", "/v1/chat"}, {"status", "200"}}, 3);
  w.sample({{"path", "a\\b \"q\"\nz"}}, 1.5);
  w.family("exo_queue_depth", "Requests waiting.", metric_type::gauge);
  w.sample({}, 0);
  CHECK(w.str()
        == "# HELP exo_requests_total Requests answered.\\nBy status.\n"
           "# TYPE exo_requests_total counter\n"
           "exo_requests_total{endpoint=\"/v1/chat\",status=\"200\"} 3\n"
           "exo_requests_total{path=\"a\\\\b \\\"q\\\"\\nz\"} 1.5\n"
           "# HELP exo_queue_depth Requests waiting.\n"
           "# TYPE exo_queue_depth gauge\n"
           "exo_queue_depth 0\n");
}

TEST_CASE("a histogram writes cumulative buckets, +Inf, sum and count") {
  histogram h{{0.1, 0.5, 1}};
  for (double v : {0.05, 0.1, 0.3, 0.7, 2.0})
    h.observe(v);
  text_writer w;
  w.family("exo_ttft_seconds", "Time to first token.",
           metric_type::histogram);
  w.sample({{"model", "tiny"}}, h);
  // The sum's exact digits are those of the double sum; check each line.
  auto s = w.str();
  CHECK(s.find("exo_ttft_seconds_bucket{model=\"tiny\",le=\"0.1\"} 2\n")
        != std::string::npos);
  CHECK(s.find("exo_ttft_seconds_bucket{model=\"tiny\",le=\"0.5\"} 3\n")
        != std::string::npos);
  CHECK(s.find("exo_ttft_seconds_bucket{model=\"tiny\",le=\"1\"} 4\n")
        != std::string::npos);
  CHECK(s.find("exo_ttft_seconds_bucket{model=\"tiny\",le=\"+Inf\"} 5\n")
        != std::string::npos);
  CHECK(s.find("exo_ttft_seconds_sum{model=\"tiny\"} "
               + format_value(0.05 + 0.1 + 0.3 + 0.7 + 2.0) + "\n")
        != std::string::npos);
  CHECK(s.find("exo_ttft_seconds_count{model=\"tiny\"} 5\n")
        != std::string::npos);
}

TEST_CASE("a histogram adds counts observed elsewhere with its bounds") {
  histogram h{{0.1, 1}};
  h.observe(0.05);
  h.add({1, 2, 3}, 4.5);
  CHECK(h.bucket_counts() == std::vector<std::uint64_t>{2, 2, 3});
  CHECK(h.count() == 7);
  CHECK(h.sum() == Approx(4.55));
  CHECK_THROWS_AS(h.add({1, 2}, 0), std::invalid_argument);
  CHECK(h.count() == 7); // nothing added
}

TEST_CASE("values: shortest round trip, infinities and NaN") {
  CHECK(format_value(0.1) == "0.1");
  CHECK(format_value(42) == "42");
  CHECK(format_value(-3.5e-9) == "-3.5e-09");
  CHECK(format_value(std::numeric_limits<double>::infinity()) == "+Inf");
  CHECK(format_value(-std::numeric_limits<double>::infinity()) == "-Inf");
  CHECK(format_value(std::nan("")) == "NaN");
}

TEST_CASE("invalid metric and label names are programming errors") {
  CHECK(valid_metric_name("DCGM_FI_DEV_GPU_TEMP"));
  CHECK(valid_metric_name("a:b_c1"));
  CHECK_FALSE(valid_metric_name("1abc"));
  CHECK_FALSE(valid_metric_name("a-b"));
  CHECK(valid_label_name("modelName"));
  CHECK_FALSE(valid_label_name("__reserved"));
  CHECK_FALSE(valid_label_name("a:b"));
  text_writer w;
  CHECK_THROWS_AS(w.family("bad name", "x", metric_type::gauge),
                  std::invalid_argument);
  w.family("ok", "x", metric_type::gauge);
  CHECK_THROWS_AS(w.sample({{"bad-label", "v"}}, 1), std::invalid_argument);
  CHECK_THROWS_AS(histogram({1, 0.5}), std::invalid_argument);
}

TEST_CASE("device gauges use dcgm-exporter's names, units and labels") {
  device_reading gpu;
  gpu.gpu = "0";
  gpu.uuid = "GPU-1234";
  gpu.model_name = "NVIDIA H100 80GB HBM3";
  gpu.hostname = "node-a";
  gpu.backend = "cuda";
  gpu.temperature_c = 61;
  gpu.power_w = 312.5;
  gpu.fb_used_mib = 1024;
  gpu.fb_free_mib = 80000;
  gpu.util_percent = 97;
  gpu.sm_clock_mhz = 1980;
  device_reading cpu;
  cpu.gpu = "1";
  cpu.uuid = "cpu-0";
  cpu.model_name = "AMD EPYC";
  cpu.hostname = "node-a";
  cpu.backend = "cpu";
  cpu.fb_used_mib = 10;
  cpu.fb_free_mib = 20;
  text_writer w;
  write_device_gauges(w, {gpu, cpu});
  auto s = w.str();
  const std::string gpu_labels
    = "{gpu=\"0\",UUID=\"GPU-1234\",modelName=\"NVIDIA H100 80GB HBM3\","
      "Hostname=\"node-a\",backend=\"cuda\"}";
  const std::string cpu_labels = "{gpu=\"1\",UUID=\"cpu-0\","
                                 "modelName=\"AMD EPYC\",Hostname=\"node-a\","
                                 "backend=\"cpu\"}";
  CHECK(s.find("# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n") != std::string::npos);
  CHECK(s.find("DCGM_FI_DEV_GPU_TEMP" + gpu_labels + " 61\n")
        != std::string::npos);
  CHECK(s.find("DCGM_FI_DEV_POWER_USAGE" + gpu_labels + " 312.5\n")
        != std::string::npos);
  CHECK(s.find("DCGM_FI_DEV_FB_USED" + gpu_labels + " 1024\n")
        != std::string::npos);
  CHECK(s.find("DCGM_FI_DEV_FB_FREE" + cpu_labels + " 20\n")
        != std::string::npos);
  CHECK(s.find("DCGM_FI_DEV_GPU_UTIL" + gpu_labels + " 97\n")
        != std::string::npos);
  CHECK(s.find("DCGM_FI_DEV_SM_CLOCK" + gpu_labels + " 1980\n")
        != std::string::npos);
  // The cpu device has no temperature: no sample, never a 0.
  CHECK(s.find("DCGM_FI_DEV_GPU_TEMP" + cpu_labels) == std::string::npos);
  text_writer empty;
  write_device_gauges(empty, {cpu});
  CHECK(empty.str().find("DCGM_FI_DEV_GPU_TEMP") == std::string::npos);
}
