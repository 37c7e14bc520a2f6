// The modules a decoder is made of, under their Hugging Face names: RMSNorm, the linear layer
// (with its optional LoRA adapter and a frozen weight stored in another dtype), attention, the
// SiLU-gated MLP, the decoder layer and the decoder body. Under tensor parallelism each holds this
// rank's part (model/tensor_parallel.h) and enters and leaves the parallel regions itself.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "model/attention.h"
#include "model/attention_backend.h"
#include "model/logprobs.h"
#include "model/model_config.h"
#include "model/model_options.h"
#include "model/tensor_parallel.h"

namespace rlcpp {

class ParameterHolder;

// What one forward pass runs with beside the weights (llama.cpp's context beside its model): the
// adapters on or off, and the holder of ZeRO's sharded parameters. The model keeps no per-call
// state, so two passes with different contexts (the policy and, adapters off, its LoRA reference)
// need nothing switched on the model between them.
struct ForwardContext {
  bool adapters = true;               // false: the base model alone (the reference policy under LoRA)
  ParameterHolder* holder = nullptr;  // ZeRO stages 2 and 3 (train/zero.h; see Transformer::hidden_states)
  // A pipeline stage after the first: the previous stage's hidden states [B, T, H] its layers start from.
  torch::Tensor stage_input;
};

class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);  // normalises the last dim in fp32 (or fp64)
  torch::Tensor weight;

 private:
  double eps_;
};

// A linear layer y = x W^T + b, optionally with a LoRA adapter (see lora.h). The adapter's tensors
// are not registered parameters: the module's parameters stay exactly the Hugging Face weights.
// A weight stored in another dtype than x's (a frozen half-precision base) is converted as it runs;
// one in 8 bits (the rollout engine's copy) is read with its row scales (model/kernel_linear.h).
// Row-parallel (tensor parallelism: `reduce_over` set), the partial products of this rank's input
// columns are summed over the group before the bias is added.
class LinearImpl : public torch::nn::Module {
 public:
  LinearImpl(int64_t in, int64_t out, bool bias);
  torch::Tensor forward(const torch::Tensor& x, const ForwardContext& context);

  // A as given ([r, in], PEFT's Kaiming-uniform: lora_a_init), B = 0, in `dtype` on the weight's device.
  void add_adapter(const torch::Tensor& a, double scaling, double dropout, torch::ScalarType dtype);
  bool has_adapter() const { return lora_A.defined(); }
  // W + scaling * B A in `dtype` (W itself without an adapter).
  torch::Tensor merged_weight(torch::ScalarType dtype) const;

  torch::Tensor weight, bias;      // bias undefined when absent
  torch::Tensor weight_scale;      // an 8-bit weight's row scales [out] (the buffer "weight_scale"); else undefined
  torch::Tensor lora_A, lora_B;    // [r, in], [out, r]; undefined without an adapter
  double lora_scaling = 0, lora_dropout = 0;
  const TensorParallel* reduce_over = nullptr;  // row-parallel: sum over this group, then the bias
};

// PEFT's initial A of an adapter [rank, in] (kaiming_uniform_(a = sqrt(5)): uniform(±1/sqrt(in))), fp64.
torch::Tensor lora_a_init(int64_t rank, int64_t in, at::Generator& generator);
using Linear = std::shared_ptr<LinearImpl>;

// Under tensor parallelism (`tp`) the modules hold this rank's heads, channels and tokens
// (model/tensor_parallel.h) and enter and leave the parallel regions themselves.
class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(const ModelConfig& config, const TensorParallel* tp);
  // x [B, T, H]; cos/sin [B, T, D]; mask: padded keys and packed sequences (causality is added by
  // causal_attention, model/attention.h). Returns [B, T, H].
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const AttentionMask& mask, const ForwardContext& context);
  // Packed tokens x [T, H] of several sequences; cos/sin [T, D]; keys and values through `backend`.
  torch::Tensor forward_packed(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                               int64_t layer, AttentionBackend& backend, const ForwardContext& context);

  Linear q_proj, k_proj, v_proj, o_proj;
  std::shared_ptr<RMSNormImpl> q_norm, k_norm;  // Qwen3 only

 private:
  int64_t n_heads_, n_kv_heads_, head_dim_;  // this rank's query and KV heads
  const TensorParallel* tp_;
};

class MlpImpl : public torch::nn::Module {
 public:
  MlpImpl(const ModelConfig& config, const TensorParallel* tp);
  torch::Tensor forward(const torch::Tensor& x, const ForwardContext& context);  // down(silu(gate(x)) * up(x))
  Linear gate_proj, up_proj, down_proj;

 private:
  const TensorParallel* tp_;
};

class DecoderLayerImpl : public torch::nn::Module {
 public:
  DecoderLayerImpl(const ModelConfig& config, const TensorParallel* tp);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const AttentionMask& mask, const ForwardContext& context);
  torch::Tensor forward_packed(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                               int64_t layer, AttentionBackend& backend, const ForwardContext& context);
  std::shared_ptr<AttentionImpl> self_attn;
  std::shared_ptr<MlpImpl> mlp;
  std::shared_ptr<RMSNormImpl> input_layernorm, post_attention_layernorm;
};

// The body, registered as "model" so parameter names match Hugging Face. A pipeline stage holds its
// own layers under their indices in the whole model ("layers.5" stays layers.5), the embedding on
// the first stage (and on the last when the head is tied to it) and the final norm on the last.
class DecoderImpl : public torch::nn::Module {
 public:
  DecoderImpl(const ModelConfig& config, const TensorParallel* tp, const PipelineStage& stage);
  torch::nn::Embedding embed_tokens{nullptr};              // null on a stage without it
  std::vector<std::shared_ptr<DecoderLayerImpl>> layers;  // this stage's, in order
  std::shared_ptr<RMSNormImpl> norm;                       // null before the last stage
};

Linear make_linear(int64_t in, int64_t out, bool bias);

// `t` in `dtype` (itself when it already is, or undefined).
inline torch::Tensor as_dtype(const torch::Tensor& t, torch::ScalarType dtype) {
  return !t.defined() || t.scalar_type() == dtype ? t : t.to(dtype);
}

// The dtype softmax and norms run in: fp32 for half types, fp64 for fp64.
inline torch::ScalarType compute_dtype(torch::ScalarType dtype) { return logprob_dtype(dtype); }

// The parameters of `module` that training updates (requires_grad), adapters included.
std::vector<torch::Tensor> trained_tensors(torch::nn::Module& module);

}  // namespace rlcpp
