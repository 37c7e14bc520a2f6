#include "reward/reward_function.h"

#include <cmath>
#include <sstream>

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

bool RewardFunction::has(const std::string& name) const {
  for (const auto& c : components_) {
    if (c.name == name) return true;
  }
  return false;
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
      } else if (!graded && results[k].reason.empty()) {
        results[k].reason = s.reason;  // a component that grades no answer (a judge) may still say why
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

bool grades_answers(const RewardOptions& options) {
  return options.type != RewardType::kModel && options.type != RewardType::kJudge;
}

std::map<std::string, double> reward_weights(const RewardOptions& options) {
  std::map<std::string, double> weights;
  const bool grader = options.type != RewardType::kEnv && grades_answers(options);
  std::stringstream list(options.weights);
  std::string item;
  while (std::getline(list, item, ',')) {
    if (item.find_first_not_of(' ') == std::string::npos) continue;
    const auto trim = [](std::string text) {
      text.erase(0, text.find_first_not_of(' '));
      text.erase(text.find_last_not_of(' ') + 1);
      return text;
    };
    const auto eq = item.find('=');
    const std::string name = trim(item.substr(0, eq));
    double weight = NAN;
    if (eq != std::string::npos) {
      const std::string number = trim(item.substr(eq + 1));
      try {
        size_t used = 0;
        weight = std::stod(number, &used);
        if (used != number.size()) weight = NAN;
      } catch (const std::exception&) {
      }
    }
    if (!std::isfinite(weight)) {
      throw_user_error("--reward-weights: '{}' is not NAME=WEIGHT (for example accuracy=1,model=0.5)", trim(item));
    }
    const bool present = (name == "accuracy" && grader) || (name == "external" && !options.cmd.empty()) ||
                         (name == "model" && !options.model.path.empty()) || (name == "judge" && !options.judge.url.empty());
    if (!present) {
      throw_user_error("--reward-weights: the run has no reward component \"{}\" (its components: {}{}{}{})", name,
                       grader ? "accuracy (the -rt grader) " : "", options.cmd.empty() ? "" : "external (--reward-cmd) ",
                       options.model.path.empty() ? "" : "model (--reward-model) ",
                       options.judge.url.empty() ? "" : "judge (--judge-url)");
    }
    if (weights.count(name)) throw_user_error("--reward-weights: \"{}\" is given twice", name);
    weights[name] = weight;
  }
  return weights;
}

RewardFunction make_reward_function(const RewardOptions& options) {
  const auto weights = reward_weights(options);
  const auto weight = [&](const std::string& name, double otherwise) {
    const auto it = weights.find(name);
    return it != weights.end() ? it->second : otherwise;
  };
  RewardFunction reward;
  if (options.type == RewardType::kCode) {
    reward.add("accuracy", std::make_shared<CodeReward>(options.code), weight("accuracy", 1.0));
  } else if (options.type == RewardType::kEnv || !grades_answers(options)) {
    // The environment's rewards are the episodes' (the agent loop adds them as the part "env"); a
    // reward model's and a judge's scores are added by the run.
  } else {
    reward.add_builtin("accuracy", options.type, weight("accuracy", 1.0), options.scale);
  }
  if (!options.cmd.empty()) {
    ExternalRewardConfig external;
    external.command = options.cmd;
    external.timeout_s = options.timeout;
    reward.add("external", std::make_shared<ExternalReward>(external), weight("external", options.cmd_weight));
  }
  return reward;
}

RewardFunction make_grader(const RewardOptions& options) {
  RewardOptions grader = options;
  grader.cmd.clear();
  grader.model = {};
  grader.weights.clear();
  return make_reward_function(grader);
}

}  // namespace rlcpp
