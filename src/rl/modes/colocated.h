// The colocated mode: the step loop (step_loop.h) with one process generating, grading and training,
// the engine and the trainer sharing the same weights (no copy; publishing sets the version), or
// with OpenAI-compatible servers generating (-b).
#pragma once

#include <filesystem>

#include "parallel/topology.h"
#include "rl/config/run_config.h"

namespace rlcpp {

// Runs training (fresh, or continued from a checkpoint as the config says); returns the run
// directory (save_dir/project). With `topology` (mpirun -np N --train-tp N), every rank holds its
// tensor-parallel part of the models and takes part in every step: the first rank generates (the
// others serve its engine's steps) and grades, and hands each round's kept groups to the others;
// all train; the first rank logs and writes the checkpoints (the parts gathered to it).
std::filesystem::path run_colocated(const RunConfig& config, const Topology* topology = nullptr);

}  // namespace rlcpp
