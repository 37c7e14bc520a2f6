// Reward-model training (`rlcpp train-rm`): Bradley–Terry on preference pairs in TRL's forms, a
// sequence classifier of one label started from a causal LM (a fresh score head) or from a reward
// model, with the run machinery of `rlcpp sft`: the settings table, metrics.jsonl, step-N
// checkpoints that transformers loads as ...ForSequenceClassification, and exact resume. Held-out
// pairs (-ed) are scored every -ei steps; each checkpoint's config.json holds the mean and std of
// the scores (over the held-out pairs, else the training pairs), which --normalize-reward uses.
#pragma once

#include <filesystem>

#include "rl/config/run_config.h"

namespace rlcpp {

// Runs the training `config` describes: -tbs pairs per optimizer step, -tmbs per forward (each pair's
// two conversations in one), -ne passes (or --max-steps). Returns the run directory.
std::filesystem::path run_reward_model_training(const RunConfig& config);

}  // namespace rlcpp
