#include "algo/policy_loss.h"

#include "util/error.h"
#include "util/torch_format.h"

namespace rlcpp {

namespace {

// Log-ratios are clamped to this before exp: exp(20) ≈ 4.9e8 is finite in fp16/bf16/fp32 alike.
constexpr double kMaxLogRatio = 20.0;

// x where `keep`, 0 elsewhere, by selection: a NaN or inf at a masked position cannot leak into
// the result (x * mask would turn it into NaN), nor into the gradient of x.
torch::Tensor masked(const torch::Tensor& x, const torch::Tensor& keep) { return torch::where(keep, x, torch::zeros_like(x)); }

}  // namespace

const EnumTable<LossAggregation>& loss_aggregations() {
  static const EnumTable<LossAggregation> table(
      "loss aggregation",
      {{LossAggregation::kTokenLevel, "token_level", "token losses summed over the mini-batch / its response tokens (DAPO)"},
       {LossAggregation::kSampleLevel, "sample_level", "each sample's token mean, averaged over samples (GRPO paper)"},
       {LossAggregation::kSeqMeanTokenSumNorm, "seq_mean_token_sum_norm",
        "each sample's token sum / a constant (max new tokens), averaged over samples (Dr.GRPO)"}});
  return table;
}

const EnumTable<KlEstimator>& kl_estimators() {
  static const EnumTable<KlEstimator> table(
      "KL estimator", {{KlEstimator::kK1, "k1", "log(pi/pi_ref): unbiased, high variance"},
                       {KlEstimator::kK2, "k2", "(log(pi/pi_ref))^2 / 2"},
                       {KlEstimator::kK3, "k3", "pi_ref/pi - log(pi_ref/pi) - 1: unbiased, non-negative (GRPO)",
                        {"low_var_kl"}}});
  return table;
}

const EnumTable<ImportanceLevel>& importance_levels() {
  static const EnumTable<ImportanceLevel> table(
      "importance level", {{ImportanceLevel::kToken, "token", "one ratio per token"},
                           {ImportanceLevel::kSequence, "sequence",
                            "one ratio per sample: exp(mean token log-ratio) for the loss (GSPO), exp(sum) for TIS"}});
  return table;
}

const EnumTable<SkipMode>& skip_modes() {
  static const EnumTable<SkipMode> table(
      "skip mode", {{SkipMode::kTokenMax, "token_max", "a sample whose largest token ratio exceeds the threshold"},
                    {SkipMode::kSequenceGeoMean, "sequence_geomean",
                     "a sample whose geometric-mean ratio exp(mean log-ratio) exceeds the threshold"}});
  return table;
}

torch::Tensor kl_penalty(const torch::Tensor& logprobs, const torch::Tensor& ref_logprobs, KlEstimator estimator,
                         double clamp) {
  auto diff = logprobs - ref_logprobs;
  switch (estimator) {
    case KlEstimator::kK1: return diff;
    case KlEstimator::kK2: return 0.5 * diff.pow(2);
    case KlEstimator::kK3: {
      // ref - logp, clamped before exp (as verl does): past ~88 the fp32 exp overflows, and the
      // output clamp alone would leave an inf whose gradient is NaN.
      auto log_ratio = (-diff).clamp(-kMaxLogRatio, kMaxLogRatio);
      return (log_ratio.exp() - log_ratio - 1).clamp(-clamp, clamp);
    }
  }
  return diff;
}

namespace {

// Aggregates per-token values x [B, T] over `mask` as the configured mode does, with global normalisers.
torch::Tensor aggregate(const torch::Tensor& x, const torch::Tensor& mask, const PolicyLossInputs& in,
                        const PolicyLossConfig& config) {
  switch (config.aggregation) {
    case LossAggregation::kTokenLevel:
      return masked(x, mask).sum() / in.global_tokens;
    case LossAggregation::kSampleLevel: {
      auto per_sample = masked(x, mask).sum(1) / mask.sum(1).clamp_min(1);  // a fully masked sample adds 0
      return per_sample.sum() / in.global_samples;
    }
    case LossAggregation::kSeqMeanTokenSumNorm:
      return (masked(x, mask).sum(1) / config.norm_constant).sum() / in.global_samples;
  }
  return x.sum();
}

// Per sample [B, 1]: the masked sum of x over its tokens, and its token count (at least 1).
torch::Tensor sample_sum(const torch::Tensor& x, const torch::Tensor& mask) { return masked(x, mask).sum(1, true); }
torch::Tensor sample_tokens(const torch::Tensor& mask) { return mask.sum(1, true).clamp_min(1).to(torch::kFloat64); }

}  // namespace

torch::Tensor skipped_samples(const torch::Tensor& logprobs, const torch::Tensor& old_logprobs, const torch::Tensor& mask,
                              const PolicyLossConfig& config) {
  torch::NoGradGuard no_grad;
  auto keep = mask.gt(0);
  auto none = torch::zeros({keep.size(0)}, keep.options());
  if (config.skip_threshold <= 0) return none;
  auto log_ratio = masked(logprobs.detach().to(torch::kFloat64) - old_logprobs.to(torch::kFloat64), keep);
  torch::Tensor score;  // the compared log-ratio per sample
  switch (config.skip_mode) {
    case SkipMode::kTokenMax:
      score = torch::where(keep, log_ratio, torch::full_like(log_ratio, -INFINITY)).amax(1);
      break;
    case SkipMode::kSequenceGeoMean:
      score = (sample_sum(log_ratio, keep) / sample_tokens(keep)).squeeze(1);
      break;
  }
  return score.gt(std::log(config.skip_threshold)).logical_and(keep.any(1));
}

PolicyLossOutput policy_loss(const PolicyLossInputs& in, const PolicyLossConfig& config) {
  RLCPP_CHECK(in.logprobs.dim() == 2 && in.old_logprobs.sizes() == in.logprobs.sizes() &&
                  in.mask.sizes() == in.logprobs.sizes(),
              "logprobs {}, old_logprobs {}, mask {} must all be [B, T]", in.logprobs.sizes(),
              in.old_logprobs.sizes(), in.mask.sizes());
  RLCPP_CHECK(config.aggregation != LossAggregation::kTokenLevel || in.global_tokens > 0,
              "token-level loss needs the mini-batch's global token count, got {}", in.global_tokens);
  RLCPP_CHECK(config.aggregation == LossAggregation::kTokenLevel || in.global_samples > 0,
              "{} loss needs the mini-batch's global sample count, got {}", loss_aggregations().name(config.aggregation),
              in.global_samples);
  const auto dtype = in.logprobs.scalar_type();
  // Every input is zeroed outside the mask first (by selection), so nothing at a padded position —
  // a NaN from a padded logit, an inf — reaches the loss, its metrics or its gradient.
  auto mask = in.mask.gt(0);
  auto logprobs = masked(in.logprobs, mask);
  auto adv = in.advantages.to(dtype);
  if (adv.dim() == 1) adv = adv.unsqueeze(1).expand_as(in.logprobs);  // per sample, broadcast to tokens
  adv = masked(adv, mask);
  auto old = masked(in.old_logprobs.detach().to(dtype), mask);
  torch::Tensor log_ratio;
  switch (config.ratio_level) {
    case ImportanceLevel::kToken: log_ratio = logprobs - old; break;
    case ImportanceLevel::kSequence: {
      // GSPO: every token of a sample carries the sample's ratio exp(mean log-ratio) as its value,
      // and the gradient of its own log-prob scaled by it (logp - sg(logp) + sg(sequence log-ratio)).
      auto sequence = (sample_sum(logprobs - old, mask) / sample_tokens(mask).to(dtype)).detach();
      log_ratio = logprobs - logprobs.detach() + sequence.expand_as(logprobs);
      break;
    }
  }
  log_ratio = masked(log_ratio.clamp(-kMaxLogRatio, kMaxLogRatio), mask);
  auto ratio = log_ratio.exp();

  // Clipped surrogate: -min(r A, clip(r) A) = max(-r A, -clip(r) A), then the dual-clip cap.
  auto pg1 = -adv * ratio;
  auto pg2 = -adv * ratio.clamp(1.0 - config.clip_eps_low, 1.0 + config.clip_eps_high);
  auto pg = torch::max(pg1, pg2);
  torch::Tensor dual_clipped;
  if (config.clip_ratio_c) {
    RLCPP_CHECK(*config.clip_ratio_c > 1.0, "clip_ratio_c must exceed 1, got {}", *config.clip_ratio_c);
    auto pg3 = -adv * *config.clip_ratio_c;
    dual_clipped = adv.lt(0).logical_and(pg3.lt(pg));
    pg = torch::where(adv.lt(0), torch::min(pg, pg3), pg);
  }
  torch::Tensor tis_weight, tis_clipped;
  if (config.tis_cap > 0) {
    // Truncated importance sampling: the behaviour policy is the sampler's, so each token (or
    // sample) is weighted by min(π_old / π_rollout, cap), a constant of the gradient.
    RLCPP_CHECK(in.rollout_logprobs.defined(), "truncated importance sampling needs the rollout log-probs");
    torch::NoGradGuard no_grad;
    auto gap = masked(old - in.rollout_logprobs.to(dtype), mask);
    if (config.tis_level == ImportanceLevel::kSequence) gap = sample_sum(gap, mask).expand_as(gap);
    auto weight = gap.clamp(-kMaxLogRatio, kMaxLogRatio).exp();
    tis_clipped = weight.gt(config.tis_cap);
    tis_weight = weight.clamp_max(config.tis_cap);
  }
  if (tis_weight.defined()) pg = pg * tis_weight;
  torch::Tensor is_masked;
  if (config.masks_by_ratio()) {
    RLCPP_CHECK(in.rollout_logprobs.defined(), "masked importance sampling needs the rollout log-probs");
    torch::NoGradGuard no_grad;
    auto gap = masked(old - in.rollout_logprobs.to(dtype), mask);
    if (config.is_mask_level == ImportanceLevel::kSequence) {
      gap = (sample_sum(gap, mask) / sample_tokens(mask).to(dtype)).expand_as(gap);
    }
    // Compared in log space: the band's ends as log-ratios (a low of 0 leaves the floor open).
    const double low = config.is_mask_low > 0 ? std::log(config.is_mask_low) : -INFINITY;
    is_masked = gap.lt(low).logical_or(gap.gt(std::log(config.is_mask_high))).logical_and(mask);
  }
  if (is_masked.defined()) pg = masked(pg, is_masked.logical_not());
  auto pg_loss = aggregate(pg, mask, in, config);
  auto loss = pg_loss;
  torch::Tensor kl;
  if (config.kl_coef != 0) {
    RLCPP_CHECK(in.ref_logprobs.defined(), "kl_coef {} needs reference log-probs", config.kl_coef);
    kl = kl_penalty(logprobs, masked(in.ref_logprobs.detach().to(dtype), mask), config.kl_estimator, config.kl_clamp);
    loss = loss + config.kl_coef * aggregate(kl, mask, in, config);
  }
  if (config.entropy_coef != 0) {
    RLCPP_CHECK(in.entropy.defined(), "entropy_coef {} needs the entropy", config.entropy_coef);
    loss = loss - config.entropy_coef * aggregate(masked(in.entropy.to(dtype), mask), mask, in, config);
  }

  PolicyLossOutput out;
  out.loss = loss;
  torch::NoGradGuard no_grad;
  const double n_tokens = mask.sum().item<double>();
  auto masked_mean = [&](const torch::Tensor& x) {
    return n_tokens > 0 ? masked(x.to(dtype), mask).sum().item<double>() / n_tokens : 0.0;
  };
  auto& m = out.metrics;
  m["loss"] = loss.item<double>();
  m["pg_loss"] = pg_loss.item<double>();
  m["kl"] = kl.defined() ? masked_mean(kl) : 0.0;
  m["entropy"] = in.entropy.defined() ? masked_mean(in.entropy) : 0.0;
  m["clip_frac_low"] = masked_mean(ratio.lt(1.0 - config.clip_eps_low).logical_and(adv.lt(0)));
  m["clip_frac_high"] = masked_mean(ratio.gt(1.0 + config.clip_eps_high).logical_and(adv.gt(0)));
  m["clip_frac_dual"] = dual_clipped.defined() ? masked_mean(dual_clipped) : 0.0;
  m["ratio_mean"] = masked_mean(ratio);
  m["ratio_max"] = n_tokens > 0 ? masked(ratio, mask).max().item<double>() : 0.0;
  m["adv_mean"] = masked_mean(adv);
  m["adv_sq_mean"] = masked_mean(adv.pow(2));
  m["adv_std"] = n_tokens > 0 ? std::sqrt(std::max(0.0, m["adv_sq_mean"] - std::pow(m["adv_mean"], 2))) : 0.0;
  m["tis_weight_mean"] = tis_weight.defined() ? masked_mean(tis_weight) : 0.0;
  m["tis_clip_frac"] = tis_clipped.defined() ? masked_mean(tis_clipped) : 0.0;
  m["is_masked_frac"] = is_masked.defined() ? masked_mean(is_masked) : 0.0;
  m["n_tokens"] = n_tokens;
  return out;
}

}  // namespace rlcpp
