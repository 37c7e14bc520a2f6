// Rewards from a reward model (-rt model, or --reward-model beside a rule reward): a sequence
// classifier of one label (as `rlcpp train-rm` writes it, or transformers'
// ...ForSequenceClassification from elsewhere) scores each conversation: the prompt's messages and
// the response as the assistant's last message, rendered by the reward model's own chat template
// and tokenizer (it need not share the policy's), in batches with no grad, in the process that
// computes rewards. Scores can be standardised with the mean and std the model's config.json holds
// and clipped, as OpenRLHF does. It is a RewardComponent like the rule rewards, so it composes
// with them under --reward-weights.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "model/transformer.h"
#include "reward/reward_function.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace rlcpp {

class ModelReward : public RewardComponent {
 public:
  // Loads the model of options.path on `device`, in options.dtype (else `run_dtype`). A directory
  // that is not a one-label sequence classifier is a UserError naming it.
  ModelReward(const ModelRewardOptions& options, const std::string& device, const std::string& run_dtype);
  std::vector<ComponentScore> score(const std::vector<RewardInput>& inputs) override;
  // The token ids the model scores for one input (its conversation rendered and tokenised).
  std::vector<int32_t> conversation_ids(const RewardInput& input) const;

 private:
  ModelRewardOptions options_;
  std::shared_ptr<Transformer> model_;
  std::shared_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ChatTemplate> template_;
  double mean_ = 0, std_ = 1;  // --normalize-reward's, from config.json
  std::mutex mutex_;           // one batch through the model at a time
};

// The run's reward: make_reward_function's components (the -rt grader, the external command),
// with --reward-model the reward model's as "model" and with --judge-url the LLM judge's as "judge"
// (rl/rollout/judge_reward.h), weighted by --reward-weights. `device` and `dtype`: the run's (the
// reward model's unless --reward-model-dtype).
RewardFunction make_run_reward(const RewardOptions& options, const std::string& device = "cpu",
                               const std::string& dtype = "float32");

}  // namespace rlcpp
