// Evaluation of a policy on a prompt dataset: generate n samples per prompt with the eval sampling
// settings, grade them with the run's reward, and summarise (accuracy, pass@n, format accuracy,
// mean length, truncation). Used by `rlcpp eval` and by the demo's before/after.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "io/prompt_dataset.h"
#include "reward/reward_function.h"
#include "text/prompt_builder.h"

namespace rlcpp {

struct EvalOptions {
  SamplingParams sampling;  // stop tokens included
  int64_t n = 1;            // samples per prompt
  int64_t limit = 0;        // first N prompts (0: all)
  uint64_t seed = 0;
};

struct EvalSample {
  int64_t line = 0;
  std::string prompt, response, gt_answer, extracted;
  double reward = 0;
  bool correct = false, format_ok = false, truncated = false;
  int64_t tokens = 0;
};

struct EvalResult {
  int64_t prompts = 0, samples = 0;
  double accuracy = 0;          // correct samples / samples
  double pass_at_n = 0;         // prompts with a correct sample / prompts
  double format_accuracy = 0;   // samples with an extractable answer / samples
  double reward_mean = 0;
  double response_length_mean = 0;
  double truncated_fraction = 0;
  double seconds = 0;
  std::vector<EvalSample> per_sample;
  nlohmann::ordered_json summary() const;
};

EvalResult evaluate(Engine& engine, PromptBuilder& prompts, const PromptDataset& dataset, const RewardFunction& reward,
                    const EvalOptions& options);

}  // namespace rlcpp
