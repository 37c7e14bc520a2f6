// Token sampling with log-probs: temperature, top-k, top-p, min-p, per-sequence RNG.
//
// Each row draws one uniform number from its own RNG and inverts the CDF of its truncated,
// renormalised distribution, so a row's draw depends on nothing but its logits and its RNG:
// results do not change with batch composition. The reported log-prob is log softmax(logits / T)
// of the chosen token before truncation (what the trainer recomputes); at T = 0 (greedy) it is
// log softmax(logits).
#pragma once

#include <torch/types.h>

#include <random>
#include <vector>

#include "engine/sampling.h"

namespace rlcpp {

struct SampleResult {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
};

// logits [N, V] (any float dtype, any device); params[i] and rngs[i] for row i.
SampleResult sample_tokens(const torch::Tensor& logits, const std::vector<const SamplingParams*>& params,
                           const std::vector<std::mt19937_64*>& rngs);

// The truncated, renormalised distribution a row samples from (for tests): [V] fp64 on CPU.
torch::Tensor sampling_distribution(const torch::Tensor& logits_row, const SamplingParams& params);

}  // namespace rlcpp
