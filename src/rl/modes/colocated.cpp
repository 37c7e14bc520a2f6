#include "rl/modes/colocated.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <deque>
#include <future>

#include "engine/engine.h"
#include "reward/reward_function.h"
#include "rl/step/evaluate.h"
#include "rl/step/policy_update.h"
#include "rl/rollout/relay_buffer.h"
#include "rl/rollout/rollout.h"
#include "rl/rollout/rollout_channel.h"
#include "rl/rollout/rollout_servers.h"
#include "rl/run/run_state.h"
#include "rl/step/step_record.h"
#include "util/file.h"
#include "util/trace.h"

namespace rlcpp {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

class ColocatedRun {
 public:
  ColocatedRun(const RunConfig& c, const Topology* topology);
  fs::path run();

 private:
  // Generates one rollout round (inference_batch_size prompts), or takes the one generated ahead;
  // kept groups join the buffer, filtered ones go to `discarded`.
  void generate_round(std::vector<SampleGroup>& discarded);
  // Rollout servers (-b openai|vllm|sglang): they get the policy's current version (every
  // --sync-frequency rounds); with -nb >= 1 the next round is generated on another thread while
  // this step trains (one version behind), and a checkpoint waits for it.
  void publish_policy();
  void start_round_ahead(int64_t step);
  void collect_round_ahead();
  // The policy's version: the engine's, or the servers'.
  int64_t version() const { return version_; }
  void set_version(int64_t v);
  // The step's groups: generated and picked by the first rank (the others serve its engine) and
  // handed to the others under tensor parallelism.
  std::vector<SampleGroup> step_groups(int64_t step, std::vector<SampleGroup>& discarded);
  void step(int64_t step);
  void save_checkpoint(int64_t step);

  const RunConfig& c_;
  const Topology* topo_;  // tensor-parallel ranks under mpirun, else null
  bool leader_ = true;    // this rank generates, logs and writes (the only one without tensor parallelism)
  RunState run_;
  std::unique_ptr<Engine> engine_;  // over the policy's own weights (with rollout servers: evaluations only)
  std::unique_ptr<RolloutServers> servers_;  // -b openai|vllm|sglang
  int64_t version_ = 0;
  int64_t rounds_since_publish_ = 0;  // rounds the servers generated since the policy last changed on them
  std::future<RolloutRound> round_ahead_;     // -nb >= 1 with servers: the next round, generating
  std::optional<RolloutRound> collected_;     // that round, collected (by a checkpoint) and not yet taken
  RewardFunction reward_;
  std::unique_ptr<RolloutGenerator> rollouts_;
  std::unique_ptr<RunEvaluator> evaluator_;
  std::unique_ptr<RunLog> log_;
  std::deque<SampleGroup> buffer_;  // kept groups not yet trained on
  RelayBuffer relay_;                // trained groups trained on again (max_relay_episode)
  int64_t nonfinite_steps_ = 0;      // steps in a row whose updates were skipped as non-finite
  // this step's counters
  int64_t generated_groups_ = 0, kept_groups_ = 0;
  double t_generate_ = 0, t_reward_ = 0, t_sync_ = 0;
};

ColocatedRun::ColocatedRun(const RunConfig& c, const Topology* topology)
    : c_(c),
      topo_(topology),
      leader_(topology == nullptr || topology->world->rank() == 0),
      run_(load_run(c, topology)),
      reward_(run_reward_function(c)),
      relay_(c, run_.plan.saved.relay_buffer.groups) {
  version_ = run_.policy_version;
  if (leader_) evaluator_ = std::make_unique<RunEvaluator>(c, run_.policy->config(), *run_.tokenizer, run_.plan.run_dir);
  // With rollout servers the engine only evaluates: none (and no KV cache) without eval sets.
  if (!c.remote_rollout() || (evaluator_ && !evaluator_->empty())) {
    engine_ = std::make_unique<Engine>(run_.policy, run_engine_config(c), run_.tokenizer);
    engine_->set_version(version_);
  }
  if (!leader_) return;  // the others hold no dataset, evaluator or log
  RolloutBackend* backend = engine_.get();
  if (c.remote_rollout()) {
    servers_ = std::make_unique<RolloutServers>(c, run_.plan.run_dir);
    backend = &servers_->backend();
  }
  rollouts_ = std::make_unique<RolloutGenerator>(c, run_.policy->config(), *run_.tokenizer, backend, &run_.dataset,
                                                 run_.cursor.get(), &reward_);
  const CheckpointState& saved = run_.plan.saved;
  rollouts_->restore_skipped(saved.skipped_long_prompts, saved.skipped_short_prompts);
  buffer_.assign(saved.rollout_buffer.groups.begin(), saved.rollout_buffer.groups.end());
  if (saved.round.collected) {  // a round generated ahead, collected by the checkpoint
    RolloutRound round;
    round.kept = saved.round.collected->groups;
    round.discarded = saved.round.discarded;
    collected_ = std::move(round);
  }
  rounds_since_publish_ = saved.round.rounds_ahead;
  // The servers start from the trainer's policy, whatever they held before (another run's weights,
  // a resumed run's older ones).
  if (servers_) servers_->publish(*run_.policy, version_);
}

void ColocatedRun::set_version(int64_t v) {
  version_ = v;
  if (engine_) engine_->set_version(v);
}

void ColocatedRun::publish_policy() {
  if (!servers_ || servers_->version() == version_) return;
  if (++rounds_since_publish_ < c_.sync_frequency) return;
  t_sync_ += servers_->publish(*run_.policy, version_);
  rounds_since_publish_ = 0;
}

void ColocatedRun::start_round_ahead(int64_t step) {
  if (!servers_ || c_.n_behind < 1 || round_ahead_.valid() || collected_ || step >= run_.plan.total_steps) return;
  publish_policy();
  // Prompts are picked here (the cursor is this thread's); the servers' answers and the grading
  // run on the other thread while this one trains.
  auto picks = rollouts_->pick(c_.round_prompts());
  round_ahead_ = std::async(std::launch::async, [this, picks = std::move(picks)] { return rollouts_->generate(picks); });
}

void ColocatedRun::collect_round_ahead() {
  if (round_ahead_.valid()) collected_ = round_ahead_.get();
}

void ColocatedRun::generate_round(std::vector<SampleGroup>& discarded) {
  collect_round_ahead();
  RolloutRound round;
  if (collected_) {
    round = std::move(*collected_);
    collected_.reset();
  } else {
    publish_policy();
    round = rollouts_->generate(c_.round_prompts());
  }
  t_generate_ += round.generate_seconds;
  t_reward_ += round.reward_seconds;
  generated_groups_ += static_cast<int64_t>(round.kept.size() + round.discarded.size());
  kept_groups_ += static_cast<int64_t>(round.kept.size());
  for (auto& g : round.kept) buffer_.push_back(std::move(g));
  for (auto& g : round.discarded) discarded.push_back(std::move(g));
}

std::vector<SampleGroup> ColocatedRun::step_groups(int64_t step, std::vector<SampleGroup>& discarded) {
  std::vector<SampleGroup> batch;
  if (leader_) {
    if (c_.algo.dynamic_batching) {
      for (int64_t round = 0; static_cast<int64_t>(buffer_.size()) < c_.train_batch_size && round <= c_.max_dynamic_rounds;
           ++round) {
        generate_round(discarded);
      }
    } else if (buffer_.empty()) {
      generate_round(discarded);
    }
    if (engine_) engine_->release_followers();
    batch = take_groups(buffer_, c_.train_batch_size);
    short_batch(c_, step, static_cast<int64_t>(batch.size()), c_.train_batch_size);
    start_round_ahead(step);
  } else {
    engine_->serve();
  }
  if (topo_ != nullptr) {  // the same groups on every rank
    std::string bytes = leader_ ? encode_groups(batch) : std::string();
    topo_->tp_group->broadcast_bytes(bytes, 0);
    if (!leader_) batch = decode_groups(bytes);
  }
  return batch;
}

void ColocatedRun::step(int64_t step) {
  trace::Span step_span("step");
  const auto step_start = Clock::now();
  generated_groups_ = kept_groups_ = 0;
  t_generate_ = t_reward_ = t_sync_ = 0;
  std::vector<SampleGroup> discarded;
  const std::vector<SampleGroup> batch = step_groups(step, discarded);
  const int64_t version_before = version();
  const PolicyUpdate update = update_policy(*run_.trainer, c_, batch, nullptr, relay_.relayed(step), version_before);
  relay_.add(step, batch);
  check_nonfinite(c_, update, step, nonfinite_steps_);
  if (update.trained) set_version(version() + 1);  // the engine already holds the new weights
  if (!leader_) {
    serve_evaluation_if_due(*engine_, c_, step, run_.plan.total_steps);
    if (checkpoint_due(c_, step, run_.plan.total_steps)) save_checkpoint(step);
    return;
  }

  StepRecord record;
  record.step = step;
  record.total_steps = run_.plan.total_steps;
  record.episode = run_.cursor->epoch();
  for (const auto& g : batch) record.stats.add(g);
  for (const auto& g : discarded) record.stats.add(g);
  record.kept_groups = static_cast<int64_t>(batch.size());
  record.generated_groups = generated_groups_;
  record.round_kept_groups = kept_groups_;
  record.buffered_groups = static_cast<int64_t>(buffer_.size());
  record.train = update.metrics;
  record.optimizer_steps = run_.trainer->n_steps();
  record.policy_version = version();
  const double t_eval = evaluator_->run_if_due(engine_.get(), step, record.total_steps, record.extra);
  record.time = {{"generate", t_generate_},        {"reward", t_reward_}, {"logprobs", update.logprob_seconds},
                 {"train", update.train_seconds}, {"eval", t_eval},      {"total", seconds_since(step_start)}};
  if (servers_) {
    record.time.insert(record.time.end() - 1, {"sync", t_sync_});  // "total" stays last
    // Versions between the policy each group was sampled from and the one it trained (-nb).
    double stale_sum = 0;
    int64_t stale_max = 0;
    for (const auto& g : batch) {
      stale_sum += static_cast<double>(version_before - g.policy_version());
      stale_max = std::max(stale_max, version_before - g.policy_version());
    }
    record.extra["staleness"] = {{"mean", stale_sum / std::max<double>(1.0, static_cast<double>(batch.size()))},
                                 {"max", stale_max}};
    const RemoteRolloutStats remote = servers_->backend().stats();
    record.extra["rollout_servers"] = {{"requests", remote.requests}, {"retries", remote.retries},
                                       {"server_failures", remote.server_failures}, {"weight_pushes", remote.pushes}};
  }
  log_->write(record);
  if (rollouts_due(c_, step)) save_rollouts(fs::path(c_.rollout_save_dir) / c_.project, step, batch, discarded);
  if (checkpoint_due(c_, step, record.total_steps)) save_checkpoint(step);
}

void ColocatedRun::save_checkpoint(int64_t step) {
  trace::write();
  CheckpointState state;
  if (!leader_) {  // its parts and optimizer shard go to the first rank
    save_run(c_, run_, state);
    return;
  }
  collect_round_ahead();  // the round generating ahead is part of the state
  if (collected_) {
    state.round.collected = TrainerGroups{collected_->kept, {}};
    state.round.discarded = collected_->discarded;
  }
  state.round.rounds_ahead = rounds_since_publish_;
  state.step = step;
  state.policy_version = version();
  state.data_cursor = run_.cursor->state();
  state.optimizer_steps = run_.trainer->n_steps();
  state.rollout_buffer.groups.assign(buffer_.begin(), buffer_.end());
  state.relay_buffer.groups = relay_.groups();
  state.skipped_long_prompts = rollouts_->skipped_long();
  state.skipped_short_prompts = rollouts_->skipped_short();
  save_run(c_, run_, state);
}

fs::path ColocatedRun::run() {
  const auto run_start = Clock::now();
  const RunPlan& plan = run_.plan;
  if (!leader_) {
    start_profile(c_, topo_->world->rank(), topo_->describe());
    for (int64_t s = plan.first_step(); s <= plan.total_steps; ++s) step(s);
    trace::write();
    return plan.run_dir;
  }
  write_file_atomic(plan.run_dir / "config.yaml", run_config_yaml(c_));
  if (plan.resume_from) {
    spdlog::info("resuming from {} (step {}, policy version {})", plan.resume_from->string(), plan.saved.step,
                 version());
  }
  log_ = std::make_unique<RunLog>(plan.run_dir, c_, plan.resume_from ? std::optional(plan.saved.step) : std::nullopt);
  spdlog::info("training {} on {} ({} prompts): steps {}..{} of {} prompts x {} samples, {}", c_.model, c_.dataset,
               run_.dataset.records.size(), plan.first_step(), plan.total_steps, c_.train_batch_size,
               c_.num_generations, c_.algo.name);
  spdlog::info("{}", old_logprobs_plan(c_));
  if (servers_) {
    spdlog::info("rollouts from the {} servers at {} (policy written to {}){}", rollout_backend_kinds().name(c_.backend),
                 c_.rollout_url, servers_->weights_dir().string(),
                 c_.n_behind >= 1 ? "; each round is generated while the step before it trains (-nb)" : "");
  }
  start_profile(c_, 0, topo_ != nullptr ? topo_->describe() : "rlcpp train");
  for (int64_t s = plan.first_step(); s <= plan.total_steps; ++s) step(s);
  if (rollouts_->skipped_long() + rollouts_->skipped_short() > 0) {
    spdlog::info("prompts left out: {} over -mpt {}, {} under min_prompt_length {}", rollouts_->skipped_long(),
                 c_.max_prompt_tokens, rollouts_->skipped_short(), c_.min_prompt_length);
  }
  trace::write();
  spdlog::info("done in {:.1f} s; run directory {}", seconds_since(run_start), plan.run_dir.string());
  return plan.run_dir;
}

}  // namespace

fs::path run_colocated(const RunConfig& config, const Topology* topology) { return ColocatedRun(config, topology).run(); }

}  // namespace rlcpp
