// The RL algorithms against hand-computed values, gradient-accumulation exactness, and the
// gradient of the clipped loss (zero exactly in the clipped regions).
#include <torch/torch.h>

#include <cmath>

#include "algo/advantages.h"
#include "algo/dapo.h"
#include "algo/policy_loss.h"
#include "algo/preference_loss.h"
#include "algo/presets.h"
#include "algo/value_loss.h"
#include "test_util.h"
#include "util/error.h"

using namespace rlcpp;

namespace {
torch::Tensor t64(std::vector<double> v) { return torch::tensor(v, torch::kFloat64); }
void expect_values(const torch::Tensor& got, std::vector<double> expected, double tol = 1e-12) {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(expected.size()));
  for (size_t k = 0; k < expected.size(); ++k) EXPECT_NEAR(got[k].item<double>(), expected[k], tol) << "index " << k;
}
PolicyLossInputs inputs(std::vector<double> logp, std::vector<double> old, std::vector<double> adv, int64_t b, int64_t t) {
  PolicyLossInputs in;
  in.logprobs = t64(logp).view({b, t}).requires_grad_();
  in.old_logprobs = t64(old).view({b, t});
  in.advantages = t64(adv);
  in.mask = torch::ones({b, t}, torch::kFloat64);
  in.global_tokens = static_cast<double>(b * t);
  in.global_samples = static_cast<double>(b);
  return in;
}
}  // namespace

TEST(Advantages, HandComputed) {
  AdvantageConfig grpo;
  const double s = std::sqrt(1.0 / 3.0);  // unbiased std of {1, 0, 0, 1}
  expect_values(compute_advantages(t64({1, 0, 0, 1}), 4, grpo), {0.5 / (s + 1e-4), -0.5 / (s + 1e-4), -0.5 / (s + 1e-4), 0.5 / (s + 1e-4)});
  grpo.std_unbiased = false;  // population std 0.5
  expect_values(compute_advantages(t64({1, 0, 0, 1}), 4, grpo), {0.5 / 0.5001, -0.5 / 0.5001, -0.5 / 0.5001, 0.5 / 0.5001});
  grpo.std_unbiased = true;
  expect_values(compute_advantages(t64({2, 2, 2, 5, 5, 5}), 3, grpo), {0, 0, 0, 0, 0, 0});  // identical rewards
  expect_values(compute_advantages(t64({3, -1}), 1, grpo), {0, 0});                          // G = 1
  AdvantageConfig dr{AdvantageEstimator::kDrGrpo};
  expect_values(compute_advantages(t64({1, 0, 0, 1, 3, 1}), 3, dr), {2.0 / 3, -1.0 / 3, -1.0 / 3, -2.0 / 3, 4.0 / 3, -2.0 / 3});
  AdvantageConfig rloo{AdvantageEstimator::kRloo};
  // Leave-one-out by hand: r_i - mean of the others.
  expect_values(compute_advantages(t64({1, 0, 0, 1}), 4, rloo), {1 - 1.0 / 3, 0 - 2.0 / 3, 0 - 2.0 / 3, 1 - 1.0 / 3});
  expect_values(compute_advantages(t64({7}), 1, rloo), {0});
  AdvantageConfig rpp{AdvantageEstimator::kReinforcePpBaseline};
  // REINFORCE++ here: r - group mean only; the whitening is over the step's tokens (below).
  expect_values(compute_advantages(t64({1, 0, 3, 3}), 2, rpp), {0.5, -0.5, 0, 0});
  EXPECT_THROW_MSG(advantage_estimators().parse("ppo", "--adv"), UserError, "--adv", "grpo, dr_grpo, rloo");
}

TEST(Advantages, ReinforcePpWhitensOverTokens) {
  // Advantages {0.5, -0.5, 0} over 1, 3 and 2 tokens: the token values are
  // {0.5, -0.5, -0.5, -0.5, 0, 0}: mean -1/6, Bessel variance over 6 tokens.
  const double mean = -1.0 / 6;
  const double var = (std::pow(0.5 - mean, 2) + 3 * std::pow(-0.5 - mean, 2) + 2 * std::pow(0 - mean, 2)) / 5;
  const double scale = 1 / std::sqrt(var + 1e-8);
  expect_values(whiten_over_tokens(t64({0.5, -0.5, 0}), t64({1, 3, 2}), 1e-8),
                {(0.5 - mean) * scale, (-0.5 - mean) * scale, (0 - mean) * scale});
  // A constant batch: 0 / sqrt(1e-8), not a division by zero; one token: zeros.
  expect_values(whiten_over_tokens(t64({2, 2}), t64({3, 4}), 1e-8), {0, 0});
  expect_values(whiten_over_tokens(t64({2}), t64({1}), 1e-8), {0});
}

TEST(PolicyLoss, ClippedSurrogateHandComputed) {
  PolicyLossConfig config;  // clip 0.2 / 0.2, token level
  // Ratios 1.3 and 0.5, advantage +1: token 1 clipped to 1.2, token 2 unclipped → (-1.2 - 0.5) / 2.
  auto pos = policy_loss(inputs({std::log(1.3), std::log(0.5)}, {0, 0}, {1.0}, 1, 2), config);
  EXPECT_NEAR(pos.loss.item<double>(), -0.85, 1e-12);
  EXPECT_DOUBLE_EQ(pos.metrics["clip_frac_high"], 0.5);
  EXPECT_DOUBLE_EQ(pos.metrics["clip_frac_low"], 0.0);
  EXPECT_NEAR(pos.metrics["ratio_max"], 1.3, 1e-12);
  // Advantage -1: token 1 unclipped (1.3), token 2 clipped at 0.8 → (1.3 + 0.8) / 2.
  auto neg = policy_loss(inputs({std::log(1.3), std::log(0.5)}, {0, 0}, {-1.0}, 1, 2), config);
  EXPECT_NEAR(neg.loss.item<double>(), 1.05, 1e-12);
  EXPECT_DOUBLE_EQ(neg.metrics["clip_frac_low"], 0.5);
  // Dual clip c = 1.25 caps the negative-advantage loss at 1.25.
  config.clip_ratio_c = 1.25;
  auto dual = policy_loss(inputs({std::log(1.3), std::log(0.5)}, {0, 0}, {-1.0}, 1, 2), config);
  EXPECT_NEAR(dual.loss.item<double>(), (1.25 + 0.8) / 2, 1e-12);
  EXPECT_DOUBLE_EQ(dual.metrics["clip_frac_dual"], 0.5);
  // Asymmetric clip (DAPO 0.28): ratio 1.3 with A = +1 is clipped at 1.28.
  PolicyLossConfig dapo;
  dapo.clip_eps_high = 0.28;
  EXPECT_NEAR(policy_loss(inputs({std::log(1.3)}, {0}, {1.0}, 1, 1), dapo).loss.item<double>(), -1.28, 1e-12);
  // Ratio exactly at 1 ± eps: both branches agree, so the clip changes nothing there.
  EXPECT_NEAR(policy_loss(inputs({std::log(1.2)}, {0}, {1.0}, 1, 1), config).loss.item<double>(), -1.2, 1e-12);
  EXPECT_NEAR(policy_loss(inputs({std::log(0.8)}, {0}, {-1.0}, 1, 1), config).loss.item<double>(), 0.8, 1e-12);
  // Ratio exactly 1: loss -A, in every mode.
  EXPECT_NEAR(policy_loss(inputs({-0.7}, {-0.7}, {2.0}, 1, 1), config).loss.item<double>(), -2.0, 1e-12);
}

TEST(PolicyLoss, AggregationModesHandComputed) {
  // Sample 0: ratios 1, 1 (A = 1) → token losses -1, -1. Sample 1: ratio 1 (A = -2), second token masked.
  auto in = inputs({0, 0, 0, 0}, {0, 0, 0, 0}, {1.0, -2.0}, 2, 2);
  in.mask = t64({1, 1, 1, 0}).view({2, 2});
  in.global_tokens = 3;
  PolicyLossConfig config;
  EXPECT_NEAR(policy_loss(in, config).loss.item<double>(), (-1 - 1 + 2) / 3.0, 1e-12);
  config.aggregation = LossAggregation::kSampleLevel;
  EXPECT_NEAR(policy_loss(in, config).loss.item<double>(), (-1.0 + 2.0) / 2, 1e-12);
  config.aggregation = LossAggregation::kSeqMeanTokenSumNorm;
  config.norm_constant = 8;
  EXPECT_NEAR(policy_loss(in, config).loss.item<double>(), (-2.0 / 8 + 2.0 / 8) / 2, 1e-12);
  // All responses masked: a zero loss, no NaN, in every mode.
  in.mask = torch::zeros({2, 2}, torch::kFloat64);
  for (auto mode : {LossAggregation::kTokenLevel, LossAggregation::kSampleLevel, LossAggregation::kSeqMeanTokenSumNorm}) {
    config.aggregation = mode;
    auto out = policy_loss(in, config);
    EXPECT_EQ(out.loss.item<double>(), 0.0);
    EXPECT_EQ(out.metrics["n_tokens"], 0.0);
  }
}

TEST(PolicyLoss, KlEstimatorsAndEntropy) {
  auto logp = t64({std::log(0.5)}), ref = t64({std::log(0.25)});
  const double d = std::log(2.0);  // logp - ref
  EXPECT_NEAR(kl_penalty(logp, ref, KlEstimator::kK1, 10)[0].item<double>(), d, 1e-12);
  EXPECT_NEAR(kl_penalty(logp, ref, KlEstimator::kK2, 10)[0].item<double>(), 0.5 * d * d, 1e-12);
  EXPECT_NEAR(kl_penalty(logp, ref, KlEstimator::kK3, 10)[0].item<double>(), 0.5 + d - 1, 1e-12);
  EXPECT_NEAR(kl_penalty(t64({0}), t64({30}), KlEstimator::kK3, 10)[0].item<double>(), 10.0, 1e-12);  // clamped
  auto in = inputs({std::log(0.5)}, {std::log(0.5)}, {0.0}, 1, 1);
  in.ref_logprobs = ref.view({1, 1});
  in.entropy = t64({1.5}).view({1, 1});
  PolicyLossConfig config;
  config.kl_coef = 0.1;
  config.entropy_coef = 0.01;
  auto out = policy_loss(in, config);
  EXPECT_NEAR(out.loss.item<double>(), 0.1 * (0.5 + d - 1) - 0.01 * 1.5, 1e-12);
  EXPECT_NEAR(out.metrics["kl"], 0.5 + d - 1, 1e-12);
  EXPECT_NEAR(out.metrics["entropy"], 1.5, 1e-12);
  config.kl_coef = 0.1;
  in.ref_logprobs = torch::Tensor();
  EXPECT_THROW(policy_loss(in, config), InternalError);  // β > 0 without a reference is a bug
}

TEST(PolicyLoss, K3KlIsFiniteWithAHugeLogRatio) {
  // ref - logp = 100 in fp32: exp(100) overflows, and one inf token used to make the gradient NaN
  // (poisoning the whole step through clipping). The log-ratio is clamped at 20 before exp, so the
  // value is the ±10 clamp and the gradient is finite (zero there: the clamp is flat).
  auto logp = torch::tensor({-100.0f, -1.0f}).view({1, 2}).requires_grad_(true);
  auto ref = torch::tensor({0.0f, -1.5f}).view({1, 2});
  auto kl = kl_penalty(logp, ref, KlEstimator::kK3, 10.0);
  EXPECT_FLOAT_EQ(kl[0][0].item<float>(), 10.0f);
  // Token 2: log r = ref - logp = -0.5, k3 = e^-0.5 + 0.5 - 1.
  EXPECT_NEAR(kl[0][1].item<float>(), std::exp(-0.5) - 0.5, 1e-6);
  kl.sum().backward();
  EXPECT_TRUE(torch::isfinite(logp.grad()).all().item<bool>()) << logp.grad();
  // d k3 / d logp = 1 - e^(ref - logp) = 1 - e^-0.5 on the unclamped token.
  EXPECT_NEAR(logp.grad()[0][1].item<float>(), 1 - std::exp(-0.5), 1e-6);
  // Through the loss, with β > 0, in fp32: finite loss and gradient.
  PolicyLossInputs in;
  in.logprobs = torch::tensor({-100.0f, -1.0f}).view({1, 2}).requires_grad_(true);
  in.old_logprobs = in.logprobs.detach().clone();
  in.ref_logprobs = ref;
  in.advantages = torch::tensor({1.0f});
  in.mask = torch::ones({1, 2});
  in.global_tokens = 2;
  PolicyLossConfig config;
  config.kl_coef = 0.1;
  auto out = policy_loss(in, config);
  out.loss.backward();
  EXPECT_TRUE(std::isfinite(out.loss.item<double>()));
  EXPECT_TRUE(torch::isfinite(in.logprobs.grad()).all().item<bool>()) << in.logprobs.grad();
}

TEST(PolicyLoss, NonFiniteValuesInPaddingCannotLeak) {
  // The same two samples with finite padding and with NaN/inf at every padded position of every
  // input: the same loss and metrics in each mode, and a finite gradient that is 0 on the padding.
  for (auto mode : {LossAggregation::kTokenLevel, LossAggregation::kSampleLevel, LossAggregation::kSeqMeanTokenSumNorm}) {
    PolicyLossConfig config;
    config.aggregation = mode;
    config.kl_coef = 0.05;
    config.entropy_coef = 0.01;
    config.tis_cap = 2.0;
    auto make = [&](double pad) {
      PolicyLossInputs in;
      in.logprobs = t64({-0.5, -1.0, pad, -0.2}).view({2, 2}).requires_grad_(true);
      in.old_logprobs = t64({-0.6, -0.9, pad, -0.3}).view({2, 2});
      in.ref_logprobs = t64({-0.4, -1.2, -pad, -0.1}).view({2, 2});
      in.rollout_logprobs = t64({-0.6, -1.0, pad, -0.3}).view({2, 2});
      in.entropy = t64({1.0, 2.0, pad, 0.5}).view({2, 2});
      in.advantages = t64({1.0, -0.5});
      in.mask = t64({1, 1, 0, 1}).view({2, 2});
      in.global_tokens = 3;
      in.global_samples = 2;
      return in;
    };
    auto clean = make(0.0), dirty = make(std::nan(""));
    auto a = policy_loss(clean, config), b = policy_loss(dirty, config);
    EXPECT_EQ(a.loss.item<double>(), b.loss.item<double>()) << loss_aggregations().name(mode);
    for (const auto& [key, value] : a.metrics) EXPECT_EQ(value, b.metrics[key]) << key;
    b.loss.backward();
    EXPECT_TRUE(torch::isfinite(dirty.logprobs.grad()).all().item<bool>()) << dirty.logprobs.grad();
    EXPECT_EQ(dirty.logprobs.grad()[1][0].item<double>(), 0.0);
    auto inf = make(std::numeric_limits<double>::infinity());
    EXPECT_EQ(policy_loss(inf, config).loss.item<double>(), a.loss.item<double>()) << "inf padding";
  }
}

TEST(PolicyLoss, SkipThresholdDecidesWholeSamples) {
  // Sample 0: one token at ratio 50 among four at 1 (geometric mean 50^(1/4) ≈ 2.66).
  // Sample 1: every token at ratio 1.5. Sample 2: fully masked.
  const double l50 = std::log(50.0), l15 = std::log(1.5);
  auto logp = t64({l50, 0, 0, 0, l15, l15, l15, l15, 9, 9, 9, 9}).view({3, 4});
  auto old = torch::zeros({3, 4}, torch::kFloat64);
  auto mask = torch::ones({3, 4}, torch::kFloat64);
  mask[2].zero_();
  PolicyLossConfig config;
  config.skip_threshold = 20;
  auto skipped = [&] {
    auto s = skipped_samples(logp, old, mask, config);
    return std::vector<bool>{s[0].item<bool>(), s[1].item<bool>(), s[2].item<bool>()};
  };
  config.skip_mode = SkipMode::kTokenMax;  // 50 > 20: skipped (the old mean-ratio rule let it through)
  EXPECT_EQ(skipped(), (std::vector<bool>{true, false, false}));
  config.skip_mode = SkipMode::kSequenceGeoMean;  // 2.66 < 20: kept
  EXPECT_EQ(skipped(), (std::vector<bool>{false, false, false}));
  config.skip_threshold = 1.4;  // both 2.66 and 1.5 exceed 1.4
  EXPECT_EQ(skipped(), (std::vector<bool>{true, true, false}));
  config.skip_threshold = 0;
  EXPECT_EQ(skipped(), (std::vector<bool>{false, false, false}));
  EXPECT_EQ(skip_modes().parse("sequence_geomean", "--skip-mode"), SkipMode::kSequenceGeoMean);
}

TEST(PolicyLoss, TruncatedImportanceSamplingTokenAndSequence) {
  // TIS: weight min(exp(old - rollout), cap) on each token's loss.
  auto tis = inputs({0, 0}, {0, 0}, {1.0}, 1, 2);
  tis.rollout_logprobs = t64({-1.0, 0.5}).view({1, 2});  // weights e^1 = 2.72 → capped at 2, e^-0.5
  PolicyLossConfig capped;
  capped.tis_cap = 2.0;
  auto token = policy_loss(tis, capped);
  EXPECT_NEAR(token.loss.item<double>(), (-2.0 - std::exp(-0.5)) / 2, 1e-12);
  EXPECT_NEAR(token.metrics["tis_weight_mean"], (2.0 + std::exp(-0.5)) / 2, 1e-12);
  EXPECT_DOUBLE_EQ(token.metrics["tis_clip_frac"], 0.5);
  // Sequence level: one weight exp(Σ (old - rollout)) = e^0.5 for both tokens (under the cap).
  capped.tis_level = ImportanceLevel::kSequence;
  auto sequence = policy_loss(tis, capped);
  EXPECT_NEAR(sequence.loss.item<double>(), -std::exp(0.5), 1e-12);
  EXPECT_DOUBLE_EQ(sequence.metrics["tis_clip_frac"], 0.0);
  capped.tis_cap = 1.5;  // e^0.5 ≈ 1.65 → 1.5
  EXPECT_NEAR(policy_loss(tis, capped).loss.item<double>(), -1.5, 1e-12);
  // The weight is a constant of the gradient: d/dlogp of -w·r at r = 1 is -w per token / 2 tokens.
  policy_loss(tis, capped).loss.backward();
  expect_values(tis.logprobs.grad().view({-1}), {-1.5 / 2, -1.5 / 2});
}

TEST(PolicyLoss, MaskedImportanceSamplingTokenAndSequence) {
  // IcePop: tokens whose behaviour ratio exp(old - rollout) leaves [0.5, 2] add nothing; the
  // token-level denominator still counts all four tokens.
  auto in = inputs({0, 0, 0, 0}, {0, 0, 0, 0}, {1.0}, 1, 4);
  in.rollout_logprobs = t64({-1.0, 0.0, 0.9, 2.0}).view({1, 4});  // ratios e^1, 1, e^-0.9 = 0.41, e^-2
  PolicyLossConfig band;
  band.is_mask_low = 0.5;
  band.is_mask_high = 2.0;
  auto token = policy_loss(in, band);
  EXPECT_NEAR(token.loss.item<double>(), -1.0 / 4, 1e-12);  // only token 1: -A·r / 4
  EXPECT_DOUBLE_EQ(token.metrics["is_masked_frac"], 0.75);
  token.loss.backward();
  expect_values(in.logprobs.grad().view({-1}), {0, -0.25, 0, 0});
  // Sequence level: the sample's geometric-mean ratio exp(mean(1, 0, -0.9, -2)) = e^-0.475 = 0.62.
  band.is_mask_level = ImportanceLevel::kSequence;
  in.logprobs.mutable_grad() = torch::Tensor();
  EXPECT_NEAR(policy_loss(in, band).loss.item<double>(), -1.0, 1e-12);  // inside: all four count
  band.is_mask_low = 0.7;  // 0.62 < 0.7: the whole sample is masked
  auto masked_out = policy_loss(in, band);
  EXPECT_NEAR(masked_out.loss.item<double>(), 0.0, 1e-12);
  EXPECT_DOUBLE_EQ(masked_out.metrics["is_masked_frac"], 1.0);
  // With TIS the kept tokens are weighted too: token 1's weight is min(1, cap) = 1, the rest masked.
  band = PolicyLossConfig{};
  band.is_mask_low = 0.5;
  band.is_mask_high = 2.0;
  band.tis_cap = 2.0;
  EXPECT_NEAR(policy_loss(in, band).loss.item<double>(), -1.0 / 4, 1e-12);
  EXPECT_FALSE(PolicyLossConfig{}.uses_rollout_logprobs());
  EXPECT_TRUE(band.uses_rollout_logprobs());
}

TEST(PolicyLoss, GspoSequenceRatioHandComputed) {
  // GSPO: s = exp(mean token log-ratio), clipped at the sequence level, every token carrying s;
  // the gradient of token t is -A·s/|y| (sample-level mean), zero once s is clipped.
  PolicyLossConfig config = algo_preset("GSPO", "-a").loss;
  EXPECT_EQ(config.ratio_level, ImportanceLevel::kSequence);
  // Sample 0: log-ratios {0.0002, -0.0001, 0.0002}: s = exp(1e-4), inside [1 - 3e-4, 1 + 4e-4].
  // Sample 1: log-ratios {0.001, 0.001, 0.001}: s = e^0.001 > 1 + 4e-4, clipped (A > 0).
  auto in = inputs({0.0002, -0.0001, 0.0002, 0.001, 0.001, 0.001}, {0, 0, 0, 0, 0, 0}, {1.0, 2.0}, 2, 3);
  auto out = policy_loss(in, config);
  const double s0 = std::exp(1e-4);
  EXPECT_NEAR(out.loss.item<double>(), (-1.0 * s0 - 2.0 * (1 + 4e-4)) / 2, 1e-12);
  EXPECT_NEAR(out.metrics["ratio_mean"], (3 * s0 + 3 * std::exp(0.001)) / 6, 1e-12);
  out.loss.backward();
  auto grad = in.logprobs.grad();
  for (int64_t t = 0; t < 3; ++t) {
    EXPECT_NEAR(grad[0][t].item<double>(), -1.0 * s0 / 3 / 2, 1e-12);
    EXPECT_EQ(grad[1][t].item<double>(), 0.0);
  }
  // Token against sequence ratios, clip 0.2: log-ratios {0.5, -0.5} and A = 1. Per token, 1.65 is
  // clipped to 1.2 and 0.61 is not: -(1.2 + e^-0.5) / 2. Per sequence, s = exp(0) = 1: -1.
  PolicyLossConfig wide;
  auto spread = inputs({0.5, -0.5}, {0, 0}, {1.0}, 1, 2);
  EXPECT_NEAR(policy_loss(spread, wide).loss.item<double>(), -(1.2 + std::exp(-0.5)) / 2, 1e-12);
  wide.ratio_level = ImportanceLevel::kSequence;
  EXPECT_NEAR(policy_loss(spread, wide).loss.item<double>(), -1.0, 1e-12);
}

TEST(PolicyLoss, GradientAccumulationIsExactInEveryMode) {
  torch::manual_seed(3);
  const int64_t b = 6, t = 5;
  auto logp = (torch::randn({b, t}, torch::kFloat64) * 0.3 - 1).detach();
  auto old = (logp + torch::randn({b, t}, torch::kFloat64) * 0.2).detach();
  auto ref = (logp + torch::randn({b, t}, torch::kFloat64) * 0.1).detach();
  auto adv = torch::randn({b}, torch::kFloat64);
  auto mask = (torch::rand({b, t}) > 0.3).to(torch::kFloat64);
  mask[2].zero_();  // one sample fully masked
  const double tokens = mask.sum().item<double>();
  for (auto mode : {LossAggregation::kTokenLevel, LossAggregation::kSampleLevel, LossAggregation::kSeqMeanTokenSumNorm}) {
    PolicyLossConfig config;
    config.aggregation = mode;
    config.norm_constant = 7;
    config.kl_coef = 0.05;
    config.clip_ratio_c = 3.0;
    config.entropy_coef = 0.01;
    config.tis_cap = 1.5;
    auto entropy = torch::rand({b, t}, torch::kFloat64);
    auto rollout = (old + torch::randn({b, t}, torch::kFloat64) * 0.3).detach();
    auto grad_of = [&](int64_t begin, int64_t end) {
      auto lp = logp.narrow(0, begin, end - begin).clone().requires_grad_();
      PolicyLossInputs in;
      in.logprobs = lp;
      in.old_logprobs = old.narrow(0, begin, end - begin);
      in.ref_logprobs = ref.narrow(0, begin, end - begin);
      in.rollout_logprobs = rollout.narrow(0, begin, end - begin);
      in.entropy = entropy.narrow(0, begin, end - begin);
      in.advantages = adv.narrow(0, begin, end - begin);
      in.mask = mask.narrow(0, begin, end - begin);
      in.global_tokens = tokens;           // the whole mini-batch's counts, as the trainer passes them
      in.global_samples = static_cast<double>(b);
      policy_loss(in, config).loss.backward();
      return lp.grad();
    };
    auto full = grad_of(0, b);
    auto accumulated = torch::cat({grad_of(0, 2), grad_of(2, 5), grad_of(5, 6)});
    EXPECT_LT((full - accumulated).abs().max().item<double>(), 1e-12) << loss_aggregations().name(mode);  // issue bound: 1e-6
    config.ratio_level = ImportanceLevel::kSequence;  // GSPO's ratio accumulates exactly too
    auto full_seq = grad_of(0, b);
    auto accumulated_seq = torch::cat({grad_of(0, 2), grad_of(2, 5), grad_of(5, 6)});
    EXPECT_LT((full_seq - accumulated_seq).abs().max().item<double>(), 1e-12) << "sequence ratio";
  }
}

TEST(PolicyLoss, GradientIsZeroExactlyInTheClippedRegions) {
  // Ratios below, inside and above [0.8, 1.2] (and above the dual cap 3), for A = +1 and A = -1.
  const std::vector<double> ratios = {0.5, 0.9, 1.0, 1.1, 1.5, 4.0};
  for (double a : {1.0, -1.0}) {
    std::vector<double> logp;
    for (double r : ratios) logp.push_back(std::log(r));
    auto in = inputs(logp, std::vector<double>(ratios.size(), 0.0), {a}, 1, static_cast<int64_t>(ratios.size()));
    PolicyLossConfig config;
    config.clip_ratio_c = 3.0;
    policy_loss(in, config).loss.backward();
    auto grad = in.logprobs.grad()[0];
    for (size_t k = 0; k < ratios.size(); ++k) {
      const double r = ratios[k];
      // PPO: A > 0 stops above 1 + eps; A < 0 stops below 1 - eps; dual clip stops A < 0 above c.
      const bool clipped = (a > 0 && r > 1.2) || (a < 0 && r < 0.8) || (a < 0 && r > 3.0);
      const double g = grad[static_cast<int64_t>(k)].item<double>();
      if (clipped) {
        EXPECT_EQ(g, 0.0) << "A " << a << " ratio " << r;
      } else {
        EXPECT_NEAR(g, -a * r / ratios.size(), 1e-12) << "A " << a << " ratio " << r;  // d(-A r)/dlogp = -A r
      }
    }
  }
}

TEST(Dapo, FilterOverlongAndTruncation) {
  auto correct = torch::tensor({true, true, false, true, false, false});
  auto keep = filter_groups_by_accuracy(correct, 2, 0.01, 0.99);
  EXPECT_EQ(keep[0].item<bool>(), false);  // all right
  EXPECT_EQ(keep[1].item<bool>(), true);
  EXPECT_EQ(keep[2].item<bool>(), false);  // all wrong
  EXPECT_EQ(overlong_penalty(80, 100, 20), 0.0);
  EXPECT_DOUBLE_EQ(overlong_penalty(90, 100, 20), -0.5);
  EXPECT_DOUBLE_EQ(overlong_penalty(100, 100, 20), -1.0);
  EXPECT_DOUBLE_EQ(overlong_penalty(150, 100, 20), -1.0);
  EXPECT_DOUBLE_EQ(overlong_penalty(90, 100, 20, 10.0), -5.0);  // on the 10/0 scale
  EXPECT_EQ(default_overlong_cache(3584), 896);
  EXPECT_EQ(default_overlong_cache(8192), 1024);
  auto mask = mask_truncated(torch::ones({3, 2}), torch::tensor({false, true, false}));
  EXPECT_EQ(mask.sum().item<double>(), 4.0);
  EXPECT_EQ(mask[1].sum().item<double>(), 0.0);
}

TEST(Presets, ReferenceDefaultsAndOverrides) {
  auto grpo = algo_preset("GRPO", "-a");
  EXPECT_DOUBLE_EQ(grpo.loss.kl_coef, 0.01);
  EXPECT_DOUBLE_EQ(grpo.loss.clip_eps_high, 0.2);
  EXPECT_EQ(grpo.loss.aggregation, LossAggregation::kSampleLevel);
  EXPECT_FALSE(grpo.filter_range.has_value());
  EXPECT_FALSE(grpo.loss.clip_ratio_c.has_value());  // dual clip off unless asked for
  auto dapo = algo_preset("dapo", "-a");
  EXPECT_DOUBLE_EQ(dapo.loss.kl_coef, 0.0);
  EXPECT_DOUBLE_EQ(dapo.loss.clip_eps_high, 0.28);
  EXPECT_EQ(dapo.loss.aggregation, LossAggregation::kTokenLevel);
  ASSERT_TRUE(dapo.filter_range.has_value());
  EXPECT_DOUBLE_EQ(dapo.filter_range->first, 0.01);
  EXPECT_TRUE(dapo.dynamic_batching && dapo.overlong_shaping && dapo.filter_truncated);
  ASSERT_TRUE(dapo.loss.clip_ratio_c.has_value());
  EXPECT_DOUBLE_EQ(*dapo.loss.clip_ratio_c, 10.0);
  EXPECT_EQ(algo_preset("DR_GRPO", "-a").advantage.estimator, AdvantageEstimator::kDrGrpo);
  // RLOO and REINFORCE_PPB as the reference system: β 0.01, sample-level loss.
  for (const char* name : {"rloo", "REINFORCE_PPB", "REINFORCE_PP", "reinforce-ppb"}) {
    auto c = algo_preset(name, "-a");
    EXPECT_DOUBLE_EQ(c.loss.kl_coef, 0.01) << name;
    EXPECT_EQ(c.loss.aggregation, LossAggregation::kSampleLevel) << name;
  }
  EXPECT_EQ(algo_preset("rloo", "-a").advantage.estimator, AdvantageEstimator::kRloo);
  EXPECT_EQ(algo_preset("REINFORCE_PP", "-a").advantage.estimator, AdvantageEstimator::kReinforcePpBaseline);
  EXPECT_EQ(algo_preset("REINFORCE_PP", "-a").name, "REINFORCE_PPB");  // the alias reads as the reference name
  auto gspo = algo_preset("gspo", "-a");
  EXPECT_DOUBLE_EQ(gspo.loss.clip_eps_low, 3e-4);
  EXPECT_DOUBLE_EQ(gspo.loss.clip_eps_high, 4e-4);
  EXPECT_DOUBLE_EQ(gspo.loss.kl_coef, 0.0);
  EXPECT_THROW_MSG(algo_preset("TRPO", "-a"), UserError, "-a", "unknown algorithm \"TRPO\"", "REINFORCE_PPB", "GSPO", "PPO");
  // PPO: GAE from a critic, the value loss's defaults, no KL unless asked for.
  auto ppo = algo_preset("ppo", "-a");
  EXPECT_EQ(ppo.advantage.estimator, AdvantageEstimator::kGae);
  EXPECT_TRUE(ppo.uses_critic());
  EXPECT_FALSE(grpo.uses_critic());
  EXPECT_EQ(ppo.loss.aggregation, LossAggregation::kTokenLevel);
  EXPECT_DOUBLE_EQ(ppo.loss.kl_coef, 0.0);
  EXPECT_DOUBLE_EQ(ppo.ppo.gamma, 1.0);
  EXPECT_DOUBLE_EQ(ppo.ppo.lam, 0.95);
  EXPECT_DOUBLE_EQ(ppo.ppo.value_clip, 0.5);
  // GAE's group advantages are 0 (the per-token ones come from the critic in the update).
  AdvantageConfig gae;
  gae.estimator = AdvantageEstimator::kGae;
  expect_values(compute_advantages(t64({1.0, 0.0, 3.0, 2.0}), 2, gae), {0, 0, 0, 0}, 0);
  // The help describes each preset from its config.
  const std::string help = algo_preset_help();
  EXPECT_NE(help.find("REINFORCE_PPB (alias REINFORCE_PP): --advantage-estimator reinforce_pp_baseline, --kl-coeff 0.01"),
            std::string::npos) << help;
  EXPECT_NE(help.find("--dual-clip 10"), std::string::npos) << help;
  EXPECT_NE(help.find("PPO: --advantage-estimator gae, --kl-coeff 0, --clip-eps-low 0.2, --clip-eps-high 0.2, "
                      "--loss-variation token_level, --gamma 1, --lam 0.95, --value-clip 0.5"), std::string::npos) << help;
  EXPECT_NE(help.find("GSPO: --advantage-estimator grpo, --kl-coeff 0, --clip-eps-low 0.0003, --clip-eps-high 0.0004, "
                      "--loss-variation sample_level, --ratio-level sequence"), std::string::npos) << help;
}

TEST(PreferenceLoss, BradleyTerryAndItsGradientByHand) {
  // -log σ(c - r - m): σ(x) = 1 / (1 + e^-x), so the loss is log(1 + e^-(c - r - m)).
  auto chosen = t64({1.5, -0.25, 3.0, 40.0}).requires_grad_();
  auto rejected = t64({0.5, 0.75, 3.0, -40.0}).requires_grad_();
  const auto margin = t64({0.0, 0.0, 1.0, 0.0});
  const std::vector<double> d = {1.0, -1.0, -1.0, 80.0};
  std::vector<double> expected;
  for (double x : d) expected.push_back(std::log1p(std::exp(-x)));
  const auto loss = bradley_terry_loss(chosen, rejected, margin);
  expect_values(loss, expected, 1e-15);
  // d/dc = -σ(-d) = σ(d) - 1, d/dr = σ(-d): what the loss's autograd gives.
  loss.sum().backward();
  for (size_t k = 0; k < d.size(); ++k) {
    const double s = 1.0 / (1.0 + std::exp(d[k]));  // σ(-d)
    EXPECT_NEAR(chosen.grad()[static_cast<int64_t>(k)].item<double>(), -s, 1e-15) << k;
    EXPECT_NEAR(rejected.grad()[static_cast<int64_t>(k)].item<double>(), s, 1e-15) << k;
  }
  // A large negative difference stays finite (softplus, not log of a rounded σ).
  const auto far = bradley_terry_loss(t64({-800.0}), t64({0.0}), t64({0.0}));
  EXPECT_NEAR(far.item<double>(), 800.0, 1e-12);
}

TEST(PreferenceLoss, CenteringAddsTheSquaredSum) {
  PreferenceLossConfig config;
  config.center_coef = 0.01;
  auto chosen = t64({2.0}).requires_grad_();
  auto rejected = t64({1.0}).requires_grad_();
  const auto loss = bradley_terry_loss(chosen, rejected, t64({0.0}), config);
  EXPECT_NEAR(loss.item<double>(), std::log1p(std::exp(-1.0)) + 0.01 * 9.0, 1e-15);
  loss.backward();
  const double s = 1.0 / (1.0 + std::exp(1.0));
  EXPECT_NEAR(chosen.grad().item<double>(), -s + 2 * 0.01 * 3.0, 1e-15);
  EXPECT_NEAR(rejected.grad().item<double>(), s + 2 * 0.01 * 3.0, 1e-15);
}

TEST(ValueLoss, GaeByHand) {
  // r = [0, 0, 1], V = [0.5, 0.2, 0.4], γ 0.9, λ 0.8; the state after the last step is terminal.
  // δ2 = 1 − 0.4 = 0.6, δ1 = 0.9·0.4 − 0.2 = 0.16, δ0 = 0.9·0.2 − 0.5 = −0.32;
  // A2 = 0.6, A1 = 0.16 + 0.72·0.6 = 0.592, A0 = −0.32 + 0.72·0.592 = 0.10624; R = A + V.
  const Gae g = generalized_advantages({0, 0, 1}, {0.5, 0.2, 0.4}, 0.9, 0.8);
  const std::vector<double> a = {0.10624, 0.592, 0.6}, r = {0.60624, 0.792, 1.0};
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_NEAR(g.advantages[k], a[k], 1e-15) << k;
    EXPECT_NEAR(g.returns[k], r[k], 1e-15) << k;
  }
  // γ = λ = 1: A_t is the sum of the rewards to come less V_t (Monte Carlo), and every return the sum.
  const Gae mc = generalized_advantages({0.5, -1, 2}, {0.25, 1, -0.5}, 1, 1);
  const std::vector<double> mc_a = {1.5 - 0.25, 1 - 1, 2 + 0.5};
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_NEAR(mc.advantages[k], mc_a[k], 1e-15) << k;
    EXPECT_NEAR(mc.returns[k], k == 0 ? 1.5 : k == 1 ? 1.0 : 2.0, 1e-15) << k;
  }
  // λ = 0: one-step TD errors.
  const Gae td = generalized_advantages({0, 0, 1}, {0.5, 0.2, 0.4}, 0.9, 0);
  EXPECT_NEAR(td.advantages[0], -0.32, 1e-15);
  EXPECT_NEAR(td.advantages[1], 0.16, 1e-15);
  EXPECT_NEAR(td.advantages[2], 0.6, 1e-15);
  EXPECT_TRUE(generalized_advantages({}, {}, 1, 1).advantages.empty());
  EXPECT_THROW(generalized_advantages({1}, {}, 1, 1), InternalError);
}

TEST(ValueLoss, ClippedValueLossAndItsGradientByHand) {
  // V = [1, 0, 2, 0.5], V_old 0.5, R = [2, 0, 0, 3], the last token masked, clip 0.2, 4 tokens:
  // t0: (1 − 2)² = 1 against (0.7 − 2)² = 1.69: clipped; t1: 0 against (0.3 − 0)² = 0.09: clipped;
  // t2: (2 − 0)² = 4 against (0.7 − 0)² = 0.49: unclipped. ½ (1.69 + 0.09 + 4) / 4 = 0.7225.
  auto v = t64({1.0, 0.0, 2.0, 0.5}).view({1, 4}).requires_grad_();
  const auto old = torch::full({1, 4}, 0.5, torch::kFloat64);
  const auto returns = t64({2.0, 0.0, 0.0, 3.0}).view({1, 4});
  const auto mask = t64({1, 1, 1, 0}).view({1, 4});
  auto out = value_loss(v, old, returns, mask, 0.2, 4);
  EXPECT_NEAR(out.loss.item<double>(), 0.7225, 1e-15);
  EXPECT_NEAR(out.metrics.at("vf_loss"), 0.7225, 1e-15);
  EXPECT_NEAR(out.metrics.at("vf_clip_frac"), 2.0 / 3, 1e-15);
  EXPECT_NEAR(out.metrics.at("value_mean"), 1.0, 1e-15);
  EXPECT_NEAR(out.metrics.at("return_mean"), 2.0 / 3, 1e-15);
  EXPECT_EQ(out.metrics.at("n_tokens"), 3);
  // Where the clipped term wins, its clamp is saturated: no gradient; else ½·2(V − R)/4.
  out.loss.backward();
  expect_values(v.grad().view({-1}), {0, 0, 0.5, 0}, 1e-15);
  // Unclipped: ½ (1 + 0 + 4) / 4.
  auto plain = value_loss(v.detach(), old, returns, mask, 0, 4);
  EXPECT_NEAR(plain.loss.item<double>(), 0.625, 1e-15);
  EXPECT_EQ(plain.metrics.at("vf_clip_frac"), 0);
  // A non-finite value on a masked token reaches neither the loss nor the gradient.
  auto bad = t64({1.0, 0.0, 2.0, std::nan("")}).view({1, 4}).requires_grad_();
  auto guarded = value_loss(bad, old, returns, mask, 0.2, 4);
  EXPECT_NEAR(guarded.loss.item<double>(), 0.7225, 1e-15);
  guarded.loss.backward();
  EXPECT_TRUE(torch::isfinite(bad.grad()).all().item<bool>());
  // Split over micro-batches with the global count, the pieces sum to the whole.
  const auto first = value_loss(v.detach().slice(1, 0, 2), old.slice(1, 0, 2), returns.slice(1, 0, 2), mask.slice(1, 0, 2), 0.2, 4);
  const auto rest = value_loss(v.detach().slice(1, 2, 4), old.slice(1, 2, 4), returns.slice(1, 2, 4), mask.slice(1, 2, 4), 0.2, 4);
  EXPECT_NEAR(first.loss.item<double>() + rest.loss.item<double>(), 0.7225, 1e-15);
  EXPECT_THROW(value_loss(v, old, returns.view({4, 1}), mask, 0.2, 4), InternalError);
}
