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
#include "util/torch_format.h"
#include "util/file.h"

#include <fmt/ranges.h>

namespace rlcpp {

namespace {

Linear make_linear(int64_t in, int64_t out, bool bias) { return std::make_shared<LinearImpl>(in, out, bias); }

// `t` in `dtype` (itself when it already is).
torch::Tensor as_dtype(const torch::Tensor& t, torch::ScalarType dtype) {
  return !t.defined() || t.scalar_type() == dtype ? t : t.to(dtype);
}

// Activation checkpointing of one decoder layer: the forward runs without a graph and keeps only
// the layer's input; the backward runs the layer again with a graph (the RNG replayed, so dropout
// draws the same mask) and differentiates it. The layer's trainable parameters are inputs, so
// their gradients flow even when x needs none (the first layer under LoRA).
struct CheckpointedLayer : public torch::autograd::Function<CheckpointedLayer> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, torch::TensorList params,
                               DecoderLayerImpl* layer, const torch::Tensor& cos, const torch::Tensor& sin,
                               const torch::Tensor& mask, ParameterHolder* holder, const Transformer* model) {
    ctx->save_for_backward({x});
    ctx->saved_data["holder"] = reinterpret_cast<int64_t>(holder);
    ctx->saved_data["model"] = reinterpret_cast<int64_t>(model);
    ctx->saved_data["cos"] = cos;
    ctx->saved_data["sin"] = sin;
    ctx->saved_data["mask"] = mask;
    ctx->saved_data["layer"] = reinterpret_cast<int64_t>(layer);
    ctx->saved_data["x_grad"] = x.requires_grad();
    ctx->saved_data["n_params"] = static_cast<int64_t>(params.size());
    auto generator = at::globalContext().defaultGenerator(x.device());
    {
      std::lock_guard<std::mutex> lock(generator.mutex());
      ctx->saved_data["rng"] = generator.get_state();
    }
    std::vector<torch::Tensor> kept(params.begin(), params.end());
    ctx->saved_data["params"] = c10::List<torch::Tensor>(kept);
    return layer->forward(x, cos, sin, mask);  // with a holder, the parameters were gathered for apply
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const auto x = ctx->get_saved_variables()[0];
    auto* layer = reinterpret_cast<DecoderLayerImpl*>(ctx->saved_data["layer"].toInt());
    const bool x_grad = ctx->saved_data["x_grad"].toBool();
    auto params_list = ctx->saved_data["params"].toTensorList();
    std::vector<torch::Tensor> params(params_list.begin(), params_list.end());
    auto generator = at::globalContext().defaultGenerator(x.device());
    torch::Tensor rng_now;
    {
      std::lock_guard<std::mutex> lock(generator.mutex());
      rng_now = generator.get_state();
      generator.set_state(ctx->saved_data["rng"].toTensor());
    }
    auto* holder = reinterpret_cast<ParameterHolder*>(ctx->saved_data["holder"].toInt());
    if (holder != nullptr) holder->gather(params);
    torch::Tensor out;
    auto input = x.detach().requires_grad_(x_grad);
    {
      torch::AutoGradMode grad(true);
      out = layer->forward(input, ctx->saved_data["cos"].toTensor(), ctx->saved_data["sin"].toTensor(),
                           ctx->saved_data["mask"].toTensor());
    }
    {
      std::lock_guard<std::mutex> lock(generator.mutex());
      generator.set_state(rng_now);
    }
    std::vector<torch::Tensor> wrt;
    if (x_grad) wrt.push_back(input);
    wrt.insert(wrt.end(), params.begin(), params.end());
    torch::autograd::variable_list grads;
    if (!wrt.empty()) grads = torch::autograd::grad({out}, wrt, {grad_out[0]}, false, false, /*allow_unused=*/true);
    torch::autograd::variable_list result;
    result.push_back(x_grad ? grads[0] : torch::Tensor());
    std::vector<torch::Tensor> param_grads(grads.begin() + (x_grad ? 1 : 0), grads.end());
    out = torch::Tensor();  // the recomputed graph, and the weights it saved, go
    if (holder != nullptr) {  // the holder takes the parameters' gradients (autograd gets none)
      param_grads.resize(params.size());
      reinterpret_cast<const Transformer*>(ctx->saved_data["model"].toInt())->reduce_partial_gradients(params, param_grads);
      holder->take_gradients(params, param_grads);
      holder->release(params);
      param_grads.assign(params.size(), torch::Tensor());
    }
    param_grads.resize(params.size());
    result.insert(result.end(), param_grads.begin(), param_grads.end());
    result.resize(result.size() + 6);  // layer, cos, sin, mask, holder, model: no gradient
    return result;
  }
};

// ZeRO-2's tap at a decoder layer's input: an identity whose backward runs once backward has
// finished the layer. Autograd runs gradient accumulation before any other ready node, so the
// layer's parameters then hold this pass's gradients: the holder takes them and they are released.
// The parameters are not inputs (their accumulation would wait for this node); `anchor`, a leaf
// that needs a gradient, makes the node run when x needs none.
struct LayerGradientTap : public torch::autograd::Function<LayerGradientTap> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& anchor,
                               const std::vector<torch::Tensor>* params, ParameterHolder* holder, const Transformer* model) {
    ctx->saved_data["params"] = c10::List<torch::Tensor>(*params);
    ctx->saved_data["holder"] = reinterpret_cast<int64_t>(holder);
    ctx->saved_data["model"] = reinterpret_cast<int64_t>(model);
    ctx->saved_data["x_grad"] = x.requires_grad();
    return x.clone();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    auto list = ctx->saved_data["params"].toTensorList();
    std::vector<torch::Tensor> params(list.begin(), list.end()), grads;
    for (const auto& p : params) grads.push_back(p.grad());
    reinterpret_cast<const Transformer*>(ctx->saved_data["model"].toInt())->reduce_partial_gradients(params, grads);
    reinterpret_cast<ParameterHolder*>(ctx->saved_data["holder"].toInt())->take_gradients(params, grads);
    for (auto& p : params) p.mutable_grad() = torch::Tensor();
    return {ctx->saved_data["x_grad"].toBool() ? grad_out[0] : torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor(), torch::Tensor()};
  }
};

// A trained embedding's lookup whose backward adds its rows straight into the weight's .grad (made
// if absent) and hands autograd no gradient for the weight. LibTorch's embedding backward builds a
// dense zero [V, H] gradient for a handful of rows, and with tied weights autograd then adds it to
// the head's [V, H] gradient out of place before accumulating: three vocabulary-sized buffers a
// micro-batch (0.5B: 545 MB each) that this one index_add_ replaces. The head's gradient still
// reaches .grad through autograd, after this has run (the weight's accumulation waits for both).
// Under tensor parallelism `ids` are rows of this rank's part and `held` [ids] says which tokens
// it holds: the others look up zeros and add nothing (undefined `held`: every token is here).
struct EmbeddingIntoGrad : public torch::autograd::Function<EmbeddingIntoGrad> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& weight,
                               const torch::Tensor& ids, const c10::optional<torch::Tensor>& held) {
    ctx->saved_data["weight"] = weight;  // the parameter itself: its .grad is written
    ctx->save_for_backward({ids, held ? *held : torch::Tensor()});
    auto sizes = ids.sizes().vec();
    sizes.push_back(weight.size(1));
    auto rows = weight.index_select(0, ids.reshape({-1}));
    if (held) rows.mul_(held->reshape({-1, 1}).to(rows.scalar_type()));
    return rows.view(sizes);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto weight = ctx->saved_data["weight"].toTensor();
    const auto saved = ctx->get_saved_variables();
    const auto ids = saved[0].reshape({-1});
    auto g = grads[0].reshape({-1, weight.size(1)}).to(weight.scalar_type());
    torch::NoGradGuard no_grad;
    if (saved[1].defined()) g = g * saved[1].reshape({-1, 1}).to(g.scalar_type());
    if (!weight.grad().defined()) weight.mutable_grad() = torch::zeros_like(weight);
    weight.mutable_grad().index_add_(0, ids, g);
    return {torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// A linear layer over a frozen weight stored in another dtype than x's: the weight is converted for
// the product and again in backward, so autograd keeps the stored (half-size) weight, not a full-
// precision copy of it per layer. Only x (and a bias that trains) get gradients.
struct StoredWeightLinear : public torch::autograd::Function<StoredWeightLinear> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               const c10::optional<torch::Tensor>& bias) {
    ctx->saved_data["weight"] = weight;
    return torch::nn::functional::linear(x, weight.to(x.scalar_type()),
                                         bias ? as_dtype(*bias, x.scalar_type()) : torch::Tensor());
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const auto& g = grad_out[0];
    const auto weight = ctx->saved_data["weight"].toTensor().to(g.scalar_type());
    auto grad_x = torch::matmul(g, weight);
    return {grad_x, torch::Tensor(), torch::Tensor()};
  }
};

// The parameters of `module` that training updates (requires_grad), adapters included.
std::vector<torch::Tensor> trained_tensors(torch::nn::Module& module) {
  std::vector<torch::Tensor> out;
  for (const auto& item : module.named_modules()) {
    if (auto* linear = dynamic_cast<LinearImpl*>(item.value().get()); linear != nullptr && linear->has_adapter()) {
      out.push_back(linear->lora_A);
      out.push_back(linear->lora_B);
    }
  }
  for (const auto& p : module.parameters()) {
    if (p.requires_grad()) out.push_back(p);
  }
  return out;
}

// The dtype softmax and norms run in: fp32 for half types, fp64 for fp64.
torch::ScalarType compute_dtype(torch::ScalarType dtype) { return logprob_dtype(dtype); }

}  // namespace

const EnumTable<torch::ScalarType>& dtypes() {
  static const EnumTable<torch::ScalarType> table(
      "dtype", {{torch::kFloat32, "float32", "32-bit float", {"fp32", "float"}},
                {torch::kBFloat16, "bfloat16", "bfloat16 (8-bit exponent)", {"bf16"}},
                {torch::kFloat16, "float16", "IEEE half", {"fp16", "half"}},
                {torch::kFloat64, "float64", "64-bit float (parity and gradient checks)", {"fp64", "double"}}});
  return table;
}

torch::ScalarType dtype_or_default(const std::string& text, const std::string& flag) {
  return text.empty() ? torch::ScalarType::Undefined : dtypes().parse(text, flag);
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

LinearImpl::LinearImpl(int64_t in, int64_t out, bool with_bias) {
  // Uninitialised: loaded from a checkpoint or set by Transformer::init_weights.
  weight = register_parameter("weight", torch::empty({out, in}));
  if (with_bias) bias = register_parameter("bias", torch::zeros({out}));
}

torch::Tensor LinearImpl::forward(const torch::Tensor& x) {
  const auto dtype = x.scalar_type();
  // Row-parallel: the bias joins after the sum over the group.
  const torch::Tensor& b = reduce_over != nullptr ? torch::Tensor() : bias;
  torch::Tensor y = kernel_linear(x, weight, b);  // generation's small batches on CPU
  if (y.defined()) {
  } else if (weight.scalar_type() != dtype && !weight.requires_grad() && (!b.defined() || !b.requires_grad())) {
    y = StoredWeightLinear::apply(x, weight, b.defined() ? c10::optional<torch::Tensor>(b) : c10::nullopt);
  } else {
    y = torch::nn::functional::linear(x, as_dtype(weight, dtype), as_dtype(b, dtype));
  }
  if (lora_A.defined() && adapter_enabled) {
    auto h = lora_dropout > 0 && is_training() ? torch::dropout(x, lora_dropout, /*train=*/true) : x;
    y = y + torch::matmul(torch::matmul(h, lora_A.t()), lora_B.t()) * lora_scaling;
  }
  if (reduce_over != nullptr) {
    y = reduce_over->reduce(y);
    if (bias.defined()) y = y + as_dtype(bias, dtype);
  }
  return y;
}

torch::Tensor lora_a_init(int64_t rank, int64_t in, at::Generator& generator) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  return at::empty({rank, in}, torch::TensorOptions().dtype(torch::kFloat64)).uniform_(-bound, bound, generator);
}

void LinearImpl::add_adapter(const torch::Tensor& a, double scaling, double dropout, torch::ScalarType dtype) {
  RLCPP_CHECK(a.dim() == 2 && a.size(1) == weight.size(1), "adapter A {} for a weight {}", a.sizes(), weight.sizes());
  auto opts = torch::TensorOptions().dtype(dtype).device(weight.device());
  lora_A = a.to(opts).requires_grad_(true);
  lora_B = torch::zeros({weight.size(0), a.size(0)}, opts).requires_grad_(true);
  lora_scaling = scaling;
  lora_dropout = dropout;
}

torch::Tensor LinearImpl::merged_weight(torch::ScalarType dtype) const {
  torch::NoGradGuard no_grad;
  auto w = weight.to(dtype);
  if (!lora_A.defined()) return w;
  return w + torch::matmul(lora_B.to(dtype), lora_A.to(dtype)) * lora_scaling;
}

RMSNormImpl::RMSNormImpl(int64_t dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  if (auto y = kernel_rms_norm(x, weight, eps_); y.defined()) return y;  // the engine's steps
  const auto dtype = x.scalar_type();
  auto h = x.to(compute_dtype(dtype));
  h = h * torch::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps_);
  return weight * h.to(dtype);
}

AttentionImpl::AttentionImpl(const ModelConfig& c, const TensorParallel* tp)
    : n_heads_(tp ? tp->shape().n_heads() : c.num_attention_heads),
      n_kv_heads_(tp ? tp->shape().n_kv_heads() : c.num_key_value_heads),
      head_dim_(c.head_dim),
      tp_(tp) {
  q_proj = register_module("q_proj", make_linear(c.hidden_size, n_heads_ * head_dim_, c.qkv_bias));
  k_proj = register_module("k_proj", make_linear(c.hidden_size, n_kv_heads_ * head_dim_, c.qkv_bias));
  v_proj = register_module("v_proj", make_linear(c.hidden_size, n_kv_heads_ * head_dim_, c.qkv_bias));
  o_proj = register_module("o_proj", make_linear(n_heads_ * head_dim_, c.hidden_size, c.o_bias));
  o_proj->reduce_over = tp;
  if (c.qk_norm) {
    q_norm = register_module("q_norm", std::make_shared<RMSNormImpl>(c.head_dim, c.rms_norm_eps));
    k_norm = register_module("k_norm", std::make_shared<RMSNormImpl>(c.head_dim, c.rms_norm_eps));
  }
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& input, const torch::Tensor& cos, const torch::Tensor& sin,
                                     const torch::Tensor& mask) {
  const auto x = tp_ ? tp_->enter(input) : input;
  const int64_t batch = x.size(0), length = x.size(1);
  auto q = q_proj->forward(x).view({batch, length, n_heads_, head_dim_});
  auto k = k_proj->forward(x).view({batch, length, n_kv_heads_, head_dim_});
  auto v = v_proj->forward(x).view({batch, length, n_kv_heads_, head_dim_}).transpose(1, 2);
  if (q_norm) {
    q = q_norm->forward(q);
    k = k_norm->forward(k);
  }
  auto rotate = [&](const torch::Tensor& x) {  // [B, T, H, D] -> rotated [B, H, T, D]
    const int64_t heads = x.size(2);
    auto y = kernel_rope(x.reshape({batch * length, heads, head_dim_}), cos.reshape({batch * length, head_dim_}),
                         sin.reshape({batch * length, head_dim_}));
    return y.defined() ? y.view({batch, length, heads, head_dim_}).transpose(1, 2) : Rope::apply(x.transpose(1, 2), cos, sin);
  };
  q = rotate(q);  // [B, Hq, T, D]
  k = rotate(k);  // [B, Hkv, T, D]
  auto out = causal_attention(q, k, v, mask, 1.0 / std::sqrt(static_cast<double>(head_dim_)));  // [B, Hq, T, D]
  out = out.transpose(1, 2).reshape({batch, length, n_heads_ * head_dim_});
  return o_proj->forward(out);
}

torch::Tensor AttentionImpl::forward_packed(const torch::Tensor& input, const torch::Tensor& cos, const torch::Tensor& sin,
                                            int64_t layer, AttentionBackend& backend) {
  const auto x = tp_ ? tp_->enter(input) : input;
  const int64_t tokens = x.size(0);
  auto q = q_proj->forward(x).view({tokens, n_heads_, head_dim_});
  auto k = k_proj->forward(x).view({tokens, n_kv_heads_, head_dim_});
  auto v = v_proj->forward(x).view({tokens, n_kv_heads_, head_dim_});
  if (q_norm) {
    q = q_norm->forward(q);
    k = k_norm->forward(k);
  }
  auto rotate = [&](const torch::Tensor& x) {  // [T, H, D] with cos [T, D]
    auto y = kernel_rope(x, cos, sin);             // the engine's steps
    return y.defined() ? y : Rope::apply(x, cos, sin);
  };
  q = rotate(q);
  k = rotate(k);
  return o_proj->forward(backend.attend(layer, q, k, v));
}

MlpImpl::MlpImpl(const ModelConfig& c, const TensorParallel* tp) : tp_(tp) {
  const int64_t channels = tp ? tp->shape().mlp_end - tp->shape().mlp_begin : c.intermediate_size;
  gate_proj = register_module("gate_proj", make_linear(c.hidden_size, channels, c.mlp_bias));
  up_proj = register_module("up_proj", make_linear(c.hidden_size, channels, c.mlp_bias));
  down_proj = register_module("down_proj", make_linear(channels, c.hidden_size, c.mlp_bias));
  down_proj->reduce_over = tp;
}

torch::Tensor MlpImpl::forward(const torch::Tensor& input) {
  const auto x = tp_ ? tp_->enter(input) : input;
  auto gate = gate_proj->forward(x), up = up_proj->forward(x);
  auto h = kernel_silu_mul(gate, up);  // the engine's steps
  return down_proj->forward(h.defined() ? h : torch::silu(gate) * up);
}

DecoderLayerImpl::DecoderLayerImpl(const ModelConfig& c, const TensorParallel* tp) {
  self_attn = register_module("self_attn", std::make_shared<AttentionImpl>(c, tp));
  mlp = register_module("mlp", std::make_shared<MlpImpl>(c, tp));
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

DecoderImpl::DecoderImpl(const ModelConfig& c, const TensorParallel* tp) {
  const int64_t tokens = tp ? tp->shape().vocab_end - tp->shape().vocab_begin : c.vocab_size;
  embed_tokens = register_module("embed_tokens", torch::nn::Embedding(tokens, c.hidden_size));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layers->push_back(std::make_shared<DecoderLayerImpl>(c, tp));
  norm = register_module("norm", std::make_shared<RMSNormImpl>(c.hidden_size, c.rms_norm_eps));
}

Transformer::Transformer(ModelConfig config, ModelOptions options)
    : config_(std::move(config)), options_(options), rope_(config_, options.device) {
  if (options_.tp_group != nullptr && options_.tp_group->size() > 1) {
    tp_ = std::make_unique<TensorParallel>(options_.tp_group, config_);
  }
  model = register_module("model", std::make_shared<DecoderImpl>(config_, tp_.get()));
  if (!config_.tie_word_embeddings) {
    const int64_t tokens = model->embed_tokens->weight.size(0);  // this rank's part of the vocabulary
    lm_head = register_module("lm_head", make_linear(config_.hidden_size, tokens, false));
  }
  to(options_.device, options_.dtype);
  if (options_.frozen_dtype != torch::ScalarType::Undefined) store_frozen_weights();
  index_shards();
}

void Transformer::store_frozen_weights() {
  // Before loading: the weights are replaced, not converted (nothing is allocated at full size).
  torch::NoGradGuard no_grad;
  for (auto& item : named_parameters()) {
    auto& p = item.value();
    p.set_requires_grad(false);
    if (p.dim() == 2) p.set_data(torch::empty(p.sizes(), p.options().dtype(options_.frozen_dtype)));
  }
}

void Transformer::add_adapters(const LoraConfig& config, uint64_t seed) {
  RLCPP_CHECK(config.enabled() && adapted_.empty(), "adapters of rank {} on a model with {} adapted layers", config.rank,
              adapted_.size());
  lora_ = config;
  for (auto& p : parameters()) p.set_requires_grad(false);
  auto generator = at::detail::createCPUGenerator(seed);
  for (const auto& item : named_modules()) {
    auto linear = std::dynamic_pointer_cast<LinearImpl>(item.value());
    if (linear == nullptr || linear.get() == lm_head.get() || !config.adapts(item.key())) continue;
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

void Transformer::set_adapters_enabled(bool enabled) {
  for (auto& [name, linear] : adapted_) linear->adapter_enabled = enabled;
}

std::vector<torch::Tensor> Transformer::trainable_parameters() const {
  if (!has_adapters()) return parameters();
  std::vector<torch::Tensor> out;
  for (const auto& [name, linear] : adapted_) {
    out.push_back(linear->lora_A);
    out.push_back(linear->lora_B);
  }
  return out;
}

std::vector<std::vector<torch::Tensor>> Transformer::layer_trainable_parameters() const {
  std::vector<std::vector<torch::Tensor>> out;
  for (const auto& block : *model->layers) out.push_back(trained_tensors(*block->as<DecoderLayerImpl>()));
  return out;
}

NamedTensors Transformer::trained_weights() const {
  if (!has_adapters()) return named_weights();
  NamedTensors out;
  for (const auto& [name, linear] : adapted_) {
    out.emplace_back(name + ".lora_A.weight", linear->lora_A);
    out.emplace_back(name + ".lora_B.weight", linear->lora_B);
  }
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
  write_file_atomic(dir / kAdapterConfigFile, peft_adapter_config(lora_, base_model).dump(2) + "\n");
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
  for (auto& p : parameters()) p.set_requires_grad(false);
  auto generator = at::detail::createCPUGenerator(0);
  std::set<std::string> found;
  adapted_.clear();
  for (const auto& item : named_modules()) {  // in model order
    auto linear = std::dynamic_pointer_cast<LinearImpl>(item.value());
    if (!modules.count(item.key())) {  // an earlier adapter's layer that this one leaves alone
      if (linear != nullptr) linear->lora_A = linear->lora_B = torch::Tensor();
      continue;
    }
    if (linear == nullptr || linear.get() == lm_head.get()) continue;
    if (linear->has_adapter() && linear->lora_A.size(0) != config.rank) linear->lora_A = linear->lora_B = torch::Tensor();
    if (!linear->has_adapter()) add_adapter_to(item.key(), *linear, config, generator);
    linear->lora_scaling = config.scaling();  // a reused adapter takes this one's alpha and dropout
    linear->lora_dropout = config.dropout;
    linear->adapter_enabled = true;
    adapted_.emplace_back(item.key(), linear.get());
    found.insert(item.key());
  }
  index_shards();
  for (const auto& m : modules) {
    if (!found.count(m)) {
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

std::shared_ptr<Transformer> Transformer::from_pretrained(const std::filesystem::path& dir, ModelOptions options) {
  if (is_peft_adapter_dir(dir) && !std::filesystem::exists(dir / "config.json")) {
    const PeftAdapter adapter = read_peft_adapter(dir);
    if (!std::filesystem::exists(std::filesystem::path(adapter.base_model) / "config.json")) {
      throw_user_error("{}: its base model {} (base_model_name_or_path) is not a model directory here; edit the field "
                       "or merge the adapter on a machine that has the base (rlcpp merge BASE ADAPTER OUT)",
                       (dir / kAdapterConfigFile).string(), adapter.base_model);
    }
    auto model = from_pretrained(adapter.base_model, options);
    model->load_adapter(dir);
    return model;
  }
  auto model = std::make_shared<Transformer>(ModelConfig::load(dir), options);
  CheckpointReader reader(dir);
  model->load_weights(reader, dir.string());
  model->eval();  // inference until a trainer says otherwise (LoRA dropout is off in eval)
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
  // Which keys are real tokens, [B, T]; attention adds causality (model/attention.h).
  auto mask = attention_mask.defined()
                  ? attention_mask.to(options_.device).to(torch::kBool)
                  : torch::ones({batch, length}, torch::TensorOptions().dtype(torch::kBool).device(options_.device));
  auto h = as_dtype(embed(ids), options_.dtype);
  const bool grad = torch::GradMode::is_enabled();
  const bool sharded = holder_ != nullptr && holder_->shards_parameters();
  const bool checkpoint = grad && (sharded || (options_.gradient_checkpointing && is_training()));
  const bool tap = grad && holder_ != nullptr && !sharded;
  const auto anchor = tap ? torch::zeros({}, h.options()).requires_grad_() : torch::Tensor();
  for (const auto& block : *model->layers) {
    auto* layer = block->as<DecoderLayerImpl>();
    if (!sharded && !checkpoint && !tap) {
      h = layer->forward(h, cos, sin, mask);
      continue;
    }
    const auto params = trained_tensors(*layer);
    if (tap) h = LayerGradientTap::apply(h, anchor, &params, holder_, this);
    // Gathered before apply: autograd takes the parameters' shapes (their gradient accumulators')
    // as apply records them.
    if (sharded) holder_->gather(params);
    h = checkpoint ? CheckpointedLayer::apply(h, torch::TensorList(params), layer, cos, sin, mask,
                                              sharded ? holder_ : nullptr, this)
                   : layer->forward(h, cos, sin, mask);
    if (sharded) holder_->release(params);
  }
  return model->norm->forward(h);
}

torch::Tensor Transformer::hidden_states_packed(const torch::Tensor& ids, const torch::Tensor& positions,
                                                AttentionBackend& backend) {
  RLCPP_CHECK(ids.dim() == 1 && positions.sizes() == ids.sizes(), "packed ids {} and positions {} must be [T]",
              ids.sizes(), positions.sizes());
  auto [cos, sin] = rope_.cos_sin(positions.to(options_.device), options_.dtype);  // [T, D]
  auto h = as_dtype(embed(ids.to(options_.device)), options_.dtype);
  int64_t layer = 0;
  for (const auto& block : *model->layers) {
    h = block->as<DecoderLayerImpl>()->forward_packed(h, cos, sin, layer++, backend);
  }
  return model->norm->forward(h);
}

torch::Tensor Transformer::embed(const torch::Tensor& ids) {
  const auto& weight = model->embed_tokens->weight;
  const bool into_grad = torch::GradMode::is_enabled() && weight.requires_grad();
  if (!tp_) return into_grad ? EmbeddingIntoGrad::apply(weight, ids, c10::nullopt) : model->embed_tokens->forward(ids);
  // Vocabulary-parallel: each rank looks up the tokens it holds (zeros for the others) and the
  // rows are summed over the group.
  auto local = ids - tp_->shape().vocab_begin;
  const auto held = local.ge(0).logical_and(local.lt(weight.size(0)));
  local = local.clamp(0, weight.size(0) - 1);
  torch::Tensor rows;
  if (into_grad) {
    rows = EmbeddingIntoGrad::apply(weight, local, c10::optional<torch::Tensor>(held));
  } else {
    rows = model->embed_tokens->forward(local);
    rows.mul_(held.unsqueeze(-1).to(rows.scalar_type()));
  }
  return tp_->reduce(rows);
}

torch::Tensor Transformer::output_weight() const { return as_dtype(stored_output_weight(), options_.dtype); }

torch::Tensor Transformer::stored_output_weight() const {
  return lm_head ? lm_head->weight : model->embed_tokens->weight;
}

torch::Tensor Transformer::forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask) {
  auto h = hidden_states(input_ids, attention_mask);
  auto logits = torch::matmul(h, output_weight().t()).to(compute_dtype(options_.dtype));
  if (!tp_) return logits;
  // Every rank's vocabulary part, padded to the widest, gathered and laid side by side.
  int64_t widest = 0;
  for (const auto& r : tp_->layout().ranks) widest = std::max(widest, r.vocab_end - r.vocab_begin);
  auto mine = torch::zeros({logits.size(0), logits.size(1), widest}, logits.options().requires_grad(false));
  mine.narrow(2, 0, logits.size(2)).copy_(logits.detach());
  auto all = torch::empty({tp_->size(), mine.size(0), mine.size(1), widest}, mine.options());
  auto flat = all.view({-1});
  tp_->group().all_gather(mine.contiguous(), flat);
  std::vector<torch::Tensor> parts;
  for (int r = 0; r < tp_->size(); ++r) {
    const auto& shape = tp_->layout().ranks[static_cast<size_t>(r)];
    parts.push_back(all[r].narrow(2, 0, shape.vocab_end - shape.vocab_begin));
  }
  return torch::cat(parts, 2);
}

torch::Tensor Transformer::token_logprobs(const torch::Tensor& input_ids, const torch::Tensor& targets,
                                          double temperature, const torch::Tensor& attention_mask,
                                          torch::Tensor* entropy) {
  RLCPP_CHECK(targets.sizes() == input_ids.sizes(), "targets {} must match input_ids {}", targets.sizes(),
              input_ids.sizes());
  auto h = hidden_states(input_ids, attention_mask);
  const int64_t batch = h.size(0), length = h.size(1);
  auto flat = token_logprobs_chunked(h.reshape({batch * length, h.size(2)}), output_weight(),
                                     targets.to(options_.device).reshape({-1}), temperature,
                                     options_.logprob_chunk_tokens, entropy, vocab_shard());
  if (entropy != nullptr) *entropy = entropy->view({batch, length});
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
  auto logp = token_logprobs_chunked(flat_h, output_weight(), flat_targets, temperature, options_.logprob_chunk_tokens,
                                     nullptr, vocab_shard());
  auto entropy = token_entropy(flat_h, output_weight(), flat_targets, temperature, vocab_shard());
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
                                           options_.logprob_chunk_tokens, vocab_shard());
  return {out.logprobs.view({batch, length}), out.entropy.view({batch, length})};
}

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
    if (has_adapters()) params.insert(name, tensor);
  }
  std::set<std::string> loaded;
  for (const auto& [name, tensor] : tensors) {
    auto* param = params.find(name);
    if (param == nullptr) {
      if (name == "lm_head.weight" && config_.tie_word_embeddings) continue;  // some writers store the tied copy
      if (name.find("rotary_emb.inv_freq") != std::string::npos) continue;   // old HF buffers, recomputed here
      throw_user_error("{}: unexpected weight \"{}\" ({} has no such parameter)", source, name,
                       config_.model_type);
    }
    param->copy_(local_part(name, tensor, *param, source));
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
    for (auto& t : trained_weights()) out.push_back(std::move(t));
  }
  return out;
}

void Transformer::index_shards() {
  shards_.clear();
  if (!tp_) return;
  for (const auto& [name, t] : named_tensors()) shards_[t.unsafeGetTensorImpl()] = tp_->shard(name);
}

VocabShard Transformer::vocab_shard() const {
  if (!tp_) return {};
  return {tp_->shape().vocab_begin, &tp_->group()};
}

int64_t Transformer::kv_heads() const { return tp_ ? tp_->shape().n_kv_heads() : config_.num_key_value_heads; }

int64_t Transformer::max_kv_heads() const { return tp_ ? tp_->layout().max_kv_heads() : config_.num_key_value_heads; }

const TpShard* Transformer::shard_of(const torch::Tensor& tensor) const {
  const auto it = shards_.find(tensor.unsafeGetTensorImpl());
  return it == shards_.end() ? nullptr : &it->second;
}

std::vector<int64_t> Transformer::global_shape(const std::string& name, const torch::Tensor& local) const {
  return tp_ ? tp_->global_shape(name, local.sizes().vec()) : local.sizes().vec();
}

torch::Tensor Transformer::gather_weight(const std::string& name, const torch::Tensor& local, int root) const {
  return tp_ ? tp_->gather(local, name, root) : local;
}

torch::Tensor Transformer::local_part(const std::string& name, const torch::Tensor& whole, const torch::Tensor& local,
                                      const std::string& source) const {
  const auto expected = global_shape(name, local);
  if (whole.sizes().vec() != expected) {
    throw_user_error("{}: weight \"{}\" has shape {} but the config implies {}", source, name,
                     fmt::format("{}", whole.sizes()), fmt::format("{}", expected));
  }
  return tp_ ? tp_->slice(whole, tp_->shard(name)) : whole;
}

void Transformer::reduce_partial_gradients(const std::vector<torch::Tensor>& params) const {
  if (!tp_) return;
  std::vector<torch::Tensor> grads;
  for (const auto& p : params) grads.push_back(p.grad());
  reduce_partial_gradients(params, grads);
}

void Transformer::reduce_partial_gradients(const std::vector<torch::Tensor>& params,
                                           std::vector<torch::Tensor>& grads) const {
  if (!tp_) return;
  RLCPP_CHECK(params.size() == grads.size(), "{} gradients for {} parameters", grads.size(), params.size());
  for (size_t k = 0; k < params.size(); ++k) {
    const TpShard* shard = shard_of(params[k]);
    RLCPP_CHECK(shard != nullptr, "a trained tensor {} that is not one of the model's", params[k].sizes());
    if (grads[k].defined()) tp_->reduce_partial_gradient(grads[k], *shard);
  }
}

double Transformer::gradient_squares(const std::vector<torch::Tensor>& params) const {
  double sum = 0;
  for (const auto& p : params) {
    if (!p.grad().defined()) continue;
    if (!tp_) {
      sum += p.grad().to(torch::kFloat64).square().sum().item<double>();
    } else {
      sum += tp_->owned_squares(p.grad(), *shard_of(p));
    }
  }
  if (tp_) {
    auto total = torch::tensor({sum}, torch::kFloat64);
    tp_->group().all_reduce_sum(total);
    sum = total.item<double>();
  }
  return sum;
}

void Transformer::gather_whole(int root) {
  if (!tp_) return;
  RLCPP_CHECK(kept_parts_.empty(), "gather_whole twice");
  torch::NoGradGuard no_grad;
  for (const auto& [name, t] : named_tensors()) {
    auto whole = tp_->gather(t, name, root);
    if (tp_->rank() != root) continue;
    kept_parts_.push_back(t.data());
    torch::Tensor(t).set_data(whole);
  }
}

void Transformer::release_whole() {
  if (!tp_ || kept_parts_.empty()) return;
  torch::NoGradGuard no_grad;
  size_t k = 0;
  for (const auto& [name, t] : named_tensors()) torch::Tensor(t).set_data(kept_parts_.at(k++));
  kept_parts_.clear();
}

}  // namespace rlcpp
