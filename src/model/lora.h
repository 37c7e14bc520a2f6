// LoRA adapters (Hu et al. 2021) as Hugging Face PEFT defines them: a frozen linear layer W gains
// y = x W^T + scaling * dropout(x) A^T B^T with A [r, in] (Kaiming-uniform) and B [out, r] (zero),
// so a fresh adapter leaves the model exactly as it was. scaling = lora_alpha / r.
//
// On disk an adapter is PEFT's directory: adapter_config.json (peft_type LORA, r, lora_alpha,
// target_modules, base_model_name_or_path, ...) and adapter_model.safetensors with keys
// "base_model.model.<module>.lora_A.weight" / "...lora_B.weight".
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace rlcpp {

struct LoraConfig {
  int64_t rank = 0;                  // r; 0: no adapters
  double alpha = 0;                  // lora_alpha; scaling = alpha / rank (0: alpha = rank, scaling 1)
  double dropout = 0;                // on the adapter's input, in training only
  std::vector<std::string> targets;  // module names (q_proj, ..., down_proj); empty: all linear layers
  std::string name_scope;            // only modules whose full name contains this ("" : any)

  bool enabled() const { return rank > 0; }
  double scaling() const { return rank > 0 ? (alpha > 0 ? alpha : static_cast<double>(rank)) / static_cast<double>(rank) : 0.0; }
  // Whether the linear layer `module` ("model.layers.3.self_attn.q_proj") gets an adapter.
  bool adapts(const std::string& module) const;
};

// The linear layers an adapter can sit on, by their Hugging Face names ("all-linear": all of them;
// the output head and embeddings are never adapted, as PEFT's all-linear).
const std::vector<std::string>& lora_module_names();

// "q_proj,v_proj" or "all-linear" → target list (empty for all-linear); an unknown name is a
// UserError naming `where` and the valid names.
std::vector<std::string> parse_lora_targets(const std::string& text, const std::string& where);
std::string lora_targets_text(const std::vector<std::string>& targets);  // "all-linear" when empty

// PEFT's file names and key prefix.
inline constexpr const char* kAdapterConfigFile = "adapter_config.json";
inline constexpr const char* kAdapterWeightsFile = "adapter_model.safetensors";
inline constexpr const char* kPeftKeyPrefix = "base_model.model.";

// adapter_config.json for `config` over the base model at `base_model`; of a sequence classifier
// (`classifier`: PEFT's SEQ_CLS, the score head trained whole beside the adapters).
nlohmann::json peft_adapter_config(const LoraConfig& config, const std::string& base_model, bool classifier = false);

// A PEFT adapter directory: its LoRA settings and base model. Not LoRA, a missing field or a field
// of the wrong type is a UserError naming the file.
struct PeftAdapter {
  LoraConfig config;
  std::string base_model;  // base_model_name_or_path as written
};
PeftAdapter read_peft_adapter(const std::filesystem::path& dir);
bool is_peft_adapter_dir(const std::filesystem::path& dir);  // has adapter_config.json

}  // namespace rlcpp
