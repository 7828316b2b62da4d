// The console's one command table (core/console/commands.hpp): what it
// parses, how it refuses, and the help made from it.

#include "core/console/commands.hpp"
#include "core/workload/run_options.hpp"

#include <catch2/catch.hpp>

#include <algorithm>

using namespace exo::console;

namespace {

/// A value of `type` that the option or argument accepts.
std::string sample(value_type type, double min, double max,
                   const std::vector<std::string>& choices) {
  switch (type) {
    case value_type::count:
      return std::to_string(static_cast<std::uint64_t>(
        std::min(max, std::max(min, 1.0))));
    case value_type::number:
      return min > 0 ? std::to_string(min) : "0.5";
    case value_type::choice:
      return choices.back();
    case value_type::size:
      return "4GiB";
    case value_type::duration:
      return "1h";
    default:
      return "some-value";
  }
}

std::string message_of(const std::string& line) {
  try {
    parse_line(line);
  } catch (const command_error& e) {
    return e.what();
  }
  return "(accepted)";
}

} // namespace

TEST_CASE("every form of the table parses with all its arguments and "
          "options") {
  for (auto& c : command_table()) {
    std::string line = c.name + (c.sub.empty() ? "" : " " + c.sub);
    for (auto& a : c.args)
      line += " " + sample(a.type, 0, 1e18, {});
    for (auto& o : c.options) {
      if (o.dashed)
        line += (o.name.size() == 1 ? " -" : " --") + o.name;
      else
        line += " " + o.name + "=";
      if (o.type != value_type::flag)
        line += (o.dashed ? " " : "") + sample(o.type, o.min, o.max, o.choices);
    }
    line += " auth=tok";
    INFO(line);
    auto p = parse_line(line);
    CHECK(p.spec == &c);
    CHECK(p.name == c.name);
    CHECK(p.sub == c.sub);
    CHECK(p.args.size() == c.args.size());
    CHECK(p.values.size() == c.options.size());
    CHECK(p.has_auth);
    CHECK(p.auth == "tok");
  }
}

TEST_CASE("console command lines give their arguments and typed options") {
  auto plan = parse_line("plan m.gguf ctx=512 objective=throughput --json");
  CHECK(plan.args == std::vector<std::string>{"m.gguf"});
  CHECK(plan.count("ctx", 0) == 512);
  CHECK(plan.text("objective") == "throughput");
  CHECK(plan.has("json"));
  CHECK_FALSE(plan.has("keep"));
  CHECK(parse_command("plan", "m.gguf context=64").count("ctx", 0) == 64);

  auto dev = parse_command("dev", "alloc gpu:0 4096 auth=exo1.a.b");
  CHECK(dev.sub == "alloc");
  CHECK(dev.args == std::vector<std::string>{"gpu:0", "4096"});
  CHECK(dev.auth == "exo1.a.b");

  auto run = parse_line("run --model m.gguf --prompt \"hello  world\" -n 4 "
                        "--temperature 0.7");
  CHECK(run.text("model") == "m.gguf");
  CHECK(run.text("prompt") == "hello  world");
  CHECK(run.count("n", 16) == 4);
  CHECK(run.number("temperature", 0) == Approx(0.7));

  // key=value options may come before the subcommand word.
  auto revoke = parse_command("token", "principal=bob revoke auth=t");
  CHECK(revoke.sub == "revoke");
  CHECK(revoke.text("principal") == "bob");
  CHECK(parse_command("thermal", "").sub.empty());
  CHECK(parse_line("actors n1").args == std::vector<std::string>{"n1"});
  CHECK(parse_line("cancel 3").args == std::vector<std::string>{"3"});
  CHECK(parse_line("   ").name.empty());
}

TEST_CASE("console command errors name the command, option or value") {
  CHECK(message_of("frobnicate") == "unknown command \"frobnicate\"");
  CHECK(message_of("dev launch gpu:0") == "unknown operation \"launch\"");
  CHECK(message_of("dev") == "no operation given");
  CHECK(message_of("audit wipe") == "unknown subcommand \"wipe\"");
  CHECK(message_of("plan m.gguf speed=9") == "unknown option \"speed\"");
  CHECK(message_of("run --model m --frob 1") == "unknown option \"--frob\"");
  CHECK(message_of("run --model") == "--model needs a value (FILE)");
  CHECK(message_of("run --model m --stages 0")
        == "--stages: '0' must be >= 1");
  CHECK(message_of("run --model m --stages 1025")
        == "--stages: '1025' is larger than 1024");
  CHECK(message_of("plan m.gguf ctx=-3") == "ctx: '-3' must be >= 0");
  CHECK(message_of("plan m.gguf objective=fast")
        == "objective must be one of latency, throughput, blend, not "
           "\"fast\"");
  CHECK(message_of("plan m.gguf blend=x")
        == "blend: 'x' is not a number (digits with an optional '-', '.' and "
           "exponent, e.g. 0.25 or 1e-3)");
  CHECK(message_of("plan a.gguf b.gguf") == "unexpected argument \"b.gguf\"");
  CHECK(message_of("nodes n1") == "unexpected argument \"n1\"");
  CHECK(message_of("inspect") == "inspect expects 1 argument(s), got 0");
  CHECK(message_of("dev alloc gpu:0") == "alloc expects 2 argument(s), got 1");
  CHECK(message_of("dev alloc gpu:0 -5")
        == "alloc SIZE: '-5' must not be negative");
  CHECK(message_of("dev alloc gpu:0 -1")
        == "alloc SIZE: '-1' must not be negative");
  CHECK(message_of("dev alloc gpu:0 4G")
        == "alloc SIZE: '4G' has an ambiguous unit 'G': use 4GiB (2^30) or "
           "4GB (10^9)");
  CHECK(message_of("dev free gpu:0 18446744073709551616")
        == "free HANDLE: '18446744073709551616' is larger than "
           "18446744073709551615");
  CHECK(message_of("cancel abc")
        == "cancel JOB: 'abc' is not an integer (digits only)");
  CHECK(message_of("plan m.gguf --json=1") == "--json takes no value");
  CHECK(message_of("dev sync gpu:0 auth=a auth=b") == "auth= given twice");
  CHECK(message_of("run --prompt \"open") == "unterminated quote");
}

TEST_CASE("help lists every command and help CMD every option") {
  auto all = help_text();
  for (auto& c : command_table()) {
    if (c.internal)
      continue;
    INFO(c.name << " " << c.sub);
    CHECK_THAT(all, Catch::Contains("  " + c.name
                                    + (c.sub.empty() ? "" : " " + c.sub)));
    auto one = help_text(c.name);
    CHECK_THAT(one, Catch::Contains(c.help));
    for (auto& o : c.options)
      if (!o.internal)
        CHECK_THAT(one, Catch::Contains(o.help));
  }
  CHECK_THAT(all, Catch::Contains("auth=TOKEN"));
  CHECK_THROWS_WITH(help_text("frobnicate"),
                    "unknown command \"frobnicate\"");
}

TEST_CASE("the console's run takes the options of exo-node run that are not "
          "local to a node") {
  const command_spec* run = nullptr;
  for (auto& c : command_table())
    if (c.name == "run")
      run = &c;
  REQUIRE(run != nullptr);
  for (auto& o : run->options) {
    INFO(o.name);
    std::vector<std::string> words{"--model", "m.gguf"};
    if (o.name != "model") {
      if (o.name == "system") // goes with --chat
        words.push_back("--chat");
      if (o.name == "draft-tokens") { // goes with --draft
        words.push_back("--draft");
        words.push_back("d.gguf");
      }
      words.push_back((o.name.size() == 1 ? "-" : "--") + o.name);
      if (o.name == "logit-bias") // text of its own form
        words.push_back("3=1.5,7=-100");
      else if (o.type != value_type::flag)
        words.push_back(sample(o.type, o.min, o.max, o.choices));
    }
    CHECK_NOTHROW(exo::workload::parse_run_options(words, false));
    if (o.type == value_type::count && o.max < 1e18) {
      // The same upper bound on both sides.
      words.back() = std::to_string(static_cast<std::uint64_t>(o.max) + 1);
      CHECK_THROWS(exo::workload::parse_run_options(words, false));
      CHECK_THROWS_AS(parse_command("run", "--model m --" + o.name + " "
                                             + words.back()),
                      command_error);
    }
  }
  // And no other: an option of exo-node run alone is refused by both.
  CHECK_THROWS(exo::workload::parse_run_options(
    {"--model", "m", "--config", "c.json"}, false));
  CHECK_THROWS_AS(parse_command("run", "--model m --config c.json"),
                  command_error);
}

TEST_CASE("token issue takes a ttl duration and a quota size, strictly") {
  CHECK(message_of("token issue principal=a ttl=1e9")
        == "ttl: '1e9' has an exponent: write the number out (digits, an "
           "optional '.', then a unit)");
  CHECK(message_of("token issue principal=a ttl=-1")
        == "ttl: '-1' must not be negative");
  CHECK(message_of("token issue principal=a ttl=1500ms")
        == "ttl: '1500ms' is not a whole number of s");
  CHECK(message_of("token issue principal=a ttl=1y")
        == "ttl: '1y' has an unknown unit 'y' (durations take ns, us, ms, s, "
           "m, h or d)");
  CHECK(message_of("token issue principal=a quota=4G")
        == "quota: '4G' has an ambiguous unit 'G': use 4GiB (2^30) or 4GB "
           "(10^9)");
  CHECK(message_of("token issue principal=a quota=-1")
        == "quota: '-1' must not be negative");
  CHECK(message_of("token issue principal=a quota=18446744073709551616")
        == "quota: '18446744073709551616' is larger than "
           "18446744073709551615");
  // Plain integers keep working: seconds and bytes.
  auto ok = parse_line("token issue principal=a ttl=3600 quota=4294967296");
  CHECK(ok.seconds("ttl", 0) == 3600);
  CHECK(ok.size("quota", 0) == 4294967296ull);
  auto units = parse_line("token issue principal=a ttl=1h quota=4GiB");
  CHECK(units.seconds("ttl", 0) == 3600);
  CHECK(units.size("quota", 0) == 4294967296ull);
  CHECK(parse_line("token issue principal=a ttl=7d").seconds("ttl", 0)
        == 7 * 86400);
  CHECK(parse_line("token issue principal=a quota=512MB").size("quota", 0)
        == 512000000);
  CHECK(parse_line("token issue principal=a").seconds("ttl", 86400) == 86400);
}

TEST_CASE("dev alloc takes a size, counts and numbers are strict") {
  CHECK(parse_line("dev alloc gpu:0 64MiB").args[1] == "64MiB");
  CHECK(parse_line("dev alloc gpu:0 4096").args[1] == "4096");
  // strtod took these: hex floats, '+', nan-like words.
  CHECK(message_of("run --model m --temperature 0x1p-1")
        == "--temperature: '0x1p-1' is not a number (digits with an optional "
           "'-', '.' and exponent, e.g. 0.25 or 1e-3)");
  CHECK(message_of("run --model m --top-p +0.5")
        == "--top-p: '+0.5' is not a number (digits with an optional '-', '.' "
           "and exponent, e.g. 0.25 or 1e-3)");
  CHECK(message_of("plan m.gguf blend=1e-400")
        == "blend: '1e-400' is too small to represent (rounds to 0)");
  CHECK(message_of("plan m.gguf blend=2") == "blend: '2' is larger than 1");
  auto p = parse_line("plan m.gguf ctx=00512 blend=.5");
  CHECK(p.count("ctx", 0) == 512);
  CHECK(p.number("blend", 0) == 0.5);
}

TEST_CASE("a console follows a job that moved - where to and in what order") {
  using J = job_follow;
  CHECK(follow_reading("lost node coord (127.0.0.1:4000): it stopped "
                       "answering (two pings of 1 s)")
        == J::node_lost);
  auto twice = "failed_state: job coord:1: job peer:1 was taken over by "
               "spare while this node was unreachable";
  CHECK(follow_reading(twice) == J::taken_over);
  CHECK(taken_over_by(twice) == "spare");
  CHECK(taken_over_by("job coord:1 was taken over by peer") == "peer");
  CHECK(taken_over_by("job coord:1 was taken over by peer; then x") == "peer");
  CHECK(taken_over_by("lost node coord").empty());
  CHECK(follow_reading("invalid_argument: attach: no job story on peer, "
                       "coord, spare")
        == J::not_found);
  CHECK(follow_reading("attach: no job story on peer") == J::not_found);
  // About the job itself: reported, not followed.
  CHECK(follow_reading("failed_state: job coord:1 is lost: coordinator coord "
                       "is dead, and its backup spare had not received the "
                       "model yet")
        == J::ended);
  CHECK(follow_reading("invalid_argument: run: -n must be at least 1")
        == J::ended);
  // The node a takeover named first, the node just lost last.
  std::vector<std::string> m{"coord", "peer", "spare"};
  CHECK(follow_order(m, "spare", "peer")
        == std::vector<std::string>{"spare", "coord", "peer"});
  CHECK(follow_order(m, "", "coord")
        == std::vector<std::string>{"peer", "spare", "coord"});
  CHECK(follow_order(m, "gone", "")
        == std::vector<std::string>{"coord", "peer", "spare"});
  // A node that names itself is asked last, not first again.
  CHECK(follow_order(m, "peer", "peer")
        == std::vector<std::string>{"coord", "spare", "peer"});
}
