#pragma once

/// Child processes for the scenario runner: a long-running one whose output
/// goes to a log file (exo-node), and a bounded run with captured output
/// (exo-console, exo-model). Children die with the runner (PR_SET_PDEATHSIG),
/// never inherit EXO_BACKENDS, and get OMP_WAIT_POLICY=passive unless the
/// environment sets it.

#include <chrono>
#include <string>
#include <vector>

#include <sys/types.h>

namespace exo::scenario {

/// Set by SIGINT/SIGTERM once install_interrupt_handlers() ran; every wait
/// of the runner checks it.
bool interrupted() noexcept;
void install_interrupt_handlers();

/// Starts argv[0] with stdout and stderr appended to `log_path`; with
/// `cpus`, the process runs on those CPUs only (its threads too).
/// Throws std::runtime_error when it cannot.
pid_t spawn_logged(const std::vector<std::string>& argv,
                   const std::string& log_path,
                   const std::vector<int>& cpus = {});

/// Starts argv[0] with stdout to `out_path` and stderr to `err_path`
/// (created or truncated). Throws std::runtime_error when it cannot.
pid_t spawn_to_files(const std::vector<std::string>& argv,
                     const std::string& out_path, const std::string& err_path);

/// Whether `pid` is stopped (by SIGSTOP), as /proc/PID/stat says.
bool is_stopped(pid_t pid);

/// Whether `pid` still runs; when it has ended, `status` gets its exit
/// status (128 + signal when killed by one).
bool still_running(pid_t pid, int& status);

/// Waits up to `timeout` for `pid` to end: its exit status (128 + signal),
/// or -1 when it still runs.
int wait_exit(pid_t pid, std::chrono::milliseconds timeout);

/// SIGTERM, up to `grace` to end, then SIGKILL; reaps the child.
void terminate(pid_t pid, std::chrono::milliseconds grace);

struct captured {
  int code = -1; ///< exit status (128 + signal); -1: timed out (killed)
  std::string out;
  std::string err;
  double seconds = 0;
};

/// Runs argv[0] to completion within `timeout` (killed after it). An
/// interrupt (interrupted()) kills it too, unless `interruptible` is false
/// (the commands of a cleanup must still run after Ctrl-C).
captured run_captured(const std::vector<std::string>& argv,
                      std::chrono::milliseconds timeout,
                      bool interruptible = true);

} // namespace exo::scenario
