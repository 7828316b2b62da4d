#pragma once

/// The sim backend: simulated devices built from named profiles. A simulated
/// device computes real results on the host, enforces its memory capacity,
/// spends time in proportion to its profile, heats up by a first-order RC
/// model of its power draw, and takes injected faults. It always says it is
/// simulated.

#include "backends/host_device.hpp"

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace exo::backend {

/// A simulated device's own time on the wall, as sleeps of at least a
/// quantum: a sleep per operation (microseconds each on a fast profile)
/// oversleeps by the timer's slack, tens of microseconds each, so a fast
/// device would run at the pace of its operation count and sit idle most
/// of the wall time. What a sleep oversleeps is credited to the next ones,
/// at most one quantum (a host that stalled is not made up for). Pure
/// logic: the caller sleeps.
class wall_pacer {
public:
  explicit wall_pacer(double quantum_s = 1e-3) : quantum_(quantum_s) {}
  /// Adds `seconds` of device time; returns how long to sleep now (the
  /// whole debt once it reaches the quantum), or 0.
  double owe(double seconds) noexcept {
    owed_ += seconds;
    return owed_ >= quantum_ ? owed_ : 0;
  }
  /// A sleep that owe() asked for took `took` seconds.
  void slept(double took) noexcept {
    owed_ -= took;
    if (owed_ < -quantum_)
      owed_ = -quantum_;
  }
  /// Seconds not slept yet (negative: credit for an oversleep).
  double owed() const noexcept {
    return owed_;
  }

private:
  double quantum_;
  double owed_ = 0;
};

/// What a simulated device is like.
struct sim_profile {
  std::string name;         ///< "a100-40g"
  std::string display_name; ///< "Simulated A100-40G-like"
  std::string vendor;
  std::string architecture;
  std::uint64_t memory_bytes = 0;
  std::uint32_t compute_units = 0;
  double flops = 0;                ///< FP32 FLOP/s
  double bandwidth = 0;            ///< bytes/s
  double idle_power_w = 0;
  double peak_power_w = 0;
  double thermal_resistance = 0;   ///< degrees C per watt
  double thermal_capacitance = 0;  ///< joules per degree C
  double ambient_c = 25;
  double throttle_c = 90;
};

/// Parses a profile document ({"profiles": [...]}). Errors name the key path.
result<std::vector<sim_profile>> parse_sim_profiles(const std::string& json);

/// The profiles shipped in config/sim-profiles.json (compiled in).
const std::vector<sim_profile>& builtin_sim_profiles();

/// One simulated device to create.
struct sim_device_spec {
  std::string profile; ///< a profile name
  std::string id;      ///< optional stable id; default "sim:<profile>:<n>"
  /// A fault (for scenarios): empty, or one sim_fault_error() accepts:
  /// "fail_allocations" (every allocation fails, and every growth of a
  /// buffer: device::resize), "vanished" (every operation fails with
  /// device_lost), "vanish_after:N" (the device
  /// vanishes at its N-th operation: a device lost mid-run) or
  /// "heat_after:N:C" (its temperature jumps C degrees at its N-th
  /// operation: a thermal spike mid-run) or "cooling:F" (a cooler F times
  /// worse than the profile's from the start; see below).
  std::string fault = {};
};

/// What is wrong with a sim_device_spec's fault name ("" when it is one of
/// those above; N in [1, 10^9], C in [1, 500]).
std::string sim_fault_error(const std::string& fault);

/// What is wrong with a fault injected into a running simulated device
/// (sim_device::inject_fault; "" when fine): one of the faults above, or
///   "fail_allocations:off"  allocations succeed again,
///   "fail_next_allocation"  only the next allocation fails,
///   "heat:C"                the temperature changes by C degrees now
///                           (C in [-500, 500], not 0; negative cools),
///   "cooling:F"             the cooler works F times worse (the thermal
///                           resistance is F times the profile's; F in
///                           [0.1, 20], 1 restores it): a fan that fails,
///                           a blocked vent — the device heats gradually
///                           while it works, toward its new steady state,
///   "hang"                  every operation blocks, as a hung kernel
///                           would, until "hang:off" or a vanish,
///   "hang:allocate"         every allocation blocks (a stage placed on
///                           it never gets its weights),
///   "hang:compute"          every kernel blocks (a stage's next step
///                           never ends),
///   "hang_after:N"          every operation blocks from the N-th one from
///                           now on (a kernel that hangs mid-run, at a
///                           moment armed beforehand: N in [1, 10^9]),
///   "hang:off"              a hang ends (blocked operations go on; a
///                           pending hang_after is disarmed),
///   "vanish_at:allocate"    the device vanishes at its next allocation,
///   "vanish_at:compute"     the device vanishes at its next kernel.
/// (Not configurable: the node's start verifies its devices. A device
/// that hangs no longer answers, not even a fault: one that is to vanish
/// at a moment is told beforehand.)
std::string sim_runtime_fault_error(const std::string& fault);

struct sim_options {
  std::vector<sim_profile> profiles; ///< empty: the built-in ones
  std::vector<sim_device_spec> devices;
  /// Wall seconds per simulated second; 0 runs on a virtual clock only (the
  /// device never sleeps; tests and scenarios drive time with advance()).
  double time_scale = 0;
};

/// A simulated device. Tests and scenarios reach its controls through
/// dynamic_cast<sim_device*> on a device of the sim backend.
class sim_device final : public host_device {
public:
  sim_device(sim_profile profile, std::string id, double time_scale);

  telemetry read_telemetry() override;
  /// Applies one of sim_runtime_fault_error()'s faults now.
  result<std::string> inject_fault(const std::string& spec) override;

  // -- fault injection -------------------------------------------------------
  /// The next allocation fails with out_of_memory and this reason.
  void fail_next_allocation(std::string reason);
  /// While set, every allocation fails with out_of_memory.
  void fail_allocations(bool on);
  /// The device disappears: every later operation fails with device_lost.
  void vanish();
  /// The device vanishes at its `ops`-th operation from now (0: never).
  void vanish_after(std::uint64_t ops);
  bool vanished() const noexcept {
    return gone_;
  }
  /// While set, every operation blocks (as a hung kernel would) until
  /// cleared or the device vanishes; clearing disarms a pending
  /// hang_after too (as hang_at(none)).
  void hang(bool on);
  /// Which operations a hang or a vanish waits for.
  enum class op_kind { none, every, allocations, kernels };
  /// Blocks the operations of `kind` from now (none: ends a hang and
  /// disarms a pending hang_after).
  void hang_at(op_kind kind);
  /// Every operation blocks from the `ops`-th one from now on (0: never).
  void hang_after(std::uint64_t ops);
  /// The device vanishes at its next operation of `kind` (none: never).
  void vanish_at(op_kind kind);
  /// Adds delta degrees to the temperature at once.
  void jump_temperature(double delta_c);
  /// Adds delta degrees at the `ops`-th operation from now (0: never).
  void heat_after(std::uint64_t ops, double delta_c);

  // -- simulated time --------------------------------------------------------
  /// Lets idle time pass (the device cools toward ambient at idle power).
  void advance(double seconds);
  /// Runs at `power_w` for `seconds` of simulated time (a synthetic load).
  void run_load(double power_w, double seconds);
  /// Seconds on the device's simulated clock.
  double now() const;
  double temperature() const;
  const sim_profile& profile() const noexcept {
    return profile_;
  }

protected:
  status admit(const char* what) override;
  void account(double bytes, double flops) override;

private:
  void integrate(double power_w, double seconds); // lock held
  void catch_up_with_wall(); // lock held

  sim_profile profile_;
  double time_scale_;
  std::atomic<bool> gone_{false};
  std::atomic<op_kind> hung_{op_kind::none};
  std::atomic<op_kind> vanish_at_{op_kind::none};
  std::atomic<bool> fail_allocs_{false};
  std::atomic<std::uint64_t> ops_left_{0}; ///< vanish_after; 0: never
  std::atomic<std::uint64_t> heat_ops_left_{0}; ///< heat_after; 0: never
  std::atomic<std::uint64_t> hang_ops_left_{0}; ///< hang_after; 0: never
  double heat_c_ = 0;
  std::string fail_next_alloc_;
  double now_ = 0;          // simulated seconds
  double temp_c_;           // current temperature
  double last_power_w_;
  double busy_since_read_ = 0; // simulated busy seconds since last reading
  double energy_since_read_ = 0; // joules since the last reading
  double cooling_ = 1; // the cooler's thermal resistance, times the profile's
  std::chrono::steady_clock::time_point op_began_; // the operation's admit
  wall_pacer pacer_; // the device's time slept a millisecond at a time
  double time_at_read_ = 0;
  std::chrono::steady_clock::time_point wall_start_;
};

std::unique_ptr<backend> make_sim_backend(sim_options opts);

} // namespace exo::backend
