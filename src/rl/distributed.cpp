#include "rl/distributed.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <chrono>
#include <deque>

#include "dist/gradient_sync.h"
#include "dist/mpi.h"
#include "dist/weight_sync.h"
#include "engine/engine.h"
#include "io/prompt_dataset.h"
#include "reward/reward_function.h"
#include "rl/evaluate.h"
#include "rl/policy_update.h"
#include "rl/rollout.h"
#include "rl/rollout_channel.h"
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

// Message tags on the world communicator (the channel and the weight sync use their own).
enum Tag : int { kControl = 11, kHash = 12, kShare = 13 };

constexpr uint64_t kGradientBucketBytes = 25ULL << 20;  // as PyTorch DDP's bucket_cap_mb

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// One trainer's figures of a step, as a row of numbers all trainers sum (maxima by their slot).
enum Figure : int64_t {
  kSamples, kCorrect, kTruncated, kRewardSum, kLenSum, kMaxLen, kGroups, kBuffered,
  kStaleSum, kStaleMax, kStale0, kStale1, kStale2, kStale3Plus, kFigures
};

// What the leader gathers between two steps (rounds' figures, weight syncs).
struct Pending {
  int64_t generated = 0, kept = 0;
  double generate = 0, reward = 0, wait = 0, sync = 0;
  uint64_t sync_bytes = 0;
  int64_t syncs = 0, verified = 0;
  std::vector<GroupRollout> discarded;
};

class TrainerRank {
 public:
  TrainerRank(const RunConfig& c, const Topology& topo);
  fs::path run();

 private:
  bool leader() const { return topo_.role_rank == 0; }
  int T() const { return topo_.num_trainers; }
  int I() const { return topo_.num_inferencers; }
  void control(const nlohmann::json& message, int worker) {
    topo_.world->send_bytes(pack_message(message), T() + worker, kControl);
  }
  void send_round();     // leader: the next round's prompts, split over the workers
  void sync_weights();   // leader: the policy to every worker, if it changed since the last sync
  void train_step(int64_t step);
  // Leader: the step's metrics line (`rows`: every trainer's figures) and rollouts file.
  void log_step(int64_t step, const torch::Tensor& rows, const PolicyUpdate& update,
                const std::vector<GroupRollout>& trained);
  // Groups of every trainer at the leader (others get nothing back).
  std::vector<GroupRollout> gather(const std::vector<GroupRollout>& mine);
  void save_checkpoint(int64_t step);
  void deal_saved_buffer(const nlohmann::json& saved);

  const RunConfig& c_;
  const Topology& topo_;
  fs::path run_dir_;
  nlohmann::json plan_;  // from the leader: total_steps, first_step, resume_from, state
  std::shared_ptr<Transformer> policy_, reference_;
  std::unique_ptr<Trainer> trainer_;
  std::unique_ptr<RolloutChannel> channel_;
  std::deque<GroupRollout> buffer_;  // this trainer's kept groups not yet trained on
  int64_t version_ = 0;
  // leader only
  std::shared_ptr<Tokenizer> tokenizer_;
  PromptDataset dataset_;
  std::unique_ptr<DatasetCursor> cursor_;
  std::unique_ptr<RolloutGenerator> picker_;
  std::unique_ptr<WeightSync> weight_sync_;
  std::unique_ptr<RunEvaluator> evaluator_;
  std::unique_ptr<Engine> eval_engine_;  // over the trainer's own weights
  int64_t synced_version_ = -1;
  int64_t rounds_ = 0;  // collected, for sync_frequency
  nlohmann::json in_flight_ = nlohmann::json::array();  // picks of the round the workers are generating
  std::unique_ptr<RunLog> log_;
  Pending pending_;
  Clock::time_point last_step_end_, loop_start_;
};

TrainerRank::TrainerRank(const RunConfig& c, const Topology& topo)
    : c_(c), topo_(topo), run_dir_(fs::path(c.save_dir) / c.project) {
  // The leader decides what the run is (fresh or resumed, how long) and tells the other trainers.
  if (leader()) {
    fs::create_directories(run_dir_);
    const auto resume_from = find_resume_checkpoint(c, run_dir_);
    const auto state = resume_from ? read_checkpoint_state(*resume_from, c) : nlohmann::json(nullptr);
    tokenizer_ = Tokenizer::from_dir(c.model);
    dataset_ = load_prompt_dataset(c.dataset);
    const int64_t n_records = static_cast<int64_t>(dataset_.records.size());
    cursor_ = std::make_unique<DatasetCursor>(n_records, c.seed, /*shuffle=*/true);
    picker_ = std::make_unique<RolloutGenerator>(c, ModelConfig::load(c.model), *tokenizer_, nullptr, &dataset_,
                                                 cursor_.get(), nullptr);
    const int64_t per_episode = std::max<int64_t>(1, n_records / (T() * c.train_batch_size));
    plan_ = {{"total_steps", c.max_steps > 0 ? c.max_steps : per_episode * c.num_episodes},
             {"first_step", resume_from ? json_get<int64_t>(state, "step", "state.json") + 1 : 1},
             {"resume_from", resume_from ? resume_from->string() : ""},
             {"state", state}};
  }
  std::string plan_text = leader() ? plan_.dump() : std::string();
  topo_.role_group->broadcast_bytes(plan_text, 0);
  plan_ = nlohmann::json::parse(plan_text);
  const std::string resume_from = plan_["resume_from"].get<std::string>();
  const auto& state = plan_["state"];

  const ModelOptions options = model_options_from_flags(c.dtype, c.device);
  policy_ = Transformer::from_pretrained(resume_from.empty() ? fs::path(c.model) : fs::path(resume_from), options);
  policy_->eval();
  if (c.algo.loss.kl_coef != 0) {
    reference_ = Transformer::from_pretrained(c.model, options);
    reference_->eval();
  }
  trainer_ = std::make_unique<Trainer>(policy_, reference_, rl_trainer_config(c, plan_["total_steps"].get<int64_t>()));
  if (T() > 1) {
    auto group = topo_.role_group;
    trainer_->set_gradient_reducer(
        [group](const std::vector<torch::Tensor>& params) { all_reduce_gradients(*group, params, kGradientBucketBytes); });
  }
  channel_ = std::make_unique<RolloutChannel>(topo_.world, topo_.role_group, T(), I());
  if (leader()) {
    evaluator_ = std::make_unique<RunEvaluator>(c, policy_->config(), *tokenizer_, run_dir_);
    if (!evaluator_->empty()) {
      EngineConfig engine_config;
      engine_config.kv_cache_mb = c.kv_cache_mb;
      eval_engine_ = std::make_unique<Engine>(policy_, engine_config, tokenizer_);
    }
    weight_sync_ = std::make_unique<WeightSync>(topo_.sync_group, static_cast<uint64_t>(c.sync_bucket_mb) << 20,
                                                parse_sync_mode(c.param_sync_comm_type, "--param-sync-comm-type"));
  }
  if (!resume_from.empty()) {
    load_checkpoint_optimizer(resume_from, trainer_->optimizer());
    trainer_->restore_steps(json_get<int64_t>(state, "optimizer_steps", "state.json"));
    version_ = json_get<int64_t>(state, "policy_version", "state.json");
    if (leader()) {
      cursor_->restore(state.at("data_cursor"));
      picker_->restore_skipped(json_get_or<int64_t>(state, "skipped_long_prompts", 0, "state.json"),
                               json_get_or<int64_t>(state, "skipped_short_prompts", 0, "state.json"));
      if (state.contains("in_flight_prompts")) in_flight_ = state.at("in_flight_prompts");
    }
    deal_saved_buffer(state.at("rollout_buffer"));
  }
}

// The saved buffer (every trainer's, possibly from another -t) dealt out again by the balance.
void TrainerRank::deal_saved_buffer(const nlohmann::json& saved) {
  std::vector<GroupRollout> groups;
  for (const auto& g : saved) groups.push_back(group_from_json(g));
  std::vector<int64_t> tokens;
  for (const auto& g : groups) tokens.push_back(group_tokens(g));
  const auto to = assign_groups(tokens, std::vector<int64_t>(static_cast<size_t>(T()), 0),
                                std::vector<int64_t>(static_cast<size_t>(T()), 0));
  for (size_t k = 0; k < groups.size(); ++k) {
    if (to[k] == topo_.role_rank) buffer_.push_back(std::move(groups[k]));
  }
}

void TrainerRank::send_round() {
  nlohmann::json picks = in_flight_;
  if (picks.empty()) {  // a resumed run first re-sends the round that was in flight at the checkpoint
    for (const auto& p : picker_->pick(I() * c_.round_prompts())) picks.push_back(to_json(p));
  }
  const size_t n = picks.size();
  for (int w = 0; w < I(); ++w) {
    const size_t begin = n * static_cast<size_t>(w) / static_cast<size_t>(I());
    const size_t end = n * static_cast<size_t>(w + 1) / static_cast<size_t>(I());
    nlohmann::json part = nlohmann::json::array();
    for (size_t k = begin; k < end; ++k) part.push_back(picks[k]);
    control({{"op", "round"}, {"picks", part}}, w);
  }
  in_flight_ = std::move(picks);
}

void TrainerRank::sync_weights() {
  if (version_ == synced_version_) return;
  for (int w = 0; w < I(); ++w) control({{"op", "sync"}, {"verify", c_.verify_sync}}, w);
  const NamedTensors weights = policy_->named_weights();
  const SyncStats stats = weight_sync_->sync(weights, version_);
  synced_version_ = version_;
  pending_.sync += stats.seconds;
  pending_.sync_bytes += stats.bytes;
  ++pending_.syncs;
  if (c_.verify_sync) {
    const uint64_t expected = weights_hash(weights);
    for (int w = 0; w < I(); ++w) {
      const auto got = std::stoull(topo_.world->recv_bytes(T() + w, kHash));
      if (got != expected) {
        throw InternalError(fmt::format("weight sync to version {}: rollout worker {} holds weights hashing {:016x}, "
                                        "trainer rank 0 {:016x}", version_, w, got, expected));
      }
    }
    pending_.verified += I();
  }
  spdlog::debug("weights of version {} sent: {:.1f} MB in {} buckets, {:.3f} s", version_, stats.bytes / 1e6,
                stats.buckets, stats.seconds);
}

std::vector<GroupRollout> TrainerRank::gather(const std::vector<GroupRollout>& mine) {
  if (!leader()) {
    topo_.role_group->send_bytes(encode_groups(mine), 0, kShare);
    return {};
  }
  std::vector<GroupRollout> all(mine);
  for (int t = 1; t < T(); ++t) {
    for (auto& g : decode_groups(topo_.role_group->recv_bytes(t, kShare))) all.push_back(std::move(g));
  }
  return all;
}

void TrainerRank::train_step(int64_t step) {
  trace::Span span("step");
  std::vector<GroupRollout> batch;
  while (!buffer_.empty() && static_cast<int64_t>(batch.size()) < c_.train_batch_size) {
    batch.push_back(std::move(buffer_.front()));
    buffer_.pop_front();
  }
  const int64_t version_before = version_;
  const PolicyUpdate update = update_policy(*trainer_, c_, batch, topo_.role_group.get());
  if (update.trained) ++version_;

  // Every trainer's figures, one row each, summed so each row reaches the leader.
  auto rows = torch::zeros({T(), kFigures}, torch::kFloat64);
  auto* row = rows.data_ptr<double>() + topo_.role_rank * kFigures;
  RolloutStats stats;
  for (const auto& g : batch) {
    stats.add(g);
    const int64_t stale = version_before - g.policy_version;
    row[kStaleSum] += static_cast<double>(stale);
    row[kStaleMax] = std::max(row[kStaleMax], static_cast<double>(stale));
    row[kStale0 + std::min<int64_t>(stale, 3)] += 1;
  }
  row[kSamples] = static_cast<double>(stats.samples);
  row[kCorrect] = static_cast<double>(stats.correct);
  row[kTruncated] = static_cast<double>(stats.truncated);
  row[kRewardSum] = stats.reward_sum;
  row[kLenSum] = stats.len_sum;
  row[kMaxLen] = static_cast<double>(stats.max_len);
  row[kGroups] = static_cast<double>(batch.size());
  row[kBuffered] = static_cast<double>(buffer_.size());
  if (T() > 1) topo_.role_group->all_reduce_sum(rows);
  const bool save_rollouts_now = !c_.rollout_save_dir.empty() && step % c_.rollout_save_interval == 0;
  const auto trained = save_rollouts_now ? gather(batch) : std::vector<GroupRollout>{};
  const int64_t total_steps = plan_["total_steps"].get<int64_t>();
  if (leader()) log_step(step, rows, update, trained);
  // After the metrics line, so a run resumed from this checkpoint has every line up to it.
  if ((c_.save_interval > 0 && step % c_.save_interval == 0) || step == total_steps) save_checkpoint(step);
}

void TrainerRank::log_step(int64_t step, const torch::Tensor& rows, const PolicyUpdate& update,
                           const std::vector<GroupRollout>& trained) {
  const int64_t total_steps = plan_["total_steps"].get<int64_t>();

  StepRecord record;
  const auto figures = rows.sum(0), maxima = std::get<0>(rows.max(0));
  auto sum = [&](Figure f) { return figures[f].item<double>(); };
  auto max = [&](Figure f) { return maxima[f].item<double>(); };
  record.stats.samples = static_cast<int64_t>(sum(kSamples));
  record.stats.correct = static_cast<int64_t>(sum(kCorrect));
  record.stats.truncated = static_cast<int64_t>(sum(kTruncated));
  record.stats.reward_sum = sum(kRewardSum);
  record.stats.len_sum = sum(kLenSum);
  record.stats.max_len = static_cast<int64_t>(max(kMaxLen));
  for (const auto& g : pending_.discarded) record.stats.add(g);
  record.step = step;
  record.total_steps = total_steps;
  record.episode = cursor_->epoch();
  record.kept_groups = static_cast<int64_t>(sum(kGroups));
  record.generated_groups = pending_.generated;
  record.round_kept_groups = pending_.kept;
  record.buffered_groups = static_cast<int64_t>(sum(kBuffered));
  record.train = update.metrics;
  record.optimizer_steps = trainer_->n_steps();
  record.policy_version = version_;
  const double groups = std::max(1.0, sum(kGroups));
  record.extra["staleness"] = {{"mean", sum(kStaleSum) / groups},
                               {"max", static_cast<int64_t>(max(kStaleMax))},
                               {"groups_by_versions", {{"0", static_cast<int64_t>(sum(kStale0))},
                                                       {"1", static_cast<int64_t>(sum(kStale1))},
                                                       {"2", static_cast<int64_t>(sum(kStale2))},
                                                       {">=3", static_cast<int64_t>(sum(kStale3Plus))}}}};
  record.extra["weight_sync"] = {{"syncs", pending_.syncs}, {"bytes", pending_.sync_bytes},
                                 {"verified_workers", pending_.verified}};
  double t_eval = 0;
  if (evaluator_->due(step, total_steps)) {
    const auto t0 = Clock::now();
    record.extra["eval"] = evaluator_->run(*eval_engine_, step);
    t_eval = seconds_since(t0);
  }
  record.time = {{"generate", pending_.generate}, {"reward", pending_.reward},   {"wait", pending_.wait},
                 {"logprobs", update.logprob_seconds}, {"train", update.train_seconds},
                 {"sync", pending_.sync},         {"eval", t_eval}, {"total", seconds_since(last_step_end_)}};
  log_->write(record);
  progress::run(step, total_steps, eta_seconds(seconds_since(loop_start_), step - plan_["first_step"].get<int64_t>() + 1,
                                               total_steps - step));
  if (!c_.rollout_save_dir.empty() && step % c_.rollout_save_interval == 0) {
    save_rollouts(fs::path(c_.rollout_save_dir) / c_.project, step, trained, pending_.discarded);
  }
  pending_ = Pending{};
  last_step_end_ = Clock::now();
}

void TrainerRank::save_checkpoint(int64_t step) {
  trace::write();
  const auto all = gather(std::vector<GroupRollout>(buffer_.begin(), buffer_.end()));
  if (!leader()) return;
  nlohmann::json buffer = nlohmann::json::array();
  for (const auto& g : all) buffer.push_back(to_json(g));
  save_run_checkpoint(c_, run_dir_, step, *policy_, trainer_->optimizer(),
                      {{"step", step},
                       {"policy_version", version_},
                       {"data_cursor", cursor_->state()},
                       {"optimizer_steps", trainer_->n_steps()},
                       {"rollout_buffer", buffer},
                       {"in_flight_prompts", in_flight_},
                       {"skipped_long_prompts", picker_->skipped_long()},
                       {"skipped_short_prompts", picker_->skipped_short()},
                       {"num_trainers", T()},
                       {"num_inferencers", I()}});
}

fs::path TrainerRank::run() {
  const auto run_start = Clock::now();
  const int64_t total_steps = plan_["total_steps"].get<int64_t>();
  const int64_t first_step = plan_["first_step"].get<int64_t>();
  const int64_t tbs = c_.train_batch_size;
  if (leader()) {
    write_file_atomic(run_dir_ / "config.yaml", run_config_yaml(c_));
    const auto resumed = plan_["resume_from"].get<std::string>();
    if (!resumed.empty()) spdlog::info("resuming from {} (step {}, policy version {})", resumed, first_step - 1, version_);
    log_ = std::make_unique<RunLog>(run_dir_, c_, resumed.empty() ? std::nullopt : std::optional(first_step - 1));
    spdlog::info("training {} on {} ({} prompts): steps {}..{}; {} trainers x {} prompts x {} samples per step, {} "
                 "rollout workers x {} prompts per round, {}, -nb {}",
                 c_.model, c_.dataset, dataset_.records.size(), first_step, total_steps, T(), tbs, c_.num_generations,
                 I(), c_.round_prompts(), c_.algo.name, c_.n_behind);
    sync_weights();  // the workers start from the trainers' weights (a resumed run's, too)
    if (first_step <= total_steps) send_round();
  }
  last_step_end_ = loop_start_ = Clock::now();
  int64_t rounds_since_step = 0;
  for (int64_t step = first_step; step <= total_steps;) {
    // One round: this trainer's share of the kept groups joins its buffer.
    const auto wait_start = Clock::now();
    const RoundReceipt receipt = [&] {
      trace::Span wait("collect_rollouts");
      return channel_->collect(buffer_);
    }();
    if (leader()) {
      pending_.wait += seconds_since(wait_start);
      pending_.generated += receipt.generated;
      pending_.kept += receipt.kept_all;
      pending_.generate += receipt.generate_seconds;
      pending_.reward += receipt.reward_seconds;
      for (const auto& g : receipt.discarded) pending_.discarded.push_back(g);
      in_flight_ = nlohmann::json::array();
    }
    ++rounds_since_step;
    // Steps the trainers can fill now (each holds within one group of the others).
    auto held = torch::zeros({T()}, torch::kFloat64);
    held[topo_.role_rank] = static_cast<double>(buffer_.size());
    if (T() > 1) topo_.role_group->all_reduce_sum(held);
    int64_t steps = static_cast<int64_t>(held.min().item<double>()) / tbs;
    if (steps == 0 && !(c_.algo.dynamic_batching && rounds_since_step <= c_.max_dynamic_rounds)) steps = 1;
    steps = std::min(steps, total_steps - step + 1);
    const bool more_rounds = step + steps <= total_steps;
    if (leader() && more_rounds && c_.n_behind >= 1) {
      // Rollout runs ahead: the next round starts now, with the weights as they are.
      if (++rounds_ % c_.sync_frequency == 0) sync_weights();
      send_round();
    }
    for (int64_t k = 0; k < steps; ++k) train_step(step++);
    if (steps > 0) rounds_since_step = 0;
    if (leader() && more_rounds && c_.n_behind == 0) {
      sync_weights();
      send_round();
    }
  }
  if (leader()) {
    for (int w = 0; w < I(); ++w) control({{"op", "stop"}}, w);
    spdlog::info("done in {:.1f} s; run directory {}", seconds_since(run_start), run_dir_.string());
  }
  trace::write();
  return run_dir_;
}

// A rollout worker: generates the rounds trainer rank 0 sends, with the weights it last sent.
class RolloutWorker {
 public:
  RolloutWorker(const RunConfig& c, const Topology& topo);
  void run();

 private:
  const RunConfig& c_;
  const Topology& topo_;
  std::shared_ptr<Tokenizer> tokenizer_;
  std::shared_ptr<Transformer> policy_;
  std::unique_ptr<Engine> engine_;
  RewardFunction reward_;
  std::unique_ptr<RolloutGenerator> generator_;
  std::unique_ptr<RolloutChannel> channel_;
  std::unique_ptr<WeightSync> weight_sync_;
};

RolloutWorker::RolloutWorker(const RunConfig& c, const Topology& topo) : c_(c), topo_(topo), reward_(run_reward_function(c)) {
  tokenizer_ = Tokenizer::from_dir(c.model);
  policy_ = Transformer::from_pretrained(c.model, model_options_from_flags(c.dtype, c.device));
  policy_->eval();
  EngineConfig engine_config;
  engine_config.kv_cache_mb = c.kv_cache_mb;
  engine_ = std::make_unique<Engine>(policy_, engine_config, tokenizer_);
  generator_ = std::make_unique<RolloutGenerator>(c, policy_->config(), *tokenizer_, engine_.get(), nullptr, nullptr,
                                                  &reward_);
  channel_ = std::make_unique<RolloutChannel>(topo.world, nullptr, topo.num_trainers, topo.num_inferencers);
  weight_sync_ = std::make_unique<WeightSync>(topo.sync_group, static_cast<uint64_t>(c.sync_bucket_mb) << 20,
                                              parse_sync_mode(c.param_sync_comm_type, "--param-sync-comm-type"));
}

void RolloutWorker::run() {
  for (;;) {
    const auto message = unpack_message(topo_.world->recv_bytes(0, kControl), "control");
    const std::string op = message.at("op").get<std::string>();
    if (op == "stop") {
      trace::write();
      return;
    }
    if (op == "sync") {
      const SyncStats stats = weight_sync_->sync({}, 0, [&](const NamedTensors& bucket) { engine_->update_weights(bucket); });
      engine_->set_version(stats.version);
      if (message.at("verify").get<bool>()) {
        topo_.world->send_bytes(std::to_string(weights_hash(policy_->named_weights())), 0, kHash);
      }
    } else if (op == "round") {
      trace::Span span("round");
      std::vector<PromptPick> picks;
      for (const auto& p : message.at("picks")) picks.push_back(pick_from_json(p));
      RolloutRound round = generator_->generate(picks);
      channel_->deliver(round, engine_->version());
    } else {
      throw InternalError(fmt::format("unknown control message \"{}\" from trainer rank 0", op));
    }
  }
}

}  // namespace

fs::path run_distributed(const RunConfig& given, const Topology& topology) {
  RunConfig config = given;
  start_profile(config, topology.world->rank(), topology.describe());
  if (config.device == "cuda") {  // one device per rank: the rank's index on its machine
    const int devices = static_cast<int>(torch::cuda::device_count());
    if (devices > 0) config.device = fmt::format("cuda:{}", local_rank() % devices);
  }
  if (topology.role == Role::kTrainer) return TrainerRank(config, topology).run();
  RolloutWorker(config, topology).run();
  return fs::path(config.save_dir) / config.project;
}

}  // namespace rlcpp
