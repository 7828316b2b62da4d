// Who runs a job taken over, as one node knows (core/workload/
// job_lineage.hpp): the rules the job coordinator applies when a copy of
// a job that runs elsewhere now speaks again.

#include "core/workload/job_lineage.hpp"

#include <catch2/catch.hpp>

using namespace exo::workload;
using namespace std::chrono_literals;

namespace {

using clock_type = std::chrono::steady_clock;

} // namespace

TEST_CASE("a line of copies is believed only when each node in it went",
          "[workload][job_lineage]") {
  const auto now = clock_type::now();
  std::set<std::string> alive{"a", "c"};
  std::map<std::string, clock_type::time_point> went_down;
  CHECK(node_of_job("node-1:42") == "node-1");
  CHECK(node_of_job("a:b:7") == "a:b");
  // Nothing to believe, or only this node's own copy.
  CHECK(lineage_believed("b", {}, alive, went_down, now));
  CHECK(lineage_believed("b", {"b:3"}, alive, went_down, now));
  // A node that is not alive here went, whenever that was.
  CHECK(lineage_believed("b", {"d:1", "b:3"}, alive, went_down, now));
  // A node alive here that was never seen go: its copy was not taken
  // over, whatever a peer says.
  CHECK_FALSE(lineage_believed("b", {"a:2"}, alive, went_down, now));
  CHECK_FALSE(lineage_believed("b", {"d:1", "a:2"}, alive, went_down, now));
  // Seen dead and back within the window: believed; long ago: not.
  went_down["a"] = now - 1min;
  CHECK(lineage_believed("b", {"a:2"}, alive, went_down, now));
  went_down["a"] = now - lineage_window - 1s;
  CHECK_FALSE(lineage_believed("b", {"a:2"}, alive, went_down, now));
  went_down["a"] = now - lineage_window;
  CHECK(lineage_believed("b", {"a:2"}, alive, went_down, now));
  // Every node of the line must have gone.
  went_down["a"] = now - 1s;
  CHECK_FALSE(lineage_believed("b", {"a:2", "c:4"}, alive, went_down, now));
  went_down["c"] = now - 2s;
  CHECK(lineage_believed("b", {"a:2", "c:4"}, alive, went_down, now));
}

TEST_CASE("a copy names who holds the job it was taken over from",
          "[workload][job_lineage]") {
  // Node b's copies, asked about job a:2 for node a's copy.
  // A job unrelated to a:2.
  CHECK(copy_holder("b", "a:2", "a", "b:5", "", "").empty());
  CHECK(copy_holder("b", "a:2", "a", "b:5", "c:9", "").empty());
  // A job that started on b and runs there is not taken over: asked by
  // its own key, b names no one (a node that took it over says so).
  CHECK(copy_holder("b", "b:5", "c", "b:5", "", "").empty());
  // b took a:2 over as b:5: b holds it, asked by either key.
  CHECK(copy_holder("b", "a:2", "a", "b:5", "a:2", "") == "b");
  CHECK(copy_holder("b", "b:5", "a", "b:5", "a:2", "") == "b");
  // ... and handed it on to c: the node b took it from learns c; a node
  // after b in the line (d) is not told (it is not behind b).
  CHECK(copy_holder("b", "a:2", "a", "b:5", "a:2", "c") == "c");
  CHECK(copy_holder("b", "a:2", "d", "b:5", "a:2", "c").empty());
  // The asker's name is matched whole: "ab" is not "a".
  CHECK(copy_holder("b", "ab:2", "a", "b:5", "ab:2", "c").empty());
  CHECK(copy_holder("b", "ab:2", "ab", "b:5", "ab:2", "c") == "c");
  // A copy that started here and was handed on names no one either.
  CHECK(copy_holder("b", "b:5", "a", "b:5", "", "c").empty());
  // The asker's copy was taken over from this one (b:5, not told yet):
  // b does not claim the job from it, by either key; an asker whose line
  // does not name b:5 still hears that b holds it.
  CHECK(copy_holder("b", "a:2", "c", "a:2", "a:2", "", {"a:2", "b:5"}, "b:5")
          .empty());
  CHECK(copy_holder("b", "b:5", "c", "a:2", "a:2", "", {"a:2", "b:5"}, "b:5")
          .empty());
  CHECK(copy_holder("b", "a:2", "c", "a:2", "a:2", "", {"a:2"}, "b:5") == "b");
}

TEST_CASE("a backed-up copy runs a job when it descends from it and the "
          "asker's copy does not descend from it",
          "[workload][job_lineage]") {
  // The node backs up c:7, which c took over from d:4, itself taken
  // over from a:2 (its lineage, oldest first).
  const std::vector<std::string> line{"a:2", "d:4"};
  CHECK(backup_descends("a:2", "a", {}, "c:7", "c", line));
  CHECK(backup_descends("d:4", "d", {"a:2"}, "c:7", "c", line));
  // Not for the backed-up copy's own key, nor a job not in its line.
  CHECK_FALSE(backup_descends("c:7", "a", {}, "c:7", "c", line));
  CHECK_FALSE(backup_descends("e:1", "e", {}, "c:7", "c", line));
  // Not to the node whose copy it is.
  CHECK_FALSE(backup_descends("a:2", "c", {}, "c:7", "c", line));
  // Not when the asker's copy was itself taken over from c:7 (a later
  // copy in the line is not behind an earlier one).
  CHECK_FALSE(
      backup_descends("a:2", "e", {"a:2", "d:4", "c:7"}, "c:7", "c", line));
}
