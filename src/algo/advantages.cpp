#include "algo/advantages.h"

#include "util/error.h"
#include "util/torch_format.h"

namespace rlcpp {

const EnumTable<AdvantageEstimator>& advantage_estimators() {
  static const EnumTable<AdvantageEstimator> table(
      "advantage estimator",
      {{AdvantageEstimator::kGrpo, "grpo", "(r - group mean) / (group std + eps)"},
       {AdvantageEstimator::kDrGrpo, "dr_grpo", "r - group mean (no std division)"},
       {AdvantageEstimator::kRloo, "rloo", "leave-one-out baseline: (r - group mean) * G / (G - 1)"},
       {AdvantageEstimator::kReinforcePpBaseline, "reinforce_pp_baseline",
        "r - group mean, then whitened over the tokens of the step's batch (REINFORCE++ with baseline)"},
       {AdvantageEstimator::kGae, "gae",
        "per token: GAE (--gamma, --lam) from a critic's values, whitened over the step's tokens (PPO; trains a critic)"}});
  return table;
}

torch::Tensor compute_advantages(const torch::Tensor& rewards, int64_t group_size, const AdvantageConfig& config) {
  RLCPP_CHECK(rewards.dim() == 1 && group_size > 0 && rewards.size(0) % group_size == 0,
              "rewards {} are not whole groups of {}", rewards.sizes(), group_size);
  auto r = rewards.to(torch::kFloat64).view({-1, group_size});  // [n_groups, G]
  auto mean = r.mean(1, /*keepdim=*/true);
  auto centered = r - mean;
  torch::Tensor adv;
  switch (config.estimator) {
    case AdvantageEstimator::kGrpo: {
      if (group_size == 1) {
        adv = torch::zeros_like(r);
      } else {
        auto std = r.std(1, config.std_unbiased, /*keepdim=*/true);
        adv = centered / (std + config.eps);  // all equal: 0 / eps = 0
      }
      break;
    }
    case AdvantageEstimator::kDrGrpo: adv = centered; break;
    case AdvantageEstimator::kRloo:
      adv = group_size == 1 ? torch::zeros_like(r) : centered * (static_cast<double>(group_size) / (group_size - 1));
      break;
    case AdvantageEstimator::kReinforcePpBaseline: adv = centered; break;  // whitened per step
    case AdvantageEstimator::kGae: adv = torch::zeros_like(r); break;       // per token, from the critic, in the update
  }
  return adv.reshape({-1}).to(rewards.scalar_type());
}

torch::Tensor whiten_over_tokens(const torch::Tensor& advantages, const torch::Tensor& tokens, double eps) {
  RLCPP_CHECK(advantages.dim() == 1 && tokens.sizes() == advantages.sizes(), "advantages {} and token counts {} must be [N]",
              advantages.sizes(), tokens.sizes());
  auto a = advantages.to(torch::kFloat64);
  auto w = tokens.to(torch::kFloat64);
  const double n = w.sum().item<double>();
  if (n < 2) return torch::zeros_like(advantages);
  auto mean = (a * w).sum() / n;
  auto var = ((a - mean).pow(2) * w).sum() / (n - 1);
  return ((a - mean) * torch::rsqrt(var + eps)).to(advantages.scalar_type());
}

}  // namespace rlcpp
