#include "rl/step/policy_update.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>

#include "rl/step/critic.h"
#include "util/cuda_backend.h"
#include "util/error.h"

namespace rlcpp {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Sums `values` over the trainer ranks (in place; identity without a communicator).
void sum_over(Communicator* trainers, std::vector<double>& values) {
  if (trainers == nullptr || trainers->size() == 1) return;
  auto t = torch::tensor(values, torch::kFloat64);
  trainers->all_reduce_sum(t);
  std::copy(t.data_ptr<double>(), t.data_ptr<double>() + t.numel(), values.begin());
}

// The largest of `value` over the trainer ranks.
double max_over(Communicator* trainers, double value) {
  if (trainers == nullptr || trainers->size() == 1) return value;
  std::vector<double> all(static_cast<size_t>(trainers->size()), 0.0);
  all[static_cast<size_t>(trainers->rank())] = value;
  sum_over(trainers, all);
  return *std::max_element(all.begin(), all.end());
}

// Per-token means weighted by each rank's tokens; sums (losses, counts) as they are. The critic's
// are added when there is one (decided by the run, alike on every rank: a rank with no sample has
// none of the keys, and takes part with zeros).
const std::vector<std::string> kSummed = {"loss", "pg_loss", "n_skipped"};
const std::vector<std::string> kCriticSummed = {"critic/vf_loss"};
// Counted over the step's updates (the same on every rank), not averaged.
const std::vector<std::string> kCounted = {"n_skipped", "nonfinite"};
const std::vector<std::string> kTokenMeans = {"kl", "clip_frac_low", "clip_frac_high", "clip_frac_dual", "entropy",
                                              "tis_weight_mean", "tis_clip_frac", "is_masked_frac", "adv_mean",
                                              "adv_sq_mean"};
const std::vector<std::string> kCriticTokenMeans = {"critic/vf_clip_frac", "critic/value_mean", "critic/return_mean"};

// REINFORCE++: the step's advantages (r - group mean) whitened over the trained tokens of every
// sample trained on, on every trainer rank. A sample with one advantage for all its tokens counts
// it once per trained token.
void whiten_advantages(std::vector<Sample>& samples, double eps, Communicator* trainers) {
  // Over each sample's trained tokens: sum f(advantage) (one product for a uniform advantage).
  auto token_sum = [](const Sample& s, auto&& f) {
    if (s.uniform_advantage()) return f(s.advantages[0]) * static_cast<double>(s.trained_tokens());
    const auto mask = s.loss_mask();
    double sum = 0;
    for (size_t t = 0; t < mask.size(); ++t) sum += mask[t] ? f(s.advantages[t]) : 0.0;
    return sum;
  };
  double n = 0, sum = 0;
  for (const auto& s : samples) {
    n += static_cast<double>(s.trained_tokens());
    sum += token_sum(s, [](double a) { return a; });
  }
  std::vector<double> moments = {n, sum};
  sum_over(trainers, moments);
  if (moments[0] < 2) {
    for (auto& s : samples) s.advantages.assign(s.advantages.size(), 0.0);
    return;
  }
  const double mean = moments[1] / moments[0];
  std::vector<double> squares = {0.0};
  for (const auto& s : samples) squares[0] += token_sum(s, [&](double a) { return std::pow(a - mean, 2); });
  sum_over(trainers, squares);
  const double scale = 1.0 / std::sqrt(squares[0] / (moments[0] - 1) + eps);
  for (auto& s : samples) {
    for (auto& a : s.advantages) a = (a - mean) * scale;
  }
}

// How far the sampler's log-probs are from the trainer's for the same tokens (a different policy
// version under staleness or relay, or another dtype or kernel): mean and max |Δ log p| and the
// KL(rollout || trainer) estimate k3, over every token with a rollout log-prob, on every rank.
// With the policy's version, the same by how many versions behind it each token was sampled
// (0, 1, 2, 3 or more): "mismatch_by_versions/{k}/tokens", ".../abs_mean", ".../kl" (k "3+" last).
void add_mismatch(std::map<std::string, double>& metrics, const std::vector<Sample>& samples,
                  const std::vector<std::vector<float>>& logprobs, Communicator* trainers,
                  std::optional<int64_t> policy_version) {
  constexpr size_t kBuckets = 4;
  // Per bucket: tokens, Σ|Δ|, Σ k3; the first three entries over every bucket.
  std::vector<double> sums(3 * (kBuckets + 1), 0.0);
  double abs_max = 0;
  for (size_t k = 0; k < samples.size(); ++k) {
    const auto& rollout = samples[k].rollout_logprobs;
    if (rollout.size() != logprobs[k].size()) continue;  // none kept for this sample
    const auto mask = samples[k].loss_mask();  // inserted tokens were not sampled
    const auto versions = samples[k].token_versions();
    for (size_t t = 0; t < rollout.size(); ++t) {
      if (!mask[t]) continue;
      const double delta = static_cast<double>(logprobs[k][t]) - static_cast<double>(rollout[t]);  // log π_train/π_rollout
      const double kl = std::exp(std::min(delta, 20.0)) - delta - 1;
      const int64_t behind = policy_version ? std::max<int64_t>(0, *policy_version - versions[t]) : 0;
      const size_t bucket = 1 + static_cast<size_t>(std::min<int64_t>(behind, kBuckets - 1));
      for (size_t at : {size_t{0}, bucket}) {
        sums[3 * at] += 1;
        sums[3 * at + 1] += std::abs(delta);
        sums[3 * at + 2] += kl;
      }
      abs_max = std::max(abs_max, std::abs(delta));
    }
  }
  sum_over(trainers, sums);
  const double n = std::max(1.0, sums[0]);
  metrics["mismatch_abs_mean"] = sums[1] / n;
  metrics["mismatch_abs_max"] = max_over(trainers, abs_max);
  metrics["mismatch_kl"] = sums[2] / n;
  if (!policy_version) return;
  for (size_t b = 0; b < kBuckets; ++b) {
    const double* at = &sums[3 * (b + 1)];
    if (at[0] == 0) continue;
    const std::string key = fmt::format("mismatch_by_versions/{}{}/", b, b + 1 == kBuckets ? "+" : "");
    metrics[key + "tokens"] = at[0];
    metrics[key + "abs_mean"] = at[1] / at[0];
    metrics[key + "kl"] = at[2] / at[0];
  }
}

// The on-policy shortcut for this step's samples: every rank's groups from the policy as it is now,
// nothing relayed, one mini-batch, and the sampler's log-prob for every response token. Agreed over
// the trainer ranks (one small sum), so they all take the same path.
bool step_is_on_policy(const RunConfig& c, const std::vector<SampleGroup>& groups, double n_relayed,
                       size_t n_minibatches, std::optional<int64_t> policy_version, Communicator* trainers) {
  if (!policy_version || !on_policy_shortcut_off(c).empty() || n_relayed > 0 || n_minibatches != 1) return false;
  bool here = true;
  for (const auto& g : groups) {
    for (const auto& s : g.samples) {
      here = here && s.rollout_logprobs.size() == s.response_ids.size() &&
             (s.segments.empty() || (s.single_version() && s.policy_version() == *policy_version));
    }
  }
  std::vector<double> off = {here ? 0.0 : 1.0};
  sum_over(trainers, off);
  return off[0] == 0;
}

// Per-sample response log-probs laid out like the scoring pass's: the sampler's own.
std::vector<std::vector<float>> rollout_logprobs_of(const std::vector<Sample>& samples) {
  std::vector<std::vector<float>> out;
  out.reserve(samples.size());
  for (const auto& s : samples) out.push_back(s.rollout_logprobs);
  return out;
}

}  // namespace

std::string on_policy_shortcut_off(const RunConfig& c) {
  if (!c.train.reuse_rollout_logprobs) return "--reuse-rollout-logprobs false";
  if (c.train.num_training_epoch != 1) return fmt::format("--num-training-epoch {}", c.train.num_training_epoch);
  if (c.train.train_minibatch_size < c.train.train_batch_size) {
    return fmt::format("--train-minibatch-size {} < --train-batch-size {} (several updates a step)", c.train.train_minibatch_size,
                       c.train.train_batch_size);
  }
  if (c.staleness.max_relay_episode != 0) return "the relay buffer (--max-relay-episode)";
  // A kept cache mixes the old weights' keys and values into the tokens sampled after a switch.
  if (c.staleness.partial_rollout && !c.staleness.recompute_kv) return "--partial-rollout with --partial-kv keep";
  if (!c.rollout.dtype.empty() && c.rollout.dtype != c.runtime.dtype) {
    return fmt::format("--rollout-dtype {} differs from --dtype {}", c.rollout.dtype, c.runtime.dtype);
  }
  if (!c.rollout.kv_cache_dtype.empty() && c.rollout.kv_cache_dtype != c.runtime.dtype) {
    return fmt::format("--kv-cache-dtype {} differs from --dtype {}", c.rollout.kv_cache_dtype, c.runtime.dtype);
  }
  return "";
}

std::string old_logprobs_plan(const RunConfig& c) {
  const std::string off = on_policy_shortcut_off(c);
  if (!off.empty()) return fmt::format("old log-probs: a scoring pass every step ({})", off);
  return "old log-probs: the sampler's on on-policy steps (every group from the current policy; the scoring pass is "
         "skipped), a scoring pass otherwise (--reuse-rollout-logprobs false: always)";
}

TrainerConfig rl_trainer_config(const RunConfig& c, int64_t total_steps) {
  TrainerConfig t;
  t.loss = c.algo.loss;
  if (t.loss.aggregation == LossAggregation::kSeqMeanTokenSumNorm) {
    t.loss.norm_constant = static_cast<double>(c.rollout.sampling.max_new_tokens);
  }
  t.optimizer = c.train.optimizer;
  if (t.optimizer.total_steps == 0) {  // the schedule spans the run's optimizer steps
    t.optimizer.total_steps = total_steps * (c.train.train_batch_size / c.train.train_minibatch_size) * c.train.num_training_epoch;
  }
  t.train_microbatch_size = c.train.train_microbatch_size;
  t.max_tokens_per_micro_batch = c.train.max_tokens_per_micro_batch;
  t.padding_free = c.train.padding_free;
  t.temperature = c.rollout.sampling.temperature > 0 ? c.rollout.sampling.temperature : 1.0;
  t.filter_truncated = c.algo.filter_truncated;
  if (c.algo.uses_critic() && c.algo.ppo.kl_in_reward) t.loss.kl_coef = 0;  // the KL is in the token rewards instead
  return t;
}

TrainerConfig critic_trainer_config(const RunConfig& c, int64_t total_steps) {
  TrainerConfig t = rl_trainer_config(c, total_steps);
  t.loss = PolicyLossConfig{};
  t.optimizer.lr = c.train.critic.lr;
  t.optimizer.warmup_steps = c.train.critic.warmup_steps;
  t.value_clip = c.algo.ppo.value_clip;
  return t;
}

PolicyUpdate update_policy(Trainer& trainer, const RunConfig& c, const std::vector<SampleGroup>& groups,
                           Communicator* trainers, const std::vector<SampleGroup>& relayed,
                           std::optional<int64_t> policy_version, Trainer* critic) {
  RLCPP_CHECK((critic != nullptr) == c.algo.uses_critic(), "--advantage-estimator {} {} a critic",
              advantage_estimators().name(c.algo.advantage.estimator), critic != nullptr ? "given" : "without");
  PolicyUpdate out;
  std::vector<Sample> samples;
  for (const auto* set : {&groups, &relayed}) {
    for (const auto& g : *set) {
      for (const auto& s : g.samples) {
        if (!s.response_ids.empty()) samples.push_back(s);
      }
    }
  }
  std::vector<double> n_relayed = {static_cast<double>(relayed.size())};
  sum_over(trainers, n_relayed);
  if (c.algo.advantage.estimator == AdvantageEstimator::kReinforcePpBaseline) {
    whiten_advantages(samples, c.algo.advantage.whiten_eps, trainers);
  }
  const size_t per_minibatch = static_cast<size_t>(c.train.train_minibatch_size * c.rollout.num_generations);
  const size_t n_minibatches_here = (samples.size() + per_minibatch - 1) / per_minibatch;
  // The step's shape over every rank: samples, and the most mini-batches any rank has.
  size_t n_minibatches = n_minibatches_here;
  double all_samples = static_cast<double>(samples.size());
  if (trainers != nullptr && trainers->size() > 1) {
    std::vector<double> shape(static_cast<size_t>(trainers->size()) + 1, 0.0);
    shape[static_cast<size_t>(trainers->rank())] = static_cast<double>(n_minibatches_here);
    shape.back() = all_samples;
    sum_over(trainers, shape);
    n_minibatches = static_cast<size_t>(*std::max_element(shape.begin(), shape.end() - 1));
    all_samples = shape.back();
  }
  if (all_samples == 0) return out;
  out.trained = true;

  auto t0 = Clock::now();
  // On policy, the old log-probs are the sampler's (equal to a scoring pass's within 1e-5: the
  // engine-vs-trainer invariant), and the first update's forward gives the entropy and mismatch.
  const bool on_policy = step_is_on_policy(c, groups, n_relayed[0], n_minibatches, policy_version, trainers);
  double entropy = 0;
  const auto old_logprobs = on_policy ? rollout_logprobs_of(samples) : trainer.policy_logprobs(samples, &entropy);
  const bool has_reference = c.algo.loss.kl_coef != 0;
  const auto ref_logprobs = has_reference ? trainer.reference_logprobs(samples) : std::vector<std::vector<float>>{};
  if (!on_policy) add_mismatch(out.metrics, samples, old_logprobs, trainers, policy_version);
  // PPO: the critic's values before any update, GAE's advantages (whitened over the step's tokens,
  // as verl's) and the returns the critic regresses to.
  std::vector<std::vector<float>> old_values;
  std::vector<std::vector<double>> returns;
  if (critic != nullptr) {
    old_values = critic->response_values(samples);
    const double kl_in_reward = c.algo.ppo.kl_in_reward ? c.algo.loss.kl_coef : 0.0;
    auto targets = critic_targets(samples, old_values, token_rewards(samples, old_logprobs, ref_logprobs, kl_in_reward),
                                  c.algo.ppo);
    returns = std::move(targets.returns);
    std::vector<double> sums = {targets.metrics["critic_tokens"], targets.metrics["critic_value_sum"],
                                targets.metrics["critic_return_sum"], targets.metrics["critic_advantage_sum"]};
    sum_over(trainers, sums);
    const double n = std::max(1.0, sums[0]);
    out.metrics["critic/old_value_mean"] = sums[1] / n;
    out.metrics["critic/gae_return_mean"] = sums[2] / n;
    out.metrics["critic/gae_advantage_mean"] = sums[3] / n;
    whiten_advantages(samples, c.algo.advantage.whiten_eps, trainers);
  }
  out.logprob_seconds = seconds_since(t0);  // the scoring passes (and the critic's values)
  t0 = Clock::now();
  // The old log-probs stay those computed above, before any update, through every epoch. The first
  // pass takes the samples in order; each later pass reshuffles them into new mini-batches, seeded by
  // (seed, optimizer steps so far, rank): deterministic, and the same again on an exact resume.
  std::map<std::string, double> sums;
  int64_t n_updates = 0;
  std::vector<size_t> order(samples.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::mt19937_64 rng(c.runtime.seed ^ (0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(trainer.n_steps() + 1)) ^
                      (static_cast<uint64_t>(trainers != nullptr ? trainers->rank() : 0) << 48));
  for (int64_t epoch = 0; epoch < c.train.num_training_epoch; ++epoch) {
    if (epoch > 0) {
      for (size_t k = order.size(); k > 1; --k) std::swap(order[k - 1], order[rng() % k]);  // Fisher-Yates
    }
    for (size_t m = 0; m < n_minibatches; ++m) {
      const size_t begin = std::min(samples.size(), m * per_minibatch);
      const size_t end = std::min(samples.size(), begin + per_minibatch);
      PolicyMiniBatch mb;
      for (size_t k = begin; k < end; ++k) {
        mb.samples.push_back(samples[order[k]]);
        mb.old_logprobs.push_back(old_logprobs[order[k]]);
        if (has_reference) mb.ref_logprobs.push_back(ref_logprobs[order[k]]);
      }
      // The skip threshold decides whole samples first, so the counts below leave them out. Before
      // the first update the policy is the old one (every ratio 1): nothing to decide.
      if (c.algo.loss.skip_threshold > 0 && n_updates > 0) mb.skipped = trainer.skipped_samples(mb.samples, mb.old_logprobs);
      double skipped = 0;
      for (auto k : mb.skipped) skipped += k;
      std::vector<double> counts = {trainer.loss_tokens(mb.samples, mb.skipped),
                                    static_cast<double>(mb.samples.size()) - skipped};
      sum_over(trainers, counts);
      mb.global_tokens = std::max(1.0, counts[0]);
      mb.global_samples = std::max(1.0, counts[1]);
      mb.score = on_policy;
      const auto stepped = trainer.step(mb);
      for (const auto& [k, v] : stepped.values) sums[k] += v;
      if (critic != nullptr) {  // the same samples, one optimizer step of the critic
        ValueMiniBatch vmb;
        for (size_t k = begin; k < end; ++k) {
          vmb.samples.push_back(samples[order[k]]);
          vmb.old_values.push_back(old_values[order[k]]);
          vmb.returns.push_back(returns[order[k]]);
        }
        std::vector<double> tokens = {0.0};
        for (const auto& s : vmb.samples) tokens[0] += static_cast<double>(s.trained_tokens());
        sum_over(trainers, tokens);
        vmb.global_tokens = std::max(1.0, tokens[0]);
        for (const auto& [k, v] : critic->value_step(vmb).values) {
          if (k != "n_tokens") sums["critic/" + k] += v;
        }
      }
      if (on_policy) add_mismatch(out.metrics, mb.samples, stepped.logprobs, trainers, policy_version);
      ++n_updates;
    }
  }
  synchronize_device(c.runtime.device);  // the optimizer's last step may still be queued on a GPU
  out.train_seconds = seconds_since(t0);
  for (const auto& [k, v] : sums) {
    const bool counted = std::find(kCounted.begin(), kCounted.end(), k) != kCounted.end();
    out.metrics[k] = counted ? v : v / static_cast<double>(n_updates);
  }
  if (!on_policy) out.metrics["entropy"] = entropy;  // else the update's own (a token mean, as the pass's)
  out.metrics["old_logprobs_reused"] = on_policy ? 1.0 : 0.0;
  out.metrics["optimizer_updates"] = static_cast<double>(n_updates);
  out.metrics["relayed_groups"] = n_relayed[0];
  if (trainers != nullptr && trainers->size() > 1) {
    // The whole step's figures: losses summed over ranks, per-token means weighted by tokens.
    const double tokens = trainer.loss_tokens(samples);
    auto keys = [&](std::vector<std::string> base, const std::vector<std::string>& critic_keys) {
      if (critic != nullptr) base.insert(base.end(), critic_keys.begin(), critic_keys.end());
      return base;
    };
    const auto summed = keys(kSummed, kCriticSummed), token_means = keys(kTokenMeans, kCriticTokenMeans);
    std::vector<double> values;
    for (const auto& k : summed) values.push_back(out.metrics[k]);
    for (const auto& k : token_means) values.push_back(out.metrics[k] * tokens);
    values.push_back(tokens);
    sum_over(trainers, values);
    size_t i = 0;
    for (const auto& k : summed) out.metrics[k] = values[i++];
    for (const auto& k : token_means) out.metrics[k] = values[i++] / std::max(1.0, values.back());
  }
  if (const auto sq = out.metrics.find("adv_sq_mean"); sq != out.metrics.end()) {
    // The advantages' std over the step's trained tokens on every trainer, from their token means.
    out.metrics["adv_std"] = std::sqrt(std::max(0.0, sq->second - std::pow(out.metrics["adv_mean"], 2)));
    out.metrics.erase(sq);
  }
  return out;
}

void check_nonfinite(const TrainOptions& train, const PolicyUpdate& update, int64_t step, int64_t& consecutive) {
  const auto it = update.metrics.find("nonfinite");
  if (it == update.metrics.end() || it->second == 0) {
    consecutive = 0;
    return;
  }
  ++consecutive;
  spdlog::warn("step {}: {} of {} optimizer updates had a non-finite gradient and were skipped ({} such step(s) in a row)",
               step, it->second, update.metrics.at("optimizer_updates"), consecutive);
  if (consecutive >= train.max_nonfinite_steps) {
    throw_user_error("step {}: {} steps in a row had a non-finite loss or gradient (--max-nonfinite-steps {}); the run "
                     "stops with its last checkpoint intact. Lower -lr, check the data and the reward, or resume from "
                     "the checkpoint", step, consecutive, train.max_nonfinite_steps);
  }
}

}  // namespace rlcpp
