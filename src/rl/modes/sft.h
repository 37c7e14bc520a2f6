// Supervised fine-tuning on chat JSONL (`messages` with assistant turns; loss on assistant tokens
// only), with the run machinery of RL training: the same settings table, metrics.jsonl,
// checkpoints (HF directory + trainer_state/) and exact resume.
#pragma once

#include <filesystem>

#include "rl/config/run_config.h"

namespace rlcpp {

// Runs SFT: train_batch_size chats per optimizer step, train_microbatch_size per forward/backward,
// num_episodes passes (or max_steps). Returns the run directory.
std::filesystem::path run_sft(const RunConfig& config);

}  // namespace rlcpp
