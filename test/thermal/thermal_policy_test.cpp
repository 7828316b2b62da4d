#include "core/thermal/audit_event.hpp"
#include "core/thermal/thermal_policy.hpp"

#include <catch2/catch.hpp>

#include <functional>
#include <random>
#include <vector>

using namespace exo::thermal;

namespace {

/// Result of a closed-loop simulation.
struct sim_result {
  double max_temp = 0;
  std::vector<thermal_transition> transitions;
  double paused_seconds = 0;
};

/// Simulates a device that obeys `truth` under `load(t)` while the policy
/// watches it. When paused the device finishes the work in flight during
/// one interval, then draws no power until resumed.
sim_result simulate(thermal_policy& policy, const rc_params& truth,
                    const std::function<double(double)>& load, double seconds,
                    double start_temp, double noise_c = 0.05) {
  sim_result out;
  std::mt19937 rng{11};
  std::normal_distribution<double> noise{0, noise_c};
  double dt = policy.config().interval_s;
  double temp = start_temp;
  double drawn = 0;
  for (double t = 0; t < seconds; t += dt) {
    auto planned = load(t);
    auto tr = policy.observe({t, temp + noise(rng), drawn}, planned);
    if (tr)
      out.transitions.push_back(*tr);
    bool paused = policy.state() == thermal_state::paused;
    bool just_paused = tr && tr->to == thermal_state::paused;
    // Work in flight completes; nothing new starts while paused.
    double power = paused && !just_paused ? 0 : planned;
    if (paused)
      out.paused_seconds += dt;
    // Check the peak between samples too (fine sub-steps of the model).
    for (int i = 0; i < 10; ++i) {
      temp = step(truth, temp, power, dt / 10);
      out.max_temp = std::max(out.max_temp, temp);
    }
    drawn = power;
  }
  return out;
}

thermal_config default_config() {
  thermal_config cfg;
  cfg.prior = {0.15, 60, 25}; // deliberately wrong: the fitter must correct it
  return cfg;
}

} // namespace

TEST_CASE("under a heating trace the device pauses before the limit and "
          "never exceeds it") {
  rc_params truth{0.25, 40, 25}; // 320 W settles at 105 C, above the 90 C limit
  thermal_policy policy{default_config()};
  auto load = [](double t) { return t < 30 ? 20.0 : 320.0; };
  auto res = simulate(policy, truth, load, 900, 25);
  REQUIRE_FALSE(res.transitions.empty());
  bool paused = false;
  for (auto& tr : res.transitions) {
    if (tr.to == thermal_state::paused && !paused) {
      paused = true;
      CHECK(tr.temp_c < 85.5);
      CHECK_THAT(tr.reason, Catch::Contains("pause point"));
    }
  }
  CHECK(paused);
  CHECK(res.max_temp < 90);
  CHECK(res.paused_seconds > 0);
  CHECK(policy.fitted());
  CHECK(policy.model().resistance_c_per_w == Approx(0.25).epsilon(0.1));
}

TEST_CASE("a paused device resumes only below limit minus hysteresis") {
  rc_params truth{0.25, 40, 25};
  thermal_policy policy{default_config()};
  auto load = [](double t) { return t < 30 ? 20.0 : 320.0; };
  auto res = simulate(policy, truth, load, 900, 25);
  int resumes = 0;
  for (auto& tr : res.transitions) {
    if (tr.from == thermal_state::paused) {
      ++resumes;
      CHECK(tr.temp_c < 80.5); // 90 - 10, plus the measurement noise
      CHECK(tr.predicted_c < 85);
      CHECK_THAT(tr.reason, Catch::StartsWith("resumed"));
    }
  }
  CHECK(resumes > 0);
  // Under a sustained overload the device duty-cycles, but each pause lasts
  // at least the dwell time: the count of transitions stays bounded.
  CHECK(res.transitions.size() <= 2 * 900 / 5);
}

TEST_CASE("a device that cools completely comes back to normal") {
  rc_params truth{0.25, 40, 25};
  thermal_policy policy{default_config()};
  auto load = [](double t) { return t < 400 ? 320.0 : 10.0; };
  auto res = simulate(policy, truth, load, 900, 25);
  CHECK(res.max_temp < 90);
  CHECK(policy.state() == thermal_state::normal);
}

TEST_CASE("under a square-wave load the policy does not oscillate") {
  rc_params truth{0.25, 40, 25};
  auto cfg = default_config();
  thermal_policy policy{cfg};
  // 4 s at 360 W, 4 s idle: the average settles near the warm band, and each
  // half-period alone would move the prediction across it.
  auto load = [](double t) {
    return static_cast<long>(t / 4) % 2 == 0 ? 360.0 : 0.0;
  };
  auto res = simulate(policy, truth, load, 1200, 25);
  std::string log;
  for (auto& tr : res.transitions)
    log += std::to_string(tr.time_s) + " " + std::string{to_string(tr.to)}
           + ": " + tr.reason + "\n";
  INFO(log);
  CHECK(res.transitions.size() <= 3);
  CHECK(res.max_temp < 90);
  CHECK(policy.state() == thermal_state::warm);
}

TEST_CASE("without dwell and hysteresis the square wave would oscillate") {
  // Guards the previous test: it must exercise a load that crosses the band.
  rc_params truth{0.25, 40, 25};
  auto cfg = default_config();
  cfg.min_dwell_s = 0;
  cfg.warm_exit_c = 0;
  thermal_policy policy{cfg};
  auto load = [](double t) {
    return static_cast<long>(t / 4) % 2 == 0 ? 360.0 : 0.0;
  };
  auto res = simulate(policy, truth, load, 1200, 25);
  CHECK(res.transitions.size() > 20);
}

TEST_CASE("the warm band asks for reduced precision") {
  rc_params truth{0.25, 40, 25};
  thermal_policy policy{default_config()};
  auto load = [](double t) { return t < 30 ? 20.0 : 230.0; }; // settles 82.5 C
  auto res = simulate(policy, truth, load, 600, 25);
  REQUIRE_FALSE(res.transitions.empty());
  auto& first = res.transitions.front();
  CHECK(first.from == thermal_state::normal);
  CHECK(first.to == thermal_state::warm);
  CHECK(first.reduce_precision());
  CHECK_THAT(first.reason, Catch::Contains("reduce precision"));
  for (auto& tr : res.transitions)
    CHECK(tr.to != thermal_state::paused);
  CHECK(policy.state() == thermal_state::warm);
  REQUIRE(policy.time_to_limit() == std::nullopt);
}

TEST_CASE("the time to limit is predicted while heating") {
  thermal_config cfg;
  cfg.prior = {0.25, 40, 25};
  thermal_policy policy{cfg};
  policy.observe({0, 50, 300}, 320);
  auto t = policy.time_to_limit();
  REQUIRE(t);
  CHECK(step(cfg.prior, 50, 320, *t) == Approx(90).epsilon(1e-9));
}

TEST_CASE("a broken temperature reading changes nothing") {
  thermal_policy policy{default_config()};
  CHECK_FALSE(policy.observe({0, NAN, 100}, 100));
  CHECK_FALSE(policy.observe({0.5, INFINITY, 100}, 100));
  CHECK(policy.state() == thermal_state::normal);
}

TEST_CASE("invalid thermal settings are refused with the setting named") {
  auto bad = [](auto change) {
    thermal_config cfg;
    change(cfg);
    return cfg;
  };
  CHECK_THROWS_WITH(
    thermal_policy(bad([](thermal_config& c) { c.margin_c = 0; })),
    Catch::Contains("margin_c"));
  CHECK_THROWS_WITH(
    thermal_policy(bad([](thermal_config& c) { c.hysteresis_c = 3; })),
    Catch::Contains("hysteresis_c"));
  CHECK_THROWS_WITH(
    thermal_policy(bad([](thermal_config& c) { c.horizon_s = 0.1; })),
    Catch::Contains("horizon_s"));
  CHECK_THROWS_WITH(
    thermal_policy(bad([](thermal_config& c) { c.interval_s = -1; })),
    Catch::Contains("interval_s"));
  CHECK_THROWS_WITH(
    thermal_policy(bad([](thermal_config& c) { c.limit_c = NAN; })),
    Catch::Contains("limit_c"));
  CHECK_THROWS_WITH(
    thermal_policy(bad([](thermal_config& c) { c.prior.tau_s = 0; })),
    Catch::Contains("prior"));
  CHECK_NOTHROW(thermal_config{}.validate());
}

TEST_CASE("thermal transitions map to pause, resume and warn audit events") {
  thermal_transition tr;
  tr.from = thermal_state::warm;
  tr.to = thermal_state::paused;
  tr.temp_c = 84.25;
  tr.reason = "predicted";
  auto ev = make_audit_event(tr, "gpu3");
  CHECK(ev.type == exo::audit::event_type::thermal_pause);
  CHECK(ev.details.at("device") == "gpu3");
  CHECK(ev.details.at("temp_c") == "84.25");
  tr.from = thermal_state::paused;
  tr.to = thermal_state::warm;
  CHECK(make_audit_event(tr, "gpu3").type
        == exo::audit::event_type::thermal_resume);
  tr.from = thermal_state::normal;
  CHECK(make_audit_event(tr, "gpu3").type
        == exo::audit::event_type::thermal_warn);
}

namespace {

/// A device under a steady 300 W whose cooler fails at 240 s (its thermal
/// resistance and time constant 2.5 times what they were: the steady state
/// moves from 79 C to 175 C, a rise of about 0.9 C/s at first), watched by
/// `policy` from 25 C. Returns the highest temperature and the
/// transitions.
sim_result failing_cooler(thermal_policy& policy) {
  sim_result out;
  rc_params good{0.18, 40, 25};
  rc_params bad{0.5, 100, 25};
  double dt = policy.config().interval_s;
  double temp = 25;
  double drawn = 0;
  for (double t = 0; t < 600; t += dt) {
    auto& truth = t < 240 ? good : bad;
    auto tr = policy.observe({t, temp, drawn}, 300);
    if (tr)
      out.transitions.push_back(*tr);
    bool paused = policy.state() == thermal_state::paused;
    bool just_paused = tr && tr->to == thermal_state::paused;
    double power = paused && !just_paused ? 0 : 300;
    for (int i = 0; i < 10; ++i) {
      temp = step(truth, temp, power, dt / 10);
      out.max_temp = std::max(out.max_temp, temp);
    }
    drawn = power;
  }
  return out;
}

/// The first transition to paused (REQUIREd).
thermal_transition first_pause(const sim_result& r) {
  for (auto& tr : r.transitions)
    if (tr.to == thermal_state::paused)
      return tr;
  FAIL("never paused");
  return {};
}

std::string log_of(const sim_result& r) {
  std::string log;
  for (auto& tr : r.transitions)
    log += std::to_string(tr.time_s) + " " + std::string{to_string(tr.to)}
           + ": " + tr.reason + "\n";
  return log;
}

} // namespace

TEST_CASE("a cooler that fails under load: the trend pauses the device "
          "well before the pause point, where the model fitted before the "
          "failure sees nothing coming") {
  auto cfg = default_config();
  thermal_policy policy{cfg};
  auto res = failing_cooler(policy);
  INFO(log_of(res));
  CHECK(res.max_temp < cfg.limit_c);
  auto tr = first_pause(res);
  CHECK(tr.time_s > 240); // the good cooler held it warm, never paused
  CHECK(tr.temp_c < cfg.pause_at() - 3);
  CHECK_THAT(tr.reason, Catch::Contains("rising"));
  CHECK_THAT(tr.reason, Catch::Contains("(trend; the "));
  CHECK_THAT(tr.reason, Catch::Contains(" model said "));
  // Without the trend it pauses only when the temperature itself reaches
  // the pause point (the fit follows the new cooler too late).
  auto off = cfg;
  off.trend_window_s = 0;
  thermal_policy blind{off};
  auto late = failing_cooler(blind);
  INFO(log_of(late));
  auto at = first_pause(late);
  CHECK(at.temp_c >= cfg.pause_at());
  CHECK_THAT(at.reason, Catch::Contains("reached the pause point"));
  CHECK(at.time_s > tr.time_s + 4);
  CHECK(late.max_temp > res.max_temp + 3);
}

TEST_CASE("a device at its steady state, or warming up as its model says, "
          "has no trend and no time to its limit") {
  auto cfg = default_config();
  thermal_policy policy{cfg};
  rc_params truth{0.25, 40, 25};
  auto res = simulate(policy, truth, [](double) { return 200.0; }, 900, 75,
                      0.3);
  CHECK(policy.trend_c_per_s() == 0);
  CHECK(policy.time_to_limit() == std::nullopt);
  CHECK(res.max_temp < 76);
  // A warm-up the model knows: 25 C toward 82.5 C (the warm band), the
  // model right from the start.
  auto known = cfg;
  known.prior = truth;
  thermal_policy warmup{known};
  auto w = simulate(warmup, truth, [](double) { return 230.0; }, 300, 25);
  INFO(log_of(w));
  for (auto& tr : w.transitions)
    CHECK(tr.to != thermal_state::paused);
}
