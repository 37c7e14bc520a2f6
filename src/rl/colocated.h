// The colocated RL loop: one process generates with the engine, grades, computes advantages and
// trains, the engine and the trainer sharing the same weights (no copy; the version is bumped).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "algo/presets.h"
#include "engine/engine.h"
#include "reward/reward.h"
#include "train/trainer.h"

namespace rlcpp {

struct RunConfig {
  std::string model;                 // Hugging Face model directory
  std::string dataset;               // JSONL prompts
  std::string project = "rlcpp";     // run folder name under save_dir
  std::string save_dir = "runs";
  int64_t num_episodes = 1;          // passes over the dataset
  int64_t max_steps = 0;             // stop after this many steps (0: the episodes decide)
  int64_t num_generations = 8;       // G
  int64_t train_batch_size = 4;      // prompts per optimizer step... per step (groups)
  int64_t train_minibatch_size = 4;  // prompts per optimizer step
  int64_t train_microbatch_size = 8; // samples per forward/backward
  SamplingParams sampling;           // temperature, top-k/p, max_new_tokens
  int64_t max_prompt_tokens = 0;
  std::string system_prompt;         // empty: the reward type's default
  bool system_prompt_set = false;
  RewardType reward_type = RewardType::kBoxed;
  RewardScale reward_scale;
  AlgoConfig algo;
  OptimizerConfig optimizer;
  uint64_t seed = 42;
  int64_t save_interval = 0;         // steps between checkpoints (0: only at the end)
  int64_t max_dynamic_rounds = 3;    // extra generation rounds to fill a batch under dynamic batching
  std::string dtype = "float32";
  std::string device = "cpu";
  int64_t kv_cache_mb = 1024;
};

// Runs training; returns the run directory (save_dir/project).
std::filesystem::path run_colocated(const RunConfig& config);

}  // namespace rlcpp
