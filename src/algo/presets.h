// Algorithm presets: named bundles of advantage, loss and DAPO settings with the reference
// system's defaults. Any single setting can be overridden after the preset is applied.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "algo/advantages.h"
#include "algo/policy_loss.h"
#include "algo/value_loss.h"

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
  int64_t max_dynamic_rounds = 3;                          // extra rounds to fill a step under dynamic batching
  bool require_full_batch = false;  // a step short of -tbs groups after those rounds is an error, not a warning
  PpoConfig ppo;                    // GAE and the value loss (advantage estimator gae: -a PPO)

  // Advantages from a critic (GAE): the run trains a value model beside the policy.
  bool uses_critic() const { return advantage.estimator == AdvantageEstimator::kGae; }
};

// The presets and their settings are listed by algo_preset_help (GRPO, DAPO, DR_GRPO, RLOO,
// REINFORCE_PPB alias REINFORCE_PP, GSPO, PPO). Names are case-insensitive ('-' reads as '_'); an unknown
// one is a UserError naming `flag`. The returned config's name is the preset's canonical name.
AlgoConfig algo_preset(const std::string& name, const std::string& flag);
// The presets' names, "GRPO | DAPO | ...".
std::string algo_preset_names(std::string_view separator = " | ");
// One line per preset, "NAME: its settings", for --help and the README.
std::string algo_preset_help(std::string_view indent = "  ");

}  // namespace rlcpp
