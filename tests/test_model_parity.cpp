// Model parity against the fixtures' float64 references, for every fixture folder under
// $RLCPP_FIXTURES: a new fixture needs no code. Also: left padding, save/load, sharding.
#include <torch/torch.h>

#include <algorithm>
#include <fstream>

#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "model/transformer.h"
#include "test_util.h"
#include "util/error.h"

using namespace rlcpp;
using rlcpp::testing::TempDir;

namespace {

struct Reference {
  torch::Tensor input_ids, logits, token_logprobs;
};

Reference load_reference(const std::filesystem::path& dir) {
  auto file = SafetensorsFile::open(dir / "reference.safetensors");
  return {file->tensor("input_ids").clone(), file->tensor("logits").clone(), file->tensor("token_logprobs").clone()};
}

// Targets aligned with inputs: targets[:, t] = ids[:, t + 1], the last position ignored.
torch::Tensor next_token_targets(const torch::Tensor& ids) {
  auto targets = torch::full_like(ids, -1);
  targets.narrow(1, 0, ids.size(1) - 1).copy_(ids.narrow(1, 1, ids.size(1) - 1));
  return targets;
}

// How many shards save_checkpoint makes for `cap` bytes (a shard closes before the tensor that overflows it).
int count_shards(const NamedTensors& tensors, uint64_t cap) {
  int shards = 1;
  uint64_t used = 0;
  for (const auto& [name, t] : tensors) {
    const uint64_t bytes = t.numel() * t.element_size();
    if (used > 0 && used + bytes > cap) {
      ++shards;
      used = 0;
    }
    used += bytes;
  }
  return shards;
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
}

}  // namespace

TEST(ModelParity, Float32AgainstFloat64Reference) {
  for (const auto& dir : rlcpp::testing::fixture_dirs()) {
    SCOPED_TRACE(dir.string());
    auto ref = load_reference(dir);
    auto model = Transformer::from_pretrained(dir);
    torch::NoGradGuard no_grad;
    auto logits = model->forward(ref.input_ids);
    ASSERT_EQ(logits.sizes(), ref.logits.sizes());
    // 1e-4: the bound for fp32; the observed error is ~1e-5 (fp32 rounding over a few layers).
    EXPECT_LT(max_diff(logits, ref.logits), 1e-4);
    const int64_t t = ref.input_ids.size(1);
    auto logprobs = model->token_logprobs(ref.input_ids, next_token_targets(ref.input_ids)).narrow(1, 0, t - 1);
    // 1e-5: the bound; log-softmax in fp32 of logits that are themselves within ~1e-5.
    EXPECT_LT(max_diff(logprobs, ref.token_logprobs), 1e-5);
  }
}

TEST(ModelParity, Float64MatchesReferenceToFloat32Rounding) {
  for (const auto& dir : rlcpp::testing::fixture_dirs()) {
    SCOPED_TRACE(dir.string());
    auto ref = load_reference(dir);
    ModelOptions options;
    options.dtype = torch::kFloat64;
    auto model = Transformer::from_pretrained(dir, options);
    torch::NoGradGuard no_grad;
    // The reference is fp64 math rounded to fp32: an fp64 model must agree to that rounding.
    auto logits = model->forward(ref.input_ids);
    auto tol = ref.logits.abs().max().item<double>() * 1e-7;
    EXPECT_LE(max_diff(logits.to(torch::kFloat32), ref.logits), tol);
  }
}

TEST(ModelParity, BFloat16WithinBf16Rounding) {
  for (const auto& dir : rlcpp::testing::fixture_dirs()) {
    SCOPED_TRACE(dir.string());
    auto ref = load_reference(dir);
    ModelOptions options;
    options.dtype = torch::kBFloat16;
    auto model = Transformer::from_pretrained(dir, options);
    torch::NoGradGuard no_grad;
    auto logits = model->forward(ref.input_ids);
    EXPECT_EQ(logits.scalar_type(), torch::kFloat32);
    // bf16 keeps 8 significant bits (relative rounding 2^-9 ≈ 0.2%); weights, activations and every
    // matmul output are rounded, a few dozen roundings deep. We allow 3% of the logit range: an
    // implementation bug (a wrong rope or norm) moves logits by tens of percent.
    const double range = ref.logits.abs().max().item<double>();
    EXPECT_LT(max_diff(logits, ref.logits), 0.03 * range);
    // And the bf16 model must rank the reference's top token first nearly everywhere.
    auto agree = (logits.argmax(-1) == ref.logits.argmax(-1)).to(torch::kFloat32).mean().item<double>();
    EXPECT_GT(agree, 0.9);
  }
}

TEST(ModelParity, LeftPaddedBatchMatchesEachSequenceAlone) {
  for (const auto& dir : rlcpp::testing::fixture_dirs()) {
    SCOPED_TRACE(dir.string());
    auto ref = load_reference(dir);
    auto model = Transformer::from_pretrained(dir);
    torch::NoGradGuard no_grad;
    const int64_t t = ref.input_ids.size(1);
    const std::vector<int64_t> lengths = {t, t - 7, 5, 1};
    auto ids = torch::zeros({4, t}, torch::kInt64);
    auto mask = torch::zeros({4, t}, torch::kInt64);
    for (int64_t b = 0; b < 4; ++b) {
      const int64_t len = lengths[b];
      ids[b].narrow(0, t - len, len).copy_(ref.input_ids[b % ref.input_ids.size(0)].narrow(0, 0, len));
      ids[b].narrow(0, 0, t - len).fill_(3);  // pad id: any token, it must not matter
      mask[b].narrow(0, t - len, len).fill_(1);
    }
    auto batched = model->forward(ids, mask);
    auto batched_logprobs = model->token_logprobs(ids, next_token_targets(ids), 0.7, mask);
    for (int64_t b = 0; b < 4; ++b) {
      const int64_t len = lengths[b];
      auto alone_ids = ids[b].narrow(0, t - len, len).unsqueeze(0);
      auto alone = model->forward(alone_ids);
      // 1e-5: same math, different matmul shapes: only fp32 summation order differs.
      EXPECT_LT(max_diff(batched[b].narrow(0, t - len, len), alone[0]), 1e-5) << "row " << b;
      auto alone_logprobs = model->token_logprobs(alone_ids, next_token_targets(alone_ids), 0.7);
      // 3e-5: a log-prob is a logit minus a log-sum-exp, each within 1e-5, both divided by 0.7.
      EXPECT_LT(max_diff(batched_logprobs[b].narrow(0, t - len, len), alone_logprobs[0]), 3e-5) << "row " << b;
    }
  }
}

TEST(ModelParity, SaveLoadIsBitIdenticalAlsoInThreeShards) {
  for (const auto& dir : rlcpp::testing::fixture_dirs()) {
    SCOPED_TRACE(dir.string());
    auto model = Transformer::from_pretrained(dir);
    CheckpointReader original(dir);
    for (const auto& [name, tensor] : model->named_weights()) {
      EXPECT_TRUE(torch::equal(tensor, original.tensor(name))) << name;
    }
    TempDir single, sharded;
    model->save_pretrained(single.path());
    uint64_t total = 0;
    for (const auto& [name, tensor] : model->named_weights()) total += tensor.numel() * tensor.element_size();
    // The smallest shard size for which the greedy packing gives exactly 3 shards.
    uint64_t cap = total / 3;
    while (count_shards(model->named_weights(), cap) > 3) cap += 64;
    ASSERT_EQ(count_shards(model->named_weights(), cap), 3);
    model->save_pretrained(sharded.path(), cap);
    CheckpointReader sharded_reader(sharded.path());
    EXPECT_EQ(sharded_reader.files().size(), 3u);
    for (const auto& path : {single.path(), sharded.path()}) {
      auto loaded = Transformer::from_pretrained(path);
      auto a = model->named_weights();
      auto b = loaded->named_weights();
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(a[i].first, b[i].first);
        EXPECT_TRUE(torch::equal(a[i].second, b[i].second)) << a[i].first;
      }
      EXPECT_EQ(CheckpointReader(path).names(), original.names());
    }
  }
}

// A reward model in Hugging Face's layout (`...ForSequenceClassification`, `score.weight`
// [num_labels, H], no LM head) made from each fixture, its score head a row of the fixture's
// output projection: its score is then the fixture's float64 reference logit of that token at the
// last position, an oracle independent of rlcpp.
TEST(RewardModel, ScoresAreTheReferenceLogitsOfItsHeadsRows) {
  for (const auto& dir : rlcpp::testing::fixture_dirs()) {
    SCOPED_TRACE(dir.string());
    auto ref = load_reference(dir);
    ModelOptions options;
    options.dtype = torch::kFloat64;
    auto lm = Transformer::from_pretrained(dir, options);
    const std::vector<int64_t> rows = {5, 17};  // two labels: two tokens' logits
    TempDir rm_dir;
    const ModelConfig config = classifier_config(lm->config(), static_cast<int64_t>(rows.size()));
    std::filesystem::create_directories(rm_dir.path());
    std::ofstream(rm_dir / "config.json") << config.raw.dump(2);
    NamedTensors weights;
    for (const auto& [name, t] : lm->named_weights()) {
      if (name != "lm_head.weight") weights.emplace_back(name, t.to(torch::kFloat32));
    }
    const auto head = lm->output_weight().index_select(0, torch::tensor(rows, torch::kInt64));
    weights.emplace_back("score.weight", head.to(torch::kFloat32));
    save_checkpoint(rm_dir.path(), weights);

    auto rm = Transformer::from_pretrained(rm_dir.path(), options);
    EXPECT_TRUE(rm->config().classifier());
    EXPECT_EQ(rm->config().num_labels, 2);
    EXPECT_EQ(rm->config().parameter_count(), lm->config().parameter_count() - (lm->config().tie_word_embeddings ? 0 :
              lm->config().vocab_size * lm->config().hidden_size) + 2 * lm->config().hidden_size);
    torch::NoGradGuard no_grad;
    auto scores = rm->scores(ref.input_ids);
    ASSERT_EQ(scores.sizes(), (std::vector<int64_t>{ref.input_ids.size(0), 2}));
    const int64_t last = ref.input_ids.size(1) - 1;
    auto expected = ref.logits.select(1, last).index_select(1, torch::tensor(rows, torch::kInt64));
    // As the fp64 model's logits: the reference is fp64 math rounded to fp32.
    EXPECT_LE(max_diff(scores.to(torch::kFloat32), expected), ref.logits.abs().max().item<double>() * 1e-7);

    // Left padding: a shorter sequence scores as it does alone.
    const int64_t t = ref.input_ids.size(1), len = t - 6;
    auto ids = ref.input_ids.clone();
    auto mask = torch::ones_like(ids);
    ids[1].narrow(0, 0, t - len).fill_(3);
    mask[1].narrow(0, 0, t - len).zero_();
    ids[1].narrow(0, t - len, len).copy_(ref.input_ids[1].narrow(0, 0, len));
    auto padded = rm->scores(ids, mask);
    auto alone = rm->scores(ref.input_ids[1].narrow(0, 0, len).unsqueeze(0));
    EXPECT_LT(max_diff(padded[1], alone[0]), 1e-10);

    // Saved again: transformers' layout (the classifier's architecture and labels, `score`, no LM head).
    TempDir saved;
    rm->save_pretrained(saved.path());
    const auto json = nlohmann::json::parse(std::ifstream(saved / "config.json"));
    EXPECT_EQ(json["architectures"][0].get<std::string>().ends_with("ForSequenceClassification"), true);
    EXPECT_EQ(json["id2label"].size(), 2u);
    const auto names = CheckpointReader(saved.path()).names();
    EXPECT_EQ(std::count(names.begin(), names.end(), "score.weight"), 1);
    EXPECT_EQ(std::count(names.begin(), names.end(), "lm_head.weight"), 0);
    EXPECT_TRUE(torch::equal(Transformer::from_pretrained(saved.path(), options)->scores(ref.input_ids), scores));
    // A reward model has no language-model head to generate or train a policy with.
    EXPECT_THROW(rm->forward(ref.input_ids), UserError);
    EXPECT_THROW(lm->scores(ref.input_ids), InternalError);
  }
}

TEST(ModelErrors, MissingAndMisshapenWeights) {
  const auto dir = rlcpp::testing::fixture("llama-tiny");
  auto model = Transformer::from_pretrained(dir);
  auto weights = model->named_weights();
  weights.erase(weights.begin() + 3);
  const std::string dropped = model->named_weights()[3].first;
  EXPECT_THROW_MSG(model->load_weights(weights, "src"), UserError, "src", dropped, "missing");
  weights = model->named_weights();
  weights[0].second = torch::zeros({2, 2});
  EXPECT_THROW_MSG(model->load_weights(weights, "src"), UserError, weights[0].first, "shape [2, 2]");
  weights = model->named_weights();
  weights.emplace_back("model.layers.0.mlp.extra.weight", torch::zeros({1}));
  EXPECT_THROW_MSG(model->load_weights(weights, "src"), UserError, "unexpected weight");
}
