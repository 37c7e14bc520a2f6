// A trainer rank of the distributed run: collects its replica's share of each round's groups,
// trains data-parallel with the other replicas (and tensor-parallel within its replica), and (on
// rank 0) does the leader's duties. A replica's first rank collects its groups and hands them to
// the replica's other ranks; they hold the same buffers and take the same steps.
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <chrono>
#include <deque>
#include <optional>

#include "comm/gradient_sync.h"
#include "rl/modes/control.h"
#include "rl/modes/distributed.h"
#include "rl/step/evaluate.h"
#include "rl/modes/leader.h"
#include "rl/rollout/relay_buffer.h"
#include "rl/checkpoint/run_checkpoint.h"
#include "util/trace.h"

namespace rlcpp {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {


class TrainerRank {
 public:
  TrainerRank(const RunConfig& c, const Topology& topo);
  fs::path run();

 private:
  int T() const { return topo_.num_replicas(); }
  int replica() const { return topo_.replica(); }
  ZeroOptimizer* zero() { return run_.trainer->zero(); }
  // This replica's share of saved groups: its own under the same replicas, else dealt by the balance.
  std::vector<SampleGroup> deal(const TrainerGroups& saved) const;
  // One round from the workers: this trainer's share of its kept groups joins `into`.
  void collect(std::deque<SampleGroup>& into);
  // One round's kept groups join the buffer: the round collected ahead if there is one.
  void collect_round();
  // At a checkpoint under -nb >= 1: the round the workers are generating, collected now (as if at
  // the round's end) and kept apart until the next collect_round.
  void collect_ahead();
  // Trains steps [step, last], then sends the next round if the run goes on and none is coming.
  void train_round(int64_t& step, int64_t last);
  void train_step(int64_t step);
  void save_checkpoint(int64_t step);
  // Groups of every replica at the leader, in replica order (the others get nothing back).
  TrainerGroups gather(const std::vector<SampleGroup>& mine);
  // The leader's evaluation of `step` after its metrics, which the first replica's other ranks serve.
  void log_step(int64_t step, const torch::Tensor& rows, const PolicyUpdate& update,
                const std::vector<SampleGroup>& trained);

  const RunConfig& c_;
  const Topology& topo_;
  RunState run_;
  std::unique_ptr<RolloutChannel> channel_;
  std::deque<SampleGroup> buffer_;  // this trainer's kept groups not yet trained on
  std::unique_ptr<RelayBuffer> relay_;  // this trainer's trained groups trained on again
  std::optional<std::deque<SampleGroup>> collected_;  // this trainer's share of a round collected ahead
  int64_t round_end_ = 0;    // the last step of the round in training
  bool round_ahead_ = false;  // a round is being generated while this one trains (-nb >= 1)
  int64_t nonfinite_steps_ = 0;         // steps in a row whose updates were skipped as non-finite
  std::unique_ptr<Leader> leader_;   // trainer rank 0 only
  std::unique_ptr<Engine> eval_engine_;  // the first replica's other ranks under tensor parallelism, with -ed
};

TrainerRank::TrainerRank(const RunConfig& c, const Topology& topo)
    : c_(c), topo_(topo), run_(load_run(c, &topo)) {
  if (T() > 1 && run_.trainer->zero() == nullptr) {
    auto group = topo_.dp_group;
    run_.trainer->set_gradient_reducer(
        [group](const std::vector<torch::Tensor>& params) { all_reduce_gradients(*group, params, kGradientBucketBytes); });
  }
  channel_ = std::make_unique<RolloutChannel>(topo_);
  if (topo_.role_rank == 0) {
    leader_ = std::make_unique<Leader>(c, topo, run_);
  } else if (replica() == 0 && topo_.train_tp > 1 && !eval_sets(c).empty()) {
    eval_engine_ = std::make_unique<Engine>(run_.policy, run_engine_config(c));  // serves the leader's evaluations
  }
  const CheckpointState& saved = run_.plan.saved;
  const auto mine = deal(saved.rollout_buffer);
  buffer_.assign(mine.begin(), mine.end());
  relay_ = std::make_unique<RelayBuffer>(c, deal(saved.relay_buffer));
  if (saved.round.collected) {
    const auto ahead = deal(*saved.round.collected);
    collected_.emplace(ahead.begin(), ahead.end());
  }
}

std::vector<SampleGroup> TrainerRank::deal(const TrainerGroups& saved) const {
  if (static_cast<int>(saved.per_trainer.size()) == T()) {
    int64_t first = 0;
    for (int t = 0; t < replica(); ++t) first += saved.per_trainer[static_cast<size_t>(t)];
    const auto begin = saved.groups.begin() + first;
    return {begin, begin + saved.per_trainer[static_cast<size_t>(replica())]};
  }
  std::vector<int64_t> tokens;
  for (const auto& g : saved.groups) tokens.push_back(g.response_tokens());
  const auto to = assign_groups(tokens, std::vector<int64_t>(static_cast<size_t>(T()), 0),
                                std::vector<int64_t>(static_cast<size_t>(T()), 0));
  std::vector<SampleGroup> mine;
  for (size_t k = 0; k < saved.groups.size(); ++k) {
    if (to[k] == replica()) mine.push_back(saved.groups[k]);
  }
  return mine;
}

TrainerGroups TrainerRank::gather(const std::vector<SampleGroup>& mine) {
  if (!topo_.tp_leader()) return {};  // the replica's first rank holds the same groups
  if (!leader_) {
    topo_.dp_group->send_bytes(encode_groups(mine), 0, kShareTag);
    return {};
  }
  TrainerGroups all{mine, {static_cast<int64_t>(mine.size())}};
  for (int t = 1; t < T(); ++t) {
    auto theirs = decode_groups(topo_.dp_group->recv_bytes(t, kShareTag));
    all.per_trainer.push_back(static_cast<int64_t>(theirs.size()));
    for (auto& g : theirs) all.groups.push_back(std::move(g));
  }
  return all;
}

void TrainerRank::collect(std::deque<SampleGroup>& into) {
  const auto wait_start = Clock::now();
  const size_t before = into.size();
  if (topo_.tp_leader()) {
    const RoundReceipt receipt = [&] {
      trace::Span wait("collect_rollouts");
      return channel_->collect(into);
    }();
    if (leader_) leader_->note_round(receipt, std::chrono::duration<double>(Clock::now() - wait_start).count());
  }
  if (topo_.train_tp > 1) {  // the replica's other ranks get the same groups
    std::string bytes;
    if (topo_.tp_leader()) bytes = encode_groups(std::vector<SampleGroup>(into.begin() + static_cast<long>(before), into.end()));
    topo_.tp_group->broadcast_bytes(bytes, 0);
    if (!topo_.tp_leader()) {
      for (auto& g : decode_groups(bytes)) into.push_back(std::move(g));
    }
  }
}

void TrainerRank::collect_round() {
  if (!collected_) return collect(buffer_);
  for (auto& g : *collected_) buffer_.push_back(std::move(g));
  collected_.reset();
}

void TrainerRank::collect_ahead() {
  std::deque<SampleGroup> held = buffer_;  // the balance weighs what this trainer holds
  const auto before = static_cast<long>(held.size());
  collect(held);
  collected_.emplace(held.begin() + before, held.end());
}

void TrainerRank::train_round(int64_t& step, int64_t last) {
  const bool more_rounds = last < run_.plan.total_steps;
  while (step <= last) train_step(step++);
  // The next round, unless it went ahead (-nb >= 1) or was collected with the checkpoint resumed
  // from (-nb may change on resume).
  if (more_rounds && !round_ahead_ && !collected_) {
    if (leader_) {
      leader_->sync_weights();
      leader_->send_round();
    } else {
      Leader::follow_sync(topo_, run_);  // ZeRO-3: the layers stream with trainer 0's sync
    }
  }
}

void TrainerRank::save_checkpoint(int64_t step) {
  trace::write();
  // ZeRO-3: trainer 0 writes the model directory whole (the others send it their shards).
  GatheredParameters whole(zero(), true, /*root=*/0);
  // Under -nb >= 1 the workers are generating the next round from an older policy, which a
  // resumed run could not reproduce: the round is collected now and saved with the checkpoint.
  if (round_ahead_ && !collected_) collect_ahead();
  CheckpointState state;
  state.step = step;
  state.rollout_buffer = gather(std::vector<SampleGroup>(buffer_.begin(), buffer_.end()));
  state.relay_buffer = gather(relay_->groups());
  state.round.end_step = round_end_;
  if (collected_) state.round.collected = gather(std::vector<SampleGroup>(collected_->begin(), collected_->end()));
  if (leader_) state = leader_->checkpoint_state(std::move(state));
  save_run(c_, run_, state);  // every trainer: parts and optimizer shards go to trainer 0
}

void TrainerRank::log_step(int64_t step, const torch::Tensor& rows, const PolicyUpdate& update,
                           const std::vector<SampleGroup>& trained) {
  if (leader_) {
    leader_->log_step(step, rows, update, trained);
  } else if (eval_engine_) {
    serve_evaluation_if_due(*eval_engine_, c_, step, run_.plan.total_steps);
  }
}

void TrainerRank::train_step(int64_t step) {
  trace::Span span("step");
  const std::vector<SampleGroup> batch = take_groups(buffer_, c_.train_batch_size);
  const int64_t version_before = run_.policy_version;
  const PolicyUpdate update = update_policy(*run_.trainer, c_, batch, topo_.dp_group.get(), relay_->relayed(step),
                                            version_before);
  relay_->add(step, batch);
  check_nonfinite(c_, update, step, nonfinite_steps_);
  if (update.trained) ++run_.policy_version;

  // Every replica's figures, one row each, summed so each row reaches the leader.
  auto rows = torch::zeros({T(), n_step_figures()}, torch::kFloat64);
  rows[replica()] = step_figures(batch, static_cast<int64_t>(buffer_.size()), version_before);
  if (T() > 1) topo_.dp_group->all_reduce_sum(rows);
  const auto trained = rollouts_due(c_, step) ? gather(batch).groups : std::vector<SampleGroup>{};
  if (zero() != nullptr && zero()->stage() == 3) {
    // The leader's evaluation generates with the policy: whole on trainer 0 for it.
    auto due = torch::tensor({leader_ && leader_->evaluation_due(step) ? 1.0 : 0.0}, torch::kFloat64);
    topo_.role_group->broadcast(due, 0);
    GatheredParameters whole(zero(), due.item<double>() > 0, /*root=*/0);
    log_step(step, rows, update, trained);
  } else {
    log_step(step, rows, update, trained);
  }
  // After the metrics line, so a run resumed from this checkpoint has every line up to it.
  if (checkpoint_due(c_, step, run_.plan.total_steps)) save_checkpoint(step);
}

fs::path TrainerRank::run() {
  const auto run_start = Clock::now();
  const int64_t total_steps = run_.plan.total_steps;
  int64_t step = run_.plan.first_step();
  // A run resumed in the middle of a round first trains the rest of it (its groups are buffered).
  round_end_ = std::min(run_.plan.saved.round.end_step, total_steps);
  const bool mid_round = step <= round_end_;
  if (leader_) {
    leader_->start(/*send_round=*/!mid_round && !collected_);
  } else {
    Leader::follow_sync(topo_, run_);  // start's sync
  }
  if (mid_round) train_round(step, round_end_);
  int64_t rounds_since_step = 0;
  while (step <= total_steps) {
    collect_round();  // this trainer's share of the round's kept groups joins its buffer
    ++rounds_since_step;
    // Steps the trainers can fill now (each holds within one group of the others).
    auto held = torch::zeros({T()}, torch::kFloat64);
    held[replica()] = static_cast<double>(buffer_.size());
    if (T() > 1) topo_.dp_group->all_reduce_sum(held);
    int64_t steps = static_cast<int64_t>(held.min().item<double>()) / c_.train_batch_size;
    if (steps == 0 && !(c_.algo.dynamic_batching && rounds_since_step <= c_.max_dynamic_rounds)) {
      steps = 1;  // a partial step: every trainer trains on what it holds
      if (leader_) short_batch(c_, step, static_cast<int64_t>(held.sum().item<double>()), T() * c_.train_batch_size);
    }
    steps = std::min(steps, total_steps - step + 1);
    round_end_ = step + steps - 1;
    round_ahead_ = round_end_ < total_steps && c_.n_behind >= 1;
    if (leader_ && round_ahead_) {
      // Rollout runs ahead: the next round starts now, with the weights as they are.
      leader_->sync_ahead();
      leader_->send_round();
    } else if (round_ahead_) {
      Leader::follow_sync(topo_, run_);
    }
    train_round(step, round_end_);
    if (steps > 0) rounds_since_step = 0;
  }
  if (leader_) {
    leader_->stop_workers();
    spdlog::info("done in {:.1f} s; run directory {}",
                 std::chrono::duration<double>(Clock::now() - run_start).count(), run_.plan.run_dir.string());
  }
  trace::write();
  return run_.plan.run_dir;
}

}  // namespace

fs::path run_trainer_rank(const RunConfig& config, const Topology& topology) { return TrainerRank(config, topology).run(); }

}  // namespace rlcpp
