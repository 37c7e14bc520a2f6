#include "reward/reward_function.h"

#include "reward/external.h"
#include "util/error.h"

namespace rlcpp {

std::vector<ComponentScore> BuiltinReward::score(const std::vector<RewardInput>& inputs) {
  std::vector<ComponentScore> out(inputs.size());
  for (size_t k = 0; k < inputs.size(); ++k) {
    const RewardResult r = grade_response(type_, inputs[k].response, inputs[k].gt_answer, inputs[k].truncated, scale_);
    out[k].value = r.reward;
    out[k].outcome = GradeOutcome{r.extracted, r.format_ok, r.correct};
  }
  return out;
}

void BuiltinReward::check_record(const std::string& gt_answer, const nlohmann::json& metadata) const {
  if (gt_answer.empty()) throw_user_error("no \"gt_answer\" for the {} reward to grade against", reward_types().name(type_));
}

void RewardFunction::check_record(const std::string& gt_answer, const nlohmann::json& metadata) const {
  for (const auto& c : components_) c.component->check_record(gt_answer, metadata);
}

void RewardFunction::add(const std::string& name, std::shared_ptr<RewardComponent> component, double weight) {
  components_.push_back({name, weight, std::move(component)});
}

std::vector<RewardResult> RewardFunction::score(const std::vector<RewardInput>& inputs) const {
  std::vector<RewardResult> results(inputs.size());
  bool graded = false;  // an earlier component reported the outcome
  for (const auto& c : components_) {
    const auto scores = c.component->score(inputs);
    bool grades = false;
    for (size_t k = 0; k < inputs.size(); ++k) {
      const ComponentScore& s = scores[k];
      if (s.outcome && !graded) {
        results[k].extracted = s.outcome->extracted;
        results[k].format_ok = s.outcome->format_ok;
        results[k].correct = s.outcome->correct;
        results[k].reason = s.reason;
        results[k].details = s.details;
        grades = true;
      }
      for (const auto& [part, v] : s.parts) results[k].parts[c.name + "/" + part] = v;
      results[k].parts[c.name] = s.value;
      results[k].reward += c.weight * s.value;
      results[k].truncated = inputs[k].truncated;
    }
    graded = graded || grades;
  }
  return results;
}

RewardFunction make_reward_function(const RewardOptions& options) {
  RewardFunction reward;
  if (options.type == RewardType::kCode) {
    reward.add("accuracy", std::make_shared<CodeReward>(options.code), 1.0);
  } else if (options.type == RewardType::kEnv) {
    // The environment's rewards are the episodes' (the agent loop adds them as the part "env").
  } else {
    reward.add_builtin("accuracy", options.type, 1.0, options.scale);
  }
  if (!options.cmd.empty()) {
    ExternalRewardConfig external;
    external.command = options.cmd;
    external.timeout_s = options.timeout;
    reward.add("external", std::make_shared<ExternalReward>(external), options.cmd_weight);
  }
  return reward;
}

RewardFunction make_grader(const RewardOptions& options) {
  RewardOptions grader = options;
  grader.cmd.clear();
  return make_reward_function(grader);
}

}  // namespace rlcpp
