// The Transformer's weights in and out: Hugging Face checkpoints loaded (whole, or sliced to this
// rank's part), updated by name, saved, and initialised at random.
#include "model/transformer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/autograd.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "io/checkpoint.h"
#include "model/attention.h"
#include "model/kernel_linear.h"
#include "model/logprobs.h"
#include "util/error.h"
#include "util/file.h"
#include "util/torch_format.h"

#include <fmt/ranges.h>

namespace rlcpp {

void Transformer::load_weights(const CheckpointReader& reader, const std::string& source) {
  const auto params = named_parameters();
  for (const auto& item : params) {
    if (!reader.contains(item.key())) {
      throw_user_error("{}: weight \"{}\" is missing ({} expects it; is config.json the right one for these weights?)",
                       source, item.key(), config_.architecture.empty() ? config_.model_type : config_.architecture);
    }
  }
  // One tensor at a time, its file pages released once copied: the load peaks at the weights plus
  // one tensor, not at twice the weights.
  for (const auto& item : params) {
    update_weights({{item.key(), reader.tensor(item.key())}}, source);
    reader.release(item.key());
  }
}

std::shared_ptr<Transformer> Transformer::classifier_from_pretrained(const std::filesystem::path& dir, ModelOptions options,
                                                                   int64_t num_labels, uint64_t seed) {
  if (is_peft_adapter_dir(dir) && !std::filesystem::exists(dir / "config.json")) {
    // A reward model trained with LoRA: its base with a head, then the adapter and the trained head.
    auto model = classifier_from_pretrained(read_peft_adapter(dir).base_model, options, num_labels, seed);
    model->load_adapter(dir);
    model->eval();
    return model;
  }
  const ModelConfig base = ModelConfig::load(dir);
  if (base.classifier()) {
    if (base.num_labels != num_labels) {
      throw_user_error("{}: a sequence classifier of {} labels; a reward model here has {}", dir.string(), base.num_labels,
                       num_labels);
    }
    return from_pretrained(dir, options);
  }
  auto model = std::make_shared<Transformer>(classifier_config(base, num_labels), options);
  CheckpointReader reader(dir);
  for (const auto& item : model->named_parameters()) {
    if (item.key() == "score.weight") continue;
    if (!reader.contains(item.key())) {
      throw_user_error("{}: weight \"{}\" is missing ({} expects it)", dir.string(), item.key(), base.architecture);
    }
    model->update_weights({{item.key(), reader.tensor(item.key())}}, dir.string());
    reader.release(item.key());
  }
  if (model->score) {  // (a pipeline stage before the last holds no head)
    torch::NoGradGuard no_grad;
    const double stddev = base.raw.is_object() ? base.raw.value("initializer_range", 0.02) : 0.02;
    auto generator = at::detail::createCPUGenerator(seed);
    model->score->weight.copy_(at::normal(0.0, stddev, model->score->weight.sizes(), generator,
                                          torch::TensorOptions().dtype(torch::kFloat32)));
  }
  model->eval();
  return model;
}

void Transformer::load_weights(const NamedTensors& tensors, const std::string& source) {
  const auto loaded = update_weights(tensors, source);
  for (const auto& item : named_parameters()) {
    if (!loaded.count(item.key())) throw_user_error("{}: weight \"{}\" is missing", source, item.key());
  }
}

std::set<std::string> Transformer::update_weights(const NamedTensors& tensors, const std::string& source) {
  torch::NoGradGuard no_grad;
  auto params = named_parameters();
  for (const auto& [name, tensor] : trained_weights()) {
    if (has_adapters() && !params.contains(name)) params.insert(name, tensor);  // a classifier's head is a parameter already
  }
  std::set<std::string> loaded;
  for (const auto& [name, tensor] : tensors) {
    auto* param = params.find(name);
    if (param == nullptr) {
      if (!holds_weight(name)) continue;  // another pipeline stage's
      if (name == "lm_head.weight" && config_.tie_word_embeddings) continue;  // some writers store the tied copy
      if (name.find("rotary_emb.inv_freq") != std::string::npos) continue;   // old HF buffers, recomputed here
      throw_user_error("{}: unexpected weight \"{}\" ({} has no such parameter)", source, name,
                       config_.model_type);
    }
    assign(name, *param, local_part(name, tensor, *param, source));
    loaded.insert(name);
  }
  return loaded;
}

void Transformer::assign(const std::string& name, torch::Tensor& param, const torch::Tensor& local) const {
  if (!eight_bit(param.scalar_type())) {
    param.copy_(local);
    return;
  }
  auto scale = weight_scale(name);
  RLCPP_CHECK(scale.defined(), "the 8-bit weight \"{}\" has no row scales", name);
  quantize_weight(local, param, scale);
}

void Transformer::write_weight(const std::string& name, const torch::Tensor& local) {
  torch::NoGradGuard no_grad;
  auto params = named_parameters();
  auto* param = params.find(name);
  RLCPP_CHECK(param != nullptr, "no weight \"{}\" to write", name);
  assign(name, *param, local);
}

bool Transformer::holds_weight(const std::string& name) const {
  const PipelineStage& stage = options_.stage;
  if (stage.whole()) return true;
  const std::string layers = "model.layers.";
  if (name.starts_with(layers)) {
    const auto dot = name.find('.', layers.size());
    int64_t layer = -1;
    try {
      layer = std::stoll(name.substr(layers.size(), dot - layers.size()));
    } catch (const std::exception&) {
      return true;  // not a layer's weight: refused by the caller
    }
    const int64_t end = stage.layer_end < 0 ? config_.num_hidden_layers : stage.layer_end;
    return layer >= stage.layer_begin && layer < end;
  }
  if (name.starts_with("model.embed_tokens.")) return stage.first() || (stage.last() && config_.head_is_embedding());
  if (name.starts_with("model.norm.") || name.starts_with("lm_head.") || name.starts_with("score.")) return stage.last();
  return true;
}

NamedTensors Transformer::named_weights() const {
  NamedTensors out;
  for (const auto& item : named_parameters()) out.emplace_back(item.key(), item.value());
  return out;
}

void Transformer::save_pretrained(const std::filesystem::path& dir, uint64_t max_shard_bytes) const {
  RLCPP_CHECK(!tp_ || !kept_parts_.empty(), "save_pretrained of one rank's part: gather the model whole first");
  std::filesystem::create_directories(dir);
  auto config_json = config_.raw;
  config_json["torch_dtype"] = dtypes().name(options_.dtype);
  write_file_atomic(dir / "config.json", config_json.dump(2) + "\n");
  save_checkpoint(dir, has_adapters() || options_.frozen_dtype != torch::ScalarType::Undefined ? merged_weights()
                                                                                             : named_weights(),
                  max_shard_bytes);
}

void Transformer::init_weights(double stddev, uint64_t seed) {
  torch::NoGradGuard no_grad;
  auto generator = at::detail::createCPUGenerator(seed);
  for (auto& item : named_parameters()) {
    auto& p = item.value();
    const std::string& name = item.key();
    torch::Tensor value;
    if (name.ends_with("norm.weight")) {
      value = torch::ones(p.sizes(), torch::kFloat32);
    } else if (name.ends_with(".bias")) {
      value = torch::zeros(p.sizes(), torch::kFloat32);
    } else {  // drawn whole, so a tensor-parallel part is that of the whole model
      value = at::normal(0.0, stddev, global_shape(name, p), generator, torch::TensorOptions().dtype(torch::kFloat32));
    }
    p.copy_(tp_ ? tp_->slice(value, tp_->shard(name)) : value);
  }
}

void Transformer::add_adapter_to(const std::string& name, LinearImpl& linear, const LoraConfig& config,
                                 at::Generator& generator) {
  const std::string a_name = name + ".lora_A.weight";
  auto a = lora_a_init(config.rank, global_shape(name + ".weight", linear.weight)[1], generator);
  if (tp_) a = tp_->slice(a, tp_->shard(a_name));
  linear.add_adapter(a, config.scaling(), config.dropout, options_.dtype);
}

NamedTensors Transformer::named_tensors() const {
  NamedTensors out = named_weights();
  if (has_adapters()) {
    for (auto& t : trained_weights()) {
      if (t.first != "score.weight") out.push_back(std::move(t));  // a classifier's head is among the weights already
    }
  }
  return out;
}

}  // namespace rlcpp
