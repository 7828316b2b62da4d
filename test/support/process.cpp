#include "test/support/process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <stdexcept>

extern char** environ;

namespace exo::test {

std::string build_path(const std::string& relative) {
  const char* dir = std::getenv("EXO_TEST_BUILD_DIR");
  return std::string{dir ? dir : EXO_BUILD_DIR} + "/" + relative;
}

std::string temp_dir(const std::string& prefix) {
  std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr)
    throw std::runtime_error("mkdtemp failed");
  return buf.data();
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out{path, std::ios::binary | std::ios::trunc};
  out << text;
}

std::string read_file(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

process::process(std::vector<std::string> argv,
                 std::vector<std::string> env) {
  int out[2], err[2];
  if (pipe(out) != 0 || pipe(err) != 0)
    throw std::runtime_error("pipe failed");
  program_ = argv.empty() ? std::string{} : argv[0];
  pid_ = fork();
  if (pid_ < 0)
    throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    // A test killed before its destructors run (a signal, a pipe closed
    // under it) must not leave exo-node processes behind.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    // A crash leaves a core for read_core() (where the kernel writes it
    // into the working directory: core_pattern "core", as here).
    rlimit core{};
    if (getrlimit(RLIMIT_CORE, &core) == 0) {
      core.rlim_cur = core.rlim_max;
      setrlimit(RLIMIT_CORE, &core);
    }
    dup2(out[1], 1);
    dup2(err[1], 2);
    close(out[0]);
    close(err[0]);
    close(out[1]);
    close(err[1]);
    int devnull = open("/dev/null", O_RDONLY);
    dup2(devnull, 0);
    // Several exo-node processes share this machine's two cores: OpenMP
    // threads that spin-wait after each parallel region (libgomp's default)
    // steal the core the next stage needs, and a three-node pipeline ran
    // 100x slower than with sleeping threads. Tests set it unless told.
    if (!std::getenv("OMP_WAIT_POLICY"))
      putenv(const_cast<char*>("OMP_WAIT_POLICY=passive"));
    for (auto& e : env)
      putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> args;
    for (auto& a : argv)
      args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  out_fd_ = out[0];
  err_fd_ = err[0];
  fcntl(out_fd_, F_SETFL, O_NONBLOCK);
  fcntl(err_fd_, F_SETFL, O_NONBLOCK);
  if (pipe(wake_) != 0)
    throw std::runtime_error("pipe failed");
  reader_ = std::thread{[this] { read_pipes(); }};
}

process::~process() {
  if (!exited_ && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    waitpid(pid_, &status_, 0);
  }
  // The reader stops at once (a grandchild may still hold the pipes).
  if (write(wake_[1], "x", 1) < 0) {
  }
  reader_.join();
  for (int fd : {out_fd_, err_fd_, wake_[0], wake_[1]})
    if (fd >= 0)
      close(fd);
}

void process::read_pipes() {
  bool open[2] = {true, true};
  char buf[65536];
  while (open[0] || open[1]) {
    pollfd fds[3] = {{open[0] ? out_fd_ : -1, POLLIN, 0},
                     {open[1] ? err_fd_ : -1, POLLIN, 0},
                     {wake_[0], POLLIN, 0}};
    if (poll(fds, 3, -1) < 0) {
      if (errno == EINTR)
        continue;
      break;
    }
    if (fds[2].revents != 0)
      break;
    for (int i = 0; i < 2; ++i) {
      if (!open[i] || fds[i].revents == 0)
        continue;
      for (;;) {
        auto n = read(fds[i].fd, buf, sizeof(buf));
        if (n > 0) {
          std::lock_guard<std::mutex> guard{mx_};
          (i == 0 ? out_ : err_).append(buf, static_cast<size_t>(n));
          grew_.notify_all();
          continue;
        }
        if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
          open[i] = false; // the child (and all who held it) closed it
          std::lock_guard<std::mutex> guard{mx_};
          --pipes_open_;
          grew_.notify_all();
        }
        if (n < 0 && errno == EINTR)
          continue;
        break;
      }
    }
  }
  std::lock_guard<std::mutex> guard{mx_};
  pipes_open_ = 0;
  grew_.notify_all();
}

void process::drain(std::chrono::milliseconds bound) {
  std::unique_lock<std::mutex> lock{mx_};
  grew_.wait_for(lock, bound, [this] { return pipes_open_ == 0; });
}

void process::signal(int sig) {
  if (!exited_)
    ::kill(pid_, sig);
}

bool process::running() {
  if (exited_)
    return false;
  if (waitpid(pid_, &status_, WNOHANG) == pid_) {
    exited_ = true;
    read_core();
  }
  return !exited_;
}

void process::read_core() {
  if (!WIFSIGNALED(status_) || !WCOREDUMP(status_))
    return;
  std::string core;
  for (auto name : {"core." + std::to_string(pid_), std::string{"core"}})
    if (struct stat sb{}; ::stat(name.c_str(), &sb) == 0 && S_ISREG(sb.st_mode)
                          && sb.st_mtime >= ::time(nullptr) - 600) {
      core = name;
      break;
    }
  std::string text = "\n--- " + program_ + " (pid " + std::to_string(pid_)
                     + ") died by signal "
                     + std::to_string(WTERMSIG(status_)) + " ("
                     + strsignal(WTERMSIG(status_)) + ") and dumped core";
  auto add = [this](const std::string& more) {
    std::lock_guard<std::mutex> guard{mx_};
    err_ += more;
  };
  if (core.empty()) {
    add(text + " (not in the working directory: see core_pattern)\n");
    return;
  }
  if (::access("/usr/bin/gdb", X_OK) != 0) {
    add(text + ": " + core + " (no gdb here to read it)\n");
    return;
  }
  std::string told = text + "; gdb's backtraces:\n";
  auto cmd = "timeout 180 /usr/bin/gdb -batch -nx -q -ex 'info threads' "
             "-ex 'thread apply all bt 30' '" + program_ + "' '" + core
             + "' 2>&1";
  if (FILE* f = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    std::size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0)
      told.append(buf, n);
    ::pclose(f);
  }
  add(told + "--- end of the backtraces\n");
  ::unlink(core.c_str());
}

int process::wait(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (running()) {
    if (std::chrono::steady_clock::now() >= deadline)
      return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  drain(std::chrono::seconds(2)); // what it printed last
  if (WIFEXITED(status_))
    return WEXITSTATUS(status_);
  if (WIFSIGNALED(status_))
    return 128 + WTERMSIG(status_);
  return -1;
}

bool process::wait_for_output(const std::string& needle,
                              std::chrono::milliseconds timeout,
                              bool in_stderr) {
  const auto& text = in_stderr ? err_ : out_;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock<std::mutex> lock{mx_};
  for (;;) {
    if (text.find(needle) != std::string::npos)
      return true;
    if (std::chrono::steady_clock::now() >= deadline || pipes_open_ == 0)
      return false;
    // Woken by new output; a child that exits with its pipes held open
    // elsewhere is noticed within 50 ms.
    grew_.wait_for(lock, std::chrono::milliseconds(50));
    if (!exited_) {
      lock.unlock();
      const bool alive = running();
      lock.lock();
      if (!alive) {
        lock.unlock();
        drain(std::chrono::seconds(2));
        lock.lock();
        return text.find(needle) != std::string::npos;
      }
    }
  }
}

std::string process::out() const {
  std::lock_guard<std::mutex> guard{mx_};
  return out_;
}

std::string process::err() const {
  std::lock_guard<std::mutex> guard{mx_};
  return err_;
}

run_result run(std::vector<std::string> argv,
               std::chrono::milliseconds timeout) {
  process p{std::move(argv)};
  auto code = p.wait(timeout);
  return {code, p.out(), p.err()};
}

} // namespace exo::test
