#include "model/transformer.h"

#include <cmath>

#include "io/checkpoint.h"
#include "model/logprobs.h"
#include "util/error.h"
#include "util/torch_format.h"
#include "util/file.h"

namespace rlcpp {

namespace {

torch::nn::Linear make_linear(int64_t in, int64_t out, bool bias) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
}

// The dtype softmax and norms run in: fp32 for half types, fp64 for fp64.
torch::ScalarType compute_dtype(torch::ScalarType dtype) { return logprob_dtype(dtype); }

// Additive attention mask [B, 1, T, T]: causal, keys at padding masked. A padded query keeps its own
// key so its softmax stays finite (its output is never used).
torch::Tensor build_attention_mask(const torch::Tensor& attention_mask, int64_t batch, int64_t length,
                                   torch::ScalarType dtype, torch::Device device) {
  auto bool_opts = torch::TensorOptions().dtype(torch::kBool).device(device);
  auto allowed = torch::ones({length, length}, bool_opts).tril().unsqueeze(0);  // [1, T, T]
  if (attention_mask.defined()) {
    auto keys = attention_mask.to(device).to(torch::kBool).unsqueeze(1);  // [B, 1, T]
    auto diagonal = torch::eye(length, bool_opts).unsqueeze(0);
    allowed = allowed.logical_and(keys).logical_or(diagonal);           // [B, T, T]
  } else {
    allowed = allowed.expand({batch, length, length});
  }
  auto mask = torch::zeros(allowed.sizes(), torch::TensorOptions().dtype(dtype).device(device));
  mask.masked_fill_(allowed.logical_not(), -std::numeric_limits<double>::infinity());
  return mask.unsqueeze(1);
}

}  // namespace

const EnumTable<torch::ScalarType>& dtypes() {
  static const EnumTable<torch::ScalarType> table(
      "dtype", {{torch::kFloat32, "float32", "32-bit float", {"fp32", "float"}},
                {torch::kBFloat16, "bfloat16", "bfloat16 (8-bit exponent)", {"bf16"}},
                {torch::kFloat16, "float16", "IEEE half", {"fp16", "half"}},
                {torch::kFloat64, "float64", "64-bit float (parity and gradient checks)", {"fp64", "double"}}});
  return table;
}

ModelOptions model_options_from_flags(const std::string& dtype, const std::string& device) {
  ModelOptions options;
  options.dtype = dtypes().parse(dtype, "--dtype");
  try {
    options.device = torch::Device(device);
  } catch (const c10::Error&) {
    throw_user_error("--device: unknown device \"{}\" (use cpu, cuda or cuda:N)", device);
  }
  if (options.device.is_cuda() && !torch::cuda::is_available()) {
    throw_user_error("--device {}: this LibTorch build or machine has no CUDA device; use --device cpu", device);
  }
  return options;
}

torch::Tensor positions_from_mask(const torch::Tensor& attention_mask) {
  return (attention_mask.to(torch::kInt64).cumsum(1) - 1).clamp_min(0);
}

RMSNormImpl::RMSNormImpl(int64_t dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  const auto dtype = x.scalar_type();
  auto h = x.to(compute_dtype(dtype));
  h = h * torch::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps_);
  return weight * h.to(dtype);
}

AttentionImpl::AttentionImpl(const ModelConfig& c)
    : n_heads_(c.num_attention_heads), n_kv_heads_(c.num_key_value_heads), head_dim_(c.head_dim) {
  q_proj = register_module("q_proj", make_linear(c.hidden_size, c.q_size(), c.qkv_bias));
  k_proj = register_module("k_proj", make_linear(c.hidden_size, c.kv_size(), c.qkv_bias));
  v_proj = register_module("v_proj", make_linear(c.hidden_size, c.kv_size(), c.qkv_bias));
  o_proj = register_module("o_proj", make_linear(c.q_size(), c.hidden_size, c.o_bias));
  if (c.qk_norm) {
    q_norm = register_module("q_norm", std::make_shared<RMSNormImpl>(c.head_dim, c.rms_norm_eps));
    k_norm = register_module("k_norm", std::make_shared<RMSNormImpl>(c.head_dim, c.rms_norm_eps));
  }
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                                     const torch::Tensor& mask) {
  const int64_t batch = x.size(0), length = x.size(1);
  const int64_t group = n_heads_ / n_kv_heads_;
  auto q = q_proj->forward(x).view({batch, length, n_heads_, head_dim_});
  auto k = k_proj->forward(x).view({batch, length, n_kv_heads_, head_dim_});
  auto v = v_proj->forward(x).view({batch, length, n_kv_heads_, head_dim_}).transpose(1, 2);
  if (q_norm) {
    q = q_norm->forward(q);
    k = k_norm->forward(k);
  }
  q = Rope::apply(q.transpose(1, 2), cos, sin);  // [B, Hq, T, D]
  k = Rope::apply(k.transpose(1, 2), cos, sin);  // [B, Hkv, T, D]
  // Grouped-query attention without copying k/v: the G query heads of a kv head are stacked on the
  // time axis, [B, Hkv, G*T, D] (q head h uses kv head h / G, as Hugging Face's repeat_kv).
  auto qg = q.reshape({batch, n_kv_heads_, group * length, head_dim_});
  auto scores = torch::matmul(qg, k.transpose(-1, -2)) * (1.0 / std::sqrt(static_cast<double>(head_dim_)));
  scores = scores.view({batch, n_kv_heads_, group, length, length}) + mask.unsqueeze(2);
  auto probs = torch::softmax(scores, -1, compute_dtype(x.scalar_type())).to(x.scalar_type());
  auto out = torch::matmul(probs.view({batch, n_kv_heads_, group * length, length}), v);  // [B, Hkv, G*T, D]
  out = out.view({batch, n_heads_, length, head_dim_}).transpose(1, 2).reshape({batch, length, n_heads_ * head_dim_});
  return o_proj->forward(out);
}

torch::Tensor AttentionImpl::forward_packed(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                                            int64_t layer, AttentionBackend& backend) {
  const int64_t tokens = x.size(0);
  auto q = q_proj->forward(x).view({tokens, n_heads_, head_dim_});
  auto k = k_proj->forward(x).view({tokens, n_kv_heads_, head_dim_});
  auto v = v_proj->forward(x).view({tokens, n_kv_heads_, head_dim_});
  if (q_norm) {
    q = q_norm->forward(q);
    k = k_norm->forward(k);
  }
  q = Rope::apply(q, cos, sin);  // [T, H, D] with cos [T, 1, D]
  k = Rope::apply(k, cos, sin);
  return o_proj->forward(backend.attend(layer, q, k, v));
}

MlpImpl::MlpImpl(const ModelConfig& c) {
  gate_proj = register_module("gate_proj", make_linear(c.hidden_size, c.intermediate_size, c.mlp_bias));
  up_proj = register_module("up_proj", make_linear(c.hidden_size, c.intermediate_size, c.mlp_bias));
  down_proj = register_module("down_proj", make_linear(c.intermediate_size, c.hidden_size, c.mlp_bias));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) {
  return down_proj->forward(torch::silu(gate_proj->forward(x)) * up_proj->forward(x));
}

DecoderLayerImpl::DecoderLayerImpl(const ModelConfig& c) {
  self_attn = register_module("self_attn", std::make_shared<AttentionImpl>(c));
  mlp = register_module("mlp", std::make_shared<MlpImpl>(c));
  input_layernorm = register_module("input_layernorm", std::make_shared<RMSNormImpl>(c.hidden_size, c.rms_norm_eps));
  post_attention_layernorm =
      register_module("post_attention_layernorm", std::make_shared<RMSNormImpl>(c.hidden_size, c.rms_norm_eps));
}

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                                        const torch::Tensor& mask) {
  auto h = x + self_attn->forward(input_layernorm->forward(x), cos, sin, mask);
  return h + mlp->forward(post_attention_layernorm->forward(h));
}

torch::Tensor DecoderLayerImpl::forward_packed(const torch::Tensor& x, const torch::Tensor& cos,
                                               const torch::Tensor& sin, int64_t layer, AttentionBackend& backend) {
  auto h = x + self_attn->forward_packed(input_layernorm->forward(x), cos, sin, layer, backend);
  return h + mlp->forward(post_attention_layernorm->forward(h));
}

DecoderImpl::DecoderImpl(const ModelConfig& c) {
  embed_tokens = register_module("embed_tokens", torch::nn::Embedding(c.vocab_size, c.hidden_size));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layers->push_back(std::make_shared<DecoderLayerImpl>(c));
  norm = register_module("norm", std::make_shared<RMSNormImpl>(c.hidden_size, c.rms_norm_eps));
}

Transformer::Transformer(ModelConfig config, ModelOptions options)
    : config_(std::move(config)), options_(options), rope_(config_, options.device) {
  model = register_module("model", std::make_shared<DecoderImpl>(config_));
  if (!config_.tie_word_embeddings) {
    lm_head = register_module("lm_head", make_linear(config_.hidden_size, config_.vocab_size, false));
  }
  to(options_.device, options_.dtype);
}

std::shared_ptr<Transformer> Transformer::from_pretrained(const std::filesystem::path& dir, ModelOptions options) {
  auto model = std::make_shared<Transformer>(ModelConfig::load(dir), options);
  CheckpointReader reader(dir);
  model->load_weights(reader, dir.string());
  return model;
}

torch::Tensor Transformer::hidden_states(const torch::Tensor& input_ids, const torch::Tensor& attention_mask) {
  RLCPP_CHECK(input_ids.dim() == 2, "input_ids must be [B, T], got {}", input_ids.sizes());
  const int64_t batch = input_ids.size(0), length = input_ids.size(1);
  auto ids = input_ids.to(options_.device);
  torch::Tensor positions;
  if (attention_mask.defined()) {
    RLCPP_CHECK(attention_mask.sizes() == input_ids.sizes(), "attention_mask {} must match input_ids {}",
                attention_mask.sizes(), input_ids.sizes());
    positions = positions_from_mask(attention_mask.to(options_.device));
  } else {
    positions = torch::arange(length, ids.options().dtype(torch::kInt64)).unsqueeze(0).expand({batch, length});
  }
  auto [cos, sin] = rope_.cos_sin(positions, options_.dtype);
  auto mask = build_attention_mask(attention_mask, batch, length, options_.dtype, options_.device);
  auto h = model->embed_tokens->forward(ids);
  for (const auto& layer : *model->layers) h = layer->as<DecoderLayerImpl>()->forward(h, cos, sin, mask);
  return model->norm->forward(h);
}

torch::Tensor Transformer::hidden_states_packed(const torch::Tensor& ids, const torch::Tensor& positions,
                                                AttentionBackend& backend) {
  RLCPP_CHECK(ids.dim() == 1 && positions.sizes() == ids.sizes(), "packed ids {} and positions {} must be [T]",
              ids.sizes(), positions.sizes());
  auto [cos, sin] = rope_.cos_sin(positions.to(options_.device), options_.dtype);  // [T, D]
  auto h = model->embed_tokens->forward(ids.to(options_.device));
  int64_t layer = 0;
  for (const auto& block : *model->layers) {
    h = block->as<DecoderLayerImpl>()->forward_packed(h, cos, sin, layer++, backend);
  }
  return model->norm->forward(h);
}

torch::Tensor Transformer::output_weight() const {
  return lm_head ? lm_head->weight : model->embed_tokens->weight;
}

torch::Tensor Transformer::forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask) {
  auto h = hidden_states(input_ids, attention_mask);
  return torch::matmul(h, output_weight().t()).to(compute_dtype(options_.dtype));
}

torch::Tensor Transformer::token_logprobs(const torch::Tensor& input_ids, const torch::Tensor& targets,
                                          double temperature, const torch::Tensor& attention_mask) {
  RLCPP_CHECK(targets.sizes() == input_ids.sizes(), "targets {} must match input_ids {}", targets.sizes(),
              input_ids.sizes());
  auto h = hidden_states(input_ids, attention_mask);
  const int64_t batch = h.size(0), length = h.size(1);
  auto flat = token_logprobs_chunked(h.reshape({batch * length, h.size(2)}), output_weight(),
                                     targets.to(options_.device).reshape({-1}), temperature,
                                     options_.logprob_chunk_tokens);
  return flat.view({batch, length});
}

LogprobsEntropy Transformer::token_logprobs_with_entropy(const torch::Tensor& input_ids, const torch::Tensor& targets,
                                                        double temperature, const torch::Tensor& attention_mask) {
  RLCPP_CHECK(targets.sizes() == input_ids.sizes(), "targets {} must match input_ids {}", targets.sizes(),
              input_ids.sizes());
  auto h = hidden_states(input_ids, attention_mask);
  const int64_t batch = h.size(0), length = h.size(1);
  auto flat_h = h.reshape({batch * length, h.size(2)});
  auto flat_targets = targets.to(options_.device).reshape({-1});
  auto logp = token_logprobs_chunked(flat_h, output_weight(), flat_targets, temperature, options_.logprob_chunk_tokens);
  auto entropy = token_entropy(flat_h, output_weight(), flat_targets, temperature);
  return {logp.view({batch, length}), entropy.view({batch, length})};
}

LogprobsEntropy Transformer::token_logprobs_entropy(const torch::Tensor& input_ids, const torch::Tensor& targets,
                                                   double temperature, const torch::Tensor& attention_mask) {
  RLCPP_CHECK(targets.sizes() == input_ids.sizes(), "targets {} must match input_ids {}", targets.sizes(),
              input_ids.sizes());
  torch::NoGradGuard no_grad;
  auto h = hidden_states(input_ids, attention_mask);
  const int64_t batch = h.size(0), length = h.size(1);
  auto out = rlcpp::token_logprobs_entropy(h.reshape({batch * length, h.size(2)}), output_weight(),
                                           targets.to(options_.device).reshape({-1}), temperature,
                                           options_.logprob_chunk_tokens);
  return {out.logprobs.view({batch, length}), out.entropy.view({batch, length})};
}

void Transformer::load_weights(const CheckpointReader& reader, const std::string& source) {
  NamedTensors tensors;
  for (const auto& item : named_parameters()) {
    const std::string& name = item.key();
    if (!reader.contains(name)) {
      throw_user_error("{}: weight \"{}\" is missing ({} expects it; is config.json the right one for these weights?)",
                       source, name, config_.architecture.empty() ? config_.model_type : config_.architecture);
    }
    tensors.emplace_back(name, reader.tensor(name));
  }
  load_weights(tensors, source);
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
  std::set<std::string> loaded;
  for (const auto& [name, tensor] : tensors) {
    auto* param = params.find(name);
    if (param == nullptr) {
      if (name == "lm_head.weight" && config_.tie_word_embeddings) continue;  // some writers store the tied copy
      if (name.find("rotary_emb.inv_freq") != std::string::npos) continue;   // old HF buffers, recomputed here
      throw_user_error("{}: unexpected weight \"{}\" ({} has no such parameter)", source, name,
                       config_.model_type);
    }
    if (param->sizes() != tensor.sizes()) {
      throw_user_error("{}: weight \"{}\" has shape {} but the config implies {}", source, name,
                       fmt::format("{}", tensor.sizes()), fmt::format("{}", param->sizes()));
    }
    param->copy_(tensor);
    loaded.insert(name);
  }
  return loaded;
}

NamedTensors Transformer::named_weights() const {
  NamedTensors out;
  for (const auto& item : named_parameters()) out.emplace_back(item.key(), item.value());
  return out;
}

void Transformer::save_pretrained(const std::filesystem::path& dir, uint64_t max_shard_bytes) const {
  std::filesystem::create_directories(dir);
  auto config_json = config_.raw;
  config_json["torch_dtype"] = dtypes().name(options_.dtype);
  write_file_atomic(dir / "config.json", config_json.dump(2) + "\n");
  save_checkpoint(dir, named_weights(), max_shard_bytes);
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
    } else {
      value = at::normal(0.0, stddev, p.sizes(), generator, torch::TensorOptions().dtype(torch::kFloat32));
    }
    p.copy_(value);
  }
}

}  // namespace rlcpp
