#include "core/thermal/rc_fitter.hpp"
#include "core/thermal/rc_model.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <random>

using namespace exo::thermal;

namespace {

/// Integrates the ODE with classic Runge-Kutta (independent of the closed
/// form in `step`).
double integrate_rk4(const rc_params& p, double temp, double power,
                     double seconds, int steps) {
  double h = seconds / steps;
  for (int i = 0; i < steps; ++i) {
    auto k1 = derivative(p, temp, power);
    auto k2 = derivative(p, temp + h / 2 * k1, power);
    auto k3 = derivative(p, temp + h / 2 * k2, power);
    auto k4 = derivative(p, temp + h * k3, power);
    temp += h / 6 * (k1 + 2 * k2 + 2 * k3 + k4);
  }
  return temp;
}

} // namespace

TEST_CASE("the exact step matches a numerical solution of the ODE") {
  rc_params p{0.25, 40, 22};
  for (double power : {0.0, 50.0, 300.0}) {
    for (double t0 : {22.0, 60.0, 95.0}) {
      for (double dt : {0.1, 5.0, 120.0}) {
        CHECK(step(p, t0, power, dt)
              == Approx(integrate_rk4(p, t0, power, dt, 20000)).epsilon(1e-9));
      }
    }
  }
}

TEST_CASE("the model settles at ambient plus P times R") {
  rc_params p{0.2, 30, 25};
  CHECK(steady_state(p, 300) == Approx(85));
  CHECK(step(p, 40, 300, 30 * 40) == Approx(85));
  CHECK(derivative(p, 85, 300) == Approx(0).margin(1e-12));
  CHECK(p.capacitance_j_per_c() == Approx(150));
}

TEST_CASE("steps compose: two steps equal one step over the sum") {
  rc_params p{0.3, 12, 18};
  auto a = step(p, step(p, 30, 200, 1.7), 200, 2.9);
  CHECK(a == Approx(step(p, 30, 200, 4.6)).epsilon(1e-12));
}

TEST_CASE("the time to reach a temperature inverts the closed form") {
  rc_params p{0.25, 40, 25};
  auto t = time_to_reach(p, 50, 300, 85);
  REQUIRE(t);
  CHECK(step(p, 50, 300, *t) == Approx(85).epsilon(1e-9));
  CHECK(time_to_reach(p, 90, 300, 85) == 0.0);
  CHECK_FALSE(time_to_reach(p, 50, 100, 85)); // settles at 50 C
  CHECK(predict_max(p, 80, 0, 10) == 80);
  CHECK(predict_max(p, 50, 300, 10) == Approx(step(p, 50, 300, 10)));
}

TEST_CASE("the fitter recovers R, tau and ambient from noisy samples") {
  rc_params truth{0.22, 35, 27};
  double dt = 0.5;
  rc_fitter fitter{dt, 4000};
  std::mt19937 rng{7};
  std::uniform_real_distribution<double> level{0, 350};
  std::normal_distribution<double> noise{0, 0.05};
  double temp = 27;
  double power = 0;
  for (int k = 0; k < 3000; ++k) {
    if (k % 60 == 0)
      power = level(rng); // a new load every 30 s
    temp = step(truth, temp, power, dt);
    fitter.add({(k + 1) * dt, temp + noise(rng), power});
  }
  auto fit = fitter.fit();
  REQUIRE(fit);
  CHECK(fit->params.resistance_c_per_w == Approx(0.22).epsilon(0.05));
  CHECK(fit->params.tau_s == Approx(35).epsilon(0.08));
  CHECK(fit->params.ambient_c == Approx(27).margin(1.0));
  CHECK(fit->rms_error_c < 0.2);
}

TEST_CASE("the fitter refuses to fit when the power never varied") {
  rc_params truth{0.22, 35, 27};
  rc_fitter fitter{0.5};
  double temp = 27;
  for (int k = 0; k < 200; ++k) {
    temp = step(truth, temp, 150, 0.5);
    fitter.add({k * 0.5, temp, 150});
  }
  std::string why;
  CHECK_FALSE(fitter.fit(&why));
  CHECK_THAT(why, Catch::Contains("vary"));
  rc_fitter few{0.5};
  few.add({0, 30, 0});
  CHECK_FALSE(few.fit(&why));
  CHECK_THAT(why, Catch::Contains("fewer"));
}

TEST_CASE("the fitter ignores unevenly spaced pairs and broken readings") {
  rc_params truth{0.3, 20, 25};
  rc_fitter fitter{1.0};
  double temp = 25, t = 0;
  for (int k = 0; k < 400; ++k) {
    double power = (k / 20) % 2 ? 250 : 20;
    double dt = k % 7 == 0 ? 3.0 : 1.0; // a missed sample now and then
    temp = step(truth, temp, power, dt);
    t += dt;
    fitter.add({t, temp, power});
    if (k % 11 == 0)
      fitter.add({t + 0.5, NAN, power});
  }
  auto fit = fitter.fit();
  REQUIRE(fit);
  CHECK(fit->params.resistance_c_per_w == Approx(0.3).epsilon(0.01));
  CHECK(fit->params.tau_s == Approx(20).epsilon(0.01));
}

TEST_CASE("the fitter refuses a non-positive interval or a tiny window") {
  CHECK_THROWS_AS(rc_fitter(0.0), std::invalid_argument);
  CHECK_THROWS_AS(rc_fitter(1.0, 2), std::invalid_argument);
}
