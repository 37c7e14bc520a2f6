// Token sampling with log-probs: temperature, top-k, top-p, min-p, per-sequence RNG.
//
// Each row draws one uniform number from its own RNG and inverts the CDF of its truncated,
// renormalised distribution, so a row's draw depends on nothing but its logits and its RNG:
// results do not change with batch composition. The reported log-prob is log softmax(logits / T)
// of the chosen token before truncation (what the trainer recomputes); at T = 0 (greedy) it is
// log softmax(logits).
//
// Under tensor parallelism each rank of the group holds the logits of its part of the vocabulary
// (a split VocabShard); the ranks exchange a few numbers per row and every one of them returns the
// same tokens, which equal one rank's with the whole logits (the total mass is summed in another
// order). No rank gathers a row of full logits.
#pragma once

#include <torch/types.h>

#include <random>
#include <vector>

#include "engine/sampling.h"
#include "model/logprobs.h"

namespace rlcpp {

struct SampleResult {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::vector<std::vector<TokenLogprob>> top;  // per row: its params' `logprobs` most likely tokens
};

// logits [N, V] (any float dtype, any device; [N, V_shard] of a split `shard`); params[i] and
// rngs[i] for row i.
SampleResult sample_tokens(const torch::Tensor& logits, const std::vector<const SamplingParams*>& params,
                           const std::vector<std::mt19937_64*>& rngs, const VocabShard& shard = {});
// The same with each row's uniform draw u[i] in [0, 1) given (what sampling with rngs[i] draws).
SampleResult sample_tokens(const torch::Tensor& logits, const std::vector<const SamplingParams*>& params,
                           const std::vector<double>& u, const VocabShard& shard = {});

// The same draws in batched tensor operations on the logits' own device, which sample_tokens takes
// for logits on a GPU (not split over a vocabulary shard): the maxima, the sums and the inverse CDF
// stay on the device, and only each row's token and log-prob (and the top log-probs asked for) come
// to the host. The probabilities are the row sampler's; the sums run in another order, so a draw
// within rounding of a boundary between two tokens may take the other one (tests: on the CPU, the
// same tokens as the row sampler).
SampleResult sample_tokens_batched(const torch::Tensor& logits, const std::vector<const SamplingParams*>& params,
                                   const std::vector<double>& u);

// The truncated, renormalised distribution a row samples from (for tests): [V] fp64 on CPU.
torch::Tensor sampling_distribution(const torch::Tensor& logits_row, const SamplingParams& params);

}  // namespace rlcpp
