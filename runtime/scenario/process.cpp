#include "runtime/scenario/process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <thread>

namespace exo::scenario {

namespace {

volatile std::sig_atomic_t g_interrupted = 0;

extern "C" void on_interrupt(int) {
  g_interrupted = 1;
}

/// In the child, after fork: die with the parent, a clean environment.
void child_setup(pid_t parent) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent)
    _exit(127); // the runner is already gone
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  unsetenv("EXO_BACKENDS");
  // Several exo-node processes share this machine: OpenMP threads that
  // spin-wait after each parallel region (libgomp's default) take the core
  // the next pipeline stage needs, and a three-node run crawls. Sleeping
  // threads, unless the environment says otherwise (README.md).
  setenv("OMP_WAIT_POLICY", "passive", 0);
  if (std::getenv("XDG_RUNTIME_DIR") == nullptr)
    setenv("XDG_RUNTIME_DIR", "/tmp", 1);
  int devnull = open("/dev/null", O_RDONLY);
  if (devnull >= 0) {
    dup2(devnull, 0);
    close(devnull);
  }
}

[[noreturn]] void child_exec(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (auto& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execv(args[0], args.data());
  _exit(127);
}

int decode(int status) {
  if (WIFEXITED(status))
    return WEXITSTATUS(status);
  if (WIFSIGNALED(status))
    return 128 + WTERMSIG(status);
  return -1;
}

} // namespace

bool interrupted() noexcept {
  return g_interrupted != 0;
}

void install_interrupt_handlers() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

pid_t spawn_logged(const std::vector<std::string>& argv,
                   const std::string& log_path, const std::vector<int>& cpus) {
  int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
                0600);
  if (fd < 0)
    throw std::runtime_error("cannot open " + log_path + ": "
                             + std::strerror(errno));
  auto parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    close(fd);
    throw std::runtime_error(std::string{"fork failed: "}
                             + std::strerror(errno));
  }
  if (pid == 0) {
    child_setup(parent);
    dup2(fd, 1);
    dup2(fd, 2);
    if (!cpus.empty()) {
      cpu_set_t set;
      CPU_ZERO(&set);
      for (int c : cpus)
        CPU_SET(c, &set);
      if (sched_setaffinity(0, sizeof set, &set) != 0) {
        std::fprintf(stderr, "exo-scenario: cannot pin to the node's cpus: "
                             "%s\n", std::strerror(errno));
        _exit(127);
      }
    }
    child_exec(argv);
  }
  close(fd);
  return pid;
}

pid_t spawn_to_files(const std::vector<std::string>& argv,
                     const std::string& out_path, const std::string& err_path) {
  int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                 0600);
  if (out < 0)
    throw std::runtime_error("cannot open " + out_path + ": "
                             + std::strerror(errno));
  int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                 0600);
  if (err < 0) {
    std::string why = std::strerror(errno);
    close(out);
    throw std::runtime_error("cannot open " + err_path + ": " + why);
  }
  auto parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    std::string why = std::strerror(errno);
    close(out);
    close(err);
    throw std::runtime_error(std::string{"fork failed: "} + why);
  }
  if (pid == 0) {
    child_setup(parent);
    dup2(out, 1);
    dup2(err, 2);
    child_exec(argv);
  }
  close(out);
  close(err);
  return pid;
}

bool is_stopped(pid_t pid) {
  // /proc/PID/stat: "PID (COMM) STATE ..."; COMM may hold spaces and
  // parentheses, so the state follows the last ')'.
  std::ifstream in{"/proc/" + std::to_string(pid) + "/stat"};
  std::string stat;
  std::getline(in, stat);
  auto close_paren = stat.rfind(')');
  if (close_paren == std::string::npos || close_paren + 2 >= stat.size())
    return false;
  auto state = stat[close_paren + 2];
  return state == 'T' || state == 't';
}

bool still_running(pid_t pid, int& status) {
  int st = 0;
  auto r = waitpid(pid, &st, WNOHANG);
  if (r == 0)
    return true;
  status = r == pid ? decode(st) : -1;
  return false;
}

int wait_exit(pid_t pid, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = -1;
  while (still_running(pid, status)) {
    if (std::chrono::steady_clock::now() >= deadline)
      return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return status;
}

void terminate(pid_t pid, std::chrono::milliseconds grace) {
  int status = 0;
  if (!still_running(pid, status))
    return;
  kill(pid, SIGTERM);
  if (wait_exit(pid, grace) >= 0)
    return;
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
}

captured run_captured(const std::vector<std::string>& argv,
                      std::chrono::milliseconds timeout,
                      bool interruptible) {
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0)
    throw std::runtime_error("pipe failed");
  if (pipe2(err, O_CLOEXEC) != 0) {
    close(out[0]);
    close(out[1]);
    throw std::runtime_error("pipe failed");
  }
  auto parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    for (int fd : {out[0], out[1], err[0], err[1]})
      close(fd);
    throw std::runtime_error("fork failed");
  }
  if (pid == 0) {
    child_setup(parent);
    dup2(out[1], 1);
    dup2(err[1], 2);
    child_exec(argv);
  }
  close(out[1]);
  close(err[1]);
  captured c;
  auto deadline = t0 + timeout;
  bool open_out = true, open_err = true;
  char buf[65536];
  while (open_out || open_err) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                  deadline - clock::now())
                  .count();
    if (left <= 0 || (interruptible && interrupted()))
      break;
    pollfd fds[2] = {{open_out ? out[0] : -1, POLLIN, 0},
                     {open_err ? err[0] : -1, POLLIN, 0}};
    int n = poll(fds, 2, static_cast<int>(std::min<long>(left, 100)));
    if (n < 0 && errno != EINTR)
      break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0)
        continue;
      auto got = read(fds[i].fd, buf, sizeof buf);
      if (got > 0)
        (i == 0 ? c.out : c.err).append(buf, static_cast<size_t>(got));
      else if (got == 0 || (errno != EINTR && errno != EAGAIN))
        (i == 0 ? open_out : open_err) = false;
    }
  }
  close(out[0]);
  close(err[0]);
  int status = 0;
  if (open_out || open_err) {
    // Timed out (or interrupted): kill it.
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    c.code = -1;
  } else {
    // Both pipes closed: the child is (about to be) gone.
    c.code = wait_exit(pid, std::chrono::milliseconds(5000));
    if (c.code < 0) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
    }
  }
  c.seconds = std::chrono::duration<double>(clock::now() - t0).count();
  return c;
}

} // namespace exo::scenario
