// The trainer's steps on a score head: reward-model training (the Bradley–Terry loss over
// preference pairs) and PPO's critic (its values of rollout samples and the clipped value loss's
// step), each exact under micro-batching; the critic's gradient against finite differences in fp64.
#include <torch/torch.h>

#include <cmath>

#include "finite_differences.h"
#include "test_util.h"
#include "train/trainer.h"
#include "trainer_fixtures.h"
#include "util/error.h"

using namespace rlcpp;
using rlcpp::testing::expect_same_weights;
using rlcpp::testing::fixed_samples;
using rlcpp::testing::weights_of;

TEST(Trainer, PreferenceStepIsTheMeanBradleyTerryLossAndExactUnderMicrobatching) {
  ModelOptions options;
  options.dtype = torch::kFloat64;
  const auto base = rlcpp::testing::fixture("qwen2-tiny");
  std::vector<PreferencePair> batch = {{{5, 6, 7, 8}, {5, 6, 9}, 0.0},
                                       {{3, 4}, {3, 4, 10, 11, 12}, 0.5},
                                       {{10, 11, 12, 13, 14}, {10, 2}, 0.0}};
  // A fresh head on the causal LM's decoder: its hidden states are the base's, and two loads with
  // one seed draw the same head.
  auto model0 = Transformer::classifier_from_pretrained(base, options, 1, 7);
  auto lm = Transformer::from_pretrained(base, options);
  ASSERT_TRUE(model0->config().classifier());
  EXPECT_EQ(model0->config().architecture, "Qwen2ForSequenceClassification");
  EXPECT_TRUE(torch::equal(model0->model->embed_tokens->weight, lm->model->embed_tokens->weight));
  EXPECT_TRUE(torch::equal(model0->score->weight, Transformer::classifier_from_pretrained(base, options, 1, 7)->score->weight));
  EXPECT_FALSE(torch::equal(model0->score->weight, Transformer::classifier_from_pretrained(base, options, 1, 8)->score->weight));
  // The loss computed here, one conversation at a time with no padding: mean of log(1 + e^-(c - r - m)).
  auto score_of = [&](const std::vector<int32_t>& ids) {
    auto h = lm->hidden_states(torch::tensor(std::vector<int64_t>(ids.begin(), ids.end())).unsqueeze(0));
    return torch::matmul(h[0][-1], model0->score->weight[0]).item<double>();
  };
  double loss = 0, correct = 0;
  for (const auto& p : batch) {
    const double d = score_of(p.chosen) - score_of(p.rejected);
    loss += std::log1p(std::exp(-(d - p.margin)));
    correct += d > 0;
  }
  loss /= 3;
  std::vector<std::vector<torch::Tensor>> results;
  for (int64_t micro : {1, 2, 3, -1, -2, -3}) {  // padding-free for the positive sizes, left-padded rows else
    auto model = Transformer::classifier_from_pretrained(base, options, 1, 7);
    TrainerConfig config;
    config.train_microbatch_size = std::abs(micro);
    config.padding_free = micro > 0;
    config.optimizer.lr = 1e-2;
    Trainer trainer(model, nullptr, config);
    const auto before = trainer.preference_figures(batch);
    EXPECT_NEAR(before.at("loss"), loss, 1e-10) << "micro-batch " << micro;
    const auto m = trainer.preference_step(batch).values;
    EXPECT_NEAR(m.at("loss"), loss, 1e-10) << "micro-batch " << micro;
    EXPECT_EQ(m.at("accuracy"), correct / 3);
    EXPECT_NEAR(m.at("margin"), m.at("chosen") - m.at("rejected"), 1e-12);
    EXPECT_GT(m.at("grad_norm"), 0);
    results.push_back(weights_of(*model));
    // The step lowers the loss of the pairs it trained on.
    EXPECT_LT(trainer.preference_figures(batch).at("loss"), loss);
  }
  expect_same_weights(results, 1e-10);
  // A causal LM cannot be trained on pairs.
  Trainer wrong(lm, nullptr, TrainerConfig{});
  EXPECT_THROW(wrong.preference_step(batch), InternalError);
}

namespace {

// The critic's values of `s` computed here: its tokens alone (no padding), the head's dot product
// at the position before each response token.
std::vector<double> values_by_hand(Transformer& critic, const Sample& s) {
  std::vector<int64_t> ids(s.prompt_ids.begin(), s.prompt_ids.end());
  ids.insert(ids.end(), s.response_ids.begin(), s.response_ids.end());
  auto h = critic.hidden_states(torch::tensor(ids).unsqueeze(0))[0];
  std::vector<double> out;
  for (size_t j = 0; j < s.response_ids.size(); ++j) {
    out.push_back(torch::dot(h[static_cast<int64_t>(s.prompt_ids.size() + j) - 1], critic.score->weight[0]).item<double>());
  }
  return out;
}

std::vector<Sample> critic_samples() {
  auto samples = fixed_samples();
  Sample multi = model_sample({5, 6, 7}, {8, 9}, 0.0);
  multi.append(SegmentKind::kInserted, {30, 31, 32}, {}, 0);  // a tool's output: no value loss there
  multi.append(SegmentKind::kModel, {10, 11}, {}, 0);
  samples.push_back(multi);
  return samples;
}

}  // namespace

TEST(Trainer, CriticValuesAndValueStepAreExactUnderMicrobatching) {
  ModelOptions options;
  options.dtype = torch::kFloat64;
  const auto base = rlcpp::testing::fixture("qwen2-tiny");
  const auto samples = critic_samples();
  auto critic = Transformer::classifier_from_pretrained(base, options, 1, 11);
  TrainerConfig config;
  config.train_microbatch_size = 3;  // rows of different lengths, right-padded together
  const auto values = Trainer(critic, nullptr, config).response_values(samples);
  ASSERT_EQ(values.size(), samples.size());
  // Returns to regress to, per response token (those on inserted tokens must not count).
  std::vector<std::vector<double>> returns;
  double expected = 0, tokens = 0;
  for (size_t k = 0; k < samples.size(); ++k) {
    const auto by_hand = values_by_hand(*critic, samples[k]);
    const auto mask = samples[k].loss_mask();
    ASSERT_EQ(values[k].size(), by_hand.size());
    returns.emplace_back();
    for (size_t j = 0; j < by_hand.size(); ++j) {
      EXPECT_NEAR(values[k][j], by_hand[j], 1e-6) << "sample " << k << ", token " << j;  // fp32 rows of fp64 values
      returns.back().push_back(mask[j] ? 0.5 * static_cast<double>(j) - 0.25 * static_cast<double>(k) : 1e6);
      if (mask[j]) {
        expected += 0.5 * std::pow(by_hand[j] - returns.back().back(), 2);
        tokens += 1;
      }
    }
  }
  expected /= tokens;  // within the clip band (V_old = V): the unclipped loss
  std::vector<std::vector<torch::Tensor>> results;
  for (int64_t micro : {1, 2, 5}) {
    auto model = Transformer::classifier_from_pretrained(base, options, 1, 11);
    TrainerConfig c;
    c.train_microbatch_size = micro;
    c.optimizer.lr = 1e-2;
    c.value_clip = 0.2;
    Trainer trainer(model, nullptr, c);
    const auto m = trainer.value_step({samples, values, returns, 0}).values;
    EXPECT_NEAR(m.at("vf_loss"), expected, 1e-8) << "micro-batch " << micro;
    EXPECT_EQ(m.at("n_tokens"), tokens);
    EXPECT_EQ(m.at("vf_clip_frac"), 0);
    EXPECT_GT(m.at("grad_norm"), 0);
    results.push_back(weights_of(*model));
    // The step moves the values toward the returns.
    double after = 0;
    const auto moved = trainer.response_values(samples);
    for (size_t k = 0; k < samples.size(); ++k) {
      const auto mask = samples[k].loss_mask();
      for (size_t j = 0; j < mask.size(); ++j) after += mask[j] ? 0.5 * std::pow(moved[k][j] - returns[k][j], 2) : 0.0;
    }
    EXPECT_LT(after / tokens, expected) << "micro-batch " << micro;
  }
  expect_same_weights(results, 1e-10);
  // A causal LM has no value head.
  auto lm = Transformer::from_pretrained(base, options);
  EXPECT_THROW(Trainer(lm, nullptr, TrainerConfig{}).response_values(samples), InternalError);
}

TEST(Trainer, CriticGradientMatchesFiniteDifferencesInFp64) {
  ModelOptions options;
  options.dtype = torch::kFloat64;
  const auto base = rlcpp::testing::fixture("llama-tiny");
  const auto samples = critic_samples();
  auto critic = Transformer::classifier_from_pretrained(base, options, 1, 5);
  TrainerConfig config;
  config.train_microbatch_size = 2;
  config.optimizer.lr = 0;  // the step leaves the weights where the gradient was taken
  config.optimizer.weight_decay = 0;
  config.optimizer.max_grad_norm = 0;
  Trainer trainer(critic, nullptr, config);
  const auto old_values = trainer.response_values(samples);
  std::vector<std::vector<double>> returns;
  for (const auto& s : samples) returns.push_back(std::vector<double>(s.response_ids.size(), 0.75));
  trainer.value_step({samples, old_values, returns, 0});
  // The loss computed here from each sample alone, as a function of the weights.
  auto loss = [&] {
    double sum = 0, n = 0;
    for (size_t k = 0; k < samples.size(); ++k) {
      const auto v = values_by_hand(*critic, samples[k]);
      const auto mask = samples[k].loss_mask();
      for (size_t j = 0; j < v.size(); ++j) {
        if (!mask[j]) continue;
        sum += 0.5 * std::pow(v[j] - returns[k][j], 2);
        n += 1;
      }
    }
    return torch::tensor(sum / n, torch::kFloat64);
  };
  std::vector<std::pair<std::string, torch::Tensor>> checked;
  for (const auto& item : critic->named_parameters()) {
    const auto& name = item.key();
    if (name == "score.weight" || name.find("layers.0.self_attn.q_proj") != std::string::npos ||
        name.find("layers.1.mlp.down_proj") != std::string::npos || name == "model.embed_tokens.weight") {
      checked.emplace_back(name, item.value());
    }
  }
  ASSERT_EQ(checked.size(), 4u);
  EXPECT_EQ(rlcpp::testing::expect_finite_difference_gradients(checked, loss), 12);
}
