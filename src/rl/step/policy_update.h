// The policy update of one RL step, shared by the colocated loop and the data-parallel trainers:
// old (and reference) log-probs of the step's samples, then num_training_epoch passes of
// mini-batches of train_minibatch_size prompts' samples, one optimizer step each.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "rl/rollout/rollout.h"
#include "rl/config/run_config.h"
#include "train/trainer.h"

namespace rlcpp {

// The trainer of an RL run: the algorithm's loss, the optimizer with its schedule spanning the
// optimizer steps of `total_steps` RL steps, micro-batches, the sampling temperature.
TrainerConfig rl_trainer_config(const RunConfig& config, int64_t total_steps);
// -a PPO: the critic's trainer, as the policy's but with the critic's learning rate and warm-up
// and the value loss's clip (its optimizer steps with the policy's, one per mini-batch).
TrainerConfig critic_trainer_config(const RunConfig& config, int64_t total_steps);

struct PolicyUpdate {
  bool trained = false;  // false: no sample with a response anywhere, nothing changed
  // loss, pg_loss, kl, entropy, clip fractions, grad_norm, lr, optimizer_updates, n_skipped, TIS weights,
  // train/rollout mismatch (mismatch_abs_mean, mismatch_abs_max, mismatch_kl), relayed_groups
  std::map<std::string, double> metrics;
  double logprob_seconds = 0, train_seconds = 0;
};

// Trains on `groups`, this rank's share of the step. With `trainers` (data parallel; the trainer's
// gradient reducer sums over the same ranks), the mini-batch count and each mini-batch's token and
// sample counts are agreed over the trainer ranks, so every rank takes the same optimizer steps and
// the sum of their losses is the loss of the whole step; the metrics are those of the whole step.
// A rank with fewer groups than another still takes part in every step.
// `relayed`: groups of earlier steps trained on again (the relay buffer), with `groups`; counted in
// the metrics as relayed_groups.
// `policy_version`: the version of the policy's weights now. Given, an on-policy step (see
// on_policy_shortcut) takes the sampler's log-probs as the old ones and skips the scoring pass;
// the entropy and the train/rollout mismatch then come from the first update's own forward.
// `critic` (-a PPO): the samples' advantages are GAE's from its values (rl/step/critic.h), and it
// takes an optimizer step on each of the policy's mini-batches; its figures join the metrics.
PolicyUpdate update_policy(Trainer& trainer, const RunConfig& config, const std::vector<SampleGroup>& groups,
                           Communicator* trainers = nullptr, const std::vector<SampleGroup>& relayed = {},
                           std::optional<int64_t> policy_version = std::nullopt, Trainer* critic = nullptr);

// Why the on-policy shortcut (--reuse-rollout-logprobs) can never apply to this run's steps ("" when
// it can: one epoch, one mini-batch per step, no relay, no staleness, rollout weights and KV cache
// in the training dtype; each step still checks its own groups). Printed at start-up.
std::string on_policy_shortcut_off(const RunConfig& config);
// The start-up line saying where the old log-probs come from, and why.
std::string old_logprobs_plan(const RunConfig& config);

// After each step: counts the steps in a row whose updates were skipped for a non-finite gradient
// (warning on each) and stops the run (UserError) at --max-nonfinite-steps.
void check_nonfinite(const TrainOptions& train, const PolicyUpdate& update, int64_t step, int64_t& consecutive);

}  // namespace rlcpp
