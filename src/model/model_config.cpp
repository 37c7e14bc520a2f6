#include "model/model_config.h"

#include <fmt/format.h>

#include <map>

#include "util/error.h"
#include "util/json.h"

namespace rlcpp {

namespace fs = std::filesystem;

namespace {

// eos_token_id is an int or a list of ints in HF configs.
void add_token_ids(const Json& value, std::vector<int64_t>* out) {
  auto add = [&](int64_t id) {
    if (std::find(out->begin(), out->end(), id) == out->end()) out->push_back(id);
  };
  if (value.is_number_integer()) add(value.get<int64_t>());
  if (value.is_array()) {
    for (const auto& v : value) {
      if (v.is_number_integer()) add(v.get<int64_t>());
    }
  }
}

RopeScaling parse_rope_scaling(const Json& json, const std::string& where) {
  RopeScaling scaling;
  auto it = json.find("rope_scaling");
  if (it == json.end() || it->is_null()) return scaling;
  if (!it->is_object()) throw_user_error("{}: \"rope_scaling\" must be an object or null", where);
  std::string type = json_get_or<std::string>(*it, "rope_type", "", where + " rope_scaling");
  if (type.empty()) type = json_get_or<std::string>(*it, "type", "default", where + " rope_scaling");
  scaling.type = rope_scaling_types().parse(type, where + " rope_scaling");
  if (scaling.type == RopeScalingType::kNone) return scaling;
  scaling.factor = json_get<double>(*it, "factor", where + " rope_scaling");
  if (scaling.type == RopeScalingType::kLlama3) {
    scaling.low_freq_factor = json_get<double>(*it, "low_freq_factor", where + " rope_scaling");
    scaling.high_freq_factor = json_get<double>(*it, "high_freq_factor", where + " rope_scaling");
    scaling.original_max_position_embeddings =
        json_get<int64_t>(*it, "original_max_position_embeddings", where + " rope_scaling");
    if (scaling.high_freq_factor <= scaling.low_freq_factor) {
      throw_user_error("{}: rope_scaling high_freq_factor ({}) must exceed low_freq_factor ({})", where,
                       scaling.high_freq_factor, scaling.low_freq_factor);
    }
  }
  if (scaling.factor <= 0) throw_user_error("{}: rope_scaling factor must be positive, got {}", where, scaling.factor);
  return scaling;
}

}  // namespace

const EnumTable<RopeScalingType>& rope_scaling_types() {
  static const EnumTable<RopeScalingType> table(
      "rope_scaling type",
      {{RopeScalingType::kNone, "none", "plain rotary embeddings", {"default"}},
       {RopeScalingType::kLinear, "linear", "positions divided by factor"},
       {RopeScalingType::kLlama3, "llama3", "Llama 3.1's frequency-dependent scaling"}});
  return table;
}

ModelConfig ModelConfig::from_json(const Json& json, const std::string& where) try {
  if (!json.is_object()) throw_user_error("{}: expected a JSON object", where);
  ModelConfig c;
  c.raw = json;
  c.model_type = json_get<std::string>(json, "model_type", where);
  if (c.model_type != "qwen2" && c.model_type != "qwen3" && c.model_type != "llama") {
    throw_user_error("{}: model_type \"{}\" is not supported (supported: qwen2, qwen3, llama)", where, c.model_type);
  }
  if (json.contains("architectures") && json["architectures"].is_array() && !json["architectures"].empty()) {
    c.architecture = json["architectures"][0].get<std::string>();
  }
  c.vocab_size = json_get<int64_t>(json, "vocab_size", where);
  c.hidden_size = json_get<int64_t>(json, "hidden_size", where);
  c.intermediate_size = json_get<int64_t>(json, "intermediate_size", where);
  c.num_hidden_layers = json_get<int64_t>(json, "num_hidden_layers", where);
  c.num_attention_heads = json_get<int64_t>(json, "num_attention_heads", where);
  c.num_key_value_heads = json_get_or<int64_t>(json, "num_key_value_heads", c.num_attention_heads, where);
  for (auto [name, value] : {std::pair<const char*, int64_t>{"vocab_size", c.vocab_size},
                             {"hidden_size", c.hidden_size},
                             {"intermediate_size", c.intermediate_size},
                             {"num_hidden_layers", c.num_hidden_layers},
                             {"num_attention_heads", c.num_attention_heads},
                             {"num_key_value_heads", c.num_key_value_heads}}) {
    if (value <= 0) throw_user_error("{}: \"{}\" must be positive, got {}", where, name, value);
  }
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    throw_user_error("{}: num_attention_heads ({}) must be a multiple of num_key_value_heads ({})", where,
                     c.num_attention_heads, c.num_key_value_heads);
  }
  const int64_t default_head_dim = c.hidden_size / c.num_attention_heads;
  c.head_dim = json_get_or<int64_t>(json, "head_dim", default_head_dim, where);
  if (c.head_dim <= 0 || c.head_dim % 2 != 0) {
    throw_user_error("{}: head_dim must be a positive even number, got {}", where, c.head_dim);
  }
  if (!json.contains("head_dim") && c.hidden_size % c.num_attention_heads != 0) {
    throw_user_error("{}: hidden_size ({}) is not divisible by num_attention_heads ({}); set head_dim", where,
                     c.hidden_size, c.num_attention_heads);
  }
  c.max_position_embeddings = json_get_or<int64_t>(json, "max_position_embeddings", 4096, where);
  c.rms_norm_eps = json_get_or<double>(json, "rms_norm_eps", 1e-6, where);
  c.rope_theta = json_get_or<double>(json, "rope_theta", 10000.0, where);
  c.rope_scaling = parse_rope_scaling(json, where);
  c.tie_word_embeddings = json_get_or<bool>(json, "tie_word_embeddings", c.model_type != "llama", where);
  const std::string act = json_get_or<std::string>(json, "hidden_act", "silu", where);
  if (act != "silu") throw_user_error("{}: hidden_act \"{}\" is not supported (supported: silu)", where, act);
  if (json_get_or<bool>(json, "use_sliding_window", false, where)) {
    throw_user_error("{}: use_sliding_window = true is not supported; set it to false (full attention)", where);
  }
  const bool attention_bias = json_get_or<bool>(json, "attention_bias", false, where);
  if (c.model_type == "qwen2") {
    c.qkv_bias = true;  // Qwen2 always has q/k/v bias and no o_proj bias.
  } else {
    c.qkv_bias = attention_bias;
    c.o_bias = attention_bias;
  }
  c.mlp_bias = c.model_type == "llama" && json_get_or<bool>(json, "mlp_bias", false, where);
  c.qk_norm = c.model_type == "qwen3";
  c.torch_dtype = json_get_or<std::string>(json, "torch_dtype", "float32", where);
  c.bos_token_id = json_get_or<int64_t>(json, "bos_token_id", -1, where);
  if (json.contains("eos_token_id")) add_token_ids(json["eos_token_id"], &c.eos_token_ids);
  if (c.architecture.ends_with("ForSequenceClassification")) {
    const auto labels = json.find("id2label");
    c.num_labels = labels != json.end() && labels->is_object() ? static_cast<int64_t>(labels->size())
                                                               : json_get_or<int64_t>(json, "num_labels", 2, where);
    if (c.num_labels < 1) throw_user_error("{}: a sequence classifier needs at least one label, got {}", where, c.num_labels);
  }
  return c;
} catch (const Json::exception& e) {  // a field of the wrong type, where the checks above do not look
  throw_user_error("{}: unexpected contents: {}", where, e.what());
}

ModelConfig classifier_config(const ModelConfig& config, int64_t num_labels) {
  RLCPP_CHECK(num_labels >= 1, "a classifier of {} labels", num_labels);
  static const std::map<std::string, std::string> names = {
      {"qwen2", "Qwen2ForSequenceClassification"}, {"qwen3", "Qwen3ForSequenceClassification"},
      {"llama", "LlamaForSequenceClassification"}};
  ModelConfig c = config;
  c.architecture = names.at(c.model_type);
  c.num_labels = num_labels;
  c.raw["architectures"] = Json::array({c.architecture});
  Json id2label = Json::object(), label2id = Json::object();
  for (int64_t k = 0; k < num_labels; ++k) {
    id2label[std::to_string(k)] = fmt::format("LABEL_{}", k);
    label2id[fmt::format("LABEL_{}", k)] = k;
  }
  c.raw["id2label"] = id2label;
  c.raw["label2id"] = label2id;
  c.raw.erase("num_labels");
  // transformers' classifiers find each row's last token by the pad token: without one they refuse
  // batches of more than one row.
  if (!c.raw.contains("pad_token_id") || c.raw["pad_token_id"].is_null()) {
    if (!c.eos_token_ids.empty()) c.raw["pad_token_id"] = c.eos_token_ids.front();
  }
  return c;
}

ModelConfig ModelConfig::load(const fs::path& dir) {
  const fs::path path = dir / "config.json";
  if (!fs::exists(path)) {
    throw_user_error("'{}' has no config.json: is it a Hugging Face model directory?", dir.string());
  }
  ModelConfig c = from_json(load_json_file(path), path.string());
  const fs::path gen_path = dir / "generation_config.json";
  if (fs::exists(gen_path)) {
    const Json gen = load_json_file(gen_path);
    if (gen.contains("eos_token_id")) add_token_ids(gen["eos_token_id"], &c.eos_token_ids);
    if (c.bos_token_id < 0 && gen.contains("bos_token_id") && gen["bos_token_id"].is_number_integer()) {
      c.bos_token_id = gen["bos_token_id"].get<int64_t>();
    }
  }
  return c;
}

int64_t ModelConfig::parameter_count() const {
  const int64_t h = hidden_size;
  int64_t attn = h * q_size() + 2 * h * kv_size() + q_size() * h;
  if (qkv_bias) attn += q_size() + 2 * kv_size();
  if (o_bias) attn += h;
  if (qk_norm) attn += 2 * head_dim;
  int64_t mlp = 3 * h * intermediate_size;
  if (mlp_bias) mlp += 2 * intermediate_size + h;
  const int64_t layer = attn + mlp + 2 * h;
  int64_t total = num_hidden_layers * layer + vocab_size * h + h;
  if (classifier()) {
    total += num_labels * h;  // the score head in place of the LM head
  } else if (!tie_word_embeddings) {
    total += vocab_size * h;
  }
  return total;
}

}  // namespace rlcpp
