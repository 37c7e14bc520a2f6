// The Transformer's LoRA lifecycle: adapters added, enabled, saved and loaded in PEFT's format, merged
// into the weights; the frozen base stored in another dtype; which tensors train.
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

void Transformer::store_frozen_weights() {
  // Before loading: the weights are replaced, not converted (nothing is allocated at full size).
  torch::NoGradGuard no_grad;
  if (eight_bit(options_.frozen_dtype)) {
    RLCPP_CHECK(!config_.classifier(), "8-bit weights for a classifier ({})", config_.architecture);
    for (const auto& item : named_modules(/*name_prefix=*/"", /*include_self=*/false)) {  // in the constructor
      auto own = item.value()->named_parameters(/*recurse=*/false);
      auto* p = own.find("weight");
      if (p == nullptr || p->dim() != 2) continue;
      p->set_requires_grad(false);
      p->set_data(torch::empty(p->sizes(), p->options().dtype(options_.frozen_dtype)));
      auto scale = item.value()->register_buffer("weight_scale", torch::zeros({p->size(0)}, p->options().dtype(torch::kFloat32)));
      if (auto* linear = dynamic_cast<LinearImpl*>(item.value().get())) linear->weight_scale = scale;
    }
    for (auto& p : parameters()) p.set_requires_grad(false);
    return;
  }
  for (auto& item : named_parameters()) {
    auto& p = item.value();
    p.set_requires_grad(false);
    if (item.key() == "score.weight") continue;  // a classifier's head trains beside the adapters, in full precision
    if (p.dim() == 2) p.set_data(torch::empty(p.sizes(), p.options().dtype(options_.frozen_dtype)));
  }
}

void Transformer::freeze_all_but_head() {
  for (auto& p : parameters()) p.set_requires_grad(false);
  if (score) score->weight.set_requires_grad(true);
}

namespace {

// A pipeline stage after the first (ModelOptions::stage) draws, and throws away, the A matrices of
// the decoder layers before it, in the whole model's order (layer by layer, each layer's modules as
// this stage's first layer has them), so each of its adapters starts as in the whole model. The
// earlier layers' shapes are its first layer's: the decoder's layers are alike.
void skip_earlier_stages_draws(const Transformer& model, const LoraConfig& config, at::Generator& generator) {
  const int64_t first = model.options().stage.layer_begin;
  if (model.options().stage.whole() || first == 0) return;
  const std::string held = fmt::format("model.layers.{}.", first);
  std::vector<std::pair<std::string, int64_t>> linears;  // the first layer's: name within the layer, inputs
  for (const auto& item : model.named_modules()) {
    auto linear = std::dynamic_pointer_cast<LinearImpl>(item.value());
    if (linear == nullptr || item.key().rfind(held, 0) != 0) continue;
    linears.emplace_back(item.key().substr(held.size()), model.global_shape(item.key() + ".weight", linear->weight)[1]);
  }
  for (int64_t layer = 0; layer < first; ++layer) {
    for (const auto& [name, in] : linears) {
      if (config.adapts(fmt::format("model.layers.{}.{}", layer, name))) lora_a_init(config.rank, in, generator);
    }
  }
}

}  // namespace

void Transformer::add_adapters(const LoraConfig& config, uint64_t seed) {
  RLCPP_CHECK(config.enabled() && adapted_.empty(), "adapters of rank {} on a model with {} adapted layers", config.rank,
              adapted_.size());
  lora_ = config;
  freeze_all_but_head();
  auto generator = at::detail::createCPUGenerator(seed);
  skip_earlier_stages_draws(*this, config, generator);
  for (const auto& item : named_modules()) {
    auto linear = std::dynamic_pointer_cast<LinearImpl>(item.value());
    if (linear == nullptr || linear.get() == lm_head.get() || linear.get() == score.get() || !config.adapts(item.key())) continue;
    add_adapter_to(item.key(), *linear, config, generator);
    adapted_.emplace_back(item.key(), linear.get());
  }
  index_shards();
  if (adapted_.empty()) {
    throw_user_error("LoRA: no linear layer matches --lora-target-modules {}{} in this {} model",
                     lora_targets_text(config.targets),
                     config.name_scope.empty() ? "" : fmt::format(" within name scope \"{}\"", config.name_scope),
                     config_.model_type);
  }
}

std::vector<torch::Tensor> Transformer::trainable_parameters() const {
  if (!has_adapters()) return parameters();
  std::vector<torch::Tensor> out;
  for (const auto& [name, linear] : adapted_) {
    out.push_back(linear->lora_A);
    out.push_back(linear->lora_B);
  }
  if (score) out.push_back(score->weight);  // PEFT's modules_to_save of a classifier
  return out;
}

std::vector<std::vector<torch::Tensor>> Transformer::layer_trainable_parameters() const {
  std::vector<std::vector<torch::Tensor>> out;
  for (const auto& layer : model->layers) out.push_back(trained_tensors(*layer));
  return out;
}

NamedTensors Transformer::trained_weights() const {
  if (!has_adapters()) return named_weights();
  NamedTensors out;
  for (const auto& [name, linear] : adapted_) {
    out.emplace_back(name + ".lora_A.weight", linear->lora_A);
    out.emplace_back(name + ".lora_B.weight", linear->lora_B);
  }
  if (score) out.emplace_back("score.weight", score->weight);  // PEFT saves modules_to_save under their own names
  return out;
}

void Transformer::for_each_merged_weight(
    const std::function<void(const std::string&, const torch::Tensor&)>& fn) const {
  for (const auto& [name, tensor] : named_weights()) {
    const std::string module = name.substr(0, name.rfind('.'));
    const auto it = std::find_if(adapted_.begin(), adapted_.end(), [&](const auto& a) { return a.first == module; });
    if (it != adapted_.end() && name.ends_with(".weight")) {
      fn(name, it->second->merged_weight(options_.dtype));
    } else if (tensor.scalar_type() != options_.dtype && tensor.is_floating_point()) {
      fn(name, tensor.to(options_.dtype));
    } else {
      fn(name, tensor);
    }
  }
}

NamedTensors Transformer::merged_weights() const {
  NamedTensors out;
  for_each_merged_weight([&](const std::string& name, const torch::Tensor& t) { out.emplace_back(name, t); });
  return out;
}

void Transformer::save_adapter(const std::filesystem::path& dir, const std::string& base_model) const {
  RLCPP_CHECK(has_adapters(), "save_adapter on a model without adapters");
  std::filesystem::create_directories(dir);
  write_file_atomic(dir / kAdapterConfigFile, peft_adapter_config(lora_, base_model, config_.classifier()).dump(2) + "\n");
  NamedTensors tensors;
  for (const auto& [name, tensor] : trained_weights()) tensors.emplace_back(kPeftKeyPrefix + name, tensor.detach());
  save_safetensors(dir / kAdapterWeightsFile, tensors);
}

void Transformer::load_adapter(const std::filesystem::path& dir) {
  const PeftAdapter adapter = read_peft_adapter(dir);
  const auto file = dir / kAdapterWeightsFile;
  if (!std::filesystem::exists(file)) throw_user_error("{}: missing (the adapter's weights)", file.string());
  const auto weights_file = SafetensorsFile::open(file);
  std::vector<std::string> weight_names;
  for (const auto& info : weights_file->tensors()) weight_names.push_back(info.name);
  // The modules that carry an adapter are those the file has matrices for.
  LoraConfig config = adapter.config;
  std::set<std::string> modules;
  const std::string prefix = kPeftKeyPrefix;
  for (const auto& name : weight_names) {
    std::string key = name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name;
    for (const char* part : {".lora_A.weight", ".lora_B.weight", ".lora_A.default.weight", ".lora_B.default.weight"}) {
      if (key.ends_with(part)) modules.insert(key.substr(0, key.size() - std::strlen(part)));
    }
  }
  if (modules.empty()) throw_user_error("{}: no LoRA matrices (keys ...lora_A.weight / ...lora_B.weight)", file.string());
  for (const auto& m : modules) {
    std::string leaf = m.substr(m.rfind('.') + 1);
    if (std::find(config.targets.begin(), config.targets.end(), leaf) == config.targets.end() && !config.targets.empty()) {
      config.targets.push_back(leaf);
    }
  }
  config.name_scope.clear();
  lora_ = config;
  freeze_all_but_head();
  auto generator = at::detail::createCPUGenerator(0);
  std::set<std::string> found;
  adapted_.clear();
  for (const auto& item : named_modules()) {  // in model order
    auto linear = std::dynamic_pointer_cast<LinearImpl>(item.value());
    if (!modules.count(item.key())) {  // an earlier adapter's layer that this one leaves alone
      if (linear != nullptr) linear->lora_A = linear->lora_B = torch::Tensor();
      continue;
    }
    if (linear == nullptr || linear.get() == lm_head.get() || linear.get() == score.get()) continue;
    if (linear->has_adapter() && linear->lora_A.size(0) != config.rank) linear->lora_A = linear->lora_B = torch::Tensor();
    if (!linear->has_adapter()) add_adapter_to(item.key(), *linear, config, generator);
    linear->lora_scaling = config.scaling();  // a reused adapter takes this one's alpha and dropout
    linear->lora_dropout = config.dropout;
    adapted_.emplace_back(item.key(), linear.get());
    found.insert(item.key());
  }
  index_shards();
  for (const auto& m : modules) {
    if (!found.count(m) && holds_weight(m + ".weight")) {  // another pipeline stage's are not here
      throw_user_error("{}: adapter for \"{}\", which is not a linear layer of this {} model", file.string(), m,
                       config_.model_type);
    }
  }
  NamedTensors tensors;
  for (const auto& name : weight_names) {
    std::string key = name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name;
    const auto pos = key.find(".default.weight");
    if (pos != std::string::npos) key = key.substr(0, pos) + ".weight";
    tensors.emplace_back(key, weights_file->tensor(name));
  }
  const auto loaded = update_weights(tensors, file.string());
  for (const auto& [name, tensor] : trained_weights()) {
    if (!loaded.count(name)) throw_user_error("{}: matrix \"{}{}\" is missing", file.string(), prefix, name);
  }
}

}  // namespace rlcpp
