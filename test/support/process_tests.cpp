// The test harness's child processes (process.hpp): a child that crashes
// and dumps core gets its backtraces into the captured stderr, so that a
// rare crash in CI shows where it happened.

#include "test/support/process.hpp"

#include <catch2/catch.hpp>

#include <csignal>

#include <sys/stat.h>
#include <unistd.h>

using namespace exo::test;
using namespace std::chrono_literals;

namespace {

bool exists(const std::string& path) {
  struct stat sb {};
  return ::stat(path.c_str(), &sb) == 0;
}

} // namespace

TEST_CASE("a child that aborts is reported with its signal, and its core "
          "with gdb's backtraces") {
  process p{{"/bin/sh", "-c", "echo started; kill -ABRT $$"}};
  auto code = p.wait(120s);
  CHECK(code == 128 + 6);
  auto err = p.err();
  INFO(err);
  CHECK_THAT(err, Catch::Contains("/bin/sh (pid " + std::to_string(p.pid())
                                  + ") died by signal 6"));
  if (err.find("dumped core;") != std::string::npos) {
    // Read and removed.
    CHECK_THAT(err, Catch::Contains("--- end of the backtraces"));
    CHECK_THAT(err, Catch::Contains("#0"));
    CHECK_FALSE(exists("core." + std::to_string(p.pid())));
  } else {
    // A kernel that writes cores elsewhere, or no gdb: said so.
    CHECK((err.find("see core_pattern") != std::string::npos
           || err.find("no gdb here") != std::string::npos));
  }
}

TEST_CASE("a child that exits or is killed is not taken for a crash") {
  process ok{{"/bin/sh", "-c", "exit 3"}};
  CHECK(ok.wait(60s) == 3);
  CHECK(ok.err().empty());
  process killed{{"/bin/sh", "-c", "sleep 30"}};
  killed.signal(SIGKILL);
  CHECK(killed.wait(60s) == 128 + 9);
  CHECK(killed.err().empty());
}
