// ModelConfig parsing: the fixtures, every supported switch, and the errors for what is not supported.
#include <cmath>
#include <fstream>

#include "model/model_config.h"
#include "model/rope.h"
#include "test_util.h"
#include "util/error.h"

using namespace rlcpp;
using rlcpp::testing::TempDir;

namespace {

nlohmann::json base_config(const std::string& type) {
  return {{"model_type", type}, {"vocab_size", 100}, {"hidden_size", 32}, {"intermediate_size", 64},
          {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2}};
}

}  // namespace

TEST(ModelConfig, Fixtures) {
  auto qwen2 = ModelConfig::load(rlcpp::testing::fixture("qwen2-tiny"));
  EXPECT_EQ(qwen2.model_type, "qwen2");
  EXPECT_TRUE(qwen2.qkv_bias);
  EXPECT_FALSE(qwen2.o_bias);
  EXPECT_TRUE(qwen2.tie_word_embeddings);
  EXPECT_EQ(qwen2.head_dim, 16);
  EXPECT_EQ(qwen2.eos_token_ids, std::vector<int64_t>{1});

  auto qwen3 = ModelConfig::load(rlcpp::testing::fixture("qwen3-tiny"));
  EXPECT_TRUE(qwen3.qk_norm);
  EXPECT_EQ(qwen3.head_dim, 24);  // explicit, not hidden/heads = 16
  EXPECT_EQ(qwen3.q_size(), 96);
  EXPECT_FALSE(qwen3.qkv_bias);

  auto llama = ModelConfig::load(rlcpp::testing::fixture("llama-tiny"));
  EXPECT_FALSE(llama.tie_word_embeddings);
  EXPECT_EQ(llama.num_key_value_heads, 1);
  EXPECT_DOUBLE_EQ(llama.rope_theta, 500000.0);
  EXPECT_DOUBLE_EQ(llama.rms_norm_eps, 1e-5);
}

TEST(ModelConfig, GenerationConfigAddsStopTokens) {
  TempDir dir;
  auto json = base_config("llama");
  json["eos_token_id"] = 5;
  std::ofstream(dir / "config.json") << json.dump();
  std::ofstream(dir / "generation_config.json") << R"({"eos_token_id": [5, 7, 9], "bos_token_id": 3})";
  auto c = ModelConfig::load(dir.path());
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{5, 7, 9}));
  EXPECT_EQ(c.bos_token_id, 3);
}

TEST(ModelConfig, DefaultsAndBiases) {
  auto json = base_config("llama");
  json.erase("num_key_value_heads");
  json["attention_bias"] = true;
  json["mlp_bias"] = true;
  auto c = ModelConfig::from_json(json, "cfg");
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_TRUE(c.qkv_bias && c.o_bias && c.mlp_bias);
  EXPECT_FALSE(c.tie_word_embeddings);  // llama default
  EXPECT_TRUE(ModelConfig::from_json(base_config("qwen2"), "cfg").tie_word_embeddings);
}

TEST(ModelConfig, ParameterCountMatchesFixtureFiles) {
  // 4*(64*64) ... computed independently: qwen2-tiny = 480104-byte file of fp32 weights.
  auto c = ModelConfig::load(rlcpp::testing::fixture("qwen2-tiny"));
  const int64_t h = 64, kv = 32, inter = 160, v = 512;
  const int64_t layer = h * h + 2 * h * kv + h * h + (h + 2 * kv) + 3 * h * inter + 2 * h;
  EXPECT_EQ(c.parameter_count(), 2 * layer + v * h + h);
}

TEST(ModelConfig, RopeScalingLinearAndLlama3) {
  auto json = base_config("llama");
  json["hidden_size"] = 256;
  json["num_attention_heads"] = 2;  // head_dim 128
  json["rope_theta"] = 500000.0;
  auto plain = rope_inverse_frequencies(ModelConfig::from_json(json, "cfg"));

  json["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}};
  auto linear = rope_inverse_frequencies(ModelConfig::from_json(json, "cfg"));
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_DOUBLE_EQ(linear[i], plain[i] / 4.0);

  // Llama 3.1 values: factor 8, low 1, high 4, original context 8192.
  json["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  auto llama3 = rope_inverse_frequencies(ModelConfig::from_json(json, "cfg"));
  int kept = 0, divided = 0, blended = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    const double wavelen = 2 * M_PI / plain[i];
    if (wavelen < 8192.0 / 4.0) {
      EXPECT_DOUBLE_EQ(llama3[i], plain[i]);
      ++kept;
    } else if (wavelen > 8192.0) {
      EXPECT_DOUBLE_EQ(llama3[i], plain[i] / 8.0);
      ++divided;
    } else {
      const double smooth = (8192.0 / wavelen - 1.0) / 3.0;
      EXPECT_NEAR(llama3[i], (1 - smooth) * plain[i] / 8.0 + smooth * plain[i], 1e-15);
      EXPECT_LT(llama3[i], plain[i]);
      EXPECT_GT(llama3[i], plain[i] / 8.0);
      ++blended;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(blended, 0);
}

TEST(ModelConfigErrors, NamedAndListSupported) {
  auto json = base_config("mistral");
  EXPECT_THROW_MSG(ModelConfig::from_json(json, "my/config.json"), UserError, "my/config.json",
                   "model_type \"mistral\"", "qwen2, qwen3, llama");
  json = base_config("llama");
  json["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}};
  EXPECT_THROW_MSG(ModelConfig::from_json(json, "cfg"), UserError, "\"yarn\"", "linear, llama3");
  json = base_config("llama");
  json["num_key_value_heads"] = 3;
  EXPECT_THROW_MSG(ModelConfig::from_json(json, "cfg"), UserError, "multiple of num_key_value_heads");
  json = base_config("llama");
  json.erase("hidden_size");
  EXPECT_THROW_MSG(ModelConfig::from_json(json, "cfg"), UserError, "missing field \"hidden_size\"");
  json = base_config("llama");
  json["hidden_size"] = "big";
  EXPECT_THROW_MSG(ModelConfig::from_json(json, "cfg"), UserError, "\"hidden_size\"", "wrong type");
  json = base_config("qwen2");
  json["hidden_act"] = "gelu";
  EXPECT_THROW_MSG(ModelConfig::from_json(json, "cfg"), UserError, "hidden_act \"gelu\"");
  json = base_config("qwen2");
  json["use_sliding_window"] = true;
  EXPECT_THROW_MSG(ModelConfig::from_json(json, "cfg"), UserError, "use_sliding_window");
  TempDir dir;
  EXPECT_THROW_MSG(ModelConfig::load(dir.path()), UserError, "no config.json");
}
