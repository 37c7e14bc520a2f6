// The duties of trainer rank 0 in a distributed run, beside training its own share: picking each
// round's prompts and sending them to the rollout workers, sending them new weights (WeightSync),
// gathering the rounds' figures, evaluating, and writing the metrics line, rollouts and
// checkpoints. The other trainers and the rollout workers hold no run state of their own.
#pragma once

#include <torch/types.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <vector>

#include "engine/engine.h"
#include "parallel/topology.h"
#include "parallel/weight_sync.h"
#include "rl/step/evaluate.h"
#include "rl/step/policy_update.h"
#include "rl/rollout/rollout.h"
#include "rl/rollout/rollout_channel.h"
#include "rl/run/run_state.h"
#include "rl/step/step_record.h"
#include "train/zero.h"

namespace rlcpp {

// One trainer's figures of a step, as a row that the trainers sum (maxima have their own slots).
// `version_before`: the policy version the step trained from (for the staleness of its groups).
torch::Tensor step_figures(const std::vector<SampleGroup>& batch, int64_t buffered, int64_t version_before);
int64_t n_step_figures();

class Leader {
 public:
  // `run` is trainer rank 0's run state (with the dataset); both must outlive the leader.
  Leader(const RunConfig& config, const Topology& topology, RunState& run);

  // Before the first step: config.yaml, the metrics log, the workers' first weights, and the
  // first round unless `send_round` is false (a resumed run with a round collected, or one that
  // first finishes the round it was in).
  void start(bool send_round);
  // The next round's prompts to the workers (a resumed run first re-sends the round in flight).
  void send_round();
  // The policy to every worker, when it changed since the last sync.
  void sync_weights();
  // Every (sync_frequency)th round ahead of training (-nb >= 1) carries a sync.
  void sync_ahead();
  // Under ZeRO-3 or tensor parallelism each of start, sync_weights and sync_ahead first tells the
  // other trainers whether it syncs, and they stream the layers and gather the first replica's
  // parts with it: each calls this at the same points.
  static void follow_sync(const Topology& topology, RunState& run);
  // Whether log_step of `step` runs an evaluation.
  bool evaluation_due(int64_t step) const;
  // What a collected round brought the leader; `wait`: seconds spent waiting for it.
  void note_round(const RoundReceipt& receipt, double wait);
  // The step's metrics line and rollouts file. `rows`: every trainer's step_figures, [T, n].
  void log_step(int64_t step, const torch::Tensor& rows, const PolicyUpdate& update,
                const std::vector<SampleGroup>& trained);
  // The checkpoint state of `state.step`: `state` holds every replica's groups and where the round
  // stands, the leader adds the rest (every trainer then calls save_run).
  CheckpointState checkpoint_state(CheckpointState state) const;
  void stop_workers();

 private:
  const RunConfig& c_;
  const Topology& topo_;
  RunState& run_;
  std::unique_ptr<RolloutGenerator> picker_;
  std::unique_ptr<WeightSync> weight_sync_;
  std::unique_ptr<RunEvaluator> evaluator_;
  std::unique_ptr<Engine> eval_engine_;  // over the trainer's own weights
  std::unique_ptr<RunLog> log_;
  int64_t synced_version_ = -1;
  int64_t rounds_ahead_ = 0;            // rounds sent ahead of training, for sync_frequency
  std::vector<PromptPick> in_flight_;   // the round the workers are generating
  // Gathered between two steps:
  struct Pending {
    int64_t generated = 0, kept = 0;
    double generate = 0, reward = 0, wait = 0, sync = 0;
    uint64_t sync_bytes = 0;
    int64_t syncs = 0, verified = 0;
    std::vector<SampleGroup> discarded;
  } pending_;
  std::chrono::steady_clock::time_point last_step_end_ = std::chrono::steady_clock::now();
};

}  // namespace rlcpp
