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

#include "model/autograd_ops.h"

namespace rlcpp {

torch::Tensor positions_from_mask(const torch::Tensor& attention_mask) {
  return (attention_mask.to(torch::kInt64).cumsum(1) - 1).clamp_min(0);
}

torch::Tensor packed_positions(const std::vector<int64_t>& sequences) {
  RLCPP_CHECK(sequences.size() >= 2, "packed positions of {} sequence bounds", sequences.size());
  auto positions = torch::empty({sequences.back()}, torch::kInt64);
  auto* p = positions.data_ptr<int64_t>();
  for (size_t s = 0; s + 1 < sequences.size(); ++s) {
    for (int64_t t = sequences[s]; t < sequences[s + 1]; ++t) p[t] = t - sequences[s];
  }
  return positions;
}

std::pair<torch::Tensor, torch::Tensor> left_padded(const std::vector<const std::vector<int32_t>*>& rows) {
  size_t length = 0;
  for (const auto* row : rows) length = std::max(length, row->size());
  const auto n = static_cast<int64_t>(rows.size());
  auto ids = torch::zeros({n, static_cast<int64_t>(length)}, torch::kInt64);
  auto mask = torch::zeros({n, static_cast<int64_t>(length)}, torch::kInt64);
  auto ids_a = ids.accessor<int64_t, 2>();
  auto mask_a = mask.accessor<int64_t, 2>();
  for (int64_t r = 0; r < n; ++r) {
    const auto& row = *rows[static_cast<size_t>(r)];
    const size_t pad = length - row.size();
    for (size_t t = 0; t < row.size(); ++t) {
      ids_a[r][static_cast<int64_t>(pad + t)] = row[t];
      mask_a[r][static_cast<int64_t>(pad + t)] = 1;
    }
  }
  return {ids, mask};
}

std::pair<torch::Tensor, torch::Tensor> one_row(const std::vector<const std::vector<int32_t>*>& rows) {
  std::vector<int64_t> ids, numbers;
  for (size_t r = 0; r < rows.size(); ++r) {
    for (const auto id : *rows[r]) {
      ids.push_back(id);
      numbers.push_back(static_cast<int64_t>(r) + 1);
    }
  }
  return {torch::tensor(ids, torch::kInt64).unsqueeze(0), torch::tensor(numbers, torch::kInt64).unsqueeze(0)};
}

Transformer::Transformer(ModelConfig config, ModelOptions options)
    : config_(std::move(config)), options_(options), rope_(config_, options.device) {
  if (options_.tp_group != nullptr && options_.tp_group->size() > 1) {
    tp_ = std::make_unique<TensorParallel>(options_.tp_group, config_);
  }
  const PipelineStage& stage = options_.stage;
  const int64_t layer_end = stage.layer_end < 0 ? config_.num_hidden_layers : stage.layer_end;
  RLCPP_CHECK(stage.count >= 1 && stage.index >= 0 && stage.index < stage.count && stage.layer_begin >= 0 &&
                  stage.layer_begin < layer_end && layer_end <= config_.num_hidden_layers,
              "pipeline stage {} of {} holding layers [{}, {}) of a model of {}", stage.index, stage.count,
              stage.layer_begin, layer_end, config_.num_hidden_layers);
  model = register_module("model", std::make_shared<DecoderImpl>(config_, tp_.get(), stage));
  if (config_.classifier()) {
    // On the last pipeline stage (under tensor parallelism whole on every rank).
    if (stage.last()) score = register_module("score", make_linear(config_.hidden_size, config_.num_labels, false));
  } else if (!config_.tie_word_embeddings && stage.last()) {
    const int64_t tokens = tp_ ? tp_->shape().vocab_end - tp_->shape().vocab_begin : config_.vocab_size;
    lm_head = register_module("lm_head", make_linear(config_.hidden_size, tokens, false));
  }
  to(options_.device, options_.dtype);
  if (options_.frozen_dtype != torch::ScalarType::Undefined) store_frozen_weights();
  index_shards();
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

torch::Tensor Transformer::hidden_states(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                         const ForwardContext& context) {
  RLCPP_CHECK(input_ids.dim() == 2, "input_ids must be [B, T], got {}", input_ids.sizes());
  const int64_t batch = input_ids.size(0), length = input_ids.size(1);
  auto ids = input_ids.to(options_.device);
  torch::Tensor positions;
  std::vector<int64_t> sequences;  // a packed row's
  if (attention_mask.defined()) {
    RLCPP_CHECK(attention_mask.sizes() == input_ids.sizes(), "attention_mask {} must match input_ids {}",
                attention_mask.sizes(), input_ids.sizes());
    if (batch == 1) sequences = packed_sequences(attention_mask[0]);
    positions = sequences.empty() ? positions_from_mask(attention_mask.to(options_.device))
                                  : packed_positions(sequences).to(options_.device).unsqueeze(0);
  } else {
    positions = torch::arange(length, ids.options().dtype(torch::kInt64)).unsqueeze(0).expand({batch, length});
  }
  auto [cos, sin] = rope_.cos_sin(positions, options_.dtype);
  // Which keys are real tokens, [B, T], and a packed row's sequences; attention adds causality
  // (model/attention.h).
  const AttentionMask mask(
      attention_mask.defined()
          ? attention_mask.to(options_.device).ne(0)
          : torch::ones({batch, length}, torch::TensorOptions().dtype(torch::kBool).device(options_.device)),
      std::move(sequences));
  const PipelineStage& stage = options_.stage;
  RLCPP_CHECK(stage.first() || context.stage_input.defined(), "pipeline stage {} run without its input", stage.index);
  auto h = stage.first() ? as_dtype(embed(ids), options_.dtype) : context.stage_input;
  const bool grad = torch::GradMode::is_enabled();
  ParameterHolder* holder = context.holder;
  const bool sharded = holder != nullptr && holder->shards_parameters();
  const bool checkpoint = grad && (sharded || (options_.gradient_checkpointing && is_training()));
  const bool tap = grad && holder != nullptr && !sharded;
  const auto anchor = tap ? torch::zeros({}, h.options()).requires_grad_() : torch::Tensor();
  for (const auto& held : model->layers) {
    auto* layer = held.get();
    if (!sharded && !checkpoint && !tap) {
      h = layer->forward(h, cos, sin, mask, context);
      continue;
    }
    const auto params = trained_tensors(*layer);
    if (tap) h = LayerGradientTap::apply(h, anchor, &params, holder, this);
    // Gathered before apply: autograd takes the parameters' shapes (their gradient accumulators')
    // as apply records them.
    if (sharded) holder->gather(params);
    h = checkpoint ? CheckpointedLayer::apply(h, torch::TensorList(params), layer, cos, sin, mask,
                                              sharded ? holder : nullptr, context.adapters, this)
                   : layer->forward(h, cos, sin, mask, context);
    if (sharded) holder->release(params);
  }
  return stage.last() ? model->norm->forward(h) : h;
}

torch::Tensor Transformer::hidden_states_packed(const torch::Tensor& ids, const torch::Tensor& positions,
                                                AttentionBackend& backend, const ForwardContext& context) {
  RLCPP_CHECK(ids.dim() == 1 && positions.sizes() == ids.sizes(), "packed ids {} and positions {} must be [T]",
              ids.sizes(), positions.sizes());
  const PipelineStage& stage = options_.stage;
  RLCPP_CHECK(stage.first() || context.stage_input.defined(), "pipeline stage {} run without its input", stage.index);
  auto [cos, sin] = rope_.cos_sin(positions.to(options_.device), options_.dtype);  // [T, D]
  auto h = stage.first() ? as_dtype(embed(ids.to(options_.device)), options_.dtype) : context.stage_input;
  int64_t layer = 0;  // the backend's layers are this stage's
  for (const auto& held : model->layers) h = held->forward_packed(h, cos, sin, layer++, backend, context);
  return stage.last() ? model->norm->forward(h) : h;
}

torch::Tensor Transformer::embedding_rows(const torch::Tensor& ids) {
  const auto& weight = model->embed_tokens->weight;
  const auto buffers = model->embed_tokens->named_buffers(/*recurse=*/false);
  const auto* scale = buffers.find("weight_scale");
  if (scale == nullptr) return model->embed_tokens->forward(ids);
  const auto flat = ids.reshape({-1});
  auto sizes = ids.sizes().vec();
  sizes.push_back(weight.size(1));
  return dequantize_weight(weight.index_select(0, flat), scale->index_select(0, flat)).view(sizes);
}

torch::Tensor Transformer::embed(const torch::Tensor& ids) {
  const auto& weight = model->embed_tokens->weight;
  const bool into_grad = torch::GradMode::is_enabled() && weight.requires_grad();
  if (!tp_) return into_grad ? EmbeddingIntoGrad::apply(weight, ids, c10::nullopt) : embedding_rows(ids);
  // Vocabulary-parallel: each rank looks up the tokens it holds (zeros for the others) and the
  // rows are summed over the group.
  auto local = ids - tp_->shape().vocab_begin;
  const auto held = local.ge(0).logical_and(local.lt(weight.size(0)));
  local = local.clamp(0, weight.size(0) - 1);
  torch::Tensor rows;
  if (into_grad) {
    rows = EmbeddingIntoGrad::apply(weight, local, c10::optional<torch::Tensor>(held));
  } else {
    rows = embedding_rows(local);
    rows.mul_(held.unsqueeze(-1).to(rows.scalar_type()));
  }
  return tp_->reduce(rows);
}

torch::Tensor Transformer::scores(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                  const ForwardContext& context) {
  RLCPP_CHECK(config_.classifier(), "scores of a causal LM ({}): only a sequence classifier has a score head",
              config_.architecture);
  return last_token_scores(hidden_states(input_ids, attention_mask, context), attention_mask, context);
}

torch::Tensor Transformer::last_token_scores(const torch::Tensor& h, const torch::Tensor& attention_mask,
                                             const ForwardContext& context) {
  RLCPP_CHECK(score, "the score head is on the last pipeline stage, not on stage {}", options_.stage.index);
  std::vector<int64_t> sequences;
  if (attention_mask.defined() && h.size(0) == 1) sequences = packed_sequences(attention_mask[0]);
  torch::Tensor last;  // [B, H] (a packed row: [S, H]), each sequence's last token
  if (sequences.empty()) {
    last = h.select(1, h.size(1) - 1);  // left padding puts every row's last token there
  } else {
    const auto numbers = attention_mask[0].to(torch::kCPU).to(torch::kInt64).contiguous();
    std::vector<int64_t> ends;  // of the runs that are sequences (not padding)
    for (size_t s = 1; s < sequences.size(); ++s) {
      if (numbers[sequences[s - 1]].item<int64_t>() != 0) ends.push_back(sequences[s] - 1);
    }
    last = h[0].index_select(0, torch::tensor(ends, torch::kInt64).to(h.device()));
  }
  return score->forward(last, context).to(compute_dtype(options_.dtype));
}

torch::Tensor Transformer::output_weight() const {
  const auto stored = stored_output_weight();
  if (eight_bit(stored.scalar_type())) return as_dtype(dequantize_weight(stored, stored_output_scale()), options_.dtype);
  return as_dtype(stored, options_.dtype);
}

torch::Tensor Transformer::stored_output_scale() const {
  stored_output_weight();  // the checks: a causal LM's last stage
  return weight_scale(lm_head ? "lm_head.weight" : "model.embed_tokens.weight");
}

torch::Tensor Transformer::weight_scale(const std::string& name) const {
  // Every decode step asks for the head's: only an 8-bit model looks through its buffers.
  if (!eight_bit(options_.frozen_dtype)) return {};
  const auto buffers = named_buffers();
  const auto* scale = buffers.find(name + "_scale");
  return scale != nullptr ? *scale : torch::Tensor();
}

torch::Tensor Transformer::stored_output_weight() const {
  if (config_.classifier()) {
    throw_user_error("{} is a sequence classifier (a reward model): it scores sequences, it has no language-model head "
                     "to generate or train a policy with; give a ...ForCausalLM model", config_.architecture);
  }
  RLCPP_CHECK(options_.stage.last(), "the head is on the last pipeline stage, not on stage {}", options_.stage.index);
  return lm_head ? lm_head->weight : model->embed_tokens->weight;
}

torch::Tensor Transformer::forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                   const ForwardContext& context) {
  auto h = hidden_states(input_ids, attention_mask, context);
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
                                          torch::Tensor* entropy, const ForwardContext& context) {
  RLCPP_CHECK(targets.sizes() == input_ids.sizes(), "targets {} must match input_ids {}", targets.sizes(),
              input_ids.sizes());
  auto h = hidden_states(input_ids, attention_mask, context);
  const int64_t batch = h.size(0), length = h.size(1);
  auto flat = token_logprobs_chunked(h.reshape({batch * length, h.size(2)}), output_weight(),
                                     targets.to(options_.device).reshape({-1}), temperature,
                                     options_.logprob_chunk_tokens, entropy, vocab_shard());
  if (entropy != nullptr) *entropy = entropy->view({batch, length});
  return flat.view({batch, length});
}

LogprobsEntropy Transformer::token_logprobs_with_entropy(const torch::Tensor& input_ids, const torch::Tensor& targets,
                                                        double temperature, const torch::Tensor& attention_mask,
                                                        const ForwardContext& context) {
  RLCPP_CHECK(targets.sizes() == input_ids.sizes(), "targets {} must match input_ids {}", targets.sizes(),
              input_ids.sizes());
  auto h = hidden_states(input_ids, attention_mask, context);
  const int64_t batch = h.size(0), length = h.size(1);
  auto flat_h = h.reshape({batch * length, h.size(2)});
  auto flat_targets = targets.to(options_.device).reshape({-1});
  auto logp = token_logprobs_chunked(flat_h, output_weight(), flat_targets, temperature, options_.logprob_chunk_tokens,
                                     nullptr, vocab_shard());
  auto entropy = token_entropy(flat_h, output_weight(), flat_targets, temperature, vocab_shard());
  return {logp.view({batch, length}), entropy.view({batch, length})};
}

LogprobsEntropy Transformer::token_logprobs_entropy(const torch::Tensor& input_ids, const torch::Tensor& targets,
                                                   double temperature, const torch::Tensor& attention_mask,
                                                   const ForwardContext& context) {
  RLCPP_CHECK(targets.sizes() == input_ids.sizes(), "targets {} must match input_ids {}", targets.sizes(),
              input_ids.sizes());
  torch::NoGradGuard no_grad;
  auto h = hidden_states(input_ids, attention_mask, context);
  const int64_t batch = h.size(0), length = h.size(1);
  auto out = rlcpp::token_logprobs_entropy(h.reshape({batch * length, h.size(2)}), output_weight(),
                                           targets.to(options_.device).reshape({-1}), temperature,
                                           options_.logprob_chunk_tokens, vocab_shard());
  return {out.logprobs.view({batch, length}), out.entropy.view({batch, length})};
}

}  // namespace rlcpp
