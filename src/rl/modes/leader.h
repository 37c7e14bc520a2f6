// The duties of the rank that picks prompts (the only process, or trainer rank 0), beside training
// its own share: each round's prompts, the rounds' and weight publications' figures, evaluation,
// the metrics line and rollouts file, and the run's part of a checkpoint's state. The other ranks
// hold no run state of their own beyond their buffers.
#pragma once

#include <torch/types.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <vector>

#include "engine/engine.h"
#include "parallel/topology.h"
#include "rl/modes/reward_rank.h"
#include "rl/rollout/rollout.h"
#include "rl/rollout/rollout_source.h"
#include "rl/run/run_state.h"
#include "rl/step/evaluate.h"
#include "rl/step/policy_update.h"
#include "rl/step/step_record.h"

namespace rlcpp {

// What --max-staleness took out of a step's buffer: groups dropped, tokens kept as context only.
struct StaleCounts {
  int64_t dropped_groups = 0, masked_tokens = 0;
};
// One trainer's figures of a step, as a row that the trainers sum (maxima have their own slots).
// `version_before`: the policy version the step trained from (for the staleness of its groups);
// `stale`: what --max-staleness took out before the step.
torch::Tensor step_figures(const std::vector<SampleGroup>& batch, int64_t buffered, int64_t version_before,
                           StaleCounts stale = {});
int64_t n_step_figures();

class Leader {
 public:
  // `run` is the leader's run state (with the dataset) and `source` the run's; both must outlive
  // the leader. `engine`: an engine over the policy's own weights for evaluations, or null (one
  // is made when there are eval sets).
  Leader(const RunConfig& config, const Topology* topology, RunState& run, RolloutSource& source, Engine* engine);

  // Before the first step: config.yaml, the metrics log, the start-up lines.
  void start();
  // The next round's prompts: a resumed run's round in flight first, else new ones.
  const std::vector<PromptPick>& pick_round();
  // --stream-prompts: the round after it, picked now (pick_round then takes these).
  const std::vector<PromptPick>& pick_next();
  // What a collected round brought; `wait`: seconds spent waiting for it.
  void note_round(const RoundReceipt& receipt, double wait);
  // A weight publication's seconds.
  void note_publish(double seconds);
  // Whether log_step of `step` runs an evaluation.
  bool evaluation_due(int64_t step) const;
  // The step's metrics line and rollouts file. `rows`: every trainer's step_figures, [T, n].
  void log_step(int64_t step, const torch::Tensor& rows, const PolicyUpdate& update,
                const std::vector<SampleGroup>& trained);
  // The checkpoint state of `state.step`: `state` holds every replica's groups and where the round
  // stands, the leader adds the rest (every trainer then calls save_run).
  CheckpointState checkpoint_state(CheckpointState state) const;
  // The closing lines.
  // The run did what was asked (metrics.jsonl's status line says so), or ended with `error`.
  void finish(double seconds);
  void fail(const std::string& error);

 private:
  const RunConfig& c_;
  const Topology* topo_;
  RunState& run_;
  RolloutSource& source_;
  std::unique_ptr<RolloutGenerator> picker_;
  std::unique_ptr<RewardRankClient> reward_rank_;  // scores evaluations (evaluation_on_reward_rank)
  std::unique_ptr<RunEvaluator> evaluator_;
  Engine* eval_engine_ = nullptr;
  std::unique_ptr<Engine> own_engine_;  // for evaluations, when the source has no engine to lend
  std::unique_ptr<RunLog> log_;
  std::vector<PromptPick> in_flight_;   // the round submitted and not yet collected
  std::vector<PromptPick> next_;        // --stream-prompts: the round after it, sent to be streamed
  // Gathered between two steps:
  struct Pending {
    int64_t generated = 0, kept = 0;
    double generate = 0, reward = 0, wait = 0, sync = 0;
    std::vector<SampleGroup> discarded;
  } pending_;
  std::chrono::steady_clock::time_point last_step_end_ = std::chrono::steady_clock::now();
};

}  // namespace rlcpp
