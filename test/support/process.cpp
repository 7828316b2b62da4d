#include "test/support/process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

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
}

process::~process() {
  if (!exited_ && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    waitpid(pid_, &status_, 0);
  }
  if (out_fd_ >= 0)
    close(out_fd_);
  if (err_fd_ >= 0)
    close(err_fd_);
}

void process::signal(int sig) {
  if (!exited_)
    ::kill(pid_, sig);
}

void process::pump(int timeout_ms) {
  pollfd fds[2] = {{out_fd_, POLLIN, 0}, {err_fd_, POLLIN, 0}};
  if (poll(fds, 2, timeout_ms) <= 0)
    return;
  char buf[65536];
  for (auto& f : fds) {
    if (f.revents == 0)
      continue;
    for (;;) {
      auto n = read(f.fd, buf, sizeof(buf));
      if (n <= 0)
        break;
      (f.fd == out_fd_ ? out_ : err_).append(buf, static_cast<size_t>(n));
    }
  }
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
  if (core.empty()) {
    err_ += text + " (not in the working directory: see core_pattern)\n";
    return;
  }
  if (::access("/usr/bin/gdb", X_OK) != 0) {
    err_ += text + ": " + core + " (no gdb here to read it)\n";
    return;
  }
  err_ += text + "; gdb's backtraces:\n";
  auto cmd = "timeout 180 /usr/bin/gdb -batch -nx -q -ex 'info threads' "
             "-ex 'thread apply all bt 30' '" + program_ + "' '" + core
             + "' 2>&1";
  if (FILE* f = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    std::size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0)
      err_.append(buf, n);
    ::pclose(f);
  }
  err_ += "--- end of the backtraces\n";
  ::unlink(core.c_str());
}

int process::wait(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (running()) {
    if (std::chrono::steady_clock::now() >= deadline)
      return -1;
    pump(10);
  }
  pump(0);
  pump(0);
  if (WIFEXITED(status_))
    return WEXITSTATUS(status_);
  if (WIFSIGNALED(status_))
    return 128 + WTERMSIG(status_);
  return -1;
}

bool process::wait_for_output(const std::string& needle,
                              std::chrono::milliseconds timeout,
                              bool in_stderr) {
  auto& text = in_stderr ? err_ : out_;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (text.find(needle) != std::string::npos)
      return true;
    if (std::chrono::steady_clock::now() >= deadline)
      return false;
    if (!running()) {
      pump(0);
      return text.find(needle) != std::string::npos;
    }
    pump(20);
  }
}

const std::string& process::out() {
  pump(0);
  return out_;
}

const std::string& process::err() {
  pump(0);
  return err_;
}

run_result run(std::vector<std::string> argv,
               std::chrono::milliseconds timeout) {
  process p{std::move(argv)};
  auto code = p.wait(timeout);
  return {code, p.out(), p.err()};
}

} // namespace exo::test
