// The reward of a run: one or more components (reward_component.h: built-in reward types, external
// commands, ...), each with a weight; the reward is the weighted sum and each component's value is
// kept as a named part. The first component that grades an answer decides the extracted answer,
// format and correctness reported.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "reward/code_reward.h"
#include "reward/reward.h"
#include "reward/reward_component.h"

namespace rlcpp {

// A run's reward settings (the reward group): the built-in grader on its scale, and an external
// command (reward/external.h) added to it with a weight.
struct RewardOptions {
  RewardType type = RewardType::kBoxed;  // the built-in grader
  RewardScale scale;                     // what each outcome of the grader is worth
  std::string cmd;                       // external reward command (JSON lines), added to the built-in one
  double cmd_weight = 1.0;               // the external reward's weight in the sum
  double timeout = 30.0;                 // seconds the external reward command has for each reply
  CodeRewardOptions code;                // -rt code: the sandbox and how tests count
};

class RewardFunction {
 public:
  void add(const std::string& name, std::shared_ptr<RewardComponent> component, double weight);
  // The common case: a built-in reward type on its scale.
  void add_builtin(const std::string& name, RewardType type, double weight, RewardScale scale = {}) {
    add(name, std::make_shared<BuiltinReward>(type, scale), weight);
  }
  bool empty() const { return components_.empty(); }

  std::vector<RewardResult> score(const std::vector<RewardInput>& inputs) const;
  // Every component's check of a dataset record (RewardComponent::check_record).
  void check_record(const std::string& gt_answer, const nlohmann::json& metadata) const;

 private:
  struct Component {
    std::string name;
    double weight = 1.0;
    std::shared_ptr<RewardComponent> component;
  };
  std::vector<Component> components_;
};

// The reward the options describe: the built-in grader (or the code tests) as "accuracy", the
// command as "external".
RewardFunction make_reward_function(const RewardOptions& options);
// The grader alone, without the external command: what evaluation reports as accuracy.
RewardFunction make_grader(const RewardOptions& options);

}  // namespace rlcpp
