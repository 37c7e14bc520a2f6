// The MPI rollout workers of the distributed mode (rollout_worker.cpp), as a RolloutSource on the
// trainers: trainer rank 0 sends each round's prompts to the engines (split evenly) and the
// policy to every rollout rank in buckets (WeightSync; under ZeRO-3 or tensor parallelism the other
// trainers stream their parts with it); each round's kept groups reach the trainer replicas over
// the RolloutChannel, a replica's first rank handing them to its other ranks.
#pragma once

#include <memory>

#include "parallel/topology.h"
#include "parallel/weight_sync.h"
#include "rl/rollout/rollout_channel.h"
#include "rl/rollout/rollout_source.h"
#include "rl/run/run_state.h"

namespace rlcpp {

class WorkerSource : public RolloutSource {
 public:
  // `topology` and `run` (this trainer's) must outlive the source.
  WorkerSource(const RunConfig& config, const Topology& topology, RunState& run);
  void submit(std::vector<PromptPick> picks, const WeightSwitches& switches) override;
  void stream_next(std::vector<PromptPick> next) override { next_ = std::move(next); }
  RoundReceipt collect(std::deque<SampleGroup>& buffer) override;
  double publish(int64_t version, bool resend) override;
  bool concurrent() const override { return true; }
  bool cuts_rounds() const override;
  std::vector<nlohmann::json> take_cut() override;
  bool resume_cut(const std::vector<nlohmann::json>& in_flight) override;
  std::vector<std::vector<PromptPick>> pool() const override { return pool_; }
  int64_t round_prompts() const override { return topo_.num_engines() * c_.round_prompts(); }
  void add_figures(nlohmann::ordered_json& extra) override;
  void finish() override;
  std::string describe() const override;

 private:
  bool leader() const { return topo_.role_rank == 0; }
  // Trainer 0's sync of the policy at `version` (when it changed since the last one).
  double sync_weights(int64_t version, bool resend);

  const RunConfig& c_;
  const Topology& topo_;
  RunState& run_;
  RolloutChannel channel_;
  std::unique_ptr<WeightSync> weight_sync_;  // trainer 0
  int64_t synced_version_ = -1;
  int64_t syncs_ = 0, verified_ = 0;  // since the last metrics line
  uint64_t sync_bytes_ = 0;
  std::vector<PromptPick> next_;  // trainer 0, --stream-prompts: sent with the next round
  // Trainer 0, --group-order completion: each engine's prompts sent and not yet delivered; whether
  // a checkpoint gave them, and whether the workers hold them (after the first round sent).
  std::vector<std::vector<PromptPick>> pool_;
  bool pools_restored_ = false, pools_sent_ = false;
  int64_t restarted_ = 0;  // groups the workers began anew over --max-staleness, since the last metrics line
};

}  // namespace rlcpp
