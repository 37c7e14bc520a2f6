#include "rl/modes/leader.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <limits>
#include <utility>

#include "util/error.h"
#include "util/file.h"

namespace rlcpp {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

enum Figure : int64_t {
  kSamples, kCorrect, kTruncated, kRewardSum, kLenSum, kMaxLen, kGroups, kBuffered,
  kStaleSum, kStaleMax, kStale0, kStale1, kStale2, kStale3Plus,
  // Versions behind per sample (its oldest model token's) and per model token: sums, extremes
  // (minima kept negated so that every row's figures combine by sum or max), counts.
  kSampleStaleSum, kSampleStaleMax, kSampleStaleNegMin, kSampleStale0, kSampleStale1, kSampleStale2, kSampleStale3Plus,
  kTokenStaleSum, kTokenStaleMax, kTokenStaleNegMin, kModelTokens, kStaleDropped, kStaleMasked,
  kEpisodes, kTurnsSum, kTurnsMax, kToolCalls, kToolErrors, kInsertedTokens,
  kReason0,  // then one count per code verdict (the reasons graders give), in code_verdicts() order
};
// After the reasons: trajectories per way they ended (episode_ends() order), then per token-exactness
// outcome (tito_kinds() order, then "unchecked").
const int64_t kEnded0 = kReason0 + static_cast<int64_t>(code_verdicts().entries().size());
const int64_t kTito0 = kEnded0 + static_cast<int64_t>(episode_ends().entries().size());
const int64_t kFigures = kTito0 + static_cast<int64_t>(tito_kinds().entries().size()) + 1;

template <typename E>
std::vector<std::string> table_names(const EnumTable<E>& table) {
  std::vector<std::string> out;
  for (const auto& e : table.entries()) out.emplace_back(e.name);
  return out;
}

const std::vector<std::string>& tito_names() {
  static const std::vector<std::string> names = [] {
    auto n = table_names(tito_kinds());
    n.push_back("unchecked");
    return n;
  }();
  return names;
}

}  // namespace

int64_t n_step_figures() { return kFigures; }

torch::Tensor step_figures(const std::vector<SampleGroup>& batch, int64_t buffered, int64_t version_before,
                           StaleCounts stale) {
  auto figures = torch::zeros({kFigures}, torch::kFloat64);
  auto* row = figures.data_ptr<double>();
  row[kStaleDropped] = static_cast<double>(stale.dropped_groups);
  row[kStaleMasked] = static_cast<double>(stale.masked_tokens);
  RolloutStats stats;
  row[kSampleStaleNegMin] = row[kTokenStaleNegMin] = -std::numeric_limits<double>::infinity();  // none yet
  for (const auto& g : batch) {
    stats.add(g);
    const int64_t stale = version_before - g.policy_version();
    row[kStaleSum] += static_cast<double>(stale);
    row[kStaleMax] = std::max(row[kStaleMax], static_cast<double>(stale));
    row[kStale0 + std::min<int64_t>(stale, 3)] += 1;
    for (const auto& s : g.samples) {
      if (s.trained_tokens() == 0) continue;
      const auto behind = static_cast<double>(version_before - s.policy_version());
      row[kSampleStaleSum] += behind;
      row[kSampleStaleMax] = std::max(row[kSampleStaleMax], behind);
      row[kSampleStaleNegMin] = std::max(row[kSampleStaleNegMin], -behind);
      row[kSampleStale0 + std::min<int64_t>(static_cast<int64_t>(behind), 3)] += 1;
      for (const auto& segment : s.segments) {
        if (segment.kind != SegmentKind::kModel || segment.length == 0) continue;
        const auto seg_behind = static_cast<double>(version_before - segment.policy_version);
        row[kTokenStaleSum] += seg_behind * static_cast<double>(segment.length);
        row[kModelTokens] += static_cast<double>(segment.length);
        row[kTokenStaleMax] = std::max(row[kTokenStaleMax], seg_behind);
        row[kTokenStaleNegMin] = std::max(row[kTokenStaleNegMin], -seg_behind);
      }
    }
  }
  row[kSamples] = static_cast<double>(stats.samples);
  row[kCorrect] = static_cast<double>(stats.correct);
  row[kTruncated] = static_cast<double>(stats.truncated);
  row[kRewardSum] = stats.reward_sum;
  row[kLenSum] = stats.len_sum;
  row[kMaxLen] = static_cast<double>(stats.max_len);
  row[kGroups] = static_cast<double>(batch.size());
  row[kBuffered] = static_cast<double>(buffered);
  auto counts = [&](int64_t first, const std::vector<std::string>& names, const std::map<std::string, int64_t>& found) {
    for (size_t v = 0; v < names.size(); ++v) {
      const auto it = found.find(names[v]);
      row[first + static_cast<int64_t>(v)] = it == found.end() ? 0.0 : static_cast<double>(it->second);
    }
  };
  counts(kReason0, table_names(code_verdicts()), stats.reasons);
  row[kEpisodes] = static_cast<double>(stats.episodes);
  row[kTurnsSum] = static_cast<double>(stats.turns_sum);
  row[kTurnsMax] = static_cast<double>(stats.turns_max);
  row[kToolCalls] = static_cast<double>(stats.tool_calls);
  row[kToolErrors] = static_cast<double>(stats.tool_errors);
  row[kInsertedTokens] = static_cast<double>(stats.inserted_tokens);
  counts(kEnded0, table_names(episode_ends()), stats.ended_by);
  counts(kTito0, tito_names(), stats.tito);
  return figures;
}

Leader::Leader(const RunConfig& c, const Topology* topo, RunState& run, RolloutSource& source, Engine* engine)
    : c_(c), topo_(topo), run_(run), source_(source), eval_engine_(engine) {
  picker_ = std::make_unique<RolloutGenerator>(c, run.policy->config(), *run.tokenizer, nullptr, &run.dataset,
                                               run.cursor.get(), nullptr);
  const CheckpointState& saved = run.plan.saved;
  picker_->restore_skipped(saved.skipped_long_prompts, saved.skipped_short_prompts);
  in_flight_ = saved.in_flight_prompts;
  next_ = saved.next_prompts;
  size_t pooled = 0;
  for (const auto& picks : saved.round.pool) pooled += picks.size();
  if (pooled > 0 && source_.pool().empty()) {
    spdlog::warn("the checkpoint's rollout workers held {} prompt(s) picked and not yet delivered (--group-order "
                 "completion); this run does not take groups in completion order on rollout workers, so they are not "
                 "generated (the run goes on from the prompts after them)", pooled);
  }
  pending_.generated = saved.round.generated_groups;
  pending_.kept = saved.round.kept_groups;
  pending_.discarded = saved.round.discarded;
  RowScorer reward_model;  // on a reward rank rather than loaded here
  if (topo_ != nullptr && evaluation_on_reward_rank(c, *topo_)) {
    reward_rank_ = std::make_unique<RewardRankClient>(*topo_, topo_->reward_rank_of(0));
    reward_model = [client = reward_rank_.get()](const std::vector<std::vector<int32_t>>& rows) { return client->score(rows); };
  }
  evaluator_ = std::make_unique<RunEvaluator>(c, run.policy->config(), *run.tokenizer, run.plan.run_dir, reward_model);
  if (eval_engine_ == nullptr && !evaluator_->empty()) {
    own_engine_ = std::make_unique<Engine>(run.policy, policy_engine_config(c, run), run.tokenizer);
    eval_engine_ = own_engine_.get();
  }
}

void Leader::start() {
  const RunPlan& plan = run_.plan;
  write_file_atomic(plan.run_dir / "config.yaml", run_config_yaml(c_));
  if (plan.resume_from) {
    spdlog::info("resuming from {} (step {}, policy version {})", plan.resume_from->string(), plan.saved.step,
                 run_.policy_version);
  }
  log_ = std::make_unique<RunLog>(plan.run_dir, c_, plan.resume_from ? std::optional(plan.saved.step) : std::nullopt);
  if (c_.parallel.distributed()) {
    spdlog::info("training {} on {} ({} prompts): steps {}..{}; {} trainer replicas{} x {} prompts x {} samples per "
                 "step, {} engines{} x {} prompts per round, {}, -nb {}",
                 c_.model.path, c_.runtime.dataset, run_.dataset.records.size(), plan.first_step(), plan.total_steps,
                 topo_->num_replicas(), topo_->replica_size() > 1 ? fmt::format(" of {} ranks", topo_->replica_size()) : "",
                 c_.train.train_batch_size, c_.rollout.num_generations, topo_->num_engines(),
                 topo_->rollout_tp > 1 ? fmt::format(" of {} ranks", topo_->rollout_tp) : "", c_.round_prompts(),
                 c_.algo.name, c_.staleness.n_behind);
  } else {
    spdlog::info("training {} on {} ({} prompts): steps {}..{} of {} prompts x {} samples, {}", c_.model.path, c_.runtime.dataset,
                 run_.dataset.records.size(), plan.first_step(), plan.total_steps, c_.train.train_batch_size,
                 c_.rollout.num_generations, c_.algo.name);
  }
  spdlog::info("{}", old_logprobs_plan(c_));
  spdlog::info("rollouts from {}{}", source_.describe(),
               source_.concurrent() && c_.staleness.n_behind >= 1 ? "; each round is generated while the steps before it train (-nb)"
                                                         : "");
  last_step_end_ = Clock::now();
}

const std::vector<PromptPick>& Leader::pick_round() {
  if (in_flight_.empty()) in_flight_ = next_.empty() ? picker_->pick(source_.round_prompts()) : std::exchange(next_, {});
  return in_flight_;
}

const std::vector<PromptPick>& Leader::pick_next() {
  if (next_.empty()) next_ = picker_->pick(source_.round_prompts());
  return next_;
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

void Leader::note_publish(double seconds) { pending_.sync += seconds; }

bool Leader::evaluation_due(int64_t step) const { return evaluator_->due(step, run_.plan.total_steps); }

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
  auto counts = [&](int64_t first, const std::vector<std::string>& names, std::map<std::string, int64_t>& out) {
    for (size_t v = 0; v < names.size(); ++v) {
      const auto n = static_cast<int64_t>(figures[first + static_cast<int64_t>(v)].item<double>());
      if (n > 0) out[names[v]] = n;
    }
  };
  counts(kReason0, table_names(code_verdicts()), record.stats.reasons);
  record.stats.episodes = static_cast<int64_t>(sum(kEpisodes));
  record.stats.turns_sum = static_cast<int64_t>(sum(kTurnsSum));
  record.stats.turns_max = static_cast<int64_t>(max(kTurnsMax));
  record.stats.tool_calls = static_cast<int64_t>(sum(kToolCalls));
  record.stats.tool_errors = static_cast<int64_t>(sum(kToolErrors));
  record.stats.inserted_tokens = static_cast<int64_t>(sum(kInsertedTokens));
  counts(kEnded0, table_names(episode_ends()), record.stats.ended_by);
  counts(kTito0, tito_names(), record.stats.tito);
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
  auto by_versions = [&](Figure first) {
    return nlohmann::ordered_json{{"0", static_cast<int64_t>(sum(first))},
                                  {"1", static_cast<int64_t>(sum(static_cast<Figure>(first + 1)))},
                                  {"2", static_cast<int64_t>(sum(static_cast<Figure>(first + 2)))},
                                  {">=3", static_cast<int64_t>(sum(static_cast<Figure>(first + 3)))}};
  };
  // Versions behind the policy the step trained from: min/mean/max per sample (its oldest model
  // token's version) and per model token (a token's own version), with the histograms.
  auto extremes = [&](Figure total, Figure max_of, Figure neg_min_of, double count) {
    if (count == 0) return nlohmann::ordered_json{{"min", 0}, {"mean", 0.0}, {"max", 0}};
    return nlohmann::ordered_json{{"min", static_cast<int64_t>(-max(neg_min_of))},
                                  {"mean", sum(total) / count},
                                  {"max", static_cast<int64_t>(max(max_of))}};
  };
  const double sampled = sum(kSampleStale0) + sum(kSampleStale1) + sum(kSampleStale2) + sum(kSampleStale3Plus);
  record.extra["staleness"] = {{"mean", sum(kStaleSum) / groups},
                               {"max", static_cast<int64_t>(max(kStaleMax))},
                               {"groups_by_versions", by_versions(kStale0)},
                               {"per_sample", extremes(kSampleStaleSum, kSampleStaleMax, kSampleStaleNegMin, sampled)},
                               {"samples_by_versions", by_versions(kSampleStale0)},
                               {"per_token", extremes(kTokenStaleSum, kTokenStaleMax, kTokenStaleNegMin, sum(kModelTokens))}};
  record.extra["staleness"]["per_token"]["tokens"] = static_cast<int64_t>(sum(kModelTokens));
  if (c_.staleness.max_staleness >= 0) {
    record.extra["staleness"]["bound"] = c_.staleness.max_staleness;
    record.extra["staleness"]["dropped_groups"] = static_cast<int64_t>(sum(kStaleDropped));
    record.extra["staleness"]["masked_tokens"] = static_cast<int64_t>(sum(kStaleMasked));
  }
  source_.add_figures(record.extra);
  const double t_eval = evaluator_->run_if_due(eval_engine_, step, record.total_steps, record.extra);
  record.time = {{"generate", pending_.generate}, {"reward", pending_.reward},   {"wait", pending_.wait},
                 {"logprobs", update.logprob_seconds}, {"train", update.train_seconds},
                 {"sync", pending_.sync},         {"eval", t_eval}, {"total", seconds_since(last_step_end_)}};
  log_->write(record);
  if (rollouts_due(c_.logging, step)) save_rollouts(fs::path(c_.logging.rollout_save_dir) / c_.logging.project, step, trained, pending_.discarded);
  pending_ = Pending{};
  last_step_end_ = Clock::now();
}

CheckpointState Leader::checkpoint_state(CheckpointState state) const {
  state.policy_version = run_.policy_version;
  state.data_cursor = run_.cursor->state();
  state.optimizer_steps = run_.trainer->n_steps();
  if (run_.critic_trainer) state.critic_optimizer_steps = run_.critic_trainer->n_steps();
  state.in_flight_prompts = in_flight_;
  state.next_prompts = next_;
  state.round.pool = source_.pool();
  state.round.generated_groups = pending_.generated;
  state.round.kept_groups = pending_.kept;
  state.round.discarded = pending_.discarded;
  state.skipped_long_prompts = picker_->skipped_long();
  state.skipped_short_prompts = picker_->skipped_short();
  state.num_trainers = topo_ != nullptr && c_.parallel.distributed() ? topo_->num_trainers : 1;
  state.num_inferencers = topo_ != nullptr && c_.parallel.distributed() ? topo_->num_inferencers : 0;
  return state;
}

void Leader::fail(const std::string& error) { log_->fail(error); }

void Leader::finish(double seconds) {
  if (reward_rank_) reward_rank_->stop();
  log_->finish();
  if (picker_->skipped_long() + picker_->skipped_short() > 0) {
    spdlog::info("prompts left out: {} over -mpt {}, {} under min_prompt_length {}", picker_->skipped_long(),
                 c_.rollout.max_prompt_tokens, picker_->skipped_short(), c_.rollout.min_prompt_length);
  }
  spdlog::info("done in {:.1f} s; run directory {}", seconds, run_.plan.run_dir.string());
}

}  // namespace rlcpp
