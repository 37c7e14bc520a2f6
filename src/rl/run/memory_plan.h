// The memory preflight of a training run: before anything is loaded, an estimate of the peak memory
// of one trainer process (weights, gradients, optimizer state, reference model, KV cache, training
// activations of the largest micro-batch and sequence), line by line. A run that cannot fit is
// refused with the budget and the settings that would make it fit; --dry-run prints the estimate.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model_config.h"
#include "rl/config/run_config.h"

namespace rlcpp {

// Held for the whole run, or only in one phase of a training step: the peak is everything held
// plus the larger of the two phases.
enum class MemoryPhase { kHeld, kBackward, kOptimizer };

struct MemoryLine {
  std::string what;
  double bytes = 0;
  std::string detail;
  MemoryPhase phase = MemoryPhase::kHeld;
};

struct MemoryEstimate {
  std::vector<MemoryLine> lines;
  int64_t sequence_tokens = 0;  // the longest training sequence assumed (prompt + response)
  double total() const;         // held + max(forward/backward, optimizer step)
  std::string table() const;    // one line per item, then the total
};

// The peak resident memory of the trainer process of `config` (the colocated run: with its engine).
// `prompt_tokens`: the longest prompt (0: -mpt, else 512 assumed and said so).
MemoryEstimate estimate_run_memory(const RunConfig& config, const ModelConfig& model, int64_t prompt_tokens = 0);

// The estimate of a run about to start: the model's config.json and, when -mpt is unset, the
// longest prompt of the dataset's first 2,000 records as the rollout builds them (system prompt,
// chat template, tokenizer).
MemoryEstimate estimate_run_memory(const RunConfig& config);

// The memory a run on `device` has now: the machine's MemAvailable for the CPU, the device's free
// memory for a CUDA device (--device cuda[:N]); 0 when unknown.
double available_memory_bytes(const std::string& device = "cpu");

// Refuses (UserError) a run whose estimate exceeds `available` bytes, with the table and what would
// make it fit; does nothing when `available` is 0.
void check_run_memory(const RunConfig& config, const MemoryEstimate& estimate, double available);

}  // namespace rlcpp
