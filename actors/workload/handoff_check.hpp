#pragma once

/// What a backup checks in a job handed over to it (messages/workload.hpp
/// job_handoff, from a peer: never trusted with sizes or shapes) before it
/// runs the job on the stages named, and in a job it is asked to back up
/// (job_replica). Plain logic, tested without a cluster (job_tests.cpp).

#include "messages/workload.hpp"

#include <cstddef>
#include <set>
#include <string>

namespace exo::workload {

/// Most stages a handed-over job may have.
constexpr std::size_t max_handoff_stages = 1024;

/// What is wrong with `h` for the job whose replica holds `req`, handed to
/// node `here` whose alive peers are `alive` ("" when nothing): its stages
/// must match their nodes, devices and contiguous layer ranges from 0, be
/// actors on alive nodes other than the origin; its sequences must be the
/// request's, each within n_gen; its recoveries bounded.
std::string handoff_problem(const job_handoff& h, const job_request& req,
                            const std::string& here,
                            const std::set<std::string>& alive);

/// What is wrong with `r`, a job that node `here` is asked to back up (""
/// when nothing): its origin must be another node; its model's (and
/// draft's) digest and size well formed; its sequences the request's, each
/// within n_gen, with draws its tokens can take and log-probabilities as
/// asked; its recoveries bounded; its line of copies at most
/// max_job_lineage well-formed keys.
std::string replica_problem(const job_replica& r, const std::string& here);

} // namespace exo::workload
