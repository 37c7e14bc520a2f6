// Padding-free micro-batches (one row of the samples back to back, each reading only its own keys)
// and micro-batches by a token budget, against right-padded rows of -tmbs samples: the layout, and
// in fp64 the same log-probs, losses, denominators and update (1e-12) in every loss aggregation,
// with the fused head and without it (entropy bonus, GSPO), with LoRA, and for PPO's critic.
#include <torch/torch.h>

#include <cmath>

#include "test_util.h"
#include "train/trainer.h"
#include "trainer_fixtures.h"

using namespace rlcpp;
using rlcpp::testing::fixed_samples;

TEST(PaddingFree, OneRowNumbersTheSamplesAndLaysValuesPerSample) {
  const auto samples = fixed_samples();  // lengths 7, 3, 7, 7
  const PackedBatch p = pack_samples(samples, 0, 2, /*padding_free=*/true);
  ASSERT_EQ(p.ids.sizes(), (std::vector<int64_t>{1, 10}));
  ASSERT_EQ(p.targets.sizes(), (std::vector<int64_t>{2, 7}));  // per sample, as the padded batch's
  EXPECT_TRUE(torch::equal(p.ids[0], torch::tensor({5, 6, 7, 8, 9, 10, 11, 12, 13, 14})));
  EXPECT_TRUE(torch::equal(p.attention_mask[0], torch::tensor({1, 1, 1, 1, 1, 1, 1, 2, 2, 2})));
  // Position 2 predicts 8; sample 1's prompt 12 (input position 7) predicts 13.
  EXPECT_TRUE(torch::equal(p.input_targets[0], torch::tensor({-1, -1, 8, 9, 10, 11, -1, 13, 14, -1})));
  const PackedBatch padded = pack_samples(samples, 0, 2);
  EXPECT_TRUE(torch::equal(p.targets, padded.targets));
  EXPECT_TRUE(torch::equal(p.response_mask, padded.response_mask));
  EXPECT_EQ(p.response_start, padded.response_start);
  EXPECT_EQ(p.input_tokens(), 10);
  EXPECT_EQ(padded.input_tokens(), 14);
  // Values of the input tokens land on each sample's positions; the rest are 0.
  const auto laid = p.per_sample(torch::arange(10, torch::kFloat64).unsqueeze(0) + 1);
  EXPECT_TRUE(torch::equal(laid[1], torch::tensor({8.0, 9.0, 10.0, 0.0, 0.0, 0.0, 0.0}, torch::kFloat64)));
  EXPECT_EQ(laid[0][6].item<double>(), 7.0);
}

TEST(PaddingFree, MicroBatchesByTokenBudget) {
  const auto samples = fixed_samples();  // lengths 7, 3, 7, 7
  using Ranges = std::vector<std::pair<size_t, size_t>>;
  EXPECT_EQ(micro_batches(samples, 3, 0, true), (Ranges{{0, 3}, {3, 4}}));
  EXPECT_EQ(micro_batches(samples, 3, 0, false), (Ranges{{0, 3}, {3, 4}}));
  EXPECT_EQ(micro_batches(samples, 1, 10, true), (Ranges{{0, 2}, {2, 3}, {3, 4}}));   // 7 + 3, then 7, 7
  EXPECT_EQ(micro_batches(samples, 1, 14, true), (Ranges{{0, 2}, {2, 4}}));           // 10, then 14
  EXPECT_EQ(micro_batches(samples, 1, 14, false), (Ranges{{0, 2}, {2, 4}}));          // 2 x 7 each
  EXPECT_EQ(micro_batches(samples, 1, 17, false), (Ranges{{0, 2}, {2, 4}}));          // 3 x 7 = 21 > 17
  EXPECT_EQ(micro_batches(samples, 1, 5, true), (Ranges{{0, 1}, {1, 2}, {2, 3}, {3, 4}}));  // each alone
}

namespace {

struct Layout {
  const char* name;
  bool padding_free;
  int64_t micro, max_tokens;
};
const Layout kLayouts[] = {{"padded, 3 per micro-batch", false, 3, 0},
                           {"padding-free, 3 per micro-batch", true, 3, 0},
                           {"padding-free, 14 tokens", true, 1, 14},
                           {"padding-free, one micro-batch", true, 4, 0},
                           {"padded, 14 tokens", false, 1, 14}};

double largest_difference(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double worst = 0;
  for (size_t k = 0; k < a.size(); ++k) worst = std::max(worst, (a[k] - b[k]).abs().max().item<double>());
  return worst;
}

// What the step updates (the adapters under LoRA), copied.
std::vector<torch::Tensor> trained_of(const Transformer& model) {
  std::vector<torch::Tensor> out;
  for (const auto& p : model.trainable_parameters()) out.push_back(p.detach().clone());
  return out;
}

// Per-sample fp32 rows (log-probs, values) from fp64 computations: equal but for the last rounding.
void expect_same_rows(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k) {
    ASSERT_EQ(a[k].size(), b[k].size());
    for (size_t t = 0; t < a[k].size(); ++t) EXPECT_NEAR(a[k][t], b[k][t], 1.2e-7 * std::max(1.0f, std::abs(b[k][t]))) << k << ", " << t;
  }
}

// Every layout's update (parameters' change), metrics and per-sample rows against the first
// layout's: 1e-12 of the largest update and of each metric (the rows, fp32, to their rounding).
void expect_same_steps(const std::vector<std::vector<torch::Tensor>>& updates,
                       const std::vector<std::map<std::string, double>>& metrics,
                       const std::vector<std::vector<std::vector<float>>>& rows) {
  double largest = 0;
  for (const auto& u : updates[0]) largest = std::max(largest, u.abs().max().item<double>());
  EXPECT_GT(largest, 0.0);
  for (size_t l = 1; l < updates.size(); ++l) {
    SCOPED_TRACE(kLayouts[l].name);
    EXPECT_LT(largest_difference(updates[l], updates[0]), 1e-12 * largest);
    for (const auto& [key, value] : metrics[0]) {
      EXPECT_NEAR(metrics[l].at(key), value, 1e-12 * std::max(1.0, std::abs(value))) << key;
    }
    expect_same_rows(rows[l], rows[0]);
  }
}

}  // namespace

// One policy step per layout from the same weights (lr and eps so large that AdamW's update is the
// gradient, as FusedLossHeadTakesTheSameStep does): every layout equals the first.
TEST(PaddingFree, PolicyStepEqualsThePaddedStep) {
  ModelOptions options;
  options.dtype = torch::kFloat64;
  options.logprob_chunk_tokens = 5;
  auto samples = fixed_samples();
  for (auto& s : samples) s.rollout_logprobs.assign(s.response_ids.size(), -1.5f);
  for (const char* name : {"qwen2-tiny", "qwen3-tiny", "llama-tiny"}) {
    for (int variant = 0; variant < 6; ++variant) {
      SCOPED_TRACE(std::string(name) + ", variant " + std::to_string(variant));
      TrainerConfig config;
      config.temperature = 0.8;
      config.optimizer.lr = 1e3;
      config.optimizer.eps = 1e3;
      config.optimizer.weight_decay = 0;
      config.optimizer.max_grad_norm = 0;
      config.loss.aggregation = variant == 1   ? LossAggregation::kSampleLevel
                                : variant == 2 ? LossAggregation::kSeqMeanTokenSumNorm
                                               : LossAggregation::kTokenLevel;
      config.loss.norm_constant = 6;
      config.loss.kl_coef = variant == 3 ? 0.3 : 0.0;
      config.loss.tis_cap = variant == 3 ? 2.0 : 0.0;
      config.loss.entropy_coef = variant == 4 ? 0.01 : 0.0;                                        // not fused
      config.loss.ratio_level = variant == 5 ? ImportanceLevel::kSequence : ImportanceLevel::kToken;  // not fused
      const bool lora = variant == 1 || variant == 4;
      std::vector<std::vector<torch::Tensor>> updates;
      std::vector<std::map<std::string, double>> metrics;
      std::vector<std::vector<std::vector<float>>> scored;
      for (const Layout& layout : kLayouts) {
        SCOPED_TRACE(layout.name);
        auto model = Transformer::from_pretrained(rlcpp::testing::fixture(name), options);
        if (lora) model->add_adapters(LoraConfig{2, 4, 0, {}, ""}, 3);
        config.padding_free = layout.padding_free;
        config.train_microbatch_size = layout.micro;
        config.max_tokens_per_micro_batch = layout.max_tokens;
        // (The KL's reference log-probs are given below; the model is only there to be accepted.)
        auto reference = config.loss.kl_coef != 0 ? Transformer::from_pretrained(rlcpp::testing::fixture(name), options) : nullptr;
        Trainer trainer(model, reference, config);
        double entropy = 0;
        auto old = trainer.policy_logprobs(samples, &entropy);
        scored.push_back(old);
        for (auto& row : old) {
          for (size_t t = 0; t < row.size(); ++t) row[t] += (t % 3 == 0) ? 0.4f : (t % 3 == 1 ? -0.3f : 0.01f);
        }
        // The sampler's log-probs (TIS) and the reference's (KL) near the old ones, so both terms
        // have a gradient.
        auto stepped = samples;
        for (size_t k = 0; k < stepped.size(); ++k) {
          for (size_t t = 0; t < old[k].size(); ++t) stepped[k].rollout_logprobs[t] = old[k][t] - (t % 2 == 0 ? 0.3f : -0.1f);
        }
        PolicyMiniBatch mb{stepped, old, {}, {}};
        if (config.loss.kl_coef != 0) {
          mb.ref_logprobs = old;
          for (auto& row : mb.ref_logprobs) for (auto& x : row) x -= 0.2f;
        }
        const auto before = trained_of(*model);
        metrics.push_back(trainer.step(mb).values);
        metrics.back()["entropy"] = entropy;
        auto after = trained_of(*model);
        for (size_t k = 0; k < after.size(); ++k) after[k] -= before[k];
        updates.push_back(after);
      }
      expect_same_steps(updates, metrics, scored);
    }
  }
}

// PPO's critic: its values of the samples and a value step, per layout.
TEST(PaddingFree, CriticValuesAndStepEqualThePaddedOnes) {
  ModelOptions options;
  options.dtype = torch::kFloat64;
  const auto samples = fixed_samples();
  std::vector<std::vector<torch::Tensor>> updates;
  std::vector<std::vector<std::vector<float>>> values;
  std::vector<std::map<std::string, double>> metrics;
  for (const Layout& layout : kLayouts) {
    auto critic = Transformer::classifier_from_pretrained(rlcpp::testing::fixture("qwen2-tiny"), options, 1, 7);
    TrainerConfig config;
    config.optimizer.lr = 1e3;
    config.optimizer.eps = 1e3;
    config.optimizer.weight_decay = 0;
    config.optimizer.max_grad_norm = 0;
    config.value_clip = 0.05;
    config.padding_free = layout.padding_free;
    config.train_microbatch_size = layout.micro;
    config.max_tokens_per_micro_batch = layout.max_tokens;
    Trainer trainer(critic, nullptr, config);
    values.push_back(trainer.response_values(samples));
    std::vector<std::vector<double>> returns;
    for (const auto& row : values.back()) {
      returns.emplace_back();
      for (size_t t = 0; t < row.size(); ++t) returns.back().push_back(row[t] + (t % 2 == 0 ? 0.5 : -0.01));
    }
    const auto before = trained_of(*critic);
    metrics.push_back(trainer.value_step({samples, values.back(), returns, 0}).values);
    auto after = trained_of(*critic);
    for (size_t k = 0; k < after.size(); ++k) after[k] -= before[k];
    updates.push_back(after);
  }
  expect_same_steps(updates, metrics, values);
}
