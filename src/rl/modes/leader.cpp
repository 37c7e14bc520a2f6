#include "rl/modes/leader.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include "rl/modes/control.h"
#include "rl/step/policy_update.h"
#include "util/error.h"
#include "util/file.h"
#include "util/trace.h"

namespace rlcpp {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

enum Figure : int64_t {
  kSamples, kCorrect, kTruncated, kRewardSum, kLenSum, kMaxLen, kGroups, kBuffered,
  kStaleSum, kStaleMax, kStale0, kStale1, kStale2, kStale3Plus, kFigures
};

}  // namespace

int64_t n_step_figures() { return kFigures; }

torch::Tensor step_figures(const std::vector<SampleGroup>& batch, int64_t buffered, int64_t version_before) {
  auto figures = torch::zeros({kFigures}, torch::kFloat64);
  auto* row = figures.data_ptr<double>();
  RolloutStats stats;
  for (const auto& g : batch) {
    stats.add(g);
    const int64_t stale = version_before - g.policy_version();
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
  row[kBuffered] = static_cast<double>(buffered);
  return figures;
}

Leader::Leader(const RunConfig& c, const Topology& topo, RunState& run) : c_(c), topo_(topo), run_(run) {
  picker_ = std::make_unique<RolloutGenerator>(c, run.policy->config(), *run.tokenizer, nullptr, &run.dataset,
                                               run.cursor.get(), nullptr);
  picker_->restore_skipped(run.plan.saved.skipped_long_prompts, run.plan.saved.skipped_short_prompts);
  const CheckpointState& saved = run.plan.saved;
  in_flight_ = saved.in_flight_prompts;
  rounds_ahead_ = saved.round.rounds_ahead;
  pending_.generated = saved.round.generated_groups;
  pending_.kept = saved.round.kept_groups;
  pending_.discarded = saved.round.discarded;
  evaluator_ = std::make_unique<RunEvaluator>(c, run.policy->config(), *run.tokenizer, run.plan.run_dir);
  if (!evaluator_->empty()) {
    eval_engine_ = std::make_unique<Engine>(run.policy, run_engine_config(c), run.tokenizer);
  }
  weight_sync_ = std::make_unique<WeightSync>(topo.sync_group, static_cast<uint64_t>(c.sync_bucket_mb) << 20,
                                              c.param_sync_comm_type);
}

void Leader::start(bool send_first_round) {
  const RunPlan& plan = run_.plan;
  write_file_atomic(plan.run_dir / "config.yaml", run_config_yaml(c_));
  if (plan.resume_from) {
    spdlog::info("resuming from {} (step {}, policy version {})", plan.resume_from->string(), plan.saved.step,
                 run_.policy_version);
  }
  log_ = std::make_unique<RunLog>(plan.run_dir, c_, plan.resume_from ? std::optional(plan.saved.step) : std::nullopt);
  spdlog::info("training {} on {} ({} prompts): steps {}..{}; {} trainer replicas{} x {} prompts x {} samples per "
               "step, {} engines{} x {} prompts per round, {}, -nb {}",
               c_.model, c_.dataset, run_.dataset.records.size(), plan.first_step(), plan.total_steps,
               topo_.num_replicas(), topo_.train_tp > 1 ? fmt::format(" of {} ranks", topo_.train_tp) : "",
               c_.train_batch_size, c_.num_generations, topo_.num_engines(),
               topo_.rollout_tp > 1 ? fmt::format(" of {} ranks", topo_.rollout_tp) : "", c_.round_prompts(),
               c_.algo.name, c_.n_behind);
  spdlog::info("{}", old_logprobs_plan(c_));
  sync_weights();  // the workers start from the trainers' weights (a resumed run's, too)
  if (send_first_round && plan.first_step() <= plan.total_steps) send_round();
  last_step_end_ = Clock::now();
}

void Leader::send_round() {
  if (in_flight_.empty()) in_flight_ = picker_->pick(topo_.num_engines() * c_.round_prompts());
  const size_t n = in_flight_.size(), engines = static_cast<size_t>(topo_.num_engines());
  for (size_t e = 0; e < engines; ++e) {
    std::vector<PromptPick> part(in_flight_.begin() + static_cast<long>(n * e / engines),
                                 in_flight_.begin() + static_cast<long>(n * (e + 1) / engines));
    const int first = topo_.engine_leader(static_cast<int>(e));
    send_control(*topo_.world, ControlMessage::round(std::move(part)), first);
    for (int r = 1; r < topo_.rollout_tp; ++r) send_control(*topo_.world, ControlMessage::round({}), first + r);  // they serve
  }
}

namespace {

// ZeRO-3's optimizer when the parameters are sharded, else nullptr.
ZeroOptimizer* sharded_parameters(RunState& run) {
  auto* zero = run.trainer->zero();
  return zero != nullptr && zero->stage() == 3 ? zero : nullptr;
}

// Under ZeRO-3 or tensor parallelism (the other trainers take part in a sync): whether a sync
// follows, from trainer 0 to the other trainers.
bool announce_sync(const Topology& topology, RunState& run, bool syncs) {
  const bool others_take_part = sharded_parameters(run) != nullptr || run.policy->tensor_parallel() != nullptr;
  if (!others_take_part || topology.num_trainers == 1) return syncs;
  auto flag = torch::tensor({syncs ? 1.0 : 0.0}, torch::kFloat64);
  topology.role_group->broadcast(flag, 0);
  return flag.item<double>() > 0;
}

}  // namespace

void Leader::follow_sync(const Topology& topology, RunState& run) {
  if (!announce_sync(topology, run, false)) return;
  // As trainer 0's sync_weights asks for each tensor: ZeRO-3's layers streamed (every trainer of a
  // data-parallel group gathers them alike), the first replica's parts gathered onto trainer 0.
  auto* zero = sharded_parameters(run);
  std::optional<LayerByLayer> stream;
  if (zero != nullptr) stream.emplace(*zero, run.policy->layer_trainable_parameters());
  if (topology.replica() == 0) {
    for (const auto& [name, t] : run.policy->trained_weights()) {
      run.policy->gather_weight(name, stream ? stream->get(t) : t, 0);
    }
  }
  if (stream) stream->finish();
}

void Leader::sync_weights() {
  if (!announce_sync(topo_, run_, run_.policy_version != synced_version_)) return;
  const int T = topo_.num_trainers, I = topo_.num_inferencers;
  for (int w = 0; w < I; ++w) send_control(*topo_.world, ControlMessage::sync(c_.verify_sync), T + w);
  const NamedTensors weights = run_.policy->trained_weights();  // under LoRA, the adapters alone
  SyncStats stats;
  uint64_t expected = 0;
  auto* zero = sharded_parameters(run_);
  if (zero != nullptr || run_.policy->tensor_parallel() != nullptr) {
    // Whole tensors made piece by piece as they go: ZeRO-3's layers streamed, the tensor-parallel
    // parts gathered; the header takes the whole shapes. Each receiver keeps its own part.
    NamedTensors layout;
    for (const auto& [name, t] : weights) {
      const auto local = zero != nullptr ? torch::empty(zero->shape_of(t), t.options().device(torch::kMeta)) : t;
      layout.emplace_back(name, torch::empty(run_.policy->global_shape(name, local), t.options().device(torch::kMeta)));
    }
    // values(k) comes once per tensor in order, as the other trainers take part (follow_sync).
    expected = weights_hash_seed();
    size_t next = 0;
    std::optional<LayerByLayer> stream;
    if (zero != nullptr) stream.emplace(*zero, run_.policy->layer_trainable_parameters());
    stats = weight_sync_->sync(layout, run_.policy_version, {}, [&](size_t k) {
      RLCPP_CHECK(k == next++, "weight sync asked for tensor {} out of order", k);
      const auto& local = stream ? stream->get(weights[k].second) : weights[k].second;
      auto whole = run_.policy->gather_weight(weights[k].first, local, 0);
      if (c_.verify_sync) expected = weights_hash_add(expected, weights[k].first, whole);
      return whole;
    });
    if (stream) stream->finish();
  } else {
    stats = weight_sync_->sync(weights, run_.policy_version);
    if (c_.verify_sync) expected = weights_hash(weights);
  }
  synced_version_ = run_.policy_version;
  pending_.sync += stats.seconds;
  pending_.sync_bytes += stats.bytes;
  ++pending_.syncs;
  if (c_.verify_sync) {
    for (int e = 0; e < topo_.num_engines(); ++e) {
      const auto got = std::stoull(topo_.world->recv_bytes(topo_.engine_leader(e), kHashTag));
      if (got != expected) {
        throw InternalError(fmt::format("weight sync to version {}: rollout engine {} holds weights hashing {:016x}, "
                                        "trainer rank 0 {:016x}", run_.policy_version, e, got, expected));
      }
    }
    pending_.verified += topo_.num_engines();
  }
  spdlog::debug("weights of version {} sent: {:.1f} MB in {} buckets, {:.3f} s", run_.policy_version, stats.bytes / 1e6,
                stats.buckets, stats.seconds);
}

bool Leader::evaluation_due(int64_t step) const { return evaluator_->due(step, run_.plan.total_steps); }

void Leader::sync_ahead() {
  if (++rounds_ahead_ % c_.sync_frequency == 0) {
    sync_weights();
  } else {
    announce_sync(topo_, run_, false);
  }
}

void Leader::note_round(const RoundReceipt& receipt, double wait) {
  pending_.wait += wait;
  pending_.generated += receipt.generated;
  pending_.kept += receipt.kept_all;
  pending_.generate += receipt.generate_seconds;
  pending_.reward += receipt.reward_seconds;
  for (const auto& g : receipt.discarded) pending_.discarded.push_back(g);
  in_flight_.clear();
}

void Leader::log_step(int64_t step, const torch::Tensor& rows, const PolicyUpdate& update,
                      const std::vector<SampleGroup>& trained) {
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
  record.total_steps = run_.plan.total_steps;
  record.episode = run_.cursor->epoch();
  record.kept_groups = static_cast<int64_t>(sum(kGroups));
  record.generated_groups = pending_.generated;
  record.round_kept_groups = pending_.kept;
  record.buffered_groups = static_cast<int64_t>(sum(kBuffered));
  record.train = update.metrics;
  record.optimizer_steps = run_.trainer->n_steps();
  record.policy_version = run_.policy_version;
  const double groups = std::max(1.0, sum(kGroups));
  record.extra["staleness"] = {{"mean", sum(kStaleSum) / groups},
                               {"max", static_cast<int64_t>(max(kStaleMax))},
                               {"groups_by_versions", {{"0", static_cast<int64_t>(sum(kStale0))},
                                                       {"1", static_cast<int64_t>(sum(kStale1))},
                                                       {"2", static_cast<int64_t>(sum(kStale2))},
                                                       {">=3", static_cast<int64_t>(sum(kStale3Plus))}}}};
  record.extra["weight_sync"] = {{"syncs", pending_.syncs}, {"bytes", pending_.sync_bytes},
                                 {"verified_workers", pending_.verified}};
  const double t_eval = evaluator_->run_if_due(eval_engine_.get(), step, record.total_steps, record.extra);
  record.time = {{"generate", pending_.generate}, {"reward", pending_.reward},   {"wait", pending_.wait},
                 {"logprobs", update.logprob_seconds}, {"train", update.train_seconds},
                 {"sync", pending_.sync},         {"eval", t_eval}, {"total", seconds_since(last_step_end_)}};
  log_->write(record);
  if (rollouts_due(c_, step)) save_rollouts(fs::path(c_.rollout_save_dir) / c_.project, step, trained, pending_.discarded);
  pending_ = Pending{};
  last_step_end_ = Clock::now();
}

CheckpointState Leader::checkpoint_state(CheckpointState state) const {
  state.policy_version = run_.policy_version;
  state.data_cursor = run_.cursor->state();
  state.optimizer_steps = run_.trainer->n_steps();
  state.in_flight_prompts = in_flight_;
  state.round.rounds_ahead = rounds_ahead_;
  state.round.generated_groups = pending_.generated;
  state.round.kept_groups = pending_.kept;
  state.round.discarded = pending_.discarded;
  state.skipped_long_prompts = picker_->skipped_long();
  state.skipped_short_prompts = picker_->skipped_short();
  state.num_trainers = topo_.num_trainers;
  state.num_inferencers = topo_.num_inferencers;
  return state;
}

void Leader::stop_workers() {
  for (int w = 0; w < topo_.num_inferencers; ++w) {
    send_control(*topo_.world, ControlMessage::stop(), topo_.num_trainers + w);
  }
}

}  // namespace rlcpp
