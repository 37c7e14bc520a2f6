// PPO's critic: generalized advantage estimation (GAE) over a trajectory's steps, and the clipped
// value loss, aggregated as the policy loss is (every normaliser a global count passed in, so
// gradient accumulation over micro-batches is exact).
#pragma once

#include <torch/types.h>

#include <map>
#include <string>
#include <vector>

namespace rlcpp {

// The algorithm group's PPO settings (-a PPO: advantages from a critic rather than from the group).
struct PpoConfig {
  double gamma = 1.0;         // discount per generated token (verl's and OpenRLHF's default: 1)
  double lam = 0.95;          // GAE's λ (OpenRLHF's default)
  double value_clip = 0.5;    // the value loss's clip of V around the old V (verl's cliprange_value; 0: none)
  bool kl_in_reward = false;  // the KL to the reference (k1, × --kl-coeff) as a per-token reward penalty in place of the loss term
};

// GAE over one trajectory of T steps: rewards[T] and the critic's values[T] (V of the state before
// each step); the state after the last step is terminal (value 0). δ_t = r_t + γ V_{t+1} − V_t,
// A_t = δ_t + γλ A_{t+1}; returns R_t = A_t + V_t (the value loss's targets).
struct Gae {
  std::vector<double> advantages, returns;
};
Gae generalized_advantages(const std::vector<double>& rewards, const std::vector<double>& values, double gamma, double lam);

struct ValueLossOutput {
  torch::Tensor loss;  // scalar: this micro-batch's share of the mini-batch's value loss
  // vf_loss (its value), vf_clip_frac, value_mean, return_mean, n_tokens: sums or means over this
  // micro-batch's counted tokens (vf_loss and n_tokens are sums)
  std::map<std::string, double> metrics;
};

// ½ Σ mask · max((V − R)², (V_old + clamp(V − V_old, ±clip) − R)²) / global_tokens, over values
// [B, T] (with grad), old_values, returns and mask [B, T]; clip 0 leaves the first term alone.
ValueLossOutput value_loss(const torch::Tensor& values, const torch::Tensor& old_values, const torch::Tensor& returns,
                           const torch::Tensor& mask, double clip, double global_tokens);

}  // namespace rlcpp
