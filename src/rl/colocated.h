// The colocated RL loop: one process generates with the engine, grades, computes advantages and
// trains, the engine and the trainer sharing the same weights (no copy; the version is bumped).
#pragma once

#include <filesystem>

#include "rl/run_config.h"

namespace rlcpp {

// Runs training (fresh, or continued from a checkpoint as the config says); returns the run
// directory (save_dir/project).
std::filesystem::path run_colocated(const RunConfig& config);

}  // namespace rlcpp
