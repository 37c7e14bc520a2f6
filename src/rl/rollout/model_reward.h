// Rewards from a reward model (-rt model, or --reward-model beside a rule reward): a sequence
// classifier of one label (as `rlcpp train-rm` writes it, or transformers'
// ...ForSequenceClassification from elsewhere) scores each conversation: the prompt's messages and
// the response as the assistant's last message, rendered by the reward model's own chat template
// and tokenizer (it need not share the policy's), in batches with no grad, in the process that
// computes rewards or on a reward rank of its own (rl/modes/reward_rank.h). Scores can be
// standardised with the mean and std the model's config.json holds and clipped, as OpenRLHF does.
// It is a RewardComponent like the rule rewards, so it composes with them under --reward-weights.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "model/transformer.h"
#include "reward/reward_function.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace rlcpp {

// A reward model's raw scores of token rows (conversations as ModelReward tokenises them), in the
// order given, options.batch rows at a time, left-padded, no grad: the same numbers wherever it runs.
class RewardModelScorer {
 public:
  // Loads the model of options.path on `device`, in options.dtype (else `run_dtype`).
  RewardModelScorer(const ModelRewardOptions& options, const std::string& device, const std::string& run_dtype);
  std::vector<double> score(const std::vector<std::vector<int32_t>>& rows);

 private:
  std::shared_ptr<Transformer> model_;
  int64_t batch_;
  std::mutex mutex_;  // one batch through the model at a time
};

// What scores ModelReward's token rows (a RewardModelScorer here, or a reward rank's client).
using RowScorer = std::function<std::vector<double>(const std::vector<std::vector<int32_t>>& rows)>;

class ModelReward : public RewardComponent {
 public:
  // The reward model of options.path: its tokenizer, chat template and config here, its weights in
  // a RewardModelScorer on `device`, in options.dtype (else `run_dtype`), or with `scorer` wherever
  // that sends the rows. A directory that is not a one-label sequence classifier is a UserError
  // naming it.
  ModelReward(const ModelRewardOptions& options, const std::string& device, const std::string& run_dtype,
              RowScorer scorer = {});
  std::vector<ComponentScore> score(const std::vector<RewardInput>& inputs) override;
  // The token ids the model scores for one input (its conversation rendered and tokenised).
  std::vector<int32_t> conversation_ids(const RewardInput& input) const;

 private:
  ModelRewardOptions options_;
  int64_t max_positions_ = 0;
  RowScorer scorer_;
  std::shared_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ChatTemplate> template_;
  double mean_ = 0, std_ = 1;  // --normalize-reward's, from config.json
};

// The run's reward: make_reward_function's components (the -rt grader, the external command),
// with --reward-model the reward model's as "model" and with --judge-url the LLM judge's as "judge"
// (rl/rollout/judge_reward.h), weighted by --reward-weights. `device` and `dtype`: the run's (the
// reward model's unless --reward-model-dtype). With `reward_model_scorer`, the reward model's rows
// are scored by it (a reward rank) and its weights are not loaded here.
RewardFunction make_run_reward(const RewardOptions& options, const std::string& device = "cpu",
                               const std::string& dtype = "float32", RowScorer reward_model_scorer = {});

}  // namespace rlcpp
