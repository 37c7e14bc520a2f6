#include "rl/colocated.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <chrono>
#include <deque>

#include "engine/engine.h"
#include "io/prompt_dataset.h"
#include "reward/reward_function.h"
#include "rl/evaluate.h"
#include "rl/policy_update.h"
#include "rl/rollout.h"
#include "rl/run_checkpoint.h"
#include "rl/step_record.h"
#include "text/tokenizer.h"
#include "util/error.h"
#include "util/file.h"
#include "util/progress.h"
#include "util/trace.h"

namespace rlcpp {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

class ColocatedRun {
 public:
  explicit ColocatedRun(const RunConfig& c);
  fs::path run();

 private:
  // Generates one rollout round (inference_batch_size prompts); kept groups join the buffer,
  // filtered ones go to `discarded`.
  void generate_round(std::vector<GroupRollout>& discarded);
  // Steps of the run: --max-steps, or the episodes' worth of -tbs prompt batches.
  int64_t total_steps() const {
    const int64_t steps_per_episode = std::max<int64_t>(1, static_cast<int64_t>(dataset_.records.size()) / c_.train_batch_size);
    return c_.max_steps > 0 ? c_.max_steps : steps_per_episode * c_.num_episodes;
  }
  void train_on(const std::vector<GroupRollout>& groups, std::map<std::string, double>& metrics);
  void save_checkpoint(int64_t step);

  const RunConfig& c_;
  fs::path run_dir_;
  std::optional<fs::path> resume_from_;
  nlohmann::json resume_state_;
  std::shared_ptr<Tokenizer> tokenizer_;
  std::shared_ptr<Transformer> policy_, reference_;
  PromptDataset dataset_;
  std::unique_ptr<DatasetCursor> cursor_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<Trainer> trainer_;
  RewardFunction reward_;
  std::unique_ptr<RolloutGenerator> rollouts_;
  std::unique_ptr<RunEvaluator> evaluator_;
  std::deque<GroupRollout> buffer_;  // kept groups not yet trained on
  // this step's counters
  int64_t generated_groups_ = 0, kept_groups_ = 0;
  double t_generate_ = 0, t_reward_ = 0, t_logprobs_ = 0, t_train_ = 0;
};

ColocatedRun::ColocatedRun(const RunConfig& c) : c_(c), run_dir_(fs::path(c.save_dir) / c.project) {
  fs::create_directories(run_dir_);
  resume_from_ = find_resume_checkpoint(c, run_dir_);
  if (resume_from_) resume_state_ = read_checkpoint_state(*resume_from_, c);  // refuses an incompatible one first
  const ModelOptions options = model_options_from_flags(c.dtype, c.device);
  tokenizer_ = Tokenizer::from_dir(c.model);
  policy_ = Transformer::from_pretrained(resume_from_ ? *resume_from_ : fs::path(c.model), options);
  policy_->eval();
  if (c.algo.loss.kl_coef != 0) {
    reference_ = Transformer::from_pretrained(c.model, options);
    reference_->eval();
  }
  dataset_ = load_prompt_dataset(c.dataset);
  cursor_ = std::make_unique<DatasetCursor>(static_cast<int64_t>(dataset_.records.size()), c.seed, /*shuffle=*/true);
  EngineConfig engine_config;
  engine_config.kv_cache_mb = c.kv_cache_mb;
  engine_ = std::make_unique<Engine>(policy_, engine_config, tokenizer_);
  trainer_ = std::make_unique<Trainer>(policy_, reference_, rl_trainer_config(c, total_steps()));
  reward_ = run_reward_function(c);
  evaluator_ = std::make_unique<RunEvaluator>(c, policy_->config(), *tokenizer_, run_dir_);
  rollouts_ = std::make_unique<RolloutGenerator>(c, policy_->config(), *tokenizer_, engine_.get(), &dataset_, cursor_.get(), &reward_);
  if (resume_from_) {
    load_checkpoint_optimizer(*resume_from_, trainer_->optimizer());
    trainer_->restore_steps(json_get<int64_t>(resume_state_, "optimizer_steps", "state.json"));
    cursor_->restore(resume_state_.at("data_cursor"));
    engine_->set_version(json_get<int64_t>(resume_state_, "policy_version", "state.json"));
    for (const auto& g : resume_state_.at("rollout_buffer")) buffer_.push_back(group_from_json(g));
    rollouts_->restore_skipped(json_get_or<int64_t>(resume_state_, "skipped_long_prompts", 0, "state.json"),
                               json_get_or<int64_t>(resume_state_, "skipped_short_prompts", 0, "state.json"));
  }
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

void ColocatedRun::train_on(const std::vector<GroupRollout>& groups, std::map<std::string, double>& metrics) {
  const PolicyUpdate update = update_policy(*trainer_, c_, groups);
  if (!update.trained) return;
  metrics = update.metrics;
  t_logprobs_ += update.logprob_seconds;
  t_train_ += update.train_seconds;
  engine_->set_version(engine_->version() + 1);  // colocated: the engine already holds the new weights
}

void ColocatedRun::save_checkpoint(int64_t step) {
  trace::write();
  nlohmann::json buffer = nlohmann::json::array();
  for (const auto& g : buffer_) buffer.push_back(to_json(g));
  save_run_checkpoint(c_, run_dir_, step, *policy_, trainer_->optimizer(),
                      {{"step", step},
                       {"policy_version", engine_->version()},
                       {"data_cursor", cursor_->state()},
                       {"optimizer_steps", trainer_->n_steps()},
                       {"rollout_buffer", buffer},
                       {"skipped_long_prompts", rollouts_->skipped_long()},
                       {"skipped_short_prompts", rollouts_->skipped_short()}});
}

fs::path ColocatedRun::run() {
  const auto run_start = Clock::now();
  const int64_t n_records = static_cast<int64_t>(dataset_.records.size());
  const int64_t total_steps = this->total_steps();
  const int64_t first_step = resume_from_ ? json_get<int64_t>(resume_state_, "step", "state.json") + 1 : 1;
  write_file_atomic(run_dir_ / "config.yaml", run_config_yaml(c_));
  if (resume_from_) {
    spdlog::info("resuming from {} (step {}, policy version {})", resume_from_->string(), first_step - 1, engine_->version());
  }
  RunLog log(run_dir_, c_, resume_from_ ? std::optional(first_step - 1) : std::nullopt);
  spdlog::info("training {} on {} ({} prompts): steps {}..{} of {} prompts x {} samples, {}", c_.model, c_.dataset, n_records,
               first_step, total_steps, c_.train_batch_size, c_.num_generations, c_.algo.name);
  start_profile(c_, 0, "rlcpp train");
  const auto loop_start = Clock::now();
  for (int64_t step = first_step; step <= total_steps; ++step) {
    trace::Span step_span("step");
    const auto step_start = Clock::now();
    generated_groups_ = kept_groups_ = 0;
    t_generate_ = t_reward_ = t_logprobs_ = t_train_ = 0;
    std::vector<GroupRollout> discarded;
    if (c_.algo.dynamic_batching) {
      for (int64_t round = 0; static_cast<int64_t>(buffer_.size()) < c_.train_batch_size && round <= c_.max_dynamic_rounds; ++round) {
        generate_round(discarded);
      }
    } else if (buffer_.empty()) {
      generate_round(discarded);
    }
    std::vector<GroupRollout> batch;
    while (!buffer_.empty() && static_cast<int64_t>(batch.size()) < c_.train_batch_size) {
      batch.push_back(std::move(buffer_.front()));
      buffer_.pop_front();
    }
    std::map<std::string, double> train_metrics;
    train_on(batch, train_metrics);
    StepRecord record;
    record.step = step;
    record.total_steps = total_steps;
    record.episode = cursor_->epoch();
    for (const auto& g : batch) record.stats.add(g);
    for (const auto& g : discarded) record.stats.add(g);
    record.kept_groups = static_cast<int64_t>(batch.size());
    record.generated_groups = generated_groups_;
    record.round_kept_groups = kept_groups_;
    record.buffered_groups = static_cast<int64_t>(buffer_.size());
    record.train = train_metrics;
    record.optimizer_steps = trainer_->n_steps();
    record.policy_version = engine_->version();
    double t_eval = 0;
    if (evaluator_->due(step, total_steps)) {
      const auto t0 = Clock::now();
      record.extra["eval"] = evaluator_->run(*engine_, step);
      t_eval = seconds_since(t0);
    }
    record.time = {{"generate", t_generate_}, {"reward", t_reward_}, {"logprobs", t_logprobs_},
                   {"train", t_train_},       {"eval", t_eval},       {"total", seconds_since(step_start)}};
    log.write(record);
    progress::run(step, total_steps, eta_seconds(seconds_since(loop_start), step - first_step + 1, total_steps - step));
    if (!c_.rollout_save_dir.empty() && step % c_.rollout_save_interval == 0) save_rollouts(fs::path(c_.rollout_save_dir) / c_.project, step, batch, discarded);
    if ((c_.save_interval > 0 && step % c_.save_interval == 0) || step == total_steps) save_checkpoint(step);
  }
  if (rollouts_->skipped_long() + rollouts_->skipped_short() > 0) {
    spdlog::info("prompts left out: {} over -mpt {}, {} under min_prompt_length {}", rollouts_->skipped_long(),
                 c_.max_prompt_tokens, rollouts_->skipped_short(), c_.min_prompt_length);
  }
  trace::write();
  spdlog::info("done in {:.1f} s; run directory {}", seconds_since(run_start), run_dir_.string());
  return run_dir_;
}

}  // namespace

fs::path run_colocated(const RunConfig& config) { return ColocatedRun(config).run(); }

}  // namespace rlcpp
