// The reward of a run: one or more components (built-in reward types, external commands), each
// with a weight; the reward is the weighted sum and each component's value is kept as a named part.
// The first built-in component decides the extracted answer, format and correctness reported.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "reward/external.h"
#include "reward/reward.h"

namespace rlcpp {

struct RewardInput {
  std::string prompt, response, gt_answer;
  nlohmann::json metadata = nlohmann::json::object();
  bool truncated = false;
};

class RewardFunction {
 public:
  void add_builtin(const std::string& name, RewardType type, double weight, RewardScale scale = {});
  void add_external(const std::string& name, std::shared_ptr<ExternalReward> external, double weight);
  bool empty() const { return components_.empty(); }

  std::vector<RewardResult> score(const std::vector<RewardInput>& inputs) const;

 private:
  struct Component {
    std::string name;
    double weight = 1.0;
    RewardType type = RewardType::kBoxed;
    RewardScale scale;
    std::shared_ptr<ExternalReward> external;  // null for a built-in
  };
  std::vector<Component> components_;
};

}  // namespace rlcpp
