// The trainer: packing, log-probs that agree with the engine's, exact accumulation across
// micro-batch sizes, and a step that moves the policy the way the advantages say.
#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "engine/engine.h"
#include "kernels/elementwise.h"
#include "test_util.h"
#include "rl/step/policy_update.h"
#include "train/trainer.h"
#include "trainer_fixtures.h"
#include "util/error.h"

using namespace rlcpp;

using rlcpp::testing::expect_same_weights;
using rlcpp::testing::fixed_samples;
using rlcpp::testing::weights_of;

TEST(Trainer, PackAlignsTargetsWithResponses) {
  const auto samples = fixed_samples();
  const PackedBatch p = pack_samples(samples, 0, 2);
  ASSERT_EQ(p.ids.sizes(), (std::vector<int64_t>{2, 7}));
  // Row 0: prompt 5 6 7, response 8 9 10 11; position 2 predicts 8.
  EXPECT_EQ(p.targets[0][2].item<int64_t>(), 8);
  EXPECT_EQ(p.targets[0][5].item<int64_t>(), 11);
  EXPECT_EQ(p.targets[0][6].item<int64_t>(), -1);
  EXPECT_EQ(p.targets[0][1].item<int64_t>(), -1);
  EXPECT_EQ(p.response_mask[0].sum().item<float>(), 4.0f);
  // Row 1: prompt 12, response 13 14, then right padding.
  EXPECT_EQ(p.targets[1][0].item<int64_t>(), 13);
  EXPECT_EQ(p.attention_mask[1].sum().item<int64_t>(), 3);
  EXPECT_EQ(p.response_mask[1].sum().item<float>(), 2.0f);
}

TEST(Trainer, LogprobsEqualTheEnginesForItsOwnSamples) {
  auto model = Transformer::from_pretrained(rlcpp::testing::fixture("qwen3-tiny"));
  EngineConfig engine_config;
  engine_config.n_blocks = 128;
  engine_config.block_size = 8;
  Engine engine(model, engine_config);
  std::vector<GenerationRequest> requests(2);
  requests[0].prompt_ids = {10, 20, 30, 40, 50};
  requests[1].prompt_ids = {7};
  for (auto& r : requests) {
    r.params.temperature = 0.7;
    r.params.max_new_tokens = 9;
    r.n = 3;
    r.seed = 99;
  }
  const auto generated = engine.generate(requests);
  std::vector<Sample> samples;
  for (const auto& g : generated) samples.push_back(model_sample(requests[g.request].prompt_ids, g.token_ids, 0.0, g.logprobs));
  TrainerConfig config;
  config.temperature = 0.7;
  config.train_microbatch_size = 4;  // padded batches of different lengths
  Trainer trainer(model, nullptr, config);
  const auto logprobs = trainer.policy_logprobs(samples);
  double worst = 0;
  for (size_t k = 0; k < samples.size(); ++k) {
    ASSERT_EQ(logprobs[k].size(), samples[k].rollout_logprobs.size());
    for (size_t t = 0; t < logprobs[k].size(); ++t) worst = std::max(worst, std::abs(double(logprobs[k][t]) - samples[k].rollout_logprobs[t]));
  }
  EXPECT_LT(worst, 1e-5);  // the RL invariant (docs/architecture.md), through the trainer's padded batches
}

TEST(Trainer, MicrobatchSizeDoesNotChangeTheStep) {
  ModelOptions options;
  options.dtype = torch::kFloat64;
  const auto samples = fixed_samples();
  std::vector<std::vector<torch::Tensor>> results;
  for (int64_t micro : {1, 3, 4}) {
    auto model = Transformer::from_pretrained(rlcpp::testing::fixture("llama-tiny"), options);
    auto reference = Transformer::from_pretrained(rlcpp::testing::fixture("llama-tiny"), options);
    TrainerConfig config;
    config.train_microbatch_size = micro;
    config.loss.kl_coef = 0.05;
    config.optimizer.lr = 1e-2;
    Trainer trainer(model, reference, config);
    auto old = trainer.policy_logprobs(samples);
    auto ref = trainer.reference_logprobs(samples);
    // Perturb the policy so that ratios and KL are not trivially 1 and 0 in the second step.
    trainer.step({samples, old, ref, {}});
    auto metrics = trainer.step({samples, old, ref, {}}).values;
    EXPECT_GT(metrics["kl"], 0.0);
    results.push_back(weights_of(*model));
  }
  expect_same_weights(results, 1e-9);
}

TEST(Trainer, StepRaisesTheLikelihoodOfPositiveAdvantageResponses) {
  auto model = Transformer::from_pretrained(rlcpp::testing::fixture("qwen2-tiny"));
  TrainerConfig config;
  config.optimizer.lr = 3e-3;
  config.loss.aggregation = LossAggregation::kTokenLevel;
  Trainer trainer(model, nullptr, config);
  std::vector<Sample> samples = {model_sample({1, 2, 3}, {40, 41, 42}, 1.0), model_sample({1, 2, 3}, {50, 51, 52}, -1.0)};
  auto sum = [](const std::vector<float>& v) { double s = 0; for (float x : v) s += x; return s; };
  const auto before = trainer.policy_logprobs(samples);
  for (int step = 0; step < 5; ++step) {
    const auto old = trainer.policy_logprobs(samples);
    const auto m = trainer.step({samples, old, {}, {}}).values;
    if (step == 0) {
      EXPECT_NEAR(m.at("ratio_mean"), 1.0, 1e-6);  // old log-probs are the policy's own
    }
    EXPECT_GT(m.at("grad_norm"), 0.0);
  }
  const auto after = trainer.policy_logprobs(samples);
  EXPECT_GT(sum(after[0]), sum(before[0]) + 0.1);
  EXPECT_LT(sum(after[1]), sum(before[1]) - 0.1);
  EXPECT_EQ(trainer.n_steps(), 5);
}

// The sample record's per-token parts reach the loss: inserted tokens (a tool's output) are context
// only, whatever their advantage; per-token advantages equal to one value give that value's step
// bit for bit; a model token's own advantage moves the step.
TEST(Trainer, InsertedTokensAreNeverTrainedAndAdvantagesArePerToken) {
  ModelOptions options;
  options.dtype = torch::kFloat64;
  auto multi_turn = [](std::vector<double> advantages) {
    Sample s = model_sample({5, 6, 7}, {8, 9}, 0.0);
    s.append(SegmentKind::kInserted, {30, 31, 32}, {}, 0);
    s.append(SegmentKind::kModel, {10, 11}, {}, 0);
    s.advantages = std::move(advantages);
    return std::vector<Sample>{s, model_sample({12}, {13, 14}, -1.0)};
  };
  for (auto mode : {LossAggregation::kTokenLevel, LossAggregation::kSampleLevel}) {
    SCOPED_TRACE(loss_aggregations().name(mode));
    auto step = [&](const std::vector<Sample>& samples) {
      auto model = Transformer::from_pretrained(rlcpp::testing::fixture("llama-tiny"), options);
      TrainerConfig config;
      config.loss.kl_coef = 0;
      config.loss.aggregation = mode;
      config.optimizer.lr = 1e-2;
      config.train_microbatch_size = 1;  // each sample alone: the mask, not the padding, leaves tokens out
      Trainer trainer(model, nullptr, config);
      EXPECT_EQ(trainer.loss_tokens(samples), 4 + 2);  // the inserted 3 never count
      trainer.step({samples, trainer.policy_logprobs(samples), {}, {}});
      return weights_of(*model);
    };
    const auto uniform = step(multi_turn({0.75}));
    const auto per_token = step(multi_turn({0.75, 0.75, 0.75, 0.75, 0.75, 0.75, 0.75}));
    const auto other_inserted = step(multi_turn({0.75, 0.75, -9.0, 4.0, 100.0, 0.75, 0.75}));
    const auto other_model = step(multi_turn({0.75, 0.75, 0.75, 0.75, 0.75, 0.75, -0.75}));
    expect_same_weights({uniform, per_token}, 1e-300);        // the same loss, the same arithmetic
    expect_same_weights({uniform, other_inserted}, 1e-300);   // inserted tokens' advantages reach nothing
    double moved = 0;
    for (size_t k = 0; k < uniform.size(); ++k) moved = std::max(moved, (other_model[k] - uniform[k]).abs().max().item<double>());
    EXPECT_GT(moved, 1e-6);
  }
}

TEST(Trainer, ScheduleAndErrors) {
  auto model = Transformer::from_pretrained(rlcpp::testing::fixture("qwen2-tiny"));
  TrainerConfig config;
  config.optimizer.lr = 1.0;
  config.optimizer.warmup_steps = 2;
  config.optimizer.total_steps = 6;
  config.optimizer.lr_schedule = LrSchedule::kCosine;
  Trainer trainer(model, nullptr, config);
  EXPECT_DOUBLE_EQ(trainer.current_lr(), 0.5);  // warm-up step 1 of 2
  config.loss.kl_coef = 0.1;
  EXPECT_THROW_MSG(Trainer(model, nullptr, config), UserError, "reference model");
  config.loss.kl_coef = 0;
  config.train_microbatch_size = 0;
  EXPECT_THROW_MSG(Trainer(model, nullptr, config), UserError, "--train-microbatch-size 0");
}

TEST(Trainer, SftStepIsTheMaskedNllAndExactUnderMicrobatching) {
  ModelOptions options;
  options.dtype = torch::kFloat64;
  std::vector<SftSample> batch = {{{5, 6, 7, 8, 9}, {0, 0, 0, 1, 1}},
                                  {{3, 4}, {0, 1}},
                                  {{10, 11, 12, 13, 14, 15, 16}, {0, 0, 1, 1, 0, 1, 1}}};
  // The loss is -Σ log p(learned token) / learned tokens, computed here without the trainer.
  auto model0 = Transformer::from_pretrained(rlcpp::testing::fixture("llama-tiny"), options);
  double nll = 0, count = 0;
  for (const auto& s : batch) {
    auto ids = torch::tensor(std::vector<int64_t>(s.ids.begin(), s.ids.end())).unsqueeze(0);
    auto logp = torch::log_softmax(model0->forward(ids)[0], -1);
    for (size_t t = 1; t < s.ids.size(); ++t) {
      if (!s.loss_mask[t]) continue;
      nll -= logp[static_cast<int64_t>(t) - 1][s.ids[t]].item<double>();
      count += 1;
    }
  }
  std::vector<std::vector<torch::Tensor>> results;
  // Micro-batches of 1 to 3 examples, right-padded or padding-free, and by a budget of 9 tokens.
  for (int64_t layout = 0; layout < 8; ++layout) {
    auto model = Transformer::from_pretrained(rlcpp::testing::fixture("llama-tiny"), options);
    TrainerConfig config;
    config.train_microbatch_size = layout % 3 + 1;
    config.padding_free = layout % 2 == 0;
    config.max_tokens_per_micro_batch = layout >= 6 ? 9 : 0;
    config.optimizer.lr = 1e-2;
    Trainer trainer(model, nullptr, config);
    const auto m = trainer.sft_step(batch).values;
    EXPECT_NEAR(m.at("loss"), nll / count, 1e-9) << "layout " << layout;
    EXPECT_EQ(m.at("n_tokens"), count);
    results.push_back(weights_of(*model));
  }
  expect_same_weights(results, 1e-9);
}

TEST(Trainer, PolicyEntropyIsTheSoftmaxEntropyOfResponseTokens) {
  ModelOptions options;
  options.dtype = torch::kFloat64;
  auto model = Transformer::from_pretrained(rlcpp::testing::fixture("qwen2-tiny"), options);
  TrainerConfig config;
  config.temperature = 0.7;
  Trainer trainer(model, nullptr, config);
  const auto samples = fixed_samples();
  double entropy = -1;
  const auto logprobs = trainer.policy_logprobs(samples, &entropy);
  double sum = 0, count = 0;
  for (const auto& s : samples) {
    std::vector<int64_t> ids(s.prompt_ids.begin(), s.prompt_ids.end());
    ids.insert(ids.end(), s.response_ids.begin(), s.response_ids.end());
    auto logp = torch::log_softmax(model->forward(torch::tensor(ids).unsqueeze(0))[0] / 0.7, -1);
    for (size_t j = 0; j < s.response_ids.size(); ++j) {
      const auto row = logp[static_cast<int64_t>(s.prompt_ids.size() + j) - 1];
      sum += -(row.exp() * row).sum().item<double>();
      count += 1;
    }
  }
  EXPECT_NEAR(entropy, sum / count, 1e-6);
  EXPECT_NEAR(logprobs[0][1], torch::log_softmax(model->forward(torch::tensor(std::vector<int64_t>{5, 6, 7, 8})
                                                                    .unsqueeze(0))[0][3] / 0.7, -1)[9].item<double>(), 1e-5);
}

// --num-training-epoch > 1: the second pass reshuffles the samples into new mini-batches (seeded,
// so two identical runs agree bitwise), which changes the update against the in-order second pass.
TEST(Trainer, LaterEpochsReshuffleMiniBatchesDeterministically) {
  std::vector<SampleGroup> groups(4);
  for (int k = 0; k < 8; ++k) {
    groups[static_cast<size_t>(k / 2)].samples.push_back(
        model_sample({5, 6, k}, {static_cast<int32_t>(8 + k), 3, static_cast<int32_t>(k)}, k % 2 == 0 ? 1.0 - 0.1 * k : -0.4));
  }
  ModelOptions options;
  options.dtype = torch::kFloat64;
  RunConfig c;
  c.rollout.num_generations = 2;
  c.train.train_batch_size = 4;
  c.train.train_minibatch_size = 1;  // 4 mini-batches of one group each
  c.train.train_microbatch_size = 2;
  c.train.num_training_epoch = 2;
  c.algo.loss.kl_coef = 0;
  c.train.optimizer.lr = 1e-2;
  auto run = [&](const RunConfig& config, const std::vector<SampleGroup>& input) {
    auto model = Transformer::from_pretrained(rlcpp::testing::fixture("llama-tiny"), options);
    Trainer trainer(model, nullptr, rl_trainer_config(config, 1));
    update_policy(trainer, config, input);
    return model->parameters();
  };
  auto max_diff = [](const std::vector<torch::Tensor>& x, const std::vector<torch::Tensor>& y) {
    double d = 0;
    for (size_t k = 0; k < x.size(); ++k) d = std::max(d, (x[k] - y[k]).abs().max().item<double>());
    return d;
  };
  RunConfig other_seed = c;
  other_seed.runtime.seed = 7;
  RunConfig one_epoch = c, one_epoch_other_seed = other_seed;
  one_epoch.train.num_training_epoch = one_epoch_other_seed.train.num_training_epoch = 1;
  // Identical runs agree bitwise; the seed changes the second pass's mini-batches (so the update);
  // with one pass the seed changes nothing (the first pass takes the samples in order).
  EXPECT_EQ(max_diff(run(c, groups), run(c, groups)), 0.0);
  EXPECT_GT(max_diff(run(c, groups), run(other_seed, groups)), 1e-9);
  EXPECT_EQ(max_diff(run(one_epoch, groups), run(one_epoch_other_seed, groups)), 0.0);
}

// The entropy bonus differentiates the entropy: its value and gradient equal those of the softmax
// entropy computed from the full logits by autograd, and a step with the bonus runs and differs.
TEST(Trainer, EntropyBonusHasTheGradientOfTheSoftmaxEntropy) {
  ModelOptions options;
  options.dtype = torch::kFloat64;
  auto model = Transformer::from_pretrained(rlcpp::testing::fixture("qwen2-tiny"), options);
  const auto samples = fixed_samples();
  const PackedBatch batch = pack_samples(samples, 0, samples.size());
  auto head = model->token_logprobs_with_entropy(batch.ids, batch.targets, 0.7, batch.attention_mask);
  auto chunked = model->token_logprobs(batch.ids, batch.targets, 0.7, batch.attention_mask);
  EXPECT_LT((head.logprobs - chunked).abs().max().item<double>(), 1e-12);
  const auto weight = model->output_weight();
  head.entropy.sum().backward();
  const auto grad = weight.grad().clone();
  model->zero_grad();
  auto logp = torch::log_softmax(model->forward(batch.ids, batch.attention_mask) / 0.7, -1);
  auto reference = -(logp.exp() * logp).sum(-1) * batch.targets.ge(0).to(torch::kFloat64);
  EXPECT_LT((head.entropy.detach() - reference.detach()).abs().max().item<double>(), 1e-10);
  reference.sum().backward();
  EXPECT_GT(grad.abs().max().item<double>(), 1e-6);
  EXPECT_LT((grad - weight.grad()).abs().max().item<double>(), 1e-10);

  auto step = [&](double coef) {
    auto m = Transformer::from_pretrained(rlcpp::testing::fixture("qwen2-tiny"), options);
    TrainerConfig config;
    config.loss.entropy_coef = coef;
    config.optimizer.lr = 1e-2;
    Trainer trainer(m, nullptr, config);
    double before = 0;
    const auto old = trainer.policy_logprobs(samples, &before);
    const auto metrics = trainer.step({samples, old, {}, {}}).values;
    return std::make_tuple(metrics.at("entropy"), before, weights_of(*m));
  };
  const auto [entropy, no_grad_entropy, with_bonus] = step(0.1);
  const auto [no_entropy, unused, without] = step(0.0);
  EXPECT_GT(entropy, 0.0);
  EXPECT_NEAR(entropy, no_grad_entropy, 1e-10);  // the step's entropy is the policy's over the same tokens
  EXPECT_EQ(no_entropy, 0.0);    // not computed without it
  double diff = 0;
  for (size_t k = 0; k < with_bonus.size(); ++k) diff = std::max(diff, (with_bonus[k] - without[k]).abs().max().item<double>());
  EXPECT_GT(diff, 1e-9);
}

// A sample the skip threshold leaves out is out of the loss and of its denominators: the step
// equals a step on the other samples alone.
TEST(Trainer, SkippedSamplesLeaveTheLossAndItsDenominators) {
  ModelOptions options;
  options.dtype = torch::kFloat64;
  const auto samples = fixed_samples();
  for (auto mode : {LossAggregation::kTokenLevel, LossAggregation::kSampleLevel}) {
    auto run = [&](const std::vector<Sample>& input, const std::vector<uint8_t>& skipped) {
      auto m = Transformer::from_pretrained(rlcpp::testing::fixture("llama-tiny"), options);
      TrainerConfig config;
      config.loss.aggregation = mode;
      config.optimizer.lr = 1e-2;
      config.train_microbatch_size = 3;
      Trainer trainer(m, nullptr, config);
      PolicyMiniBatch mb{input, trainer.policy_logprobs(input), {}, skipped};
      const auto metrics = trainer.step(mb).values;
      return std::make_pair(metrics.at("n_skipped"), weights_of(*m));
    };
    std::vector<Sample> without_one = samples;
    without_one.erase(without_one.begin() + 1);
    const auto [n_skipped, skipped] = run(samples, {0, 1, 0, 0});
    const auto [none, subset] = run(without_one, {});
    EXPECT_EQ(n_skipped, 1.0);
    EXPECT_EQ(none, 0.0);
    expect_same_weights({skipped, subset}, 1e-12);
  }
  // The trainer's own decision: after a large update the policy's ratio on some sample exceeds 1.01.
  auto m = Transformer::from_pretrained(rlcpp::testing::fixture("llama-tiny"), options);
  TrainerConfig config;
  config.optimizer.lr = 5e-2;
  config.loss.skip_threshold = 1.01;
  Trainer trainer(m, nullptr, config);
  const auto old = trainer.policy_logprobs(samples);
  EXPECT_EQ(trainer.skipped_samples(samples, old), (std::vector<uint8_t>{0, 0, 0, 0}));  // ratio 1 everywhere
  trainer.step({samples, old, {}, {}});
  const auto after = trainer.skipped_samples(samples, old);
  EXPECT_GT(std::count(after.begin(), after.end(), 1), 0);
}

// Off-policy correction: samples whose rollout log-probs differ from the trainer's report the
// mismatch, and TIS weights their loss.
TEST(Trainer, MismatchMetricsAndTisWeightsOnStaleSamples) {
  std::vector<SampleGroup> groups(2);
  const auto samples = fixed_samples();
  for (size_t k = 0; k < samples.size(); ++k) groups[k / 2].samples.push_back(samples[k]);
  ModelOptions options;
  options.dtype = torch::kFloat64;
  auto model = Transformer::from_pretrained(rlcpp::testing::fixture("llama-tiny"), options);
  RunConfig c;
  c.rollout.num_generations = 2;
  c.train.train_batch_size = 2;
  c.train.train_minibatch_size = 2;
  c.train.train_microbatch_size = 4;
  c.algo.loss.kl_coef = 0;
  c.algo.loss.tis_cap = 2.0;
  Trainer trainer(model, nullptr, rl_trainer_config(c, 1));
  // The sampler's log-probs: the trainer's own, shifted by -0.3 on every token (an older policy).
  const auto own = trainer.policy_logprobs(samples);
  for (size_t k = 0; k < samples.size(); ++k) {
    auto& s = groups[k / 2].samples[k % 2];
    s.rollout_logprobs = own[k];
    for (auto& x : s.rollout_logprobs) x -= 0.3f;
  }
  const auto update = update_policy(trainer, c, groups);
  EXPECT_NEAR(update.metrics.at("mismatch_abs_mean"), 0.3, 2e-6);
  EXPECT_NEAR(update.metrics.at("mismatch_abs_max"), 0.3, 2e-6);
  EXPECT_NEAR(update.metrics.at("mismatch_kl"), std::exp(0.3) - 0.3 - 1, 1e-6);
  EXPECT_NEAR(update.metrics.at("tis_weight_mean"), std::exp(0.3), 1e-5);  // under the cap of 2
  EXPECT_EQ(update.metrics.at("tis_clip_frac"), 0.0);
}

// A non-finite gradient is not applied: the weights stay, the step is counted as non-finite (and
// in the schedule), and the run stops after --max-nonfinite-steps such steps in a row.
TEST(Trainer, NonFiniteStepsAreSkippedAndCounted) {
  auto model = Transformer::from_pretrained(rlcpp::testing::fixture("llama-tiny"));
  TrainerConfig config;
  config.optimizer.lr = 1e-2;
  Trainer trainer(model, nullptr, config);
  auto samples = fixed_samples();
  samples[1].set_advantage(std::nan(""));
  const auto before = weights_of(*model);
  const auto metrics = trainer.step({samples, trainer.policy_logprobs(samples), {}, {}}).values;
  EXPECT_EQ(metrics.at("nonfinite"), 1.0);
  EXPECT_EQ(trainer.n_steps(), 1);
  expect_same_weights({before, weights_of(*model)}, 1e-300);
  samples[1].set_advantage(-1.0);  // the next finite step applies
  EXPECT_EQ(trainer.step({samples, trainer.policy_logprobs(samples), {}, {}}).values.at("nonfinite"), 0.0);
  double moved = 0;
  const auto after = weights_of(*model);
  for (size_t k = 0; k < after.size(); ++k) moved = std::max(moved, (after[k] - before[k]).abs().max().item<double>());
  EXPECT_GT(moved, 0.0);

  TrainOptions c;
  c.max_nonfinite_steps = 2;
  int64_t consecutive = 0;
  PolicyUpdate bad, good;
  bad.metrics = {{"nonfinite", 1.0}, {"optimizer_updates", 1.0}};
  good.metrics = {{"nonfinite", 0.0}, {"optimizer_updates", 1.0}};
  check_nonfinite(c, bad, 1, consecutive);
  check_nonfinite(c, good, 2, consecutive);  // a good step resets the count
  EXPECT_EQ(consecutive, 0);
  check_nonfinite(c, bad, 3, consecutive);
  EXPECT_THROW_MSG(check_nonfinite(c, bad, 4, consecutive), UserError, "step 4: 2 steps in a row", "--max-nonfinite-steps 2",
                   "last checkpoint intact");
}

// The on-policy shortcut: with the policy's version given, a step of one epoch and one mini-batch
// over groups of that version takes the sampler's log-probs as the old ones (no scoring pass) and
// reports entropy and mismatch from its own forward. The update equals the recompute path's within
// 1e-5 (the engine-vs-trainer invariant), on every fixture; a stale group turns it off.
TEST(Trainer, OnPolicyStepReusesTheSamplersLogprobs) {
  for (const char* name : {"qwen2-tiny", "qwen3-tiny", "llama-tiny"}) {
    SCOPED_TRACE(name);
    auto sampler_model = Transformer::from_pretrained(rlcpp::testing::fixture(name));
    EngineConfig engine_config;
    engine_config.n_blocks = 128;
    engine_config.block_size = 8;
    Engine engine(sampler_model, engine_config);
    std::vector<GenerationRequest> requests(2);
    requests[0].prompt_ids = {10, 20, 30, 40, 50};
    requests[1].prompt_ids = {7, 8};
    for (auto& r : requests) {
      r.params.temperature = 1.3;
      r.params.max_new_tokens = 7;
      r.n = 2;
      r.seed = 5;
    }
    std::vector<SampleGroup> groups(2);
    for (const auto& g : engine.generate(requests)) {
      const double advantage = 1.0 - 0.6 * static_cast<double>(g.sample) - 0.3 * static_cast<double>(g.request);
      groups[g.request].samples.push_back(
          model_sample(requests[g.request].prompt_ids, g.token_ids, advantage, g.logprobs, /*policy_version=*/3));
    }
    RunConfig c;
    c.rollout.num_generations = 2;
    c.train.train_batch_size = 2;
    c.train.train_minibatch_size = 2;
    c.train.train_microbatch_size = 3;  // two micro-batches, padded
    c.rollout.sampling.temperature = 1.3;
    c.algo.loss.kl_coef = 0;
    // AdamW's first step is lr · sign(g) where |g| >> eps, which would turn a 1e-7 difference in a
    // near-zero gradient into a full step: with lr = eps >> |g| the update is the (clipped) gradient,
    // large enough that fp32 rounding of the weights does not hide its differences.
    c.train.optimizer.lr = 1e3;
    c.train.optimizer.eps = 1e3;
    c.train.optimizer.weight_decay = 0;
    ASSERT_EQ(on_policy_shortcut_off(c), "");
    auto update = [&](std::optional<int64_t> version, const std::vector<SampleGroup>& input) {
      auto model = Transformer::from_pretrained(rlcpp::testing::fixture(name));
      const auto before = weights_of(*model);
      Trainer trainer(model, nullptr, rl_trainer_config(c, 1));
      const auto out = update_policy(trainer, c, input, nullptr, {}, version);
      auto after = weights_of(*model);
      for (size_t k = 0; k < after.size(); ++k) after[k] -= before[k];
      return std::make_pair(out.metrics, after);
    };
    const auto [reused, reused_update] = update(3, groups);
    const auto [scored, scored_update] = update(std::nullopt, groups);
    EXPECT_EQ(reused.at("old_logprobs_reused"), 1.0);
    EXPECT_EQ(scored.at("old_logprobs_reused"), 0.0);
    double largest = 0, worst = 0;
    for (size_t k = 0; k < scored_update.size(); ++k) {
      largest = std::max(largest, scored_update[k].abs().max().item<double>());
      worst = std::max(worst, (reused_update[k] - scored_update[k]).abs().max().item<double>());
    }
    EXPECT_GT(largest, 0.0);
    EXPECT_LT(worst, 1e-5 * largest);
    EXPECT_NEAR(reused.at("grad_norm"), scored.at("grad_norm"), 1e-5 * scored.at("grad_norm"));
    // The forward's entropy and mismatch are the scoring pass's.
    EXPECT_GT(scored.at("entropy"), 0.0);
    EXPECT_NEAR(reused.at("entropy"), scored.at("entropy"), 1e-5);
    EXPECT_NEAR(reused.at("mismatch_abs_max"), scored.at("mismatch_abs_max"), 1e-6);
    EXPECT_LT(reused.at("mismatch_abs_max"), 1e-5);
    EXPECT_NEAR(reused.at("loss"), scored.at("loss"), 1e-5);
    // Off the shortcut: a group from an older policy, two epochs, or the setting off.
    auto stale = groups;
    stale[1].samples[0].segments[0].policy_version = 2;
    EXPECT_EQ(update(3, stale).first.at("old_logprobs_reused"), 0.0);
    c.train.num_training_epoch = 2;
    EXPECT_NE(on_policy_shortcut_off(c), "");
    EXPECT_EQ(update(3, groups).first.at("old_logprobs_reused"), 0.0);
    c.train.num_training_epoch = 1;
    c.train.reuse_rollout_logprobs = false;
    EXPECT_EQ(update(3, groups).first.at("old_logprobs_reused"), 0.0);
  }
}

// The AdamW kernel itself against LibTorch's AdamW arithmetic written out with tensor ops, on odd
// lengths (vector body and scalar tail), with weight decay and bias correction.
TEST(Trainer, AdamWKernelComputesLibTorchsUpdate) {
  torch::manual_seed(5);
  for (int64_t n : {1, 7, 16, 17, 1000, 40001}) {
    auto p = torch::randn({n}), g = torch::randn({n}), m = torch::randn({n}) * 0.1, v = torch::rand({n}) * 0.01;
    const double lr = 3e-2, wd = 0.1, beta1 = 0.8, beta2 = 0.95, eps = 1e-6;
    const int64_t step = 3;
    const double bias1 = 1 - std::pow(beta1, step), bias2 = 1 - std::pow(beta2, step);
    auto m_ref = m * beta1 + g * (1 - beta1);
    auto v_ref = v * beta2 + g * g * (1 - beta2);
    auto p_ref = p * (1 - lr * wd) - (lr / bias1) * m_ref / (v_ref.sqrt() / std::sqrt(bias2) + eps);
    kernels::adamw(p.data_ptr<float>(), g.data_ptr<float>(), m.data_ptr<float>(), v.data_ptr<float>(), n,
                   {static_cast<float>(1 - lr * wd), static_cast<float>(beta1), static_cast<float>(1 - beta1),
                    static_cast<float>(beta2), static_cast<float>(1 - beta2), static_cast<float>(eps),
                    static_cast<float>(lr / bias1), static_cast<float>(std::sqrt(bias2))});
    EXPECT_TRUE(torch::allclose(m, m_ref, 1e-6, 1e-7)) << n;
    EXPECT_TRUE(torch::allclose(v, v_ref, 1e-6, 1e-8)) << n;
    EXPECT_TRUE(torch::allclose(p, p_ref, 1e-6, 1e-6)) << n;
  }
}

// The fused AdamW step follows LibTorch's AdamW (fp32, odd sizes, weight decay, bias correction)
// and shares its state: LibTorch's own step continues from it.
TEST(Trainer, FusedAdamWFollowsLibTorchsAdamW) {
  torch::manual_seed(4);
  std::vector<torch::Tensor> fused, plain;
  for (auto shape : std::vector<std::vector<int64_t>>{{37}, {5, 13}, {1000, 3}, {1}}) {
    auto p = torch::randn(shape);
    fused.push_back(p.clone().requires_grad_());
    plain.push_back(p.clone().requires_grad_());
  }
  torch::optim::AdamWOptions options(3e-2);
  options.betas({0.8, 0.95}).eps(1e-6).weight_decay(0.1);
  torch::optim::AdamW a(fused, options), b(plain, options);
  auto set_grads = [&](int step) {
    torch::manual_seed(100 + step);
    for (size_t k = 0; k < fused.size(); ++k) {
      auto g = torch::randn(fused[k].sizes()) * (k == 1 ? 1e-4 : 1.0);
      fused[k].mutable_grad() = g.clone();
      plain[k].mutable_grad() = g.clone();
    }
  };
  auto expect_close = [&](const char* when) {
    for (size_t k = 0; k < fused.size(); ++k) {
      const double scale = plain[k].abs().max().item<double>();
      EXPECT_LT((fused[k] - plain[k]).abs().max().item<double>(), 1e-6 * std::max(1.0, scale)) << when << ", parameter " << k;
    }
  };
  for (int step = 0; step < 3; ++step) {
    set_grads(step);
    const auto version = fused[0]._version();
    adamw_step(a);
    EXPECT_GT(fused[0]._version(), version);  // an in-place write, as LibTorch's step (the engine watches it)
    b.step();
    expect_close("fused steps");
  }
  EXPECT_EQ(a.state().size(), fused.size());  // the optimizer's own state, under its own keys
  set_grads(3);
  a.step();  // LibTorch's step continues the fused one's moments and step count
  b.step();
  expect_close("LibTorch's step after fused ones");
  EXPECT_EQ(a.state().size(), fused.size());
}

// The fused loss head (log-probs, loss gradient and head gradients in one pass per vocabulary
// chunk) takes the same step as the chunked head with its recomputing backward: packed batches of
// mixed lengths, clipped ratios on both sides, token- and sample-level losses, a KL penalty, dual
// clip and TIS; 1e-6 of the update in fp32, 1e-10 in fp64, on every fixture.
TEST(Trainer, FusedLossHeadTakesTheSameStep) {
  for (const char* name : {"qwen2-tiny", "qwen3-tiny", "llama-tiny"}) {
    for (auto dtype : {torch::kFloat32, torch::kFloat64}) {
      SCOPED_TRACE(std::string(name) + " " + c10::toString(dtype));
      ModelOptions options;
      options.dtype = dtype;
      options.logprob_chunk_tokens = 5;  // several chunks per micro-batch
      auto samples = fixed_samples();
      for (size_t k = 0; k < samples.size(); ++k) samples[k].rollout_logprobs.assign(samples[k].response_ids.size(), -1.5f);
      for (int variant = 0; variant < 3; ++variant) {
        TrainerConfig config;
        config.train_microbatch_size = 3;  // a padded micro-batch of 3 and one of 1
        config.temperature = 0.8;
        config.optimizer.lr = 1e3;  // the update is the gradient (see OnPolicyStepReusesTheSamplersLogprobs)
        config.optimizer.eps = 1e3;
        config.optimizer.weight_decay = 0;
        config.optimizer.max_grad_norm = 0;
        config.loss.aggregation = variant == 1 ? LossAggregation::kSampleLevel : LossAggregation::kTokenLevel;
        config.loss.kl_coef = variant == 2 ? 0.3 : 0.0;
        if (variant == 2) {
          config.loss.clip_ratio_c = 3.0;
          config.loss.tis_cap = 2.0;
        }
        auto update = [&](bool fused, std::map<std::string, double>* metrics) {
          auto model = Transformer::from_pretrained(rlcpp::testing::fixture(name), options);
          const auto before = weights_of(*model);
          config.fused_head = fused;
          auto reference = config.loss.kl_coef != 0 ? Transformer::from_pretrained(rlcpp::testing::fixture(name), options) : nullptr;
          Trainer trainer(model, reference, config);
          auto old = trainer.policy_logprobs(samples);
          for (size_t k = 0; k < old.size(); ++k) {
            for (size_t t = 0; t < old[k].size(); ++t) old[k][t] += (t % 3 == 0) ? 0.4f : (t % 3 == 1 ? -0.3f : 0.01f);
          }
          PolicyMiniBatch mb{samples, old, {}, {}};
          if (config.loss.kl_coef != 0) {
            mb.ref_logprobs = old;
            for (auto& row : mb.ref_logprobs) for (auto& x : row) x -= 0.2f;
          }
          *metrics = trainer.step(mb).values;
          auto after = weights_of(*model);
          for (size_t k = 0; k < after.size(); ++k) after[k] -= before[k];
          return after;
        };
        std::map<std::string, double> fused_metrics, plain_metrics;
        const auto fused = update(true, &fused_metrics);
        const auto plain = update(false, &plain_metrics);
        double largest = 0, worst = 0;
        for (size_t k = 0; k < plain.size(); ++k) {
          largest = std::max(largest, plain[k].abs().max().item<double>());
          worst = std::max(worst, (fused[k] - plain[k]).abs().max().item<double>());
        }
        EXPECT_GT(largest, 0.0) << "variant " << variant;
        EXPECT_LT(worst, (dtype == torch::kFloat64 ? 1e-10 : 1e-6) * largest) << "variant " << variant;
        EXPECT_GT(plain_metrics.at("clip_frac_low") + plain_metrics.at("clip_frac_high"), 0.0) << "variant " << variant;
        for (const char* key : {"loss", "pg_loss", "kl", "clip_frac_low", "clip_frac_high", "grad_norm"}) {
          EXPECT_NEAR(fused_metrics.at(key), plain_metrics.at(key), 1e-6 * std::max(1.0, std::abs(plain_metrics.at(key))))
              << key << ", variant " << variant;
        }
      }
    }
  }
}
