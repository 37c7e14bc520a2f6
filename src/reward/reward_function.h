// The reward of a run: one or more components (reward_component.h: built-in reward types, external
// commands, ...), each with a weight; the reward is the weighted sum and each component's value is
// kept as a named part. The first component that grades an answer decides the extracted answer,
// format and correctness reported.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "reward/code_reward.h"
#include "reward/reward.h"
#include "reward/reward_component.h"

namespace rlcpp {

// A reward model's settings (-rt model, --reward-model): scored above this layer (rl/), since the
// reward layer knows no model.
struct ModelRewardOptions {
  std::string path;           // a ...ForSequenceClassification directory ("": none)
  std::string dtype;          // its weights and compute ("": the run's dtype)
  int64_t batch = 16;         // responses per forward
  bool normalize = false;     // (score - mean) / std with the mean and std its config.json holds (train-rm writes them)
  double clip = 0;            // scores clipped to [-clip, clip] after normalising (0: not clipped)
};

// An LLM judge's settings (-rt judge, or --judge-url beside other rewards): an OpenAI-compatible
// server (rlcpp serve, vLLM, SGLang) reads each response through a prompt template and answers
// with a score; scored above this layer (rl/), through the openai layer's server pool.
struct JudgeOptions {
  std::string url;              // "http://HOST:PORT[,...]" ("": no judge)
  std::string template_path;    // the judge's prompt; {prompt}, {response} and {answer} are filled in
  std::string model;            // the judge's served name ("": each server's first of /v1/models)
  std::string pattern;          // the score: this regex's first group in the reply ("": the reply's last number)
  double max_score = 10;        // reward = score / max_score, clipped to [0, 1]
  int64_t max_tokens = 256;     // the judge's reply at most
  double timeout = 120;         // seconds one judgement may take before it goes to another server
  int64_t concurrency = 8;      // judgements in flight at one server
};

// A run's reward settings (the reward group): the built-in grader on its scale, an external
// command (reward/external.h), and a reward model, each a named component with a weight.
struct RewardOptions {
  RewardType type = RewardType::kBoxed;  // the built-in grader (or -rt model: the reward model alone)
  RewardScale scale;                     // what each outcome of the grader is worth
  std::string cmd;                       // external reward command (JSON lines), added to the built-in one
  double cmd_weight = 1.0;               // the external reward's weight in the sum
  double timeout = 30.0;                 // seconds the external reward command has for each reply
  CodeRewardOptions code;                // -rt code: the sandbox and how tests count
  ModelRewardOptions model;              // --reward-model: added as "model"
  JudgeOptions judge;                    // --judge-url: added as "judge"
  std::string weights;                   // --reward-weights "accuracy=1,model=0.5": the components' weights
};

// The components' weights --reward-weights gives ("name=w,..."; names: accuracy, external, model, judge),
// each checked: an unknown name, a component the run does not have or a bad number is a UserError
// naming the flag.
std::map<std::string, double> reward_weights(const RewardOptions& options);
// Whether the run's rewards grade an answer against the record's ground truth (its prompts need
// "gt_answer"): every reward type but the reward model or the judge alone (-rt model, -rt judge).
bool grades_answers(const RewardOptions& options);

class RewardFunction {
 public:
  void add(const std::string& name, std::shared_ptr<RewardComponent> component, double weight);
  // The common case: a built-in reward type on its scale.
  void add_builtin(const std::string& name, RewardType type, double weight, RewardScale scale = {}) {
    add(name, std::make_shared<BuiltinReward>(type, scale), weight);
  }
  bool empty() const { return components_.empty(); }
  bool has(const std::string& name) const;

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

// The reward the options describe, from this layer: the built-in grader (or the code tests) as
// "accuracy", the command as "external", weighted by --reward-weights (the reward model is added
// by the run: rl/rollout/model_reward.h).
RewardFunction make_reward_function(const RewardOptions& options);
// The grader alone, without the external command: what evaluation reports as accuracy.
RewardFunction make_grader(const RewardOptions& options);

}  // namespace rlcpp
