#include "rl/modes/step_loop.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <chrono>
#include <deque>
#include <optional>

#include "comm/gradient_sync.h"
#include "rl/modes/control.h"
#include "rl/modes/leader.h"
#include "rl/rollout/relay_buffer.h"
#include "rl/rollout/rollout_channel.h"
#include "rl/step/evaluate.h"
#include "rl/step/policy_update.h"
#include "rl/step/step_record.h"
#include "util/file.h"
#include "util/trace.h"

namespace rlcpp {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

class StepLoop {
 public:
  StepLoop(const RunConfig& c, const Topology* topology, const SourceFactory& make_source);
  fs::path run();
  void fail(const std::string& error) {
    if (lead_) lead_->fail(error);
  }

 private:
  // Replicas, and this rank's; whether this rank picks prompts, logs and writes.
  int T() const { return topo_ != nullptr ? topo_->num_replicas() : 1; }
  int replica() const { return topo_ != nullptr ? topo_->replica() : 0; }
  Communicator* trainers() const { return topo_ != nullptr ? topo_->dp_group.get() : nullptr; }
  ZeroOptimizer* zero() { return run_.trainer->zero(); }
  // This replica's share of saved groups: its own under the same replicas, else dealt by the balance.
  std::vector<SampleGroup> deal(const TrainerGroups& saved) const;
  // Groups of every replica at the leader, in replica order (the others get nothing back).
  TrainerGroups gather(const std::vector<SampleGroup>& mine);
  // The policy to the generators (every rank takes part); `resend`: even when they hold it.
  void publish(bool resend = false);
  // The next round: the policy published first if the staleness policy says so, then submitted.
  // Ahead of steps [first, last] under --partial-rollout, it takes the versions they make.
  void submit_round(bool ahead, int64_t first = 0, int64_t last = -1);
  // The leader's next round (its picks; with --stream-prompts, the round after it's streamed too).
  void submit(const WeightSwitches& switches);
  // Partial rollouts: the versions steps [first, last] make up to the first checkpoint among them
  // (which waits for the round ahead of them), and the engine steps of that round at which it
  // takes each (the first stale_switch of them before it starts, under --stale-policy drop).
  int64_t versions_during(int64_t first, int64_t last) const;
  WeightSwitches switches_during(int64_t first, int64_t last) const;
  // --max-staleness with partial rollouts: how many of those versions the round ahead must take
  // before its tokens are within the bound when the round after trains them (0: all are).
  int64_t stale_switch(int64_t first, int64_t last) const;
  // One round from the source: this trainer's share of its kept groups joins `into`.
  void collect(std::deque<SampleGroup>& into);
  // One round's kept groups join the buffer: the round collected ahead if there is one.
  void collect_round();
  // At a checkpoint with a round ahead: that round, collected now (as if at the round's end) and
  // kept apart until the next collect_round.
  void collect_ahead();
  // Trains steps [step, last], then submits the next round if the run goes on and none is coming.
  void train_round(int64_t& step, int64_t last);
  void train_step(int64_t step);
  void log_step(int64_t step, const torch::Tensor& rows, const PolicyUpdate& update,
                const std::vector<SampleGroup>& trained);
  void save_checkpoint(int64_t step);

  const RunConfig& c_;
  const Topology* topo_;  // under mpirun, else null
  bool leader_ = true;    // picks prompts, logs and writes (the only process, or world rank 0)
  RunState run_;
  std::unique_ptr<RolloutSource> source_;
  std::optional<StalenessPolicy> staleness_;
  std::unique_ptr<Leader> lead_;           // on the leader
  std::unique_ptr<Engine> eval_engine_;    // the first replica's other ranks under tensor or pipeline parallelism, with -ed
  Engine* follower_engine_ = nullptr;      // an engine whose leader evaluates (this rank serves it)
  std::deque<SampleGroup> buffer_;         // this trainer's kept groups not yet trained on
  std::unique_ptr<RelayBuffer> relay_;     // this trainer's trained groups trained on again
  std::optional<std::deque<SampleGroup>> collected_;  // this trainer's share of a round collected ahead
  int64_t round_end_ = 0;     // the last step of the round in training
  bool round_ahead_ = false;  // a round is being generated while this one trains (-nb >= 1)
  int64_t nonfinite_steps_ = 0;  // steps in a row whose updates were skipped as non-finite
  int64_t steps_taken_ = 0, steps_learned_ = 0;  // this invocation's steps, and those that changed the policy
};

StepLoop::StepLoop(const RunConfig& c, const Topology* topology, const SourceFactory& make_source)
    : c_(c), topo_(topology), leader_(topology == nullptr || topology->world->rank() == 0), run_(load_run(c, topology)) {
  if (T() > 1 && zero() == nullptr) {
    auto group = topo_->dp_group;
    auto reducer = [group](const std::vector<torch::Tensor>& params) {
      all_reduce_gradients(*group, params, kGradientBucketBytes);
    };
    run_.trainer->set_gradient_reducer(reducer);
    if (run_.critic_trainer) run_.critic_trainer->set_gradient_reducer(reducer);
  }
  source_ = make_source(run_);
  const CheckpointState& saved = run_.plan.saved;
  staleness_.emplace(c.staleness, source_->concurrent(), saved.round.rounds_ahead);
  if (leader_) {
    lead_ = std::make_unique<Leader>(c, topo_, run_, *source_, source_->engine());
  } else if (source_->engine() != nullptr) {
    follower_engine_ = source_->engine();  // serves the leader's evaluations on its engine
  } else if (replica() == 0 && topo_->replica_size() > 1 && !eval_sets(c.eval).empty()) {
    eval_engine_ = std::make_unique<Engine>(run_.policy, policy_engine_config(c, run_));  // serves the leader's evaluations
    follower_engine_ = eval_engine_.get();
  }
  const auto mine = deal(saved.rollout_buffer);
  buffer_.assign(mine.begin(), mine.end());
  relay_ = std::make_unique<RelayBuffer>(c.staleness, deal(saved.relay_buffer));
  if (saved.round.collected) {
    const auto ahead = deal(*saved.round.collected);
    collected_.emplace(ahead.begin(), ahead.end());
  }
}

std::vector<SampleGroup> StepLoop::deal(const TrainerGroups& saved) const {
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

TrainerGroups StepLoop::gather(const std::vector<SampleGroup>& mine) {
  if (topo_ != nullptr && !topo_->replica_first()) return {};  // the replica's first rank holds the same groups
  if (!leader_) {
    topo_->dp_group->send_bytes(encode_groups(mine), 0, kShareTag);
    return {};
  }
  TrainerGroups all{mine, {static_cast<int64_t>(mine.size())}};
  for (int t = 1; t < T(); ++t) {
    auto theirs = decode_groups(topo_->dp_group->recv_bytes(t, kShareTag));
    all.per_trainer.push_back(static_cast<int64_t>(theirs.size()));
    for (auto& g : theirs) all.groups.push_back(std::move(g));
  }
  return all;
}

void StepLoop::publish(bool resend) {
  const double seconds = source_->publish(run_.policy_version, resend);
  if (lead_) lead_->note_publish(seconds);
}

int64_t StepLoop::versions_during(int64_t first, int64_t last) const {
  int64_t versions = 0;
  for (int64_t step = first; step <= last; ++step) {
    ++versions;
    if (!source_->cuts_rounds() && checkpoint_due(c_.logging, step, run_.plan.total_steps)) break;
  }
  return versions;
}

int64_t StepLoop::stale_switch(int64_t first, int64_t last) const {
  if (!c_.staleness.partial_rollout || c_.staleness.max_staleness < 0) return 0;
  // The round ahead is trained by the round after these steps, up to its last step: that many
  // versions after the one it starts with, less those it takes first.
  const int64_t trained_behind = (last - first + 1) + c_.steps_per_round() - 1;
  return std::max<int64_t>(0, trained_behind - c_.staleness.max_staleness);
}

WeightSwitches StepLoop::switches_during(int64_t first, int64_t last) const {
  WeightSwitches switches;
  if (!c_.staleness.partial_rollout) return switches;
  switches.during_round = true;
  switches.asap = c_.staleness.switch_asap;
  const int64_t versions = versions_during(first, last);
  if (!c_.staleness.stale_finish) switches.start_after = std::min(versions, stale_switch(first, last));
  const int64_t during = versions - switches.start_after;
  // By default the versions spread over the round's engine steps (rollout servers: response
  // positions), -mnt for each generate call of -imbs prompts, and for each wave of --max-num-seqs
  // sequences an engine runs a call's sequences in.
  const int64_t imbs = c_.rollout.inference_microbatch_size;
  const int64_t calls = imbs > 0 ? (c_.round_prompts() + imbs - 1) / imbs : 1;
  const int64_t call_sequences = (imbs > 0 ? std::min(imbs, c_.round_prompts()) : c_.round_prompts()) * c_.rollout.num_generations;
  const int64_t max_seqs = c_.rollout.engine.scheduler.max_num_seqs;
  const int64_t waves = c_.remote.enabled() || max_seqs <= 0 ? 1 : (call_sequences + max_seqs - 1) / max_seqs;
  const int64_t interval = c_.staleness.switch_interval > 0
                               ? c_.staleness.switch_interval
                               : std::max<int64_t>(1, calls * waves * c_.rollout.sampling.max_new_tokens / (during + 1));
  for (int64_t v = 1; v <= during; ++v) switches.at.push_back(v * interval);
  if (source_->cuts_rounds()) {  // the checkpoints among the steps cut the round at their versions
    for (int64_t step = first; step <= last; ++step) {
      if (checkpoint_due(c_.logging, step, run_.plan.total_steps)) switches.cuts.push_back(step - first + 1);
    }
  }
  return switches;
}

void StepLoop::submit_round(bool ahead, int64_t first, int64_t last) {
  if (staleness_->publish_before(ahead)) publish();
  submit(ahead ? switches_during(first, last) : WeightSwitches{});
}

void StepLoop::submit(const WeightSwitches& switches) {
  std::vector<PromptPick> picks = lead_ ? lead_->pick_round() : std::vector<PromptPick>{};
  if (c_.staleness.stream_prompts) source_->stream_next(lead_ ? lead_->pick_next() : std::vector<PromptPick>{});
  source_->submit(std::move(picks), switches);
}

void StepLoop::collect(std::deque<SampleGroup>& into) {
  const auto wait_start = Clock::now();
  const RoundReceipt receipt = [&] {
    trace::Span wait("collect_rollouts");
    return source_->collect(into);
  }();
  if (lead_) lead_->note_round(receipt, std::chrono::duration<double>(Clock::now() - wait_start).count());
}

void StepLoop::collect_round() {
  if (!collected_) return collect(buffer_);
  for (auto& g : *collected_) buffer_.push_back(std::move(g));
  collected_.reset();
}

void StepLoop::collect_ahead() {
  std::deque<SampleGroup> held = buffer_;  // the balance weighs what this trainer holds
  const auto before = static_cast<long>(held.size());
  collect(held);
  collected_.emplace(held.begin() + before, held.end());
}

void StepLoop::train_round(int64_t& step, int64_t last) {
  const bool more_rounds = last < run_.plan.total_steps;
  while (step <= last) train_step(step++);
  // The next round, unless it went ahead (-nb >= 1) or was collected with the checkpoint resumed
  // from (-nb may change on resume).
  if (more_rounds && !round_ahead_ && !collected_) submit_round(/*ahead=*/false);
}

void StepLoop::save_checkpoint(int64_t step) {
  trace::write();
  // ZeRO-3: trainer 0 writes the model directory whole (the others send it their shards).
  GatheredParameters whole(zero(), true, /*root=*/0);
  GatheredParameters critic_whole(run_.critic_trainer ? run_.critic_trainer->zero() : nullptr, true, /*root=*/0);
  // With a round ahead the generators are working from an older policy, which a resumed run could
  // not reproduce: the round, cut at this checkpoint's version, is saved as it stands (partial
  // rollouts over rollout workers), or else collected now and saved with the checkpoint.
  std::vector<nlohmann::json> in_flight;
  if (round_ahead_ && !collected_) {
    if (source_->cuts_rounds()) in_flight = source_->take_cut();
    else collect_ahead();
  }
  CheckpointState state;
  state.step = step;
  state.rollout_buffer = gather(std::vector<SampleGroup>(buffer_.begin(), buffer_.end()));
  state.relay_buffer = gather(relay_->groups());
  state.round.end_step = round_end_;
  state.round.rounds_ahead = staleness_->rounds_ahead();
  if (collected_) state.round.collected = gather(std::vector<SampleGroup>(collected_->begin(), collected_->end()));
  state.round.in_flight = std::move(in_flight);
  if (lead_) state = lead_->checkpoint_state(std::move(state));
  save_run(c_, run_, state);  // every trainer: parts and optimizer shards go to trainer 0
}

void StepLoop::log_step(int64_t step, const torch::Tensor& rows, const PolicyUpdate& update,
                        const std::vector<SampleGroup>& trained) {
  if (lead_) {
    lead_->log_step(step, rows, update, trained);
  } else if (follower_engine_ != nullptr) {
    serve_evaluation_if_due(*follower_engine_, c_.eval, step, run_.plan.total_steps);
  }
}

void StepLoop::train_step(int64_t step) {
  trace::Span span("step");
  const int64_t version_before = run_.policy_version;
  // --max-staleness: tokens the bound no longer allows stay as context only (--stale-policy
  // finish), and groups it no longer allows (kept over from other rounds, or left without a
  // trained token) are dropped.
  StaleCounts stale;
  if (c_.staleness.max_staleness >= 0) {
    const int64_t oldest = version_before - c_.staleness.max_staleness;
    if (c_.staleness.stale_finish) {
      for (auto& g : buffer_) {
        for (auto& s : g.samples) stale.masked_tokens += s.mark_stale(oldest);
      }
    }
    stale.dropped_groups = static_cast<int64_t>(
        std::erase_if(buffer_, [&](const SampleGroup& g) { return g.policy_version() < oldest; }));
  }
  const std::vector<SampleGroup> batch = take_groups(buffer_, c_.train.train_batch_size);
  const PolicyUpdate update = update_policy(*run_.trainer, c_, batch, trainers(), relay_->relayed(step), version_before,
                                            run_.critic_trainer.get());
  relay_->add(step, batch);
  check_nonfinite(c_.train, update, step, nonfinite_steps_);
  ++steps_taken_;
  if (update.trained) {
    const auto nonfinite = update.metrics.find("nonfinite");
    const double applied = update.metrics.at("optimizer_updates") - (nonfinite != update.metrics.end() ? nonfinite->second : 0.0);
    if (applied > 0) ++steps_learned_;
  }
  if (update.trained) ++run_.policy_version;
  // Partial rollouts: the round generating ahead takes this step's version at its next switch (one
  // each step, so a step that changed nothing sends the weights it had).
  if (c_.staleness.partial_rollout && round_ahead_ && !collected_) publish(/*resend=*/true);

  // Every replica's figures, one row each, summed so each row reaches the leader.
  auto rows = torch::zeros({T(), n_step_figures()}, torch::kFloat64);
  rows[replica()] = step_figures(batch, static_cast<int64_t>(buffer_.size()), version_before, stale);
  if (T() > 1) topo_->dp_group->all_reduce_sum(rows);
  const auto trained = rollouts_due(c_.logging, step) ? gather(batch).groups : std::vector<SampleGroup>{};
  if (zero() != nullptr && zero()->stage() == 3) {
    // The leader's evaluation generates with the policy: whole on trainer 0 for it.
    auto due = torch::tensor({lead_ && lead_->evaluation_due(step) ? 1.0 : 0.0}, torch::kFloat64);
    topo_->role_group->broadcast(due, 0);
    GatheredParameters whole(zero(), due.item<double>() > 0, /*root=*/0);
    log_step(step, rows, update, trained);
  } else {
    log_step(step, rows, update, trained);
  }
  // After the metrics line, so a run resumed from this checkpoint has every line up to it.
  if (checkpoint_due(c_.logging, step, run_.plan.total_steps)) save_checkpoint(step);
}

fs::path StepLoop::run() {
  const auto run_start = Clock::now();
  const int64_t total_steps = run_.plan.total_steps;
  int64_t step = run_.plan.first_step();
  // A run resumed in the middle of a round first trains the rest of it (its groups are buffered).
  round_end_ = std::min(run_.plan.saved.round.end_step, total_steps);
  const bool mid_round = step <= round_end_;
  if (lead_) lead_->start();
  publish();  // the generators start from the trainers' weights (a resumed run's, too), whatever they held
  const auto& in_flight = run_.plan.saved.round.in_flight;
  if (!in_flight.empty() && source_->concurrent()) {
    // The round a checkpoint cut goes on from where it was cut, or else its prompts go anew, ahead
    // of the rest of the round in training.
    round_ahead_ = true;
    if (!source_->resume_cut(in_flight)) submit(switches_during(step, mid_round ? round_end_ : step - 1));
  } else if (!mid_round && !collected_ && step <= total_steps) {  // (a cut round's prompts, too, from pick_round)
    submit(WeightSwitches{});
  }
  if (mid_round) train_round(step, round_end_);
  int64_t rounds_since_step = 0;
  while (step <= total_steps) {
    collect_round();  // this trainer's share of the round's kept groups joins its buffer
    ++rounds_since_step;
    // Steps the trainers can fill now (each holds within one group of the others).
    auto held = torch::zeros({T()}, torch::kFloat64);
    held[replica()] = static_cast<double>(buffer_.size());
    if (T() > 1) topo_->dp_group->all_reduce_sum(held);
    int64_t steps = static_cast<int64_t>(held.min().item<double>()) / c_.train.train_batch_size;
    if (steps == 0 && !(c_.algo.dynamic_batching && rounds_since_step <= c_.algo.max_dynamic_rounds)) {
      steps = 1;  // a partial step: every trainer trains on what it holds
      if (lead_) short_batch(c_.algo, step, static_cast<int64_t>(held.sum().item<double>()), T() * c_.train.train_batch_size);
    }
    steps = std::min(steps, total_steps - step + 1);
    round_end_ = step + steps - 1;
    // A round ahead goes only when the versions these steps make bring its tokens within
    // --max-staleness (a checkpoint among them may cut them short); else it follows them.
    round_ahead_ = staleness_->ahead(round_end_, total_steps) &&
                   stale_switch(step, round_end_) <= versions_during(step, round_end_);
    if (round_ahead_) submit_round(/*ahead=*/true, step, round_end_);  // generation overlaps the steps, with the weights as they are
    train_round(step, round_end_);
    if (steps > 0) rounds_since_step = 0;
  }
  source_->finish();
  trace::write();
  if (steps_taken_ > 0 && steps_learned_ == 0) {  // no silent success: a run that learned nothing says so
    throw_user_error("the run took {} step(s) and none of them changed the policy: no group was left to train (every "
                     "one filtered out by --filter-range or dynamic batching, dropped by --max-staleness, or without a "
                     "response), or every update was skipped as non-finite. Its metrics and checkpoints are in {}; "
                     "check the reward and the filters (metrics.jsonl: kept_groups, n_skipped, nonfinite)",
                     steps_taken_, run_.plan.run_dir.string());
  }
  if (lead_) lead_->finish(std::chrono::duration<double>(Clock::now() - run_start).count());
  return run_.plan.run_dir;
}

}  // namespace

fs::path run_step_loop(const RunConfig& config, const Topology* topology, const SourceFactory& make_source) {
  StepLoop loop(config, topology, make_source);
  try {
    return loop.run();
  } catch (const std::exception& e) {
    loop.fail(e.what());  // metrics.jsonl's status line names the error
    throw;
  }
}

}  // namespace rlcpp
