#pragma once

// The placement core: problem model, solvers, plans (no CAF inside).
#include "actors/placement/baseline.hpp"
#include "actors/placement/cost_model.hpp"
#include "actors/placement/device_score.hpp"
#include "actors/placement/exact_solver.hpp"
#include "actors/placement/explain.hpp"
#include "actors/placement/gecode_solver.hpp"
#include "actors/placement/plan.hpp"
#include "actors/placement/plan_command.hpp"
#include "actors/placement/problem.hpp"
#include "actors/placement/problem_json.hpp"
#include "actors/placement/random_problem.hpp"
#include "actors/placement/solve.hpp"
