// exo::text::line (core/text/line.hpp): what a statement streams reaches
// its stream as one write, when the statement ends; lines written by
// several threads to one stdio stream never interleave.

#include "core/text/line.hpp"

#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

TEST_CASE("a line is written whole when its statement ends") {
  std::ostringstream out;
  {
    exo::text::line l(out);
    l << "exo-node " << std::string("n1") << ": " << 42 << ' ' << std::fixed
      << std::setprecision(1) << 2.25 << std::endl;
    CHECK(out.str().empty()); // nothing before the end
  }
  CHECK(out.str() == "exo-node n1: 42 2.2\n");
  exo::text::line(out) << "second" << std::flush;
  CHECK(out.str() == "exo-node n1: 42 2.2\nsecond");
}

TEST_CASE("lines of several threads on one stdio stream do not interleave") {
  // std::cout through a file: each thread writes long lines in pieces.
  char path[] = "/tmp/exo-line-XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  REQUIRE(std::freopen(path, "w", stdout) != nullptr);
  const std::string piece(200, 'x');
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i)
        exo::text::line(std::cout)
          << "thread " << t << " line " << i << ": " << piece << piece
          << " end" << std::endl;
    });
  for (auto& t : ts)
    t.join();
  std::fflush(stdout);
  std::ifstream in{path};
  std::string l;
  int lines = 0;
  while (std::getline(in, l)) {
    INFO(l.substr(0, 80));
    REQUIRE(l.rfind("thread ", 0) == 0);
    REQUIRE(l.size() > 400);
    REQUIRE(l.compare(l.size() - 4, 4, " end") == 0);
    ++lines;
  }
  CHECK(lines == 800);
  std::remove(path);
}
