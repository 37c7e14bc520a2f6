#include "algo/presets.h"

#include <algorithm>

#include "util/error.h"

namespace rlcpp {

AlgoConfig algo_preset(const std::string& name, const std::string& flag) {
  std::string key = name;
  std::transform(key.begin(), key.end(), key.begin(), [](unsigned char c) { return std::toupper(c); });
  std::replace(key.begin(), key.end(), '-', '_');
  AlgoConfig c;
  c.name = key;
  if (key == "GRPO") {
    c.advantage.estimator = AdvantageEstimator::kGrpo;
    c.loss.kl_coef = 0.01;
    c.loss.clip_eps_low = 0.2;
    c.loss.clip_eps_high = 0.2;
    c.loss.aggregation = LossAggregation::kSampleLevel;
  } else if (key == "DAPO") {
    c.advantage.estimator = AdvantageEstimator::kGrpo;
    c.loss.kl_coef = 0.0;
    c.loss.clip_eps_low = 0.2;
    c.loss.clip_eps_high = 0.28;
    c.loss.aggregation = LossAggregation::kTokenLevel;
    c.loss.skip_threshold = 20.0;
    c.filter_range = {{0.01, 0.99}};
    c.dynamic_batching = true;
    c.overlong_shaping = true;
    c.filter_truncated = true;
  } else if (key == "DR_GRPO") {
    c.advantage.estimator = AdvantageEstimator::kDrGrpo;
    c.loss.kl_coef = 0.0;
    c.loss.aggregation = LossAggregation::kSeqMeanTokenSumNorm;
  } else if (key == "RLOO") {
    c.advantage.estimator = AdvantageEstimator::kRloo;
    c.loss.kl_coef = 0.0;
    c.loss.aggregation = LossAggregation::kTokenLevel;
  } else if (key == "REINFORCE_PP") {
    c.advantage.estimator = AdvantageEstimator::kReinforcePpBaseline;
    c.loss.kl_coef = 0.0;
    c.loss.aggregation = LossAggregation::kTokenLevel;
  } else {
    throw_user_error("{}: unknown algorithm \"{}\" (GRPO, DAPO, DR_GRPO, RLOO, REINFORCE_PP)", flag, name);
  }
  return c;
}

}  // namespace rlcpp
