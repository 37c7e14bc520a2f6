// Where a run's rollouts come from, as the step loop (rl/modes/step_loop.h) sees it: rounds of
// prompts submitted, their graded groups collected in the order submitted, and the policy's
// weights published with their version. Three sources implement it: the built-in engine over the
// policy's own weights (EngineSource), OpenAI-compatible servers (ServerSource, rollout_servers.h)
// and the MPI rollout workers of the distributed mode (WorkerSource, rl/modes/worker_source.h).
// The loop's staleness policy (StalenessPolicy) decides when a round goes ahead of training and
// when the weights are published; the sources only do it.
//
// Every rank of a run calls the same methods at the same points: on the rank that picks prompts
// (the leader) they do the work, and on the others they take their part (a tensor-parallel
// engine's followers serve its steps, the other trainers receive their share of the groups and
// stream their parts of the weights).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "engine/engine.h"
#include "rl/config/run_config.h"
#include "rl/rollout/rollout.h"

namespace rlcpp {

// What one collected round brought.
struct RoundReceipt {
  int64_t kept = 0;                      // groups added to this rank's buffer
  // On the leader only, over every engine:
  std::vector<SampleGroup> discarded;    // by the group filter
  int64_t generated = 0, kept_all = 0;   // groups
  std::vector<int64_t> delivered;        // rollout workers: the kept groups' ids (SampleGroup::id)
  int64_t restarted = 0;                 // and the groups begun anew (RolloutRound::restarted)
  double generate_seconds = 0, reward_seconds = 0;  // the slowest engine's
};

class RolloutSource {
 public:
  virtual ~RolloutSource() = default;
  // Starts one round over `picks` with the weights last published (the leader's picks; the other
  // ranks pass none), taking the versions published meanwhile as `switches` says (partial
  // rollouts: rollout workers only). A source that cannot generate while the trainers train
  // (concurrent() false) generates it in collect, with the weights published by then.
  virtual void submit(std::vector<PromptPick> picks, const WeightSwitches& switches) = 0;
  // --stream-prompts: the next round's prompts, sent with the round submitted next to be decoded
  // in its free slots (a source that cannot stream leaves them to their own round).
  virtual void stream_next(std::vector<PromptPick> /*next*/) {}
  // Waits for the oldest round submitted: this rank's share of its kept groups joins `buffer`.
  virtual RoundReceipt collect(std::deque<SampleGroup>& buffer) = 0;
  // The generators take the policy's current weights, which are `version` (a no-op when they hold
  // them already, unless `resend`: a partial rollout's schedule takes one version each step, even
  // a step that left the weights as they were). Returns the seconds it took.
  virtual double publish(int64_t version, bool resend) = 0;
  // Whether rounds generate while the trainers train, so that one may go ahead (-nb >= 1).
  virtual bool concurrent() const = 0;
  // Partial rollouts: whether a checkpoint cuts the round generating ahead at the checkpoint's
  // version (WeightSwitches::cuts) and saves it in flight (else the trainers collect it first).
  virtual bool cuts_rounds() const { return false; }
  // At such a checkpoint, after the policy of its version is published: the round as each engine
  // cut it, one record per engine (on the leader; the other ranks get none).
  virtual std::vector<nlohmann::json> take_cut() { return {}; }
  // A resumed run, after the first publish: the round a checkpoint cut goes on from `in_flight`.
  // False when this source cannot (another source, another number of engines): the caller then
  // submits the round's prompts anew.
  virtual bool resume_cut(const std::vector<nlohmann::json>& in_flight) { return false; }
  // --group-order completion: each generator's prompts sent and not yet delivered, which a
  // checkpoint saves (they go on in later rounds); none elsewhere.
  virtual std::vector<std::vector<PromptPick>> pool() const { return {}; }
  // Prompts the leader picks for one round (-ibs per engine).
  virtual int64_t round_prompts() const = 0;
  // The source's own figures on the step's metrics line (rollout_servers, weight_sync).
  virtual void add_figures(nlohmann::ordered_json& extra) {}
  // After the last step (the rollout workers are told to stop).
  virtual void finish() {}
  // An engine over the policy's own weights that evaluations may use, or null.
  virtual Engine* engine() { return nullptr; }
  // For the start-up line: where rounds are generated.
  virtual std::string describe() const = 0;
};

// -nb and --sync-frequency: when the next round is submitted before the steps of this one train,
// and whether the policy is published before a round is submitted. Rounds ahead publish every
// sync_frequency-th time (the others generate with the weights the generators already hold);
// other rounds publish whenever the policy changed. A colocated engine (no concurrent source)
// never runs ahead.
class StalenessPolicy {
 public:
  // `rounds_ahead`: rounds sent ahead so far (a checkpoint's, for the cadence).
  StalenessPolicy(const StalenessOptions& options, bool concurrent, int64_t rounds_ahead);
  // Whether the round after the one whose steps end at `round_end` goes ahead of them.
  bool ahead(int64_t round_end, int64_t total_steps) const;
  // Before a round is submitted: whether the policy is published first. Counts the rounds ahead.
  bool publish_before(bool ahead);
  int64_t rounds_ahead() const { return rounds_ahead_; }

 private:
  int64_t n_behind_, sync_frequency_;
  bool concurrent_;
  int64_t rounds_ahead_;
};

// The built-in engine over the policy's own weights (the colocated mode): a round is generated,
// graded and filtered in collect, with the weights as they are then (publishing only sets the
// version). Under tensor or pipeline parallelism the engine's first rank generates while the
// others serve, and the round's kept groups reach every rank of the group.
class EngineSource : public RolloutSource {
 public:
  // `tokenizer`: on the engine's first rank (the others serve); `group`: the engine's ranks, or null.
  EngineSource(const RunConfig& config, const ModelConfig& model_config, const Tokenizer* tokenizer,
               std::shared_ptr<Engine> engine, std::shared_ptr<Communicator> group);
  void submit(std::vector<PromptPick> picks, const WeightSwitches& switches) override;
  RoundReceipt collect(std::deque<SampleGroup>& buffer) override;
  double publish(int64_t version, bool resend) override;
  bool concurrent() const override { return false; }
  int64_t round_prompts() const override { return c_.round_prompts(); }
  Engine* engine() override { return engine_.get(); }
  std::string describe() const override { return "the built-in engine over the policy's own weights"; }

 private:
  const RunConfig& c_;
  std::shared_ptr<Engine> engine_;
  RewardFunction reward_;
  std::unique_ptr<RolloutGenerator> generator_;  // on the engine's first rank
  std::shared_ptr<Communicator> group_;  // the engine's ranks: null or of one rank without TP or PP
  std::deque<std::vector<PromptPick>> submitted_;
};

}  // namespace rlcpp
