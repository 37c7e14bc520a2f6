#include "rl/colocated.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <deque>

#include "engine/engine.h"
#include "reward/reward_function.h"
#include "rl/evaluate.h"
#include "rl/policy_update.h"
#include "rl/relay_buffer.h"
#include "rl/rollout.h"
#include "rl/rollout_channel.h"
#include "rl/run_state.h"
#include "rl/step_record.h"
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
  // Generates one rollout round (inference_batch_size prompts); kept groups join the buffer,
  // filtered ones go to `discarded`.
  void generate_round(std::vector<GroupRollout>& discarded);
  // The step's groups: generated and picked by the first rank (the others serve its engine) and
  // handed to the others under tensor parallelism.
  std::vector<GroupRollout> step_groups(int64_t step, std::vector<GroupRollout>& discarded);
  void step(int64_t step);
  void save_checkpoint(int64_t step);

  const RunConfig& c_;
  const Topology* topo_;  // tensor-parallel ranks under mpirun, else null
  bool leader_ = true;    // this rank generates, logs and writes (the only one without tensor parallelism)
  RunState run_;
  std::unique_ptr<Engine> engine_;  // over the policy's own weights
  RewardFunction reward_;
  std::unique_ptr<RolloutGenerator> rollouts_;
  std::unique_ptr<RunEvaluator> evaluator_;
  std::unique_ptr<RunLog> log_;
  std::deque<GroupRollout> buffer_;  // kept groups not yet trained on
  RelayBuffer relay_;                // trained groups trained on again (max_relay_episode)
  int64_t nonfinite_steps_ = 0;      // steps in a row whose updates were skipped as non-finite
  // this step's counters
  int64_t generated_groups_ = 0, kept_groups_ = 0;
  double t_generate_ = 0, t_reward_ = 0;
};

ColocatedRun::ColocatedRun(const RunConfig& c, const Topology* topology)
    : c_(c),
      topo_(topology),
      leader_(topology == nullptr || topology->world->rank() == 0),
      run_(load_run(c, topology)),
      reward_(run_reward_function(c)),
      relay_(c, run_.plan.saved.relay_buffer.groups) {
  engine_ = std::make_unique<Engine>(run_.policy, run_engine_config(c), run_.tokenizer);
  engine_->set_version(run_.policy_version);
  if (!leader_) return;  // the others hold no dataset, evaluator or log
  evaluator_ = std::make_unique<RunEvaluator>(c, run_.policy->config(), *run_.tokenizer, run_.plan.run_dir);
  rollouts_ = std::make_unique<RolloutGenerator>(c, run_.policy->config(), *run_.tokenizer, engine_.get(), &run_.dataset,
                                                 run_.cursor.get(), &reward_);
  const CheckpointState& saved = run_.plan.saved;
  rollouts_->restore_skipped(saved.skipped_long_prompts, saved.skipped_short_prompts);
  buffer_.assign(saved.rollout_buffer.groups.begin(), saved.rollout_buffer.groups.end());
}

void ColocatedRun::generate_round(std::vector<GroupRollout>& discarded) {
  auto round = rollouts_->generate(c_.round_prompts());
  t_generate_ += round.generate_seconds;
  t_reward_ += round.reward_seconds;
  generated_groups_ += static_cast<int64_t>(round.kept.size() + round.discarded.size());
  kept_groups_ += static_cast<int64_t>(round.kept.size());
  for (auto& g : round.kept) buffer_.push_back(std::move(g));
  for (auto& g : round.discarded) discarded.push_back(std::move(g));
}

std::vector<GroupRollout> ColocatedRun::step_groups(int64_t step, std::vector<GroupRollout>& discarded) {
  std::vector<GroupRollout> batch;
  if (leader_) {
    if (c_.algo.dynamic_batching) {
      for (int64_t round = 0; static_cast<int64_t>(buffer_.size()) < c_.train_batch_size && round <= c_.max_dynamic_rounds;
           ++round) {
        generate_round(discarded);
      }
    } else if (buffer_.empty()) {
      generate_round(discarded);
    }
    engine_->release_followers();
    batch = take_groups(buffer_, c_.train_batch_size);
    short_batch(c_, step, static_cast<int64_t>(batch.size()), c_.train_batch_size);
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
  t_generate_ = t_reward_ = 0;
  std::vector<GroupRollout> discarded;
  const std::vector<GroupRollout> batch = step_groups(step, discarded);
  const PolicyUpdate update = update_policy(*run_.trainer, c_, batch, nullptr, relay_.relayed(step), engine_->version());
  relay_.add(step, batch);
  check_nonfinite(c_, update, step, nonfinite_steps_);
  if (update.trained) engine_->set_version(engine_->version() + 1);  // the engine already holds the new weights
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
  record.policy_version = engine_->version();
  const double t_eval = evaluator_->run_if_due(engine_.get(), step, record.total_steps, record.extra);
  record.time = {{"generate", t_generate_},        {"reward", t_reward_}, {"logprobs", update.logprob_seconds},
                 {"train", update.train_seconds}, {"eval", t_eval},      {"total", seconds_since(step_start)}};
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
  state.step = step;
  state.policy_version = engine_->version();
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
                 engine_->version());
  }
  log_ = std::make_unique<RunLog>(plan.run_dir, c_, plan.resume_from ? std::optional(plan.saved.step) : std::nullopt);
  spdlog::info("training {} on {} ({} prompts): steps {}..{} of {} prompts x {} samples, {}", c_.model, c_.dataset,
               run_.dataset.records.size(), plan.first_step(), plan.total_steps, c_.train_batch_size,
               c_.num_generations, c_.algo.name);
  spdlog::info("{}", old_logprobs_plan(c_));
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
