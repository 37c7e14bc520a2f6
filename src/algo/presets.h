// Algorithm presets: named bundles of advantage, loss and DAPO settings with the reference
// system's defaults. Any single setting can be overridden after the preset is applied.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "algo/advantages.h"
#include "algo/policy_loss.h"

namespace rlcpp {

struct AlgoConfig {
  std::string name = "GRPO";
  AdvantageConfig advantage;
  PolicyLossConfig loss;
  std::optional<std::pair<double, double>> filter_range;  // keep groups with accuracy strictly inside
  bool dynamic_batching = false;                           // generate until enough groups are kept
  bool overlong_shaping = false;                           // soft over-length punishment
  int64_t overlong_cache = 0;                              // L_cache; 0: min(1024, max_new_tokens / 4)
  bool filter_truncated = false;                           // truncated samples leave the loss
};

// GRPO: β 0.01, clip 0.2/0.2, sample-level. DAPO: β 0, clip 0.2/0.28, token-level, filter_range
// [0.01, 0.99], dynamic batching, overlong shaping, truncated filtering. DR_GRPO: r - mean and
// seq-mean-token-sum-norm. RLOO: leave-one-out baseline, token-level. REINFORCE_PP: batch-whitened
// baseline, token-level. Names are case-insensitive; an unknown one is a UserError naming `flag`.
AlgoConfig algo_preset(const std::string& name, const std::string& flag);
// The presets' names, "GRPO | DAPO | ...".
std::string algo_preset_names(std::string_view separator = " | ");

}  // namespace rlcpp
