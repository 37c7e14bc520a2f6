// The Bradley–Terry loss of reward-model training (as TRL's RewardTrainer and OpenRLHF's
// PairWiseLoss have it): a pair's chosen response should score above its rejected one, by a margin
// when the data gives one. Tensors in, tensors out; the trainer sums and normalises.
#pragma once

#include <torch/types.h>

namespace rlcpp {

struct PreferenceLossConfig {
  // TRL's center_rewards_coefficient: adds coef · (chosen + rejected)² per pair, which keeps the
  // scores centred on 0 (Eisenstein et al. 2023); 0: off.
  double center_coef = 0.0;
};

// Per-pair losses [P]: -log σ(chosen - rejected - margin) (+ center_coef · (chosen + rejected)²).
// chosen, rejected, margin: [P] (margin all zeros for data without margins). Differentiable.
torch::Tensor bradley_terry_loss(const torch::Tensor& chosen, const torch::Tensor& rejected, const torch::Tensor& margin,
                                 const PreferenceLossConfig& config = {});

}  // namespace rlcpp
