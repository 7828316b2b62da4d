#pragma once

/// Test support: run a program as a child process, capture its output, wait
/// with a deadline, send it signals. Used by the tests that run real
/// exo-node processes on 127.0.0.1.

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <sys/types.h>

namespace exo::test {

/// The path of a program built in this build tree ("runtime/node/exo-node").
std::string build_path(const std::string& relative);

/// A fresh, empty temporary directory (removed by the caller or left in /tmp).
std::string temp_dir(const std::string& prefix);

/// Writes `text` to `path`.
void write_file(const std::string& path, const std::string& text);
std::string read_file(const std::string& path);

class process {
public:
  /// Starts `argv[0]` with the given arguments; stdout and stderr are
  /// captured (stderr into its own buffer) by a thread of this object that
  /// reads them as they come: a child that prints a lot never blocks on a
  /// full pipe, however long the test goes without looking.
  explicit process(std::vector<std::string> argv,
                   std::vector<std::string> env = {});
  ~process(); ///< kills the child with SIGKILL if still running

  process(const process&) = delete;
  process& operator=(const process&) = delete;

  pid_t pid() const noexcept {
    return pid_;
  }

  /// Sends a signal.
  void signal(int sig);

  /// Waits for the exit; returns the exit code, 128 + signal when killed by
  /// one, or -1 on timeout (the child keeps running).
  int wait(std::chrono::milliseconds timeout);

  /// Waits up to `timeout` for `needle` to show up in stdout (in stderr
  /// with `in_stderr`). Returns whether it did.
  bool wait_for_output(const std::string& needle,
                       std::chrono::milliseconds timeout,
                       bool in_stderr = false);

  /// What the child printed so far.
  std::string out() const;
  std::string err() const;
  bool running();

private:
  /// The reader thread: appends what the pipes bring until both end or
  /// the object goes.
  void read_pipes();
  /// Waits (at most `bound`) for the reader to have read both pipes to
  /// their end (the child exited: what it printed last is in).
  void drain(std::chrono::milliseconds bound);
  /// After the child died by a signal and dumped core (a crash: an abort,
  /// a segfault), appends gdb's backtrace of every thread of the core to
  /// the captured stderr and removes the core; without gdb, says where the
  /// core is. A rare crash in CI becomes a failure that shows where.
  void read_core();

  std::string program_;
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  int wake_[2] = {-1, -1}; ///< written to stop the reader
  int status_ = -1;
  bool exited_ = false;
  mutable std::mutex mx_; ///< guards out_, err_, pipes_open_
  std::condition_variable grew_;
  std::string out_;
  std::string err_;
  int pipes_open_ = 2;
  std::thread reader_;
};

/// Runs a program to completion (deadline `timeout`), returning
/// {exit code, stdout, stderr}.
struct run_result {
  int code;
  std::string out;
  std::string err;
};
run_result run(std::vector<std::string> argv,
               std::chrono::milliseconds timeout = std::chrono::seconds(60));

} // namespace exo::test
