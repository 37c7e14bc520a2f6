// Pipeline parallelism: a model split into stages, each holding its layers under their whole-model
// names, chained in one process equals the whole model (hidden states, log-probs and every
// gradient, the tied embedding's summed over its two copies), on every fixture and on 4-layer
// models (tied and untied head) at 2, 3 and 4 stages. Under mpirun (-np 2, -np 3: every rank one
// stage) the trainer over the stages takes the steps one rank takes with the whole model: the same
// weights, loss metrics, gradient norm and log-probs (fp64, to 1e-12), through the fused, chunked
// and entropy heads, with a reference model, gradient checkpointing and more micro-batches than
// stages and fewer.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "comm/mpi.h"
#include "model/transformer.h"
#include "test_util.h"
#include "train/pipeline.h"
#include "train/trainer.h"

using namespace rlcpp;

namespace {

ModelConfig four_layers(bool tied) {
  nlohmann::json j = {{"model_type", "qwen2"},          {"architectures", {"Qwen2ForCausalLM"}},
                      {"vocab_size", 97},               {"hidden_size", 32},
                      {"intermediate_size", 64},        {"num_hidden_layers", 4},
                      {"num_attention_heads", 4},       {"num_key_value_heads", 2},
                      {"max_position_embeddings", 128}, {"rms_norm_eps", 1e-6},
                      {"rope_theta", 10000.0},          {"tie_word_embeddings", tied},
                      {"hidden_act", "silu"}};
  return ModelConfig::from_json(j, "4-layer test config");
}

ModelOptions fp64(PipelineStage stage = {}, bool checkpointing = false) {
  ModelOptions o;
  o.dtype = torch::kFloat64;
  o.logprob_chunk_tokens = 7;  // several chunks per batch
  o.gradient_checkpointing = checkpointing;
  o.stage = stage;
  return o;
}

struct Split {
  std::string name;
  std::shared_ptr<Transformer> whole;
  std::vector<std::shared_ptr<Transformer>> stages;
};

// The whole model and its `count` stages with the whole model's weights.
Split split(const std::string& name, const std::shared_ptr<Transformer>& whole, int count, bool checkpointing = false) {
  Split s{name, whole, {}};
  for (int k = 0; k < count; ++k) {
    auto stage = std::make_shared<Transformer>(whole->config(), fp64(pipeline_stage(whole->config(), k, count), checkpointing));
    stage->load_weights(whole->named_weights(), "the whole model");
    s.stages.push_back(stage);
  }
  return s;
}

std::shared_ptr<Transformer> random_model(bool tied, uint64_t seed, bool checkpointing = false) {
  auto m = std::make_shared<Transformer>(four_layers(tied), fp64({}, checkpointing));
  m->init_weights(0.2, seed);
  return m;
}

// Every fixture and both 4-layer models, at every stage count from 2 to its layers (at most 4).
std::vector<Split> splits() {
  std::vector<Split> out;
  for (const auto& dir : rlcpp::testing::fixture_dirs()) {
    auto whole = Transformer::from_pretrained(dir, fp64());
    out.push_back(split(dir.filename().string() + "/2", whole, 2));
  }
  for (const bool tied : {true, false}) {
    const auto whole = random_model(tied, tied ? 3 : 4);
    for (int count = 2; count <= 4; ++count) {
      out.push_back(split(std::string(tied ? "tied" : "untied") + "/" + std::to_string(count), whole, count));
    }
  }
  return out;
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

}  // namespace

TEST(PipelineStages, HoldTheirLayersUnderTheWholeModelsNames) {
  const auto whole = random_model(true, 1);
  const auto s = split("tied", whole, 3);
  std::map<std::string, int> holders;
  for (const auto& stage : s.stages) {
    for (const auto& item : stage->named_parameters()) ++holders[item.key()];
  }
  for (const auto& item : whole->named_parameters()) {
    // The tied embedding is on the first and the last stage; every other weight on one.
    const int expected = item.key() == "model.embed_tokens.weight" ? 2 : 1;
    EXPECT_EQ(holders[item.key()], expected) << item.key();
  }
  EXPECT_EQ(holders.size(), whole->named_parameters().size());
  EXPECT_TRUE(s.stages[0]->holds_weight("model.layers.0.mlp.up_proj.weight"));
  EXPECT_FALSE(s.stages[0]->holds_weight("model.norm.weight"));
  EXPECT_TRUE(s.stages[2]->holds_weight("model.embed_tokens.weight"));
  EXPECT_FALSE(s.stages[1]->holds_weight("model.embed_tokens.weight"));
  // An unknown name is still refused.
  EXPECT_THROW(s.stages[1]->update_weights({{"model.nonsense", torch::zeros({1})}}, "test"), UserError);
  EXPECT_THROW(pipeline_stage(whole->config(), 0, 5), UserError);
}

TEST(PipelineStages, BalancedByTheCostsGiven) {
  const ModelConfig c = four_layers(true);
  auto layers = [&](int count, const StageCosts& costs) {
    std::vector<std::pair<int64_t, int64_t>> out;
    for (int k = 0; k < count; ++k) {
      const auto s = pipeline_stage(c, k, count, costs);
      out.emplace_back(s.layer_begin, s.layer_end);
    }
    return out;
  };
  using Split = std::vector<std::pair<int64_t, int64_t>>;
  // A head as costly as 3 layers: 3 layers and 1 (4 each), not 2 and 2 (2 and 5).
  EXPECT_EQ(layers(2, {1, 0, 3}), (Split{{0, 3}, {3, 4}}));
  EXPECT_EQ(layers(2, {2, 0, 6}), (Split{{0, 3}, {3, 4}}));  // only ratios count
  EXPECT_EQ(layers(2, {1, 3, 0}), (Split{{0, 1}, {1, 4}}));  // a costly embedding
  EXPECT_EQ(layers(2, {1, 0, 0}), (Split{{0, 2}, {2, 4}}));
  // Work per token is the default: this model's head (97 x 32) is a third of a layer's 9 216 multiply-adds.
  const StageCosts work = work_stage_costs(c);
  EXPECT_EQ(work.layer, 32.0 * 32 * 2 + 2 * 32 * 16 + 3 * 32 * 64);
  EXPECT_EQ(work.head, 97.0 * 32);
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(pipeline_stage(c, k, 2).layer_begin, pipeline_stage(c, k, 2, work).layer_begin);
  }
  EXPECT_THROW(pipeline_stage(c, 0, 5, work), UserError);
  // Measured on this machine, with a vocabulary wide enough that the head is 70 layers' work (a
  // head as cheap as this model's is within the timings' noise when other tests share the cores):
  // it takes longer than a layer, and the last of 3 stages keeps one layer beside it.
  ModelConfig wide = c;
  wide.vocab_size = 20000;
  const StageCosts measured = measure_stage_costs(wide, fp64(), LoraConfig{}, 4, 64, 2);
  EXPECT_GT(measured.layer, 0);
  EXPECT_GE(measured.embedding, 0);
  EXPECT_GT(measured.head, measured.layer) << "a layer " << measured.layer << " s, the head " << measured.head << " s";
  std::vector<std::pair<int64_t, int64_t>> split;
  for (int k = 0; k < 3; ++k) {
    const auto s = pipeline_stage(wide, k, 3, measured);
    split.emplace_back(s.layer_begin, s.layer_end);
  }
  EXPECT_EQ(split.front().first, 0);
  EXPECT_EQ(split.back(), std::make_pair(int64_t{3}, int64_t{4}));
}

TEST(PipelineStages, ChainedEqualTheWholeModelAndItsGradients) {
  for (const auto& s : splits()) {
    SCOPED_TRACE(s.name);
    const auto& c = s.whole->config();
    auto g = at::detail::createCPUGenerator(7);
    auto ids = at::randint(1, c.vocab_size, {3, 9}, g, torch::TensorOptions().dtype(torch::kInt64));
    auto mask = torch::ones({3, 9}, torch::kInt64);
    mask[1].narrow(0, 0, 3).zero_();  // left padding
    auto targets = ids.roll(-1, 1);
    targets.select(1, 8).fill_(-1);
    const auto weights = at::rand({3, 9}, g, torch::TensorOptions().dtype(torch::kFloat64));

    s.whole->zero_grad();
    auto expected = s.whole->token_logprobs(ids, targets, 0.8, mask);
    (expected * weights).sum().backward();

    torch::Tensor h;
    for (size_t k = 0; k + 1 < s.stages.size(); ++k) {
      s.stages[k]->zero_grad();
      ForwardContext context;
      context.stage_input = h;
      h = s.stages[k]->hidden_states(ids, mask, context);
    }
    s.stages.back()->zero_grad();
    ForwardContext context;
    context.stage_input = h;
    auto got = s.stages.back()->token_logprobs(ids, targets, 0.8, mask, nullptr, context);
    EXPECT_LT(max_diff(got, expected), 1e-12);
    (got * weights).sum().backward();

    const auto whole_params = s.whole->named_parameters();
    std::map<std::string, torch::Tensor> grads;  // summed over the stages holding each weight
    for (const auto& stage : s.stages) {
      for (const auto& item : stage->named_parameters()) {
        auto& sum = grads[item.key()];
        sum = sum.defined() ? sum + item.value().grad() : item.value().grad().clone();
      }
    }
    for (const auto& item : whole_params) {
      ASSERT_TRUE(grads.count(item.key())) << item.key();
      EXPECT_LT(max_diff(grads[item.key()], item.value().grad()), 1e-12) << item.key();
    }
  }
}

namespace {

std::shared_ptr<Communicator> world() { return mpi_world(); }

std::vector<Sample> step_samples() {
  std::vector<Sample> s;
  s.push_back(model_sample({5, 6, 7}, {8, 9, 10, 11}, 1.0));
  s.push_back(model_sample({12}, {13, 14}, -1.0));
  s.push_back(model_sample({3, 4, 5, 6, 7, 8}, {9}, 0.5, {}, 0, true));
  s.push_back(model_sample({1, 2}, {3, 4, 5, 6, 7}, -0.25));
  s.push_back(model_sample({20, 21}, {22, 23, 24}, 0.75));
  return s;
}

struct StepCase {
  std::string name;
  bool tied = true;
  double entropy_coef = 0, kl_coef = 0;
  bool fused = true, checkpointing = false, score = false;
  int64_t micro = 2;
};

// The trainer over `whole` and over this rank's stage of it take the same steps.
void expect_same_steps(const StepCase& t) {
  SCOPED_TRACE(t.name);
  const int count = world()->size(), index = world()->rank();
  const auto whole = random_model(t.tied, 21, t.checkpointing);
  auto stage = std::make_shared<Transformer>(whole->config(), fp64(pipeline_stage(whole->config(), index, count), t.checkpointing));
  stage->load_weights(whole->named_weights(), "the whole model");
  std::shared_ptr<Transformer> whole_ref, stage_ref;
  if (t.kl_coef != 0) {
    whole_ref = random_model(t.tied, 22);
    stage_ref = std::make_shared<Transformer>(whole->config(), fp64(stage->options().stage));
    stage_ref->load_weights(whole_ref->named_weights(), "the whole reference");
  }
  TrainerConfig config;
  config.optimizer.lr = 1e-2;
  config.optimizer.max_grad_norm = 0.5;  // clipping applies: the norm must be the whole model's
  config.train_microbatch_size = t.micro;
  config.temperature = 0.9;
  config.fused_head = t.fused;
  config.loss.entropy_coef = t.entropy_coef;
  config.loss.kl_coef = t.kl_coef;
  Trainer one(whole, whole_ref, config), piped(stage, stage_ref, config);
  piped.enable_pipeline(world());
  const auto samples = step_samples();
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    PolicyMiniBatch mb;
    mb.samples = samples;
    mb.old_logprobs = one.policy_logprobs(samples);
    const auto piped_old = piped.policy_logprobs(samples);
    ASSERT_EQ(piped_old.size(), mb.old_logprobs.size());
    for (size_t k = 0; k < samples.size(); ++k) {
      EXPECT_LT(max_diff(torch::tensor(piped_old[k]), torch::tensor(mb.old_logprobs[k])), 1e-6);  // fp32 rows
    }
    if (t.kl_coef != 0) {
      mb.ref_logprobs = one.reference_logprobs(samples);
      EXPECT_EQ(piped.reference_logprobs(samples), mb.ref_logprobs);
    }
    mb.score = t.score;
    const auto expected = one.step(mb);
    const auto got = piped.step(mb);
    for (const auto& [key, value] : expected.values) {
      ASSERT_TRUE(got.values.count(key)) << key;
      EXPECT_NEAR(got.values.at(key), value, 1e-12 * std::max(1.0, std::abs(value))) << key;
    }
    EXPECT_GE(got.values.at("pp_bubble"), 0.0);
    EXPECT_EQ(got.logprobs, expected.logprobs);
    const auto whole_params = whole->named_parameters();
    for (const auto& item : stage->named_parameters()) {
      EXPECT_LT(max_diff(item.value(), *whole_params.find(item.key())), 1e-12) << item.key();
    }
  }
}

}  // namespace

TEST(PipelineTrainer, StepsEqualOneRank) {
  if (world()->size() < 2) GTEST_SKIP() << "run under mpirun -np 2 or more";
  expect_same_steps({"fused, tied", true});
  expect_same_steps({"fused, untied, one sample a micro-batch", false, 0, 0, true, false, false, 1});
  expect_same_steps({"chunked, scored, checkpointing", true, 0, 0, false, true, true});
  expect_same_steps({"entropy bonus and KL, untied", false, 1e-2, 0.1, true, false, true, 3});
  expect_same_steps({"fused, one micro-batch", true, 0, 0, true, false, false, 8});
}
