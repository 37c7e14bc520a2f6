// Advantages per group of G samples of one prompt (samples of a group are contiguous in the batch).
#pragma once

#include <torch/types.h>

#include <string>

#include "util/enum_table.h"

namespace rlcpp {

enum class AdvantageEstimator {
  kGrpo,                // (r - mean) / (std + eps)
  kDrGrpo,              // r - mean
  kRloo,                // leave-one-out baseline: (r - mean) * G / (G - 1)
  kReinforcePpBaseline, // r - group mean here; whitened over the step's tokens by whiten_over_tokens
  kGae                  // PPO: 0 here; per token from the critic's values in the update (algo/value_loss.h)
};

const EnumTable<AdvantageEstimator>& advantage_estimators();

struct AdvantageConfig {
  AdvantageEstimator estimator = AdvantageEstimator::kGrpo;
  bool std_unbiased = true;  // Bessel's correction, as the reference system
  double eps = 1e-4;         // added to the std (GRPO)
  double whiten_eps = 1e-8;  // added to the variance under rsqrt (REINFORCE++ whitening)
};

// rewards [n_groups * group_size] → advantages of the same shape (fp64 math, returned in the
// rewards' dtype). A group whose rewards are all equal, and any group of one sample, gets 0.
torch::Tensor compute_advantages(const torch::Tensor& rewards, int64_t group_size, const AdvantageConfig& config);

// REINFORCE++'s whitening of per-sample advantages [N] over tokens: each sample counts once per
// response token (`tokens` [N]), so the mean and the variance (Bessel-corrected over tokens, as
// verl's masked_whiten) are those of the token advantages; returns (a - mean) * rsqrt(var + eps).
// Applied to the samples a step actually trains on. Fewer than two tokens: zeros.
torch::Tensor whiten_over_tokens(const torch::Tensor& advantages, const torch::Tensor& tokens, double eps);

}  // namespace rlcpp
