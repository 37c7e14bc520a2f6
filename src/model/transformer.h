// The decoder-only transformer of the Qwen2, Qwen3 and Llama families in LibTorch.
//
// Parameters carry their Hugging Face names (`model.layers.3.self_attn.q_proj.weight`, `lm_head.weight`),
// so loading and saving need no renaming table. Family differences are config switches:
// q/k/v bias (Qwen2), per-head q/k RMSNorm and explicit head_dim (Qwen3), tied embeddings, rope scaling.
// The model holds parameters only: caches, optimizer state and RNGs live in their own objects.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <set>
#include <string>

#include "io/safetensors.h"
#include "model/attention_backend.h"
#include "model/logprobs.h"
#include "model/lora.h"
#include "model/model_config.h"
#include "model/rope.h"
#include "util/enum_table.h"

namespace rlcpp {

class CheckpointReader;

// Takes each decoder layer's gradients as backward produces them (ZeRO stages 2 and 3,
// train/zero.h), and may keep the trainable parameters not whole between uses (stage 3). With
// shards_parameters(), the model asks for a layer's trained tensors just before the layer runs
// (its forward, and backward's recomputation) and gives them back right after, and the gradients
// backward computes for them go to the holder, not to .grad. Without, the parameters stay whole
// and, as soon as backward has finished a layer, the holder takes its gradients out of .grad.
class ParameterHolder {
 public:
  virtual ~ParameterHolder() = default;
  virtual bool shards_parameters() const = 0;
  virtual void gather(const std::vector<torch::Tensor>& params) = 0;   // their values, in place
  virtual void release(const std::vector<torch::Tensor>& params) = 0;  // their storage may go
  // grads[k] is params[k]'s (undefined: none) from one backward pass.
  virtual void take_gradients(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& grads) = 0;
};

// Where the model lives and in which dtype: always from config, never hard-coded.
struct ModelOptions {
  torch::Device device = torch::kCPU;         // cpu | cuda[:n]
  torch::ScalarType dtype = torch::kFloat32;  // float32 | bfloat16 | float16 | float64
  int64_t logprob_chunk_tokens = 512;         // tokens per chunk of the fused log-prob head
  // Frozen weights (the base under LoRA, a reference model) stored in this dtype and computed in
  // `dtype` (converted per layer as it runs); Undefined: stored in `dtype`.
  torch::ScalarType frozen_dtype = torch::ScalarType::Undefined;
  bool gradient_checkpointing = false;        // training forward keeps only each layer's input; backward recomputes
};

// float32 (fp32), bfloat16 (bf16), float16 (fp16), float64 (fp64).
const EnumTable<torch::ScalarType>& dtypes();
// A dtype flag's value; Undefined for "" (the flag's default). A bad name is a UserError naming `flag`.
torch::ScalarType dtype_or_default(const std::string& text, const std::string& flag);
// ModelOptions from the --dtype and --device flags; bad values are UserErrors naming the flag.
ModelOptions model_options_from_flags(const std::string& dtype, const std::string& device);

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
// A weight stored in another dtype than x's (a frozen half-precision base) is converted as it runs.
class LinearImpl : public torch::nn::Module {
 public:
  LinearImpl(int64_t in, int64_t out, bool bias);
  torch::Tensor forward(const torch::Tensor& x);

  // A = Kaiming-uniform (from `generator`), B = 0, in x's compute dtype on the weight's device.
  void add_adapter(int64_t rank, double scaling, double dropout, torch::ScalarType dtype, at::Generator& generator);
  bool has_adapter() const { return lora_A.defined(); }
  // W + scaling * B A in `dtype` (W itself without an adapter).
  torch::Tensor merged_weight(torch::ScalarType dtype) const;

  torch::Tensor weight, bias;      // bias undefined when absent
  torch::Tensor lora_A, lora_B;    // [r, in], [out, r]; undefined without an adapter
  double lora_scaling = 0, lora_dropout = 0;
  bool adapter_enabled = true;
};
using Linear = std::shared_ptr<LinearImpl>;

class AttentionImpl : public torch::nn::Module {
 public:
  explicit AttentionImpl(const ModelConfig& config);
  // x [B, T, H]; cos/sin [B, T, D]; mask [B, T] bool, false at padded keys (causality is added by
  // causal_attention, model/attention.h). Returns [B, T, H].
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const torch::Tensor& mask);
  // Packed tokens x [T, H] of several sequences; cos/sin [T, D]; keys and values through `backend`.
  torch::Tensor forward_packed(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                               int64_t layer, AttentionBackend& backend);

  Linear q_proj, k_proj, v_proj, o_proj;
  std::shared_ptr<RMSNormImpl> q_norm, k_norm;  // Qwen3 only

 private:
  int64_t n_heads_, n_kv_heads_, head_dim_;
};

class MlpImpl : public torch::nn::Module {
 public:
  explicit MlpImpl(const ModelConfig& config);
  torch::Tensor forward(const torch::Tensor& x);  // down(silu(gate(x)) * up(x))
  Linear gate_proj, up_proj, down_proj;
};

class DecoderLayerImpl : public torch::nn::Module {
 public:
  explicit DecoderLayerImpl(const ModelConfig& config);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const torch::Tensor& mask);
  torch::Tensor forward_packed(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                               int64_t layer, AttentionBackend& backend);
  std::shared_ptr<AttentionImpl> self_attn;
  std::shared_ptr<MlpImpl> mlp;
  std::shared_ptr<RMSNormImpl> input_layernorm, post_attention_layernorm;
};

// The body, registered as "model" so parameter names match Hugging Face.
class DecoderImpl : public torch::nn::Module {
 public:
  explicit DecoderImpl(const ModelConfig& config);
  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  std::shared_ptr<RMSNormImpl> norm;
};

class Transformer : public torch::nn::Module {
 public:
  Transformer(ModelConfig config, ModelOptions options);

  // Loads config.json + weights from a Hugging Face directory into a model of `options`; a PEFT
  // adapter directory loads its base model (base_model_name_or_path) with the adapter on it.
  static std::shared_ptr<Transformer> from_pretrained(const std::filesystem::path& dir, ModelOptions options = {});

  // With a holder that shards the parameters, each decoder layer's trained tensors are gathered
  // for it and released after; a forward with grad then recomputes each layer in backward (as
  // gradient_checkpointing), so no graph keeps a layer's weights. The holder must outlive its use;
  // nullptr: no holder.
  void set_parameter_holder(ParameterHolder* holder) { holder_ = holder; }
  // Each decoder layer's trained tensors (see trainable_parameters), in layer order.
  std::vector<std::vector<torch::Tensor>> layer_trainable_parameters() const;

  // Final hidden states (after the last norm) [B, T, H]. attention_mask [B, T] (1 = token, 0 = pad,
  // left padding) may be undefined (no padding); positions then come from the mask.
  torch::Tensor hidden_states(const torch::Tensor& input_ids, const torch::Tensor& attention_mask = {});

  // Final hidden states [T, H] for packed tokens of several sequences (ids [T], positions [T]),
  // keys and values kept by `backend` across calls: the generation engine's entry point.
  torch::Tensor hidden_states_packed(const torch::Tensor& ids, const torch::Tensor& positions,
                                     AttentionBackend& backend);

  // Logits [B, T, V] in fp32 (fp64 for an fp64 model). Materialises the whole tensor: for
  // training use token_logprobs.
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask = {});

  // log p(targets[b, t] | input_ids[b, ..t]) under softmax(logits / temperature): [B, T] fp32,
  // differentiable, computed in chunks (see logprobs.h). targets < 0 are ignored (0, no gradient).
  // With `entropy`: also each token's entropy [B, T] from the same logits, without gradient.
  torch::Tensor token_logprobs(const torch::Tensor& input_ids, const torch::Tensor& targets, double temperature = 1.0,
                               const torch::Tensor& attention_mask = {}, torch::Tensor* entropy = nullptr);

  // As token_logprobs, and the per-token entropy, both [B, T] and differentiable (one forward of
  // the layers; the entropy keeps the response rows' logits, see token_entropy).
  LogprobsEntropy token_logprobs_with_entropy(const torch::Tensor& input_ids, const torch::Tensor& targets,
                                              double temperature = 1.0, const torch::Tensor& attention_mask = {});

  // No grad: log-probs of targets and per-token entropies, both [B, T] (0 where targets < 0).
  LogprobsEntropy token_logprobs_entropy(const torch::Tensor& input_ids, const torch::Tensor& targets,
                                         double temperature = 1.0, const torch::Tensor& attention_mask = {});

  // The output projection [V, H] in the compute dtype: lm_head, or the embedding when tied.
  torch::Tensor output_weight() const;
  // The same as stored (a frozen half-precision copy is not converted): for linear_no_grad.
  torch::Tensor stored_output_weight() const;

  // LoRA (see lora.h). add_adapters puts fresh adapters on the linear layers `config` names and
  // freezes every base weight; A is drawn from `seed`.
  void add_adapters(const LoraConfig& config, uint64_t seed);
  bool has_adapters() const { return !adapted_.empty(); }
  const LoraConfig& lora() const { return lora_; }
  // Off: the base model alone (the reference policy under LoRA). See AdaptersOff.
  void set_adapters_enabled(bool enabled);
  // What training updates: the adapters' A and B under LoRA, else every parameter.
  std::vector<torch::Tensor> trainable_parameters() const;
  // The trained weights under their names: the adapters ("<module>.lora_A.weight", ...) under
  // LoRA, else named_weights(). What a weight sync sends and update_weights takes.
  NamedTensors trained_weights() const;
  // The full model with every adapter merged in (W + scaling B A), in the compute dtype.
  NamedTensors merged_weights() const;
  // The same one weight at a time (each merged tensor is made only for the call).
  void for_each_merged_weight(const std::function<void(const std::string&, const torch::Tensor&)>& fn) const;
  // PEFT's adapter directory: adapter_config.json (base_model_name_or_path = `base_model`) and
  // adapter_model.safetensors with PEFT's key names.
  void save_adapter(const std::filesystem::path& dir, const std::string& base_model) const;
  // Puts the adapters of a PEFT directory on this model (every module its weights file names) and
  // loads them; a module this model lacks or a misshapen matrix is a UserError naming the file.
  void load_adapter(const std::filesystem::path& dir);

  // Copies weights in (cast to the model's dtype and device). Every parameter must be present with
  // its exact shape; a missing or misshapen weight is a UserError naming it and `source`.
  void load_weights(const CheckpointReader& reader, const std::string& source);
  void load_weights(const NamedTensors& tensors, const std::string& source);
  // Copies some of the weights in (a weight-sync bucket); returns the names it set.
  std::set<std::string> update_weights(const NamedTensors& tensors, const std::string& source);
  // Parameters under their Hugging Face names, tied lm_head omitted (as HF saves it).
  NamedTensors named_weights() const;
  // Writes config.json and the weights (optionally sharded) into `dir`; adapters are merged in.
  void save_pretrained(const std::filesystem::path& dir, uint64_t max_shard_bytes = 0) const;

  // Random initialisation as Hugging Face does: normal(0, initializer_range), norms 1, biases 0.
  void init_weights(double stddev, uint64_t seed);

  const ModelConfig& config() const { return config_; }
  const ModelOptions& options() const { return options_; }

  std::shared_ptr<DecoderImpl> model;
  Linear lm_head;  // null when tied

 private:
  // Stores the frozen weights in options_.frozen_dtype (after loading).
  void store_frozen_weights();
  // The embedding lookup; a trained embedding's gradient goes straight into its .grad (transformer.cpp).
  torch::Tensor embed(const torch::Tensor& ids);

  ModelConfig config_;
  ModelOptions options_;
  Rope rope_;
  LoraConfig lora_;
  std::vector<std::pair<std::string, LinearImpl*>> adapted_;  // module name → its layer, in model order
  ParameterHolder* holder_ = nullptr;
};

// Scoped: the model's adapters off (the base model) until the end of the scope.
class AdaptersOff {
 public:
  explicit AdaptersOff(Transformer& model) : model_(model) { model_.set_adapters_enabled(false); }
  ~AdaptersOff() { model_.set_adapters_enabled(true); }
  AdaptersOff(const AdaptersOff&) = delete;
  AdaptersOff& operator=(const AdaptersOff&) = delete;

 private:
  Transformer& model_;
};

// positions [B, T] from a left-padded attention mask: 0 at the first real token of each row.
torch::Tensor positions_from_mask(const torch::Tensor& attention_mask);

}  // namespace rlcpp
