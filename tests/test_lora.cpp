// LoRA adapters, activation checkpointing and a half-precision frozen base, on the fixture models:
// a fresh adapter leaves the model bit for bit; adapter gradients match finite differences in fp64;
// merged and unmerged agree; PEFT's file format; checkpointed gradients equal plain ones.
#include <torch/torch.h>

#include <fstream>

#include "io/safetensors.h"
#include "model/transformer.h"
#include "finite_differences.h"
#include "test_util.h"
#include "train/trainer.h"
#include "util/json.h"

using namespace rlcpp;
using rlcpp::testing::TempDir;

namespace {

LoraConfig lora(int64_t rank, double alpha = 0, double dropout = 0) {
  LoraConfig c;
  c.rank = rank;
  c.alpha = alpha;
  c.dropout = dropout;
  return c;
}

// Random B (a fresh one is zero), so the adapters change the model.
void randomise_b(Transformer& model, uint64_t seed) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(seed);
  for (const auto& [name, t] : model.trained_weights()) {
    if (name.ends_with("lora_B.weight")) t.copy_(torch::randn(t.sizes(), t.options()) * 0.05);
  }
}

struct Inputs {
  torch::Tensor ids, mask, targets;
};

Inputs inputs(const Transformer& model, uint64_t seed) {
  torch::manual_seed(seed);
  const int64_t vocab = model.config().vocab_size;
  Inputs in{torch::randint(0, vocab, {2, 9}, torch::kInt64), torch::ones({2, 9}, torch::kInt64),
            torch::randint(0, vocab, {2, 9}, torch::kInt64)};
  in.mask[1].narrow(0, 0, 3).fill_(0);
  in.targets[1].narrow(0, 0, 3).fill_(-1);
  return in;
}

}  // namespace

TEST(Lora, FreshAdaptersLeaveTheModelBitForBit) {
  for (const auto& dir : rlcpp::testing::fixture_dirs()) {
    SCOPED_TRACE(dir.string());
    auto base = Transformer::from_pretrained(dir);
    auto adapted = Transformer::from_pretrained(dir);
    adapted->add_adapters(lora(4, 8), 7);
    // all-linear: 7 layers per decoder layer, A and B each
    EXPECT_EQ(adapted->trained_weights().size(), static_cast<size_t>(2 * 7 * base->config().num_hidden_layers));
    const auto in = inputs(*base, 1);
    torch::NoGradGuard no_grad;
    EXPECT_TRUE(torch::equal(base->forward(in.ids, in.mask), adapted->forward(in.ids, in.mask)));
  }
}

TEST(Lora, OnlyAdaptersAreTrainedAndTheReferenceIsTheBase) {
  const auto dir = rlcpp::testing::fixture_dirs().front();
  auto base = Transformer::from_pretrained(dir);
  auto policy = Transformer::from_pretrained(dir);
  policy->add_adapters(lora(2), 3);
  randomise_b(*policy, 4);
  for (const auto& p : policy->parameters()) EXPECT_FALSE(p.requires_grad());
  const auto trained = policy->trainable_parameters();
  EXPECT_EQ(trained.size(), policy->trained_weights().size());
  for (const auto& p : trained) EXPECT_TRUE(p.requires_grad());
  const auto in = inputs(*base, 2);
  torch::NoGradGuard no_grad;
  const auto with = policy->forward(in.ids, in.mask);
  EXPECT_FALSE(torch::equal(with, base->forward(in.ids, in.mask)));
  ForwardContext base_only;  // a pass's own context: nothing on the model is switched
  base_only.adapters = false;
  EXPECT_TRUE(torch::equal(policy->forward(in.ids, in.mask, base_only), base->forward(in.ids, in.mask)));
  EXPECT_TRUE(torch::equal(policy->forward(in.ids, in.mask), with));

  // The trainer: a KL run needs no second model; its reference log-probs are the base's.
  TrainerConfig config;
  config.loss.kl_coef = 0.1;
  Trainer trainer(policy, nullptr, config);
  EXPECT_EQ(trainer.optimizer().param_groups().front().params().size(), trained.size());
  const Sample s = model_sample({1, 2, 3}, {4, 5, 6, 7}, 0.0);
  const auto ref = trainer.reference_logprobs({s});
  Trainer plain(base, nullptr, TrainerConfig{});
  EXPECT_EQ(ref, plain.policy_logprobs({s}));
  EXPECT_NE(ref, trainer.policy_logprobs({s}));
}

TEST(Lora, AdapterGradientsMatchFiniteDifferencesInDouble) {
  for (const auto& dir : rlcpp::testing::fixture_dirs()) {
    SCOPED_TRACE(dir.string());
    ModelOptions options;
    options.dtype = torch::kFloat64;
    auto model = Transformer::from_pretrained(dir, options);
    model->add_adapters(lora(3, 6), 5);
    randomise_b(*model, 6);
    const auto in = inputs(*model, 3);
    auto weights = torch::randn({2, 9}, torch::kFloat64);
    auto loss_fn = [&] { return (model->token_logprobs(in.ids, in.targets, 0.9, in.mask) * weights).sum(); };
    loss_fn().backward();
    for (const auto& p : model->parameters()) EXPECT_FALSE(p.grad().defined());
    const int checked = rlcpp::testing::expect_finite_difference_gradients(model->trained_weights(), loss_fn);
    EXPECT_GT(checked, 40);
  }
}

TEST(Lora, MergedWeightsGiveTheAdaptedModel) {
  for (const auto& dir : rlcpp::testing::fixture_dirs()) {
    SCOPED_TRACE(dir.string());
    auto model = Transformer::from_pretrained(dir);
    model->add_adapters(lora(4, 16), 9);
    randomise_b(*model, 10);
    TempDir tmp;
    model->save_pretrained(tmp.path());  // merged: a plain Hugging Face directory
    EXPECT_FALSE(std::filesystem::exists(tmp / kAdapterConfigFile));
    auto merged = Transformer::from_pretrained(tmp.path());
    EXPECT_FALSE(merged->has_adapters());
    const auto in = inputs(*model, 4);
    torch::NoGradGuard no_grad;
    const auto a = model->forward(in.ids, in.mask), b = merged->forward(in.ids, in.mask);
    // fp32: (W + sBA)x and Wx + s B(Ax) round differently, and MKL's blocked products more so than
    // a plain loop (1.2e-5 measured with the torch 2.15 wheel); a wrong merge is off by far more.
    EXPECT_LT((a - b).abs().max().item<double>(), 3e-5);
  }
}

TEST(Lora, PeftAdapterDirectoryRoundTrips) {
  const auto dir = rlcpp::testing::fixture_dirs().front();
  auto model = Transformer::from_pretrained(dir);
  LoraConfig config = lora(4, 8, 0.05);
  config.targets = {"q_proj", "v_proj"};
  model->add_adapters(config, 11);
  randomise_b(*model, 12);
  TempDir tmp;
  model->save_adapter(tmp.path(), dir.string());
  // PEFT's adapter_config.json fields (peft.LoraConfig) and key names.
  const auto j = load_json_file(tmp / "adapter_config.json");
  EXPECT_EQ(j.at("peft_type"), "LORA");
  EXPECT_EQ(j.at("task_type"), "CAUSAL_LM");
  EXPECT_EQ(j.at("r"), 4);
  EXPECT_EQ(j.at("lora_alpha").get<double>(), 8.0);
  EXPECT_EQ(j.at("lora_dropout").get<double>(), 0.05);
  EXPECT_EQ(j.at("target_modules"), Json({"q_proj", "v_proj"}));
  EXPECT_EQ(j.at("base_model_name_or_path"), dir.string());
  EXPECT_EQ(j.at("bias"), "none");
  EXPECT_EQ(j.at("fan_in_fan_out"), false);
  const auto file = SafetensorsFile::open(tmp / "adapter_model.safetensors");
  const auto& c = model->config();
  const auto* a = file->find("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight");
  const auto* b = file->find("base_model.model.model.layers.0.self_attn.v_proj.lora_B.weight");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{4, c.hidden_size}));
  EXPECT_EQ(b->shape, (std::vector<int64_t>{c.kv_size(), 4}));
  EXPECT_EQ(file->tensors().size(), static_cast<size_t>(2 * 2 * c.num_hidden_layers));
  // An adapter directory loads as a model: its base with the adapter on.
  auto loaded = Transformer::from_pretrained(tmp.path());
  EXPECT_TRUE(loaded->has_adapters());
  EXPECT_EQ(loaded->lora().scaling(), 2.0);
  const auto in = inputs(*model, 5);
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::equal(model->forward(in.ids, in.mask), loaded->forward(in.ids, in.mask)));
}

TEST(Lora, BadAdapterDirectoriesAreNamed) {
  const auto dir = rlcpp::testing::fixture_dirs().front();
  TempDir tmp;
  auto write = [&](const std::string& text) {
    std::ofstream(tmp / "adapter_config.json") << text;
  };
  write("{\"peft_type\": \"PREFIX_TUNING\", \"base_model_name_or_path\": \"" + dir.string() + "\"}");
  try {
    Transformer::from_pretrained(tmp.path());
    ADD_FAILURE() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("PREFIX_TUNING"), std::string::npos) << e.what();
  }
  write("{\"peft_type\": \"LORA\", \"r\": 4, \"base_model_name_or_path\": \"/nonexistent/base\"}");
  try {
    Transformer::from_pretrained(tmp.path());
    ADD_FAILURE() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/base"), std::string::npos) << e.what();
  }
  write("{\"peft_type\": \"LORA\", \"r\": 4, \"base_model_name_or_path\": \"" + dir.string() + "\"}");
  try {
    Transformer::from_pretrained(tmp.path());
    ADD_FAILURE() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("adapter_model.safetensors"), std::string::npos) << e.what();
  }
}

TEST(GradientCheckpointing, SameGradientsAsWithout) {
  for (bool with_lora : {false, true}) {
    for (const auto& dir : rlcpp::testing::fixture_dirs()) {
      SCOPED_TRACE(dir.string() + (with_lora ? " lora" : " full"));
      std::vector<std::vector<torch::Tensor>> grads;
      torch::Tensor values[2];
      for (bool checkpoint : {false, true}) {
        ModelOptions options;
        options.gradient_checkpointing = checkpoint;
        auto model = Transformer::from_pretrained(dir, options);
        if (with_lora) {
          model->add_adapters(lora(4, 8, /*dropout=*/0.1), 13);  // dropout: the recompute must replay the RNG
          randomise_b(*model, 14);
        }
        model->train();
        const auto in = inputs(*model, 6);
        torch::manual_seed(15);
        auto logp = model->token_logprobs(in.ids, in.targets, 1.0, in.mask);
        logp.sum().backward();
        values[checkpoint] = logp.detach();
        std::vector<torch::Tensor> g;
        for (const auto& p : model->trainable_parameters()) g.push_back(p.grad().clone());
        grads.push_back(std::move(g));
      }
      EXPECT_TRUE(torch::equal(values[0], values[1]));
      ASSERT_EQ(grads[0].size(), grads[1].size());
      for (size_t k = 0; k < grads[0].size(); ++k) {
        EXPECT_TRUE(torch::allclose(grads[0][k], grads[1][k], 1e-5, 1e-7)) << k;
      }
    }
  }
}

TEST(FrozenDtype, HalfPrecisionStorageComputesInFloat32) {
  for (const auto& dir : rlcpp::testing::fixture_dirs()) {
    SCOPED_TRACE(dir.string());
    ModelOptions options;
    options.frozen_dtype = torch::kBFloat16;
    auto frozen = Transformer::from_pretrained(dir, options);
    EXPECT_EQ(frozen->model->layers[0]->mlp->up_proj->weight.scalar_type(), torch::kBFloat16);
    // The same weights rounded to bf16 and held in fp32 compute the same logits.
    auto rounded = Transformer::from_pretrained(dir);
    {
      torch::NoGradGuard no_grad;
      for (auto& p : rounded->parameters()) {
        if (p.dim() == 2) p.copy_(p.to(torch::kBFloat16).to(torch::kFloat32));
      }
    }
    frozen->add_adapters(lora(2), 1);  // the base under LoRA
    rounded->add_adapters(lora(2), 1);
    randomise_b(*frozen, 2);
    randomise_b(*rounded, 2);
    const auto in = inputs(*rounded, 7);
    {
      torch::NoGradGuard no_grad;
      const auto a = frozen->forward(in.ids, in.mask);
      EXPECT_EQ(a.scalar_type(), torch::kFloat32);
      EXPECT_TRUE(torch::equal(a, rounded->forward(in.ids, in.mask)));
    }
    // Training through the stored weights: the adapters' gradients are those of the fp32 copy.
    frozen->token_logprobs(in.ids, in.targets, 1.0, in.mask).sum().backward();
    rounded->token_logprobs(in.ids, in.targets, 1.0, in.mask).sum().backward();
    const auto a = frozen->trainable_parameters(), b = rounded->trainable_parameters();
    ASSERT_EQ(a.size(), b.size());
    for (size_t k = 0; k < a.size(); ++k) EXPECT_TRUE(torch::allclose(a[k].grad(), b[k].grad(), 1e-5, 1e-7)) << k;
  }
}
