// The console's history file: secrets never reach it, and it is private.

#include "runtime/console/line_editor.hpp"
#include "test/support/process.hpp"

#include <catch2/catch.hpp>

#include <sys/stat.h>

using exo::console::line_editor;
using exo::console::redact_secrets;

TEST_CASE("tokens typed at the console are redacted in the history file") {
  CHECK(redact_secrets("devices auth=exo1.abc.def")
        == "devices auth=<token>");
  CHECK(redact_secrets("token check exo1.abc.def  perm=run")
        == "token check <token>  perm=run");
  CHECK(redact_secrets("run --model m.gguf --prompt hello")
        == "run --model m.gguf --prompt hello");
}

TEST_CASE("the history file is written 0600 without the secrets, and read "
          "back") {
  auto dir = exo::test::temp_dir("exo-history");
  auto file = dir + "/history";
  exo::test::write_file(file, "nodes\n");
  ::chmod(file.c_str(), 0644);
  {
    line_editor ed{file};
    CHECK(ed.history() == std::vector<std::string>{"nodes"});
    ed.add_history("dev info gpu:0 auth=exo1.secret.sig");
    // This session recalls what was typed.
    CHECK(ed.history().back() == "dev info gpu:0 auth=exo1.secret.sig");
  }
  struct stat sb {};
  REQUIRE(::stat(file.c_str(), &sb) == 0);
  CHECK((sb.st_mode & 0777) == 0600);
  auto text = exo::test::read_file(file);
  CHECK(text == "nodes\ndev info gpu:0 auth=<token>\n");
  CHECK(text.find("exo1.") == std::string::npos);
}
