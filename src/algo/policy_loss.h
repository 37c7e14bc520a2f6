// The policy loss: clipped surrogate (asymmetric clip, optional dual clip), KL to a reference
// policy (k1/k2/k3), entropy bonus, skip threshold and truncated importance sampling, aggregated so
// that gradient accumulation is exact: every normaliser is a global count passed in, never a
// statistic of the micro-batch at hand.
#pragma once

#include <torch/types.h>

#include <map>
#include <optional>
#include <string>

#include "util/enum_table.h"

namespace rlcpp {

enum class LossAggregation {
  kTokenLevel,          // Σ token losses / response tokens of the whole mini-batch (all ranks)
  kSampleLevel,         // Σ over samples of (sample's token mean) / samples of the mini-batch
  kSeqMeanTokenSumNorm  // Σ over samples of (sample's token sum / constant) / samples (Dr.GRPO)
};
enum class KlEstimator { kK1, kK2, kK3 };
// Where an importance ratio is taken: per token, or per sequence as the length-normalised sum of
// token log-ratios (GSPO's ratio; for TIS, the product of the token ratios).
enum class ImportanceLevel { kToken, kSequence };
// Which ratio of a sample the skip threshold compares: its largest token ratio, or the geometric
// mean of its token ratios (exp of the mean log-ratio).
enum class SkipMode { kTokenMax, kSequenceGeoMean };

const EnumTable<LossAggregation>& loss_aggregations();
const EnumTable<KlEstimator>& kl_estimators();
const EnumTable<ImportanceLevel>& importance_levels();
const EnumTable<SkipMode>& skip_modes();

struct PolicyLossConfig {
  ImportanceLevel ratio_level = ImportanceLevel::kToken;  // kSequence: GSPO's sequence ratio
  double clip_eps_low = 0.2;               // ratio floor 1 - eps_low
  double clip_eps_high = 0.2;              // ratio ceiling 1 + eps_high (DAPO: 0.28)
  std::optional<double> clip_ratio_c;      // dual clip for negative advantages (> 1, e.g. 3); off when unset
  LossAggregation aggregation = LossAggregation::kTokenLevel;
  double norm_constant = 1.0;              // kSeqMeanTokenSumNorm divisor (default: max_new_tokens)
  double kl_coef = 0.0;                    // β; 0: no reference model needed
  KlEstimator kl_estimator = KlEstimator::kK3;
  double kl_clamp = 10.0;                  // |k3| cap
  double entropy_coef = 0.0;               // entropy bonus (subtracted from the loss)
  double skip_threshold = 0.0;             // a sample whose ratio (skip_mode) exceeds it is left out (0: off)
  SkipMode skip_mode = SkipMode::kTokenMax;
  double tis_cap = 0.0;                    // truncated IS weight min(exp(old - rollout), cap) (0: off)
  ImportanceLevel tis_level = ImportanceLevel::kToken;  // per token, or one weight per sequence
  // Masked importance sampling (IcePop; verl's rollout_is mode "mask"): a token (or, at the sequence
  // level, every token of a sample, by its geometric-mean ratio exp(mean(old - rollout))) whose
  // behaviour ratio π_old / π_rollout falls outside [is_mask_low, is_mask_high] adds nothing to
  // the loss; the denominators keep it. Off while is_mask_high is 0.
  double is_mask_low = 0.0;
  double is_mask_high = 0.0;
  ImportanceLevel is_mask_level = ImportanceLevel::kToken;

  bool masks_by_ratio() const { return is_mask_high > 0; }
  // Whether the loss needs the sampler's log-probs (TIS or the masked band).
  bool uses_rollout_logprobs() const { return tis_cap > 0 || masks_by_ratio(); }
};

struct PolicyLossInputs {
  torch::Tensor logprobs;          // [B, T] current policy, with grad
  torch::Tensor old_logprobs;      // [B, T] behaviour policy (recomputed by the trainer), no grad
  torch::Tensor advantages;        // [B] or [B, T]
  torch::Tensor mask;              // [B, T] 1 on response tokens that count (skipped samples already out)
  torch::Tensor ref_logprobs;      // [B, T] when kl_coef > 0
  torch::Tensor rollout_logprobs;  // [B, T] the sampler's own, when uses_rollout_logprobs()
  torch::Tensor entropy;           // [B, T] when reported or entropy_coef > 0 (with grad for the bonus)
  double global_tokens = 0;        // response tokens in the whole mini-batch (token level)
  double global_samples = 0;       // samples in the whole mini-batch (sample level, seq-mean-token-sum-norm)
};

struct PolicyLossOutput {
  torch::Tensor loss;  // scalar, this micro-batch's share of the mini-batch loss
  // loss, pg_loss, kl, entropy, clip_frac_low, clip_frac_high, clip_frac_dual, ratio_mean, ratio_max,
  // adv_mean, adv_sq_mean, adv_std, tis_weight_mean, tis_clip_frac, is_masked_frac, n_tokens (sums and
  // means over this micro-batch's counted tokens; the trainer's step takes adv_std over its whole
  // mini-batch from the two means)
  std::map<std::string, double> metrics;
};

PolicyLossOutput policy_loss(const PolicyLossInputs& in, const PolicyLossConfig& config);

// The samples [B] (bool) the skip threshold leaves out, from log-probs [B, T] under the current and
// the old policy over `mask`; all false when skip_threshold is 0. A sample is decided as a whole,
// before its loss, so that the mini-batch's denominators can leave it out on every rank.
torch::Tensor skipped_samples(const torch::Tensor& logprobs, const torch::Tensor& old_logprobs, const torch::Tensor& mask,
                              const PolicyLossConfig& config);

// The three KL estimators per token (no aggregation): k1 = logp - ref, k2 = ½(logp - ref)²,
// k3 = exp(ref - logp) - (ref - logp) - 1 clamped to ±clamp.
torch::Tensor kl_penalty(const torch::Tensor& logprobs, const torch::Tensor& ref_logprobs, KlEstimator estimator,
                         double clamp);

}  // namespace rlcpp
