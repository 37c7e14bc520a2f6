#include "algo/advantages.h"

#include "util/error.h"
#include "util/torch_format.h"

namespace rlcpp {

AdvantageEstimator parse_advantage_estimator(const std::string& name, const std::string& flag) {
  if (name == "grpo") return AdvantageEstimator::kGrpo;
  if (name == "dr_grpo") return AdvantageEstimator::kDrGrpo;
  if (name == "rloo") return AdvantageEstimator::kRloo;
  if (name == "reinforce_pp_baseline") return AdvantageEstimator::kReinforcePpBaseline;
  throw_user_error("{}: unknown advantage estimator \"{}\" (grpo, dr_grpo, rloo, reinforce_pp_baseline)", flag, name);
}

std::string to_string(AdvantageEstimator estimator) {
  switch (estimator) {
    case AdvantageEstimator::kGrpo: return "grpo";
    case AdvantageEstimator::kDrGrpo: return "dr_grpo";
    case AdvantageEstimator::kRloo: return "rloo";
    case AdvantageEstimator::kReinforcePpBaseline: return "reinforce_pp_baseline";
  }
  return "?";
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
    case AdvantageEstimator::kReinforcePpBaseline: {
      auto flat = centered.view({-1});
      if (flat.numel() < 2) {
        adv = torch::zeros_like(r);
      } else {
        adv = (flat - flat.mean()) / (flat.std(config.std_unbiased) + config.eps);
      }
      break;
    }
  }
  return adv.reshape({-1}).to(rewards.scalar_type());
}

}  // namespace rlcpp
