#pragma once

// The placement core: problem model, solvers, plans (no CAF inside).
#include "core/placement/baseline.hpp"
#include "core/placement/cost_model.hpp"
#include "core/placement/device_score.hpp"
#include "core/placement/exact_solver.hpp"
#include "core/placement/explain.hpp"
#include "core/placement/gecode_solver.hpp"
#include "core/placement/lower_bound.hpp"
#include "core/placement/node_blocks.hpp"
#include "core/placement/pack.hpp"
#include "core/placement/plan.hpp"
#include "core/placement/plan_command.hpp"
#include "core/placement/problem.hpp"
#include "core/placement/problem_json.hpp"
#include "core/placement/random_problem.hpp"
#include "core/placement/solve.hpp"
#include "core/placement/subset_search.hpp"
