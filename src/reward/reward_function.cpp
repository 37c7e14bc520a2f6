#include "reward/reward_function.h"

namespace rlcpp {

void RewardFunction::add_builtin(const std::string& name, RewardType type, double weight, RewardScale scale) {
  components_.push_back({name, weight, type, scale, nullptr});
}

void RewardFunction::add_external(const std::string& name, std::shared_ptr<ExternalReward> external, double weight) {
  components_.push_back({name, weight, RewardType::kBoxed, {}, std::move(external)});
}

std::vector<RewardResult> RewardFunction::score(const std::vector<RewardInput>& inputs) const {
  std::vector<RewardResult> results(inputs.size());
  bool first_builtin = true;
  for (const auto& c : components_) {
    std::vector<double> values(inputs.size(), 0.0);
    if (c.external) {
      std::vector<ExternalRequest> requests;
      for (const auto& in : inputs) requests.push_back({in.prompt, in.response, in.gt_answer, in.metadata});
      const auto replies = c.external->score(requests);
      for (size_t k = 0; k < inputs.size(); ++k) {
        values[k] = replies[k].reward;
        for (const auto& [part, v] : replies[k].parts) results[k].parts[c.name + "/" + part] = v;
      }
    } else {
      for (size_t k = 0; k < inputs.size(); ++k) {
        RewardResult r = grade_response(c.type, inputs[k].response, inputs[k].gt_answer, inputs[k].truncated, c.scale);
        values[k] = r.reward;
        if (first_builtin) {
          results[k].extracted = r.extracted;
          results[k].format_ok = r.format_ok;
          results[k].correct = r.correct;
        }
      }
      first_builtin = false;
    }
    for (size_t k = 0; k < inputs.size(); ++k) {
      results[k].parts[c.name] = values[k];
      results[k].reward += c.weight * values[k];
      results[k].truncated = inputs[k].truncated;
    }
  }
  return results;
}

}  // namespace rlcpp
