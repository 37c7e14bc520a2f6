#include "model/layers.h"

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

#include "model/autograd_ops.h"

namespace rlcpp {

Linear make_linear(int64_t in, int64_t out, bool bias) { return std::make_shared<LinearImpl>(in, out, bias); }

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

LinearImpl::LinearImpl(int64_t in, int64_t out, bool with_bias) {
  // Uninitialised: loaded from a checkpoint or set by Transformer::init_weights.
  weight = register_parameter("weight", torch::empty({out, in}));
  if (with_bias) bias = register_parameter("bias", torch::zeros({out}));
}

torch::Tensor LinearImpl::forward(const torch::Tensor& x, const ForwardContext& context) {
  const auto dtype = x.scalar_type();
  // Row-parallel: the bias joins after the sum over the group.
  const torch::Tensor& b = reduce_over != nullptr ? torch::Tensor() : bias;
  torch::Tensor y = kernel_linear(x, weight, b, weight_scale);  // generation's small batches on CPU
  if (y.defined()) {
  } else if (weight_scale.defined()) {
    y = linear_no_grad(x, weight, b, weight_scale);
  } else if (weight.scalar_type() != dtype && !weight.requires_grad() && (!b.defined() || !b.requires_grad())) {
    y = StoredWeightLinear::apply(x, weight, b.defined() ? c10::optional<torch::Tensor>(b) : c10::nullopt);
  } else {
    y = torch::nn::functional::linear(x, as_dtype(weight, dtype), as_dtype(b, dtype));
  }
  if (lora_A.defined() && context.adapters) {
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
                                     const AttentionMask& mask, const ForwardContext& context) {
  const auto x = tp_ ? tp_->enter(input) : input;
  const int64_t batch = x.size(0), length = x.size(1);
  auto q = q_proj->forward(x, context).view({batch, length, n_heads_, head_dim_});
  auto k = k_proj->forward(x, context).view({batch, length, n_kv_heads_, head_dim_});
  auto v = v_proj->forward(x, context).view({batch, length, n_kv_heads_, head_dim_}).transpose(1, 2);
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
  return o_proj->forward(out, context);
}

torch::Tensor AttentionImpl::forward_packed(const torch::Tensor& input, const torch::Tensor& cos, const torch::Tensor& sin,
                                            int64_t layer, AttentionBackend& backend, const ForwardContext& context) {
  const auto x = tp_ ? tp_->enter(input) : input;
  const int64_t tokens = x.size(0);
  auto q = q_proj->forward(x, context).view({tokens, n_heads_, head_dim_});
  auto k = k_proj->forward(x, context).view({tokens, n_kv_heads_, head_dim_});
  auto v = v_proj->forward(x, context).view({tokens, n_kv_heads_, head_dim_});
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
  return o_proj->forward(backend.attend(layer, q, k, v), context);
}

MlpImpl::MlpImpl(const ModelConfig& c, const TensorParallel* tp) : tp_(tp) {
  const int64_t channels = tp ? tp->shape().mlp_end - tp->shape().mlp_begin : c.intermediate_size;
  gate_proj = register_module("gate_proj", make_linear(c.hidden_size, channels, c.mlp_bias));
  up_proj = register_module("up_proj", make_linear(c.hidden_size, channels, c.mlp_bias));
  down_proj = register_module("down_proj", make_linear(channels, c.hidden_size, c.mlp_bias));
  down_proj->reduce_over = tp;
}

torch::Tensor MlpImpl::forward(const torch::Tensor& input, const ForwardContext& context) {
  const auto x = tp_ ? tp_->enter(input) : input;
  auto gate = gate_proj->forward(x, context), up = up_proj->forward(x, context);
  auto h = kernel_silu_mul(gate, up);  // the engine's steps
  return down_proj->forward(h.defined() ? h : torch::silu(gate) * up, context);
}

DecoderLayerImpl::DecoderLayerImpl(const ModelConfig& c, const TensorParallel* tp) {
  self_attn = register_module("self_attn", std::make_shared<AttentionImpl>(c, tp));
  mlp = register_module("mlp", std::make_shared<MlpImpl>(c, tp));
  input_layernorm = register_module("input_layernorm", std::make_shared<RMSNormImpl>(c.hidden_size, c.rms_norm_eps));
  post_attention_layernorm =
      register_module("post_attention_layernorm", std::make_shared<RMSNormImpl>(c.hidden_size, c.rms_norm_eps));
}

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                                        const AttentionMask& mask, const ForwardContext& context) {
  auto h = x + self_attn->forward(input_layernorm->forward(x), cos, sin, mask, context);
  return h + mlp->forward(post_attention_layernorm->forward(h), context);
}

torch::Tensor DecoderLayerImpl::forward_packed(const torch::Tensor& x, const torch::Tensor& cos,
                                               const torch::Tensor& sin, int64_t layer, AttentionBackend& backend,
                                               const ForwardContext& context) {
  auto h = x + self_attn->forward_packed(input_layernorm->forward(x), cos, sin, layer, backend, context);
  return h + mlp->forward(post_attention_layernorm->forward(h), context);
}

DecoderImpl::DecoderImpl(const ModelConfig& c, const TensorParallel* tp, const PipelineStage& stage) {
  const int64_t tokens = tp ? tp->shape().vocab_end - tp->shape().vocab_begin : c.vocab_size;
  if (stage.first() || (stage.last() && c.head_is_embedding())) {
    embed_tokens = register_module("embed_tokens", torch::nn::Embedding(tokens, c.hidden_size));
  }
  // A plain module holding the layers by their whole-model index, so a stage's names are the whole
  // model's.
  auto held = register_module("layers", std::make_shared<torch::nn::Module>("layers"));
  const int64_t end = stage.layer_end < 0 ? c.num_hidden_layers : stage.layer_end;
  for (int64_t i = stage.layer_begin; i < end; ++i) {
    layers.push_back(held->register_module(std::to_string(i), std::make_shared<DecoderLayerImpl>(c, tp)));
  }
  if (stage.last()) norm = register_module("norm", std::make_shared<RMSNormImpl>(c.hidden_size, c.rms_norm_eps));
}

}  // namespace rlcpp
