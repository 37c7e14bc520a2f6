// The seam every reward plugs into: a component scores a batch of (prompt, response) inputs, each
// with a value and named parts. Built-in graders (BuiltinReward) and the external command
// (ExternalReward) implement it here; sandboxed code tests implement it over the sandbox, and reward
// models and LLM judges from above model/ and openai/, without RewardFunction knowing which.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "reward/reward.h"

namespace rlcpp {

struct RewardInput {
  std::string prompt, response, gt_answer;  // prompt: as the policy saw it (rendered by its chat template)
  nlohmann::json metadata = nlohmann::json::object();
  bool truncated = false;
  // The prompt's conversation as messages (what a reward model renders with its own chat template,
  // the response its last assistant message); empty where only text is known.
  nlohmann::json messages = nlohmann::json::array();
};

// A grader's reading of a response: the answer it found, whether the format held, whether it was right.
struct GradeOutcome {
  std::optional<std::string> extracted;
  bool format_ok = false;
  bool correct = false;
};

struct ComponentScore {
  double value = 0.0;
  std::map<std::string, double> parts;  // named sub-scores (reported as "component/part")
  std::optional<GradeOutcome> outcome;  // components that grade an answer
  std::string reason;                   // why, where the component says ("passed", "timeout", ...)
  std::string details;                  // per-test results as JSON text ("": none)
};

class RewardComponent {
 public:
  virtual ~RewardComponent() = default;
  // One score per input, in order. May block (a process, a model); never throws for one bad
  // response (that is a low score), only for a broken setup (a UserError naming it).
  virtual std::vector<ComponentScore> score(const std::vector<RewardInput>& inputs) = 0;
  // Whether a dataset record (its gt_answer and other fields) can be graded: throws a UserError
  // saying what is wrong and how to fix it. Run on every record when a dataset is loaded.
  virtual void check_record(const std::string& gt_answer, const nlohmann::json& metadata) const {}
};

// A built-in reward type (reward.h) on its scale.
class BuiltinReward : public RewardComponent {
 public:
  explicit BuiltinReward(RewardType type, RewardScale scale = {}) : type_(type), scale_(scale) {}
  std::vector<ComponentScore> score(const std::vector<RewardInput>& inputs) override;
  void check_record(const std::string& gt_answer, const nlohmann::json& metadata) const override;

 private:
  RewardType type_;
  RewardScale scale_;
};

}  // namespace rlcpp
