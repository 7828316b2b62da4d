#pragma once

/// Who runs a job now, as one node knows: the rules by which a node that
/// took a job over, or backs up a copy taken over from it, tells a copy
/// that came back (its node was frozen or cut off) that the job runs
/// elsewhere. Plain logic over what the node knows (its copies, the
/// copies it backs up, the members it saw go); the job coordinator
/// (actors/workload/job_coordinator.cpp) asks these with its state.
///
/// A job is known by its key "NODE:N" (job_numbers). A copy taken over
/// keeps the key of the copy it was taken from (`taken_from`), and a
/// replica names the whole line of copies before it (its lineage, oldest
/// first).

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace exo::workload {

/// How long a member seen dead or gone is remembered so: a line of copies
/// of a job naming it is believed that long.
constexpr auto lineage_window = std::chrono::minutes(10);

/// NODE of a job key "NODE:N" (the whole key when it has no ':').
std::string node_of_job(const std::string& key);

/// Whether node `self` believes a peer's word that its copy of a job was
/// taken over from the copies `lineage` names: each of their nodes is
/// `self`, not in `alive`, or was seen dead or gone (`went_down`) within
/// lineage_window of `now`. A member cannot make a node end (or take over
/// under another name) the job of a node that never went.
bool lineage_believed(
    const std::string& self, const std::vector<std::string>& lineage,
    const std::set<std::string>& alive,
    const std::map<std::string, std::chrono::steady_clock::time_point>&
        went_down,
    std::chrono::steady_clock::time_point now);

/// The holder of job `key`, as one copy that node `self` runs or ran
/// tells it, for a copy of node `asker`: the copy's own key `copy_key`,
/// the key it was taken over from (`taken_from`, "" for a job that
/// started on `self`) and the node it was handed or taken over to in turn
/// (`moved_to`, "" when none).
/// - `self`, when it took the job over (the copy is `key`, or was taken
///   from `key`) and still holds it;
/// - `moved_to`, when the copy went on from there, but only to the node
///   `self` had taken it from (a node after `self` in the line is not
///   behind it: it asks the one after it);
/// - "" otherwise: a job that started on `self` and runs there is not
///   taken over (a node that took it over while `self` was unreachable
///   says so when it replicates to `self`); and "" when the asker's copy
///   was taken over from this very copy (`asker_lineage`, the keys of the
///   copies before the asker's, names `own_key`, this copy's NODE:ID on
///   `self`): a copy does not claim the job from one that came after it
///   (it hears that it was taken over, and ends).
std::string copy_holder(const std::string& self, const std::string& key,
                        const std::string& asker, const std::string& copy_key,
                        const std::string& taken_from,
                        const std::string& moved_to,
                        const std::vector<std::string>& asker_lineage = {},
                        const std::string& own_key = {});

/// Whether a copy that a node backs up (`backup_key`, its replica's
/// `origin` and `backup_lineage`) runs job `key` now, for the copy of
/// `asker` taken over from the copies `asker_lineage`: it descends from
/// `key`, is not the asker's own, and the asker's copy was not taken over
/// from it. (Whether the backup's lineage is believed is lineage_believed.)
bool backup_descends(const std::string& key, const std::string& asker,
                     const std::vector<std::string>& asker_lineage,
                     const std::string& backup_key, const std::string& origin,
                     const std::vector<std::string>& backup_lineage);

} // namespace exo::workload
