#include "algo/presets.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "util/error.h"

namespace rlcpp {

namespace {

struct Preset {
  std::string_view name;
  std::vector<std::string_view> aliases;
  std::string_view origin;  // where its defaults come from
  void (*apply)(AlgoConfig&);
};

// Each preset starts from AlgoConfig's defaults (GRPO advantages, clip 0.2/0.2, no KL, token-level,
// token ratios) and sets what differs. The reference system (ColossalChat) defines GRPO, DAPO,
// REINFORCE_PPB and RLOO; DR_GRPO and GSPO follow their papers and verl's recipes; PPO trains a
// critic (algo/value_loss.h) and takes GAE's per-token advantages from it.
const std::vector<Preset>& presets() {
  static const std::vector<Preset> table = {
      {"GRPO", {}, "reference system",
       [](AlgoConfig& c) {
         c.loss.kl_coef = 0.01;
         c.loss.aggregation = LossAggregation::kSampleLevel;
       }},
      {"DAPO", {}, "reference system; dual clip from the DAPO recipe",
       [](AlgoConfig& c) {
         c.loss.clip_eps_high = 0.28;
         c.loss.clip_ratio_c = 10.0;
         c.loss.skip_threshold = 20.0;
         c.filter_range = {{0.01, 0.99}};
         c.dynamic_batching = true;
         c.overlong_shaping = true;
         c.filter_truncated = true;
       }},
      {"DR_GRPO", {}, "Dr.GRPO paper",
       [](AlgoConfig& c) {
         c.advantage.estimator = AdvantageEstimator::kDrGrpo;
         c.loss.aggregation = LossAggregation::kSeqMeanTokenSumNorm;
       }},
      {"RLOO", {}, "reference system",
       [](AlgoConfig& c) {
         c.advantage.estimator = AdvantageEstimator::kRloo;
         c.loss.kl_coef = 0.01;
         c.loss.aggregation = LossAggregation::kSampleLevel;
       }},
      {"REINFORCE_PPB", {"REINFORCE_PP"}, "reference system",
       [](AlgoConfig& c) {
         c.advantage.estimator = AdvantageEstimator::kReinforcePpBaseline;
         c.loss.kl_coef = 0.01;
         c.loss.aggregation = LossAggregation::kSampleLevel;
       }},
      {"PPO", {}, "classic RLHF PPO with a critic, as verl's and OpenRLHF's",
       [](AlgoConfig& c) {
         c.advantage.estimator = AdvantageEstimator::kGae;
         c.loss.aggregation = LossAggregation::kTokenLevel;
       }},
      {"GSPO", {}, "GSPO paper and verl's recipe",
       [](AlgoConfig& c) {
         c.loss.ratio_level = ImportanceLevel::kSequence;
         c.loss.clip_eps_low = 3e-4;
         c.loss.clip_eps_high = 4e-4;
         c.loss.aggregation = LossAggregation::kSampleLevel;
       }},
  };
  return table;
}

AlgoConfig apply(const Preset& p) {
  AlgoConfig c;
  c.name = std::string(p.name);
  c.loss.kl_coef = 0.0;
  c.loss.clip_eps_low = 0.2;
  c.loss.clip_eps_high = 0.2;
  p.apply(c);
  return c;
}

// The settings of a preset in flag terms, from the config itself (so the help cannot drift).
std::string describe(const AlgoConfig& c) {
  std::string out = fmt::format("--advantage-estimator {}, --kl-coeff {:g}",
                                advantage_estimators().name(c.advantage.estimator), c.loss.kl_coef);
  out += fmt::format(", --clip-eps-low {:g}, --clip-eps-high {:g}, --loss-variation {}", c.loss.clip_eps_low,
                     c.loss.clip_eps_high, loss_aggregations().name(c.loss.aggregation));
  if (c.loss.ratio_level != ImportanceLevel::kToken) out += ", --ratio-level " + importance_levels().name(c.loss.ratio_level);
  if (c.loss.clip_ratio_c) out += fmt::format(", --dual-clip {:g}", *c.loss.clip_ratio_c);
  if (c.loss.skip_threshold > 0) out += fmt::format(", --skip-threshold {:g}", c.loss.skip_threshold);
  if (c.filter_range) out += fmt::format(", --filter-range {:g},{:g}", c.filter_range->first, c.filter_range->second);
  if (c.dynamic_batching) out += ", --dynamic-batching";
  if (c.overlong_shaping) out += ", --soft-over-length-punishment";
  if (c.filter_truncated) out += ", --filter-truncated-response";
  if (c.uses_critic()) out += fmt::format(", --gamma {:g}, --lam {:g}, --value-clip {:g}", c.ppo.gamma, c.ppo.lam, c.ppo.value_clip);
  return out;
}

}  // namespace

std::string algo_preset_names(std::string_view separator) {
  std::string out;
  for (const auto& p : presets()) out += (out.empty() ? "" : std::string(separator)) + std::string(p.name);
  return out;
}

std::string algo_preset_help(std::string_view indent) {
  std::string out;
  for (const auto& p : presets()) {
    std::string names(p.name);
    for (const auto& alias : p.aliases) names += " (alias " + std::string(alias) + ")";
    out += fmt::format("{}{}: {} [{}]\n", indent, names, describe(apply(p)), p.origin);
  }
  return out;
}

AlgoConfig algo_preset(const std::string& name, const std::string& flag) {
  std::string key = name;
  std::transform(key.begin(), key.end(), key.begin(), [](unsigned char c) { return std::toupper(c); });
  std::replace(key.begin(), key.end(), '-', '_');
  for (const auto& p : presets()) {
    if (p.name == key || std::find(p.aliases.begin(), p.aliases.end(), key) != p.aliases.end()) return apply(p);
  }
  throw_user_error("{}: unknown algorithm \"{}\" (use {})", flag, name, algo_preset_names(", "));
}

}  // namespace rlcpp
