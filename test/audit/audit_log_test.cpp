#include "core/audit/audit_command.hpp"
#include "core/audit/audit_log.hpp"
#include "core/audit/log_files.hpp"
#include "core/audit/record.hpp"
#include "core/audit/verify.hpp"
#include "test/audit/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <sstream>

using namespace exo::audit;
using exo::test::join_lines;
using exo::test::lines_of;
using exo::test::slurp;
using exo::test::spit;
using exo::test::temp_dir;

namespace {

/// verify() that requires the log to start at record 1.
verify_options genesis() {
  verify_options o;
  o.require_genesis = true;
  return o;
}

/// A clock that advances 1 ms per reading, starting at 1,000,000 s.
std::function<std::int64_t()> fake_clock() {
  auto t = std::make_shared<std::int64_t>(1000000ll * 1000000);
  return [t] { return *t += 1000; };
}

audit_log_options options(const temp_dir& dir) {
  audit_log_options opts;
  opts.directory = dir.path();
  opts.node = "node-1";
  opts.clock = fake_clock();
  return opts;
}

event make_event(std::size_t i) {
  static const event_type types[] = {event_type::device_allocate,
                                     event_type::access_denied,
                                     event_type::thermal_pause};
  static const char* principals[] = {"alice", "bob"};
  event ev;
  ev.type = types[i % 3];
  ev.principal = principals[i % 2];
  ev.details = {{"i", std::to_string(i)}};
  return ev;
}

/// Writes `n` records into a single file and returns its path.
std::string write_log(const temp_dir& dir, std::size_t n) {
  audit_log log{options(dir)};
  for (std::size_t i = 0; i < n; ++i)
    log.append(make_event(i));
  return log.current_file();
}

int run_cli(std::vector<std::string> args, std::string& out_text,
            std::string& err_text) {
  args.insert(args.begin(), "audit");
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  std::ostringstream out, err;
  int rc = run_audit_command(static_cast<int>(argv.size()), argv.data(), out,
                             err);
  out_text = out.str();
  err_text = err.str();
  return rc;
}

} // namespace

TEST_CASE("appended records form an intact chain from the genesis hash") {
  temp_dir dir;
  auto path = write_log(dir, 10);
  auto lines = lines_of(slurp(path));
  REQUIRE(lines.size() == 10);
  record_reader reader;
  std::string prev{genesis_hash};
  for (std::size_t i = 0; i < lines.size(); ++i) {
    record r;
    REQUIRE(reader.read(lines[i], r) == "");
    CHECK(r.seq == i + 1);
    CHECK(r.node == "node-1");
    CHECK(r.prev == prev);
    prev = r.hash;
  }
  auto res = verify({path}, genesis());
  CHECK(res.ok);
  CHECK(res.records == 10);
  CHECK(res.last_seq == 10);
  CHECK(res.last_hash == prev);
}

TEST_CASE("verify names a modified record") {
  temp_dir dir;
  auto path = write_log(dir, 10);
  auto lines = lines_of(slurp(path));
  auto pos = lines[4].find("\"i\":\"4\"");
  REQUIRE(pos != std::string::npos);
  lines[4].replace(pos, 7, "\"i\":\"9\"");
  spit(path, join_lines(lines));
  auto res = verify({path});
  REQUIRE_FALSE(res.ok);
  CHECK(res.bad_seq == 5u);
  CHECK(res.bad_file == path);
  CHECK(res.bad_line == 5);
  CHECK_THAT(res.reason, Catch::Contains("modified"));
}

TEST_CASE("verify detects a record rewritten with a valid hash of its own") {
  temp_dir dir;
  auto path = write_log(dir, 10);
  auto lines = lines_of(slurp(path));
  record_reader reader;
  record r;
  REQUIRE(reader.read(lines[3], r) == "");
  r.principal = "mallory";
  sha256 hasher;
  auto forged = seal_record(r, hasher);
  forged.pop_back();
  lines[3] = forged;
  spit(path, join_lines(lines));
  auto res = verify({path});
  REQUIRE_FALSE(res.ok);
  CHECK(res.bad_seq == 5u);
  CHECK_THAT(res.reason, Catch::Contains("\"prev\""));
}

TEST_CASE("verify names a removed record") {
  temp_dir dir;
  auto path = write_log(dir, 10);
  auto lines = lines_of(slurp(path));
  lines.erase(lines.begin() + 6);
  spit(path, join_lines(lines));
  auto res = verify({path});
  REQUIRE_FALSE(res.ok);
  CHECK(res.bad_seq == 7u);
  CHECK_THAT(res.reason, Catch::Contains("removed"));
}

TEST_CASE("verify detects a removed first record when the chain must start "
          "at genesis") {
  temp_dir dir;
  auto path = write_log(dir, 5);
  auto lines = lines_of(slurp(path));
  lines.erase(lines.begin());
  spit(path, join_lines(lines));
  CHECK(verify({path}).ok);
  auto res = verify({path}, genesis());
  REQUIRE_FALSE(res.ok);
  CHECK(res.bad_seq == 1u);
}

TEST_CASE("verify names an inserted record") {
  temp_dir dir;
  auto path = write_log(dir, 10);
  auto lines = lines_of(slurp(path));
  lines.insert(lines.begin() + 3, lines[1]); // a replayed copy of record 2
  spit(path, join_lines(lines));
  auto res = verify({path});
  REQUIRE_FALSE(res.ok);
  CHECK(res.bad_seq == 4u);
  CHECK(res.bad_line == 4);
  CHECK_THAT(res.reason, Catch::Contains("inserted"));
}

TEST_CASE("verify names reordered records") {
  temp_dir dir;
  auto path = write_log(dir, 10);
  auto lines = lines_of(slurp(path));
  std::swap(lines[2], lines[3]);
  spit(path, join_lines(lines));
  auto res = verify({path});
  REQUIRE_FALSE(res.ok);
  CHECK(res.bad_seq == 3u);
  CHECK_THAT(res.reason, Catch::Contains("reordered"));
}

TEST_CASE("verify reports a garbage file as bad rather than crashing") {
  temp_dir dir;
  auto path = dir.file("garbage.jsonl");
  spit(path, std::string("\x00\xff{{{\n", 6) + std::string(300, '"') + "\n");
  auto res = verify({path});
  CHECK_FALSE(res.ok);
  CHECK_FALSE(res.reason.empty());
  CHECK_THROWS_AS(verify({dir.file("missing.jsonl")}), audit_error);
}

TEST_CASE("records stay buffered until the buffer is full or flushed") {
  temp_dir dir;
  auto opts = options(dir);
  opts.buffer_records = 10;
  audit_log log{opts};
  for (std::size_t i = 0; i < 9; ++i)
    log.append(make_event(i));
  CHECK(log.buffered() == 9);
  CHECK(slurp(log.current_file()).empty());
  log.append(make_event(9));
  CHECK(log.buffered() == 0);
  CHECK(lines_of(slurp(log.current_file())).size() == 10);
  log.append(make_event(10));
  CHECK(lines_of(slurp(log.current_file())).size() == 10);
  log.flush();
  CHECK(lines_of(slurp(log.current_file())).size() == 11);
}

TEST_CASE("every-record fsync policy writes each record at once") {
  temp_dir dir;
  auto opts = options(dir);
  opts.sync = fsync_policy::every_record;
  audit_log log{opts};
  log.append(make_event(0));
  CHECK(log.buffered() == 0);
  CHECK(lines_of(slurp(log.current_file())).size() == 1);
}

TEST_CASE("the destructor flushes buffered records") {
  temp_dir dir;
  std::string path;
  {
    audit_log log{options(dir)};
    log.append(make_event(0));
    log.append(make_event(1));
    path = log.current_file();
    CHECK(slurp(path).empty());
  }
  CHECK(lines_of(slurp(path)).size() == 2);
}

TEST_CASE("a torn last line is truncated on open and the chain continues") {
  temp_dir dir;
  auto path = write_log(dir, 5);
  auto good = slurp(path);
  auto lines = lines_of(good);
  // A crash in the middle of writing record 6.
  spit(path, good + lines[4].substr(0, 40));
  CHECK(verify({path}).torn_tail);
  {
    audit_log log{options(dir)};
    CHECK(log.recovery().truncated_bytes == 40);
    CHECK(log.recovery().last_seq == 5);
    CHECK(slurp(path) == good);
    CHECK(log.append(make_event(5)) == 6);
  }
  auto res = verify({path}, genesis());
  CHECK(res.ok);
  CHECK_FALSE(res.torn_tail);
  CHECK(res.last_seq == 6);
}

TEST_CASE("a large log is recovered from its end, whatever the torn tail's "
          "length") {
  temp_dir dir;
  // About 1 MB of records: recovery reads a growing window from the end.
  auto path = write_log(dir, 6000);
  auto good = slurp(path);
  REQUIRE(good.size() > (512u << 10));
  struct tail_case {
    std::string tail;
    std::size_t dropped;
  };
  // A short cut record; a torn tail longer than the first window (64 KiB)
  // with no newline; and whole garbage lines spanning several windows.
  std::string garbage_lines;
  for (int i = 0; i < 3000; ++i)
    garbage_lines += std::string(90, 'x') + "\n";
  for (auto& c : {tail_case{"{\"seq\":6001,\"ti", 1},
                  tail_case{std::string(200u << 10, 'y'), 1},
                  tail_case{garbage_lines, 3000}}) {
    spit(path, good + c.tail);
    audit_log log{options(dir)};
    CHECK(log.recovery().truncated_bytes == c.tail.size());
    CHECK(log.recovery().dropped_lines == c.dropped);
    CHECK(log.recovery().last_seq == 6000);
    CHECK(slurp(path) == good);
  }
  {
    audit_log log{options(dir)};
    CHECK(log.recovery().truncated_bytes == 0);
    CHECK(log.append(make_event(6000)) == 6001);
  }
  CHECK(verify({path}, genesis()).ok);
  // What recovery reads: the end of the file only.
  auto tail = read_tail(path, 100);
  auto all = slurp(path);
  CHECK(tail.size == all.size());
  CHECK(tail.offset == all.size() - 100);
  CHECK(tail.bytes == all.substr(all.size() - 100));
  CHECK(read_tail(path, 1u << 30).bytes == all);
  CHECK_THROWS_WITH(read_tail(dir.path() + "/none.jsonl", 10),
                    Catch::Contains("cannot open"));
}

TEST_CASE("a tail of zero bytes after a crash is dropped on open") {
  temp_dir dir;
  auto path = write_log(dir, 3);
  auto good = slurp(path);
  spit(path, good + std::string(100, '\0') + "\n" + std::string(50, '\0'));
  audit_log log{options(dir)};
  CHECK(log.recovery().dropped_lines == 2);
  CHECK(log.last_seq() == 3);
  log.append(make_event(3));
  log.flush();
  CHECK(verify({path}, genesis()).ok);
}

TEST_CASE("reopening a log continues its sequence and chain") {
  temp_dir dir;
  write_log(dir, 4);
  std::string path;
  {
    audit_log log{options(dir)};
    CHECK(log.recovery().truncated_bytes == 0);
    CHECK(log.append(make_event(4)) == 5);
    path = log.current_file();
  }
  auto res = verify({path}, genesis());
  CHECK(res.ok);
  CHECK(res.records == 5);
}

TEST_CASE("the audit folder is private (0700) and its files 0600") {
  namespace fs = std::filesystem;
  temp_dir dir;
  auto opts = options(dir);
  opts.directory = dir.file("audit");
  // An existing folder and an older file with looser modes are tightened.
  fs::create_directories(opts.directory);
  fs::permissions(opts.directory, fs::perms::owner_all | fs::perms::group_read
                                    | fs::perms::group_exec
                                    | fs::perms::others_read
                                    | fs::perms::others_exec);
  {
    audit_log log{opts};
    log.append(make_event(0));
  }
  auto file = opts.directory + "/audit-000001.jsonl";
  REQUIRE(fs::exists(file));
  fs::permissions(file, fs::perms::owner_read | fs::perms::owner_write
                          | fs::perms::group_read | fs::perms::others_read);
  audit_log log{opts};
  log.append(make_event(1));
  log.flush();
  auto mode = [](const std::string& p) {
    return fs::status(p).permissions() & fs::perms::mask;
  };
  CHECK(mode(opts.directory) == fs::perms::owner_all);
  CHECK(mode(file) == (fs::perms::owner_read | fs::perms::owner_write));
  // A file started by rotation is private too.
  opts.max_file_bytes = 1024;
  opts.directory = dir.file("rotated");
  audit_log small{opts};
  for (std::size_t i = 0; i < 40; ++i)
    small.append(make_event(i));
  small.flush();
  CHECK(small.current_file() != opts.directory + "/audit-000001.jsonl");
  CHECK(mode(small.current_file())
        == (fs::perms::owner_read | fs::perms::owner_write));
  CHECK(mode(opts.directory) == fs::perms::owner_all);
}

TEST_CASE("rotation starts numbered files and carries the chain across them") {
  temp_dir dir;
  auto opts = options(dir);
  opts.max_file_bytes = 2048;
  opts.buffer_records = 7;
  {
    audit_log log{opts};
    for (std::size_t i = 0; i < 60; ++i)
      log.append(make_event(i));
  }
  auto files = list_log_files(dir.path(), "audit");
  REQUIRE(files.size() >= 3);
  std::vector<std::string> paths;
  for (std::size_t i = 0; i < files.size(); ++i) {
    CHECK(files[i].index == i + 1);
    CHECK(files[i].path
          == dir.file(i == 0 ? "audit-000001.jsonl"
                             : log_file_name("audit", i + 1)));
    CHECK(slurp(files[i].path).size() <= 2048);
    paths.push_back(files[i].path);
  }
  // The first record of file 2 links to the last record of file 1.
  record_reader reader;
  record last1, first2;
  REQUIRE(reader.read(lines_of(slurp(paths[0])).back(), last1) == "");
  REQUIRE(reader.read(lines_of(slurp(paths[1])).front(), first2) == "");
  CHECK(first2.prev == last1.hash);
  CHECK(first2.seq == last1.seq + 1);
  auto res = verify(paths, genesis());
  CHECK(res.ok);
  CHECK(res.records == 60);
  CHECK(res.files == files.size());
  // A whole file removed from the middle breaks the chain.
  auto missing = paths;
  missing.erase(missing.begin() + 1);
  auto bad = verify(missing);
  REQUIRE_FALSE(bad.ok);
  CHECK(bad.bad_seq == first2.seq);
  CHECK(bad.bad_file == paths[2]);
}

TEST_CASE("record_at finds a record from the files' ends, across rotated "
          "files, as a query does") {
  temp_dir dir;
  auto opts = options(dir);
  opts.max_file_bytes = 256 << 10; // a few files of more than one window
  std::uint64_t last = 0;
  {
    audit_log log{opts};
    for (std::size_t i = 0; i < 4000; ++i)
      log.append(make_event(i));
    last = log.last_seq();
  }
  REQUIRE(list_log_files(dir.path(), "audit").size() >= 3);
  audit_log log{opts};
  auto by_query = [&](std::uint64_t seq) {
    audit_query q;
    q.after_seq = seq - 1;
    q.limit = 1;
    auto page = log.query(q);
    REQUIRE(!page.records.empty());
    return page.records.front();
  };
  for (std::uint64_t seq = 1; seq <= last; seq += 97) {
    CAPTURE(seq);
    auto at = log.record_at(seq);
    REQUIRE(at);
    CHECK(at->seq == seq);
    CHECK(at->hash == by_query(seq).hash);
  }
  for (std::uint64_t seq : {std::uint64_t{1}, last - 1, last}) {
    auto at = log.record_at(seq);
    REQUIRE(at);
    CHECK(at->hash == by_query(seq).hash);
  }
  CHECK_FALSE(log.record_at(0));
  CHECK_FALSE(log.record_at(last + 1));
  // Buffered records are flushed first.
  auto next = log.append(make_event(4000));
  auto at = log.record_at(next);
  REQUIRE(at);
  CHECK(at->seq == next);
  // A record whose line no longer parses is missing; its neighbours are not.
  auto newest = list_log_files(dir.path(), "audit").back().path;
  auto lines = lines_of(slurp(newest));
  REQUIRE(lines.size() > 10);
  record r;
  record_reader reader;
  REQUIRE(reader.read(lines[5], r) == "");
  lines[5] = "{garbage";
  spit(newest, join_lines(lines));
  CHECK_FALSE(log.record_at(r.seq));
  CHECK(log.record_at(r.seq - 1));
  CHECK(log.record_at(r.seq + 1));
}

TEST_CASE("recovery after rotation continues from the previous file when the "
          "newest is empty") {
  temp_dir dir;
  auto opts = options(dir);
  opts.max_file_bytes = 2048;
  std::uint64_t last = 0;
  {
    audit_log log{opts};
    for (std::size_t i = 0; i < 30; ++i)
      last = log.append(make_event(i));
  }
  auto files = list_log_files(dir.path(), "audit");
  // A crash right after opening the next file, before its first record.
  spit(dir.file(log_file_name("audit", files.size() + 1)), "{\"seq\":");
  audit_log log{opts};
  CHECK(log.last_seq() == last);
  log.append(make_event(30));
  log.flush();
  std::vector<std::string> paths;
  for (auto& f : list_log_files(dir.path(), "audit"))
    paths.push_back(f.path);
  auto res = verify(paths, genesis());
  CHECK(res.ok);
  CHECK(res.last_seq == last + 1);
}

TEST_CASE("queries filter by type, principal and time range") {
  temp_dir dir;
  auto opts = options(dir);
  opts.max_file_bytes = 4096;
  audit_log log{opts};
  for (std::size_t i = 0; i < 90; ++i)
    log.append(make_event(i));
  audit_query q;
  q.limit = 1000;
  q.type = event_type::access_denied;
  auto page = log.query(q);
  CHECK(page.records.size() == 30);
  for (auto& r : page.records)
    CHECK(r.type == event_type::access_denied);
  q.principal = "bob";
  page = log.query(q); // i % 3 == 1 and i odd: i = 1, 7, 13, ...
  CHECK(page.records.size() == 15);
  for (auto& r : page.records)
    CHECK(r.principal == "bob");
  audit_query by_time;
  by_time.limit = 1000;
  // Record i has time 1e12 + (i + 1) * 1000 µs.
  by_time.since_us = 1000000ll * 1000000 + 11 * 1000;
  by_time.until_us = 1000000ll * 1000000 + 21 * 1000;
  page = log.query(by_time);
  REQUIRE(page.records.size() == 10);
  CHECK(page.records.front().seq == 11);
  CHECK(page.records.back().seq == 20);
  CHECK_FALSE(page.next_cursor);
}

TEST_CASE("query pages by offset and by cursor without gaps or repeats") {
  temp_dir dir;
  auto opts = options(dir);
  opts.max_file_bytes = 4096;
  audit_log log{opts};
  for (std::size_t i = 0; i < 95; ++i)
    log.append(make_event(i));
  audit_query q;
  q.limit = 20;
  std::vector<std::uint64_t> seen;
  for (;;) {
    auto page = log.query(q);
    for (auto& r : page.records)
      seen.push_back(r.seq);
    if (!page.next_cursor)
      break;
    CHECK(page.records.size() == 20);
    q.after_seq = *page.next_cursor;
  }
  REQUIRE(seen.size() == 95);
  for (std::size_t i = 0; i < seen.size(); ++i)
    CHECK(seen[i] == i + 1);
  audit_query by_offset;
  by_offset.offset = 40;
  by_offset.limit = 5;
  auto page = log.query(by_offset);
  REQUIRE(page.records.size() == 5);
  CHECK(page.records.front().seq == 41);
  CHECK(page.next_cursor == 45u);
}

TEST_CASE("query times parse from microseconds and ISO 8601") {
  CHECK(parse_time("1700000000000000") == 1700000000000000);
  CHECK(parse_time("1970-01-01T00:00:01Z") == 1000000);
  CHECK(parse_time("2023-11-14T22:13:20.5Z") == 1700000000500000);
  CHECK_FALSE(parse_time(""));
  CHECK_FALSE(parse_time("yesterday"));
  CHECK_FALSE(parse_time("2023-13-01T00:00:00Z"));
  CHECK_FALSE(parse_time("2023-11-14T22:13:20Zjunk"));
  // Strict: exact digits, no signs or spaces, dates that exist.
  CHECK(parse_time("2024-02-29T00:00:00") == 1709164800000000);
  CHECK_FALSE(parse_time("2023-02-29T00:00:00"));
  CHECK_FALSE(parse_time("2023-04-31T00:00:00"));
  CHECK_FALSE(parse_time(" 023-11-14T22:13:20Z"));
  CHECK_FALSE(parse_time("+023-11-14T22:13:20Z"));
  CHECK_FALSE(parse_time("2023-1-14T22:13:20Z "));
  CHECK_FALSE(parse_time("2023- 1-14T22:13:20Z"));
  CHECK_FALSE(parse_time("2023-11-14T22:13:60Z"));
  CHECK_FALSE(parse_time("1969-12-31T23:59:59Z"));
  CHECK_FALSE(parse_time("2023-11-14 22:13:20Z"));
  CHECK_FALSE(parse_time("2023-11-14T22:13:20.Z"));
  CHECK_FALSE(parse_time("1234567890123456789")); // past 18 digits
}

TEST_CASE("the audit command verifies files and names the first bad "
          "sequence number") {
  temp_dir dir;
  auto path = write_log(dir, 8);
  std::string out, err;
  CHECK(run_cli({"verify", path}, out, err) == 0);
  CHECK_THAT(out, Catch::StartsWith("OK: 8 records"));
  auto lines = lines_of(slurp(path));
  lines.erase(lines.begin() + 2);
  spit(path, join_lines(lines));
  CHECK(run_cli({"verify", path}, out, err) == 1);
  CHECK_THAT(out, Catch::Contains("first bad sequence number 3"));
  CHECK_THAT(out, Catch::Contains(path));
  CHECK(run_cli({"verify"}, out, err) == 2);
  CHECK(run_cli({"verify", dir.file("nope.jsonl")}, out, err) == 2);
  CHECK_THAT(err, Catch::Contains("nope.jsonl"));
  CHECK(run_cli({"frobnicate"}, out, err) == 2);
  CHECK(run_cli({}, out, err) == 2);
}

TEST_CASE("the audit command queries a log folder") {
  temp_dir dir;
  write_log(dir, 12);
  std::string out, err;
  REQUIRE(run_cli({"query", "--dir", dir.path(), "--type", "thermal_pause",
                   "--principal", "alice", "--limit", "1"},
                  out, err)
          == 0);
  auto lines = lines_of(out); // i % 3 == 2 and i even: i = 2, 8
  REQUIRE(lines.size() == 2);
  CHECK_THAT(lines[0], Catch::Contains("\"seq\":3,"));
  CHECK(lines[1] == "# more: --after 3");
  REQUIRE(run_cli({"query", "--dir", dir.path(), "--type", "thermal_pause",
                   "--principal", "alice", "--after", "3"},
                  out, err)
          == 0);
  CHECK_THAT(out, Catch::Contains("\"seq\":9,"));
  CHECK(run_cli({"query", "--dir", dir.path(), "--type", "bogus"}, out, err)
        == 2);
  CHECK_THAT(err, Catch::Contains("unknown event type"));
  CHECK(run_cli({"query", "--dir", dir.path(), "--since", "soon"}, out, err)
        == 2);
  CHECK(run_cli({"query", "--dir", dir.path(), "--limit"}, out, err) == 2);
  CHECK(run_cli({"query", "--type", "config_load"}, out, err) == 2);
}

TEST_CASE("opening a log refuses bad options with a clear error") {
  temp_dir dir;
  auto opts = options(dir);
  opts.buffer_records = 0;
  CHECK_THROWS_WITH(audit_log{opts}, Catch::Contains("buffer_records"));
  opts = options(dir);
  opts.directory = "";
  CHECK_THROWS_WITH(audit_log{opts}, Catch::Contains("directory"));
  opts = options(dir);
  opts.directory = "/proc/definitely/not/here";
  CHECK_THROWS_AS(audit_log{opts}, audit_error);
}

TEST_CASE("a file is read line by line a chunk at a time: lines across "
          "chunks whole, a line over the bound cut, the last one without "
          "its newline incomplete") {
  temp_dir dir;
  auto path = write_log(dir, 6000); // about 2 MiB: lines across chunks
  auto content = slurp(path);
  REQUIRE(content.size() > (std::size_t{3} << 19));
  std::vector<std::string> whole, chunked;
  for_each_line(content, [&](std::string_view l, std::size_t, bool) {
    whole.emplace_back(l);
    return true;
  });
  for_each_file_line(path, 0, [&](std::string_view l, bool complete) {
    CHECK(complete);
    chunked.emplace_back(l);
    return true;
  });
  CHECK(chunked == whole);
  // From an offset (a line's start), and stopping when told.
  auto second = content.find('\n') + 1;
  std::size_t seen = 0;
  for_each_file_line(path, second, [&](std::string_view l, bool) {
    CHECK(l == whole[1 + seen]);
    return ++seen < 3;
  });
  CHECK(seen == 3);
  // A line of 3 MiB between two short ones, the last without '\n'.
  auto odd = dir.path() + "/odd.jsonl";
  spit(odd, "first\n" + std::string(3u << 20, 'x') + "\nafter\nlast");
  std::vector<std::pair<std::size_t, bool>> got;
  std::vector<std::string> texts;
  for_each_file_line(
    odd, 0,
    [&](std::string_view l, bool complete) {
      got.emplace_back(l.size(), complete);
      texts.emplace_back(l.substr(0, 5));
      return true;
    },
    1u << 20);
  REQUIRE(got.size() == 4);
  CHECK(got[0] == std::make_pair(std::size_t{5}, true));
  CHECK(got[1] == std::make_pair(std::size_t{1} << 20, false)); // cut
  CHECK(got[2] == std::make_pair(std::size_t{5}, true));
  CHECK(texts[2] == "after");
  CHECK(got[3] == std::make_pair(std::size_t{4}, false));
  CHECK_THROWS_AS(for_each_file_line(dir.path() + "/none.jsonl", 0,
                                     [](std::string_view, bool) {
                                       return true;
                                     }),
                  audit_error);
}

TEST_CASE("a query after a cursor starts near the cursor's record in a "
          "large file and finds what a whole read finds") {
  temp_dir dir;
  auto path = write_log(dir, 12000); // one file of about 4 MiB
  auto content = slurp(path);
  auto all = lines_of(content);
  REQUIRE(all.size() == 12000);
  auto opts = options(dir);
  audit_log log{opts};
  // Where each record's line starts.
  std::vector<std::uint64_t> starts{0};
  for (std::size_t i = 0; i + 1 < all.size(); ++i)
    starts.push_back(starts.back() + all[i].size() + 1);
  for (std::uint64_t cursor : {0u, 1u, 777u, 6000u, 11000u, 11990u, 11999u,
                               12000u}) {
    CAPTURE(cursor);
    auto from = seek_after_seq(path, cursor);
    if (cursor < 12000) {
      // At or before the first record after the cursor, within 64 KiB of
      // it, at a line's start.
      CHECK(from <= starts[cursor]);
      CHECK(starts[cursor] - from <= (64u << 10));
    }
    CHECK(std::find(starts.begin(), starts.end(), from) != starts.end());
    if (cursor >= 6000)
      CHECK(from > content.size() / 3); // the file's start was not read
    audit_query q;
    q.after_seq = cursor;
    q.limit = 7;
    auto page = log.query(q);
    std::vector<std::uint64_t> seqs;
    for (auto& r : page.records)
      seqs.push_back(r.seq);
    std::vector<std::uint64_t> want;
    for (auto s = cursor + 1; s <= 12000 && want.size() < 7; ++s)
      want.push_back(s);
    CHECK(seqs == want);
    // With a filter: access_denied records (i % 3 == 1: seq % 3 == 2).
    q.type = event_type::access_denied;
    seqs.clear();
    for (auto& r : log.query(q).records)
      seqs.push_back(r.seq);
    want.clear();
    for (auto s = cursor + 1; s <= 12000 && want.size() < 7; ++s)
      if (s % 3 == 2)
        want.push_back(s);
    CHECK(seqs == want);
  }
  // Lines that are not records where the search probes first (the
  // middle): it reads the file from its start, and the query is still
  // right, the lines counted as skipped.
  // (Of the same lengths: the bytes where it probes do not move.)
  for (std::size_t i = 5900; i < 6100; ++i)
    all[i] = "not a record" + std::string(all[i].size() - 12, ' ');
  spit(path, join_lines(all));
  CHECK(seek_after_seq(path, 11500) == 0);
  audit_query q;
  q.after_seq = 11500;
  q.limit = 3;
  auto page = log.query(q);
  REQUIRE(page.records.size() == 3);
  CHECK(page.records.front().seq == 11501);
  CHECK(page.skipped_lines == 200);
}
