#include "algo/presets.h"

#include <algorithm>
#include <vector>

#include "util/error.h"

namespace rlcpp {

namespace {

struct Preset {
  std::string_view name;
  void (*apply)(AlgoConfig&);
};

// Each preset starts from AlgoConfig's defaults (GRPO advantages, clip 0.2/0.2, no KL, token-level).
const std::vector<Preset>& presets() {
  static const std::vector<Preset> table = {
      {"GRPO",
       [](AlgoConfig& c) {
         c.advantage.estimator = AdvantageEstimator::kGrpo;
         c.loss.kl_coef = 0.01;
         c.loss.aggregation = LossAggregation::kSampleLevel;
       }},
      {"DAPO",
       [](AlgoConfig& c) {
         c.advantage.estimator = AdvantageEstimator::kGrpo;
         c.loss.clip_eps_high = 0.28;
         c.loss.aggregation = LossAggregation::kTokenLevel;
         c.loss.skip_threshold = 20.0;
         c.filter_range = {{0.01, 0.99}};
         c.dynamic_batching = true;
         c.overlong_shaping = true;
         c.filter_truncated = true;
       }},
      {"DR_GRPO",
       [](AlgoConfig& c) {
         c.advantage.estimator = AdvantageEstimator::kDrGrpo;
         c.loss.aggregation = LossAggregation::kSeqMeanTokenSumNorm;
       }},
      {"RLOO",
       [](AlgoConfig& c) {
         c.advantage.estimator = AdvantageEstimator::kRloo;
         c.loss.aggregation = LossAggregation::kTokenLevel;
       }},
      {"REINFORCE_PP",
       [](AlgoConfig& c) {
         c.advantage.estimator = AdvantageEstimator::kReinforcePpBaseline;
         c.loss.aggregation = LossAggregation::kTokenLevel;
       }},
  };
  return table;
}

}  // namespace

std::string algo_preset_names(std::string_view separator) {
  std::string out;
  for (const auto& p : presets()) out += (out.empty() ? "" : std::string(separator)) + std::string(p.name);
  return out;
}

AlgoConfig algo_preset(const std::string& name, const std::string& flag) {
  std::string key = name;
  std::transform(key.begin(), key.end(), key.begin(), [](unsigned char c) { return std::toupper(c); });
  std::replace(key.begin(), key.end(), '-', '_');
  for (const auto& p : presets()) {
    if (p.name != key) continue;
    AlgoConfig c;
    c.name = key;
    c.loss.kl_coef = 0.0;
    c.loss.clip_eps_low = 0.2;
    c.loss.clip_eps_high = 0.2;
    p.apply(c);
    return c;
  }
  throw_user_error("{}: unknown algorithm \"{}\" (use {})", flag, name, algo_preset_names(", "));
}

}  // namespace rlcpp
