// ModelConfig: the architecture of a Hugging Face causal LM (or of a sequence classifier on the same
// decoder: a reward model), read from `config.json` (and `generation_config.json` for stop tokens).
// Supported model types: qwen2, qwen3, llama.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "util/enum_table.h"

namespace rlcpp {

enum class RopeScalingType { kNone, kLinear, kLlama3 };

struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  double factor = 1.0;                      // linear and llama3: context extension factor
  double low_freq_factor = 1.0;             // llama3
  double high_freq_factor = 4.0;            // llama3
  int64_t original_max_position_embeddings = 8192;  // llama3
};

struct ModelConfig {
  std::string model_type;          // "qwen2" | "qwen3" | "llama"
  std::string architecture;        // e.g. "Qwen2ForCausalLM"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // defaults to num_attention_heads
  int64_t head_dim = 0;             // explicit in Qwen3; else hidden_size / num_attention_heads
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;            // bias on q/k/v projections (Qwen2: always; Llama/Qwen3: attention_bias)
  bool o_bias = false;              // bias on o_proj (Llama/Qwen3 attention_bias)
  bool mlp_bias = false;            // bias on gate/up/down (Llama mlp_bias)
  bool qk_norm = false;             // per-head RMSNorm on q and k before rotary (Qwen3)
  std::string torch_dtype = "float32";  // dtype the weights were saved in
  int64_t bos_token_id = -1;        // -1: none
  std::vector<int64_t> eos_token_ids;  // config.json and generation_config.json, merged
  // A sequence classifier (`...ForSequenceClassification`, as a reward model is saved): the score
  // head's outputs (Hugging Face's num_labels: id2label's size, else num_labels, else 2). 0: a
  // causal LM.
  int64_t num_labels = 0;
  nlohmann::json raw;               // config.json as read, written back unchanged on save

  // Reads `dir/config.json` and, when present, `dir/generation_config.json`. An unknown model type,
  // rope type, activation or an inconsistent shape is a UserError naming the file and the field.
  static ModelConfig load(const std::filesystem::path& dir);
  // Parses a config.json object; `where` names its source in errors.
  static ModelConfig from_json(const nlohmann::json& json, const std::string& where);

  bool classifier() const { return num_labels > 0; }
  // The language-model head is the embedding (tied, and not a classifier, whose score head reads
  // the last hidden states instead): a pipeline's last stage then holds a copy of the embedding.
  bool head_is_embedding() const { return tie_word_embeddings && !classifier(); }
  int64_t q_size() const { return num_attention_heads * head_dim; }
  int64_t kv_size() const { return num_key_value_heads * head_dim; }
  // Number of parameters implied by the shape (tied embeddings counted once).
  int64_t parameter_count() const;
};

const EnumTable<RopeScalingType>& rope_scaling_types();

// The sequence classifier of `num_labels` outputs on `config`'s decoder (a reward model of a causal
// LM: Qwen2ForSequenceClassification, Qwen3..., Llama...), its config.json as transformers writes it.
ModelConfig classifier_config(const ModelConfig& config, int64_t num_labels);

}  // namespace rlcpp
