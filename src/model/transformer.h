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
#include <unordered_map>

#include "io/safetensors.h"
#include "model/attention_backend.h"
#include "model/layers.h"
#include "model/logprobs.h"
#include "model/lora.h"
#include "model/model_config.h"
#include "model/model_options.h"
#include "model/rope.h"
#include "model/tensor_parallel.h"
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

class Transformer : public torch::nn::Module {
 public:
  Transformer(ModelConfig config, ModelOptions options);

  // Loads config.json + weights from a Hugging Face directory into a model of `options`; a PEFT
  // adapter directory loads its base model (base_model_name_or_path) with the adapter on it.
  static std::shared_ptr<Transformer> from_pretrained(const std::filesystem::path& dir, ModelOptions options = {});
  // A sequence classifier of `num_labels` outputs (a reward model) from `dir`: a
  // ...ForSequenceClassification directory as it is (its label count must match), or a causal LM's
  // decoder with a fresh score head, normal(0, initializer_range) drawn from `seed`, as transformers
  // starts one (the LM head is left behind). How reward-model training starts from a base.
  static std::shared_ptr<Transformer> classifier_from_pretrained(const std::filesystem::path& dir, ModelOptions options,
                                                                 int64_t num_labels, uint64_t seed);

  // Each decoder layer's trained tensors (see trainable_parameters), in layer order.
  std::vector<std::vector<torch::Tensor>> layer_trainable_parameters() const;

  // Tensor parallelism (ModelOptions::tp_group): the group and this rank's part; nullptr without.
  const TensorParallel* tensor_parallel() const { return tp_.get(); }
  // The tokens this rank's head scores: the whole vocabulary without tensor parallelism.
  VocabShard vocab_shard() const;
  // KV heads per layer this rank's attention keeps, and the most any rank of its group keeps.
  int64_t kv_heads() const;
  int64_t max_kv_heads() const;
  // How `tensor` (a parameter or an adapter's matrix) is held here; nullptr without tensor parallelism.
  const TpShard* shard_of(const torch::Tensor& tensor) const;
  // The whole shape of weight `name` of which `local` is this rank's part (local's own without TP).
  std::vector<int64_t> global_shape(const std::string& name, const torch::Tensor& local) const;
  // The whole weight `name` from every rank's `local` part, on `root` (-1: every rank; a collective
  // over the group); `local` itself without tensor parallelism.
  torch::Tensor gather_weight(const std::string& name, const torch::Tensor& local, int root) const;
  // Sums the partial gradients among `params` (TpShard::partial_gradient) over the group, so each
  // rank's .grad is its part of the whole model's gradient. A collective: every rank passes the same
  // parameters; those without a gradient are skipped (alike on every rank). No-op without TP.
  void reduce_partial_gradients(const std::vector<torch::Tensor>& params) const;
  // The same for gradients held apart: grads[k] (undefined: none) is params[k]'s.
  void reduce_partial_gradients(const std::vector<torch::Tensor>& params, std::vector<torch::Tensor>& grads) const;
  // Σ g² of `params`' gradients over the whole model, each element counted once over the group (a
  // collective under tensor parallelism), in double.
  double gradient_squares(const std::vector<torch::Tensor>& params) const;
  // On `root` of the group: every weight whole (gathered; a collective) until release_whole, for
  // writing the model out (save_pretrained, save_adapter, merged_weights). No forward pass in
  // between. No-op without tensor parallelism.
  void gather_whole(int root);
  void release_whole();

  // Every forward takes a ForwardContext (layers.h): the adapters on (the default) or off, and a
  // parameter holder. With a holder that shards the parameters, each decoder layer's trained
  // tensors are gathered for it and released after; a forward with grad then recomputes each layer
  // in backward (as gradient_checkpointing), so no graph keeps a layer's weights. With a holder
  // that does not, each layer's gradients go to it as soon as backward has finished the layer.

  // Final hidden states (after the last norm) [B, T, H]. attention_mask [B, T] (1 = token, 0 = pad,
  // left padding) may be undefined (no padding); positions then come from the mask. A packed row
  // (B = 1) of several sequences numbers them in its mask instead: 1, 2, ... (0 = pad), each a run
  // that starts at position 0 and reads only its own keys (model/attention.h). A pipeline
  // stage before the last returns its layers' output instead (no norm), and a stage after the
  // first starts from context.stage_input rather than the embedding (it still takes the ids and
  // the mask, for positions and padding). Every other forward is of the whole model or the last stage.
  torch::Tensor hidden_states(const torch::Tensor& input_ids, const torch::Tensor& attention_mask = {},
                              const ForwardContext& context = {});

  // Final hidden states [T, H] for packed tokens of several sequences (ids [T], positions [T]),
  // keys and values kept by `backend` across calls: the generation engine's entry point. A pipeline
  // stage works as in hidden_states (context.stage_input [T, H]; no norm before the last stage), its
  // backend's layer 0 being the stage's first.
  torch::Tensor hidden_states_packed(const torch::Tensor& ids, const torch::Tensor& positions,
                                     AttentionBackend& backend, const ForwardContext& context = {});

  // Logits [B, T, V] in fp32 (fp64 for an fp64 model). Materialises the whole tensor (gathered from
  // the vocabulary's shards on every rank under tensor parallelism): for training use token_logprobs.
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask = {},
                        const ForwardContext& context = {});

  // log p(targets[b, t] | input_ids[b, ..t]) under softmax(logits / temperature): [B, T] fp32,
  // differentiable, computed in chunks (see logprobs.h). targets < 0 are ignored (0, no gradient).
  // With `entropy`: also each token's entropy [B, T] from the same logits, without gradient.
  torch::Tensor token_logprobs(const torch::Tensor& input_ids, const torch::Tensor& targets, double temperature = 1.0,
                               const torch::Tensor& attention_mask = {}, torch::Tensor* entropy = nullptr,
                               const ForwardContext& context = {});

  // As token_logprobs, and the per-token entropy, both [B, T] and differentiable (one forward of
  // the layers; the entropy keeps the response rows' logits, see token_entropy).
  LogprobsEntropy token_logprobs_with_entropy(const torch::Tensor& input_ids, const torch::Tensor& targets,
                                              double temperature = 1.0, const torch::Tensor& attention_mask = {},
                                              const ForwardContext& context = {});

  // No grad: log-probs of targets and per-token entropies, both [B, T] (0 where targets < 0).
  LogprobsEntropy token_logprobs_entropy(const torch::Tensor& input_ids, const torch::Tensor& targets,
                                         double temperature = 1.0, const torch::Tensor& attention_mask = {},
                                         const ForwardContext& context = {});

  // A sequence classifier's outputs (ModelConfig::classifier(): a reward model): the score head at
  // each row's last token, [B, num_labels] in fp32 (fp64 for an fp64 model), differentiable. Rows
  // are left-padded (attention_mask [B, T], 1 = token), so every row's last token is at T - 1.
  // A packed row (see hidden_states) gives one score per sequence at its last token: [S, num_labels].
  torch::Tensor scores(const torch::Tensor& input_ids, const torch::Tensor& attention_mask = {},
                       const ForwardContext& context = {});
  // The same from the last stage's hidden states `h` [B, T, H] of those rows (a pipeline's last
  // stage; every other forward runs the whole model).
  torch::Tensor last_token_scores(const torch::Tensor& h, const torch::Tensor& attention_mask = {},
                                  const ForwardContext& context = {});

  // The output projection [V, H] in the compute dtype: lm_head, or the embedding when tied.
  torch::Tensor output_weight() const;
  // The same as stored (a frozen half-precision copy is not converted): for linear_no_grad, with
  // stored_output_scale (an 8-bit copy's row scales; else undefined).
  torch::Tensor stored_output_weight() const;
  torch::Tensor stored_output_scale() const;
  // The row scales of the 8-bit weight `name` (ModelOptions::frozen_dtype int8 or fp8: the rollout
  // engine's copy, model/kernel_linear.h); undefined for a weight stored otherwise.
  torch::Tensor weight_scale(const std::string& name) const;

  // LoRA (see lora.h). add_adapters puts fresh adapters on the linear layers `config` names and
  // freezes every base weight; A is drawn from `seed`.
  void add_adapters(const LoraConfig& config, uint64_t seed);
  bool has_adapters() const { return !adapted_.empty(); }
  const LoraConfig& lora() const { return lora_; }
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
  // its exact shape; a missing or misshapen weight is a UserError naming it and `source`. The
  // weights are whole (Hugging Face's shapes): under tensor parallelism each rank takes its part.
  void load_weights(const CheckpointReader& reader, const std::string& source);
  void load_weights(const NamedTensors& tensors, const std::string& source);
  // Copies some of the weights in (a weight-sync bucket); returns the names it set. A pipeline
  // stage passes over the weights of the other stages.
  std::set<std::string> update_weights(const NamedTensors& tensors, const std::string& source);
  // Copies this rank's part of weight `name` in (cast to its dtype; an 8-bit one quantized with
  // its row scales).
  void write_weight(const std::string& name, const torch::Tensor& local);
  // Whether the whole model's weight `name` is on this pipeline stage (ModelOptions::stage; every
  // weight on a whole model, and every name the model does not know, so it can be refused).
  bool holds_weight(const std::string& name) const;
  // Parameters under their Hugging Face names, tied lm_head omitted (as HF saves it): this rank's
  // parts under tensor parallelism (gather_weight makes them whole).
  NamedTensors named_weights() const;
  // Writes config.json and the weights (optionally sharded) into `dir`; adapters are merged in.
  // Under tensor parallelism only on the root of gather_whole.
  void save_pretrained(const std::filesystem::path& dir, uint64_t max_shard_bytes = 0) const;

  // Random initialisation as Hugging Face does: normal(0, initializer_range), norms 1, biases 0.
  void init_weights(double stddev, uint64_t seed);

  const ModelConfig& config() const { return config_; }
  const ModelOptions& options() const { return options_; }

  std::shared_ptr<DecoderImpl> model;
  Linear lm_head;  // null when tied, and for a classifier
  Linear score;    // a classifier's head [num_labels, H] (Hugging Face's `score`); null for a causal LM

 private:
  // Stores the frozen weights in options_.frozen_dtype (after loading); 8-bit ones with a
  // "weight_scale" buffer beside each weight.
  void store_frozen_weights();
  // param.copy_(local), or an 8-bit param quantized with its scales (weight_scale(name)).
  void assign(const std::string& name, torch::Tensor& param, const torch::Tensor& local) const;
  // The embedding's rows of `ids` (an 8-bit embedding's dequantized).
  torch::Tensor embedding_rows(const torch::Tensor& ids);
  // Under LoRA: every base weight frozen, a classifier's score head excepted (PEFT's modules_to_save).
  void freeze_all_but_head();
  // Every tensor a weight-sync or checkpoint names (parameters, then adapters), with its name.
  NamedTensors named_tensors() const;
  // Records the tensor-parallel shard of every named tensor (after construction and new adapters).
  void index_shards();
  // A fresh adapter on `linear` (module `name`): A drawn whole from `generator` (this rank's part
  // of it under tensor parallelism, so every layout draws the same adapter), B zero.
  void add_adapter_to(const std::string& name, LinearImpl& linear, const LoraConfig& config, at::Generator& generator);
  // Under tensor parallelism: `whole` cut to this rank's part of `name`, its whole shape checked.
  torch::Tensor local_part(const std::string& name, const torch::Tensor& whole, const torch::Tensor& local,
                           const std::string& source) const;
  // The embedding lookup; a trained embedding's gradient goes straight into its .grad (transformer.cpp).
  torch::Tensor embed(const torch::Tensor& ids);

  ModelConfig config_;
  ModelOptions options_;
  Rope rope_;
  LoraConfig lora_;
  std::vector<std::pair<std::string, LinearImpl*>> adapted_;  // module name → its layer, in model order
  std::unique_ptr<TensorParallel> tp_;                          // null without tensor parallelism
  std::unordered_map<const void*, TpShard> shards_;             // TensorImpl → its shard (under TP)
  std::vector<torch::Tensor> kept_parts_;                       // this rank's parts while whole (gather_whole)
};

// Scoped: the model whole on `root` of its tensor-parallel group (gather_whole) until the end of
// the scope; nothing without tensor parallelism or with `when` false (alike on every rank).
class WholeModel {
 public:
  WholeModel(Transformer& model, int root, bool when = true) : model_(when ? &model : nullptr) {
    if (model_) model_->gather_whole(root);
  }
  ~WholeModel() {
    if (model_) model_->release_whole();
  }
  WholeModel(const WholeModel&) = delete;
  WholeModel& operator=(const WholeModel&) = delete;

 private:
  Transformer* model_;
};

// Token rows left-padded into one batch (what scores() takes): ids (pad 0) and the attention mask,
// both [rows, longest row], int64.
std::pair<torch::Tensor, torch::Tensor> left_padded(const std::vector<const std::vector<int32_t>*>& rows);

// The same rows as one packed row (ids [1, T]) and its attention mask numbering them 1, 2, ...
// (Transformer::hidden_states).
std::pair<torch::Tensor, torch::Tensor> one_row(const std::vector<const std::vector<int32_t>*>& rows);

// positions [B, T] from a left-padded attention mask: 0 at the first real token of each row.
torch::Tensor positions_from_mask(const torch::Tensor& attention_mask);
// positions [T] of a packed row (AttentionMask::sequences): 0 at each sequence's first token.
torch::Tensor packed_positions(const std::vector<int64_t>& sequences);

}  // namespace rlcpp
