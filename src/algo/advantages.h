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
  kReinforcePpBaseline  // r - group mean, then whitened over the whole batch
};

const EnumTable<AdvantageEstimator>& advantage_estimators();

struct AdvantageConfig {
  AdvantageEstimator estimator = AdvantageEstimator::kGrpo;
  bool std_unbiased = true;  // Bessel's correction, as the reference system
  double eps = 1e-4;         // added to the std
};

// rewards [n_groups * group_size] → advantages of the same shape (fp64 math, returned in the
// rewards' dtype). A group whose rewards are all equal, and any group of one sample, gets 0.
torch::Tensor compute_advantages(const torch::Tensor& rewards, int64_t group_size, const AdvantageConfig& config);

}  // namespace rlcpp
