#include "model/logprobs.h"

#include <torch/autograd.h>

#include "kernels/softmax.h"
#include "model/kernel_linear.h"
#include "model/tensor_parallel.h"
#include "util/error.h"
#include "util/torch_format.h"

namespace rlcpp {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// logits of one chunk in the accumulation dtype, divided by temperature: [n, V]
torch::Tensor chunk_logits(const torch::Tensor& h, const torch::Tensor& weight, double temperature) {
  auto logits = torch::matmul(h, weight.t()).to(logprob_dtype(h.scalar_type()));
  if (temperature != 1.0) logits = logits / temperature;
  return logits;
}

// The row passes over a chunk's logits run on the kernels (every core) for contiguous fp32 CPU
// logits, on LibTorch otherwise.
bool on_kernels(const torch::Tensor& logits) {
  return kernels_enabled() && logits.device().is_cpu() && logits.scalar_type() == torch::kFloat32 &&
         logits.is_contiguous();
}

// log Σ_j exp(logits[i, j]) of a chunk's logits [n, V]: [n].
torch::Tensor logsumexp_rows(const torch::Tensor& logits) {
  if (!on_kernels(logits)) return logits.logsumexp(-1);
  auto lse = torch::empty({logits.size(0)}, logits.options());
  kernels::row_logsumexp(logits.data_ptr<float>(), logits.size(0), logits.size(1), lse.data_ptr<float>());
  return lse;
}

// Over the whole vocabulary, from this rank's logits [n, V_shard] of a chunk: each row's
// log-sum-exp [n] (one all-gather under tensor parallelism, combined in double).
torch::Tensor vocab_logsumexp(const torch::Tensor& logits, const VocabShard& shard) {
  auto lse = logsumexp_rows(logits);
  if (!shard.split()) return lse;
  auto all = torch::empty({shard.group->size(), lse.size(0)}, lse.options());
  auto flat = all.view({-1});
  shard.group->all_gather(lse.contiguous(), flat);
  return all.to(torch::kFloat64).logsumexp(0).to(lse.scalar_type());
}

// This rank's column of each row's target [n, 1] (clamped into the shard) and whether the target
// is in the shard [n, 1] (all true without tensor parallelism).
std::pair<torch::Tensor, torch::Tensor> local_targets(const torch::Tensor& targets, int64_t width, const VocabShard& shard) {
  auto t = targets.unsqueeze(-1);
  if (!shard.split()) return {t, torch::ones_like(t, t.options().dtype(torch::kBool))};
  auto local = t - shard.begin;
  auto in = local.ge(0).logical_and(local.lt(width));
  return {local.clamp(0, width - 1), in};
}

// A per-row value this rank computed over its tokens, summed over the group: [n].
torch::Tensor sum_over_vocab(torch::Tensor x, const VocabShard& shard) {
  if (shard.split()) x = tp_reduce(x, *shard.group);
  return x;
}

// The target tokens' logits [n] from a chunk's logits (each held by one rank under tensor parallelism).
torch::Tensor target_logits(const torch::Tensor& logits, const torch::Tensor& targets, const VocabShard& shard) {
  const auto [t, in] = local_targets(targets, logits.size(1), shard);
  auto picked = logits.gather(-1, t);
  if (shard.split()) picked = torch::where(in, picked, torch::zeros_like(picked));
  return sum_over_vocab(picked.squeeze(-1).contiguous(), shard);
}

// Each row's entropy [n] from a chunk's logits and its whole-vocabulary lse [n].
torch::Tensor entropy_of(const torch::Tensor& logits, const torch::Tensor& lse, const VocabShard& shard) {
  if (!shard.split()) return lse - (torch::softmax(logits, -1) * logits).sum(-1);
  // -Σ p log p with log p = z - lse: no cancellation between lse and Σ p z.
  const auto logp = logits - lse.unsqueeze(-1);
  return -sum_over_vocab((logp.exp() * logp).sum(-1).contiguous(), shard);
}

// The hidden states' gradient from this rank's part of the head: summed over the group.
void sum_hidden_gradient(torch::Tensor& grad_hidden, const VocabShard& shard) {
  if (shard.split()) shard.group->all_reduce_sum(grad_hidden);
}

// Turns a chunk's logits [n, V] (already divided by temperature) in place into g_i · d logp_i /
// d logit_ij = g_i · (1[j = t_i] − p_ij) / temperature, with lse [n], g [n, 1] and targets [n]
// (global ids; only the targets in this rank's shard get their + g_i / temperature).
torch::Tensor into_logprob_gradient(torch::Tensor& logits, const torch::Tensor& lse, const torch::Tensor& g,
                                    const torch::Tensor& targets, double temperature, const VocabShard& shard) {
  const auto [t, in] = local_targets(targets, logits.size(1), shard);
  const auto g_target = shard.split() ? torch::where(in, g, torch::zeros_like(g)) : g;
  if (on_kernels(logits)) {  // one pass: -g/T · exp(logits - lse), then + g/T at the target
    const auto coef = (g / -temperature).contiguous();
    const auto shift = lse.contiguous();
    kernels::exp_scale_rows(logits.data_ptr<float>(), logits.size(0), logits.size(1), shift.data_ptr<float>(),
                            coef.data_ptr<float>());
    return logits.scatter_add_(-1, t, g_target / temperature);
  }
  auto grad_logits = logits.sub_(lse.unsqueeze(-1)).exp_().mul_(-g);
  grad_logits.scatter_add_(-1, t, g_target);
  if (temperature != 1.0) grad_logits.div_(temperature);
  return grad_logits;
}

// Over rows that all have a target (token_logprobs_chunked selects them). A second output, the
// per-token entropy, is computed when asked (`with_entropy`) and carries no gradient.
class ChunkedLogprobFunction : public torch::autograd::Function<ChunkedLogprobFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& hidden, const torch::Tensor& weight,
                               const torch::Tensor& targets, double temperature, int64_t chunk, bool with_entropy,
                               const VocabShard* shard) {
    const int64_t n = hidden.size(0);
    const auto acc = logprob_dtype(hidden.scalar_type());
    auto out = torch::zeros({n}, hidden.options().dtype(acc));
    auto lse = torch::zeros({n}, hidden.options().dtype(acc));
    auto entropy = with_entropy ? torch::zeros({n}, hidden.options().dtype(acc)) : torch::zeros({0}, hidden.options().dtype(acc));
    for (int64_t start = 0; start < n; start += chunk) {
      const int64_t len = std::min(chunk, n - start);
      auto logits = chunk_logits(hidden.narrow(0, start, len), weight, temperature);
      auto chunk_lse = vocab_logsumexp(logits, *shard);
      auto picked = target_logits(logits, targets.narrow(0, start, len), *shard);
      lse.narrow(0, start, len).copy_(chunk_lse);
      out.narrow(0, start, len).copy_(picked - chunk_lse);
      if (with_entropy) entropy.narrow(0, start, len).copy_(entropy_of(logits, chunk_lse, *shard));
    }
    ctx->save_for_backward({hidden, weight, targets, lse});
    ctx->saved_data["temperature"] = temperature;
    ctx->saved_data["chunk"] = chunk;
    // By value: the caller's VocabShard is gone by backward.
    ctx->saved_data["shard_begin"] = shard->begin;
    ctx->saved_data["shard_group"] = reinterpret_cast<int64_t>(shard->group);
    ctx->mark_non_differentiable({entropy});
    return {out, entropy};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto saved = ctx->get_saved_variables();
    const auto& hidden = saved[0];
    const auto& weight = saved[1];
    const auto& targets = saved[2];
    const auto& lse = saved[3];
    const double temperature = ctx->saved_data["temperature"].toDouble();
    const int64_t chunk = ctx->saved_data["chunk"].toInt();
    const VocabShard shard{ctx->saved_data["shard_begin"].toInt(),
                           reinterpret_cast<Communicator*>(ctx->saved_data["shard_group"].toInt())};
    const auto acc = lse.scalar_type();
    // d out_i / d logit_ij = (1[j = t_i] - p_ij) / temperature.
    auto grad = grad_outputs[0].to(acc);
    const int64_t n = hidden.size(0);
    torch::Tensor grad_hidden = torch::empty_like(hidden);
    // A frozen head (LoRA, a reference model) needs no [V, H] gradient: skip its products entirely.
    const bool weight_grad = ctx->needs_input_grad(1);
    torch::Tensor grad_weight = weight_grad ? torch::zeros(weight.sizes(), weight.options().dtype(acc)) : torch::Tensor();
    for (int64_t start = 0; start < n; start += chunk) {
      const int64_t len = std::min(chunk, n - start);
      auto h = hidden.narrow(0, start, len);
      auto g = grad.narrow(0, start, len).unsqueeze(-1);  // [n, 1]
      auto logits = chunk_logits(h, weight, temperature);
      auto grad_logits = into_logprob_gradient(logits, lse.narrow(0, start, len), g, targets.narrow(0, start, len),
                                               temperature, shard);
      auto grad_logits_model = grad_logits.to(hidden.scalar_type());
      grad_hidden.narrow(0, start, len).copy_(torch::matmul(grad_logits_model, weight));
      if (!weight_grad) continue;
      if (h.scalar_type() == acc) {
        grad_weight.addmm_(grad_logits_model.t(), h);  // in place: no second [V, H] buffer per chunk
      } else {
        grad_weight.add_(torch::matmul(grad_logits_model.t(), h).to(acc));
      }
    }
    if (weight_grad) grad_weight = grad_weight.to(weight.scalar_type());
    sum_hidden_gradient(grad_hidden, shard);
    return {grad_hidden, grad_weight, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// Everything in forward (see fused_token_loss_head); backward scales the saved gradients.
class FusedLossHeadFunction : public torch::autograd::Function<FusedLossHeadFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& hidden, const torch::Tensor& weight,
                               const torch::Tensor& targets, double temperature, int64_t chunk,
                               const std::function<torch::Tensor(const torch::Tensor&)>* loss_of, bool with_entropy,
                               const VocabShard* shard) {
    const int64_t n = hidden.size(0);
    const auto acc = logprob_dtype(hidden.scalar_type());
    auto logprobs = torch::zeros({n}, hidden.options().dtype(acc));
    auto entropy = torch::zeros({with_entropy ? n : 0}, hidden.options().dtype(acc));
    auto grad_hidden = torch::empty_like(hidden);
    const bool weight_grad = weight.requires_grad();
    auto grad_weight = weight_grad ? torch::zeros(weight.sizes(), weight.options().dtype(acc)) : torch::Tensor();
    for (int64_t start = 0; start < n; start += chunk) {
      const int64_t len = std::min(chunk, n - start);
      auto h = hidden.narrow(0, start, len);
      auto t = targets.narrow(0, start, len);
      auto logits = chunk_logits(h, weight, temperature);
      auto lse = vocab_logsumexp(logits, *shard);
      logprobs.narrow(0, start, len).copy_(target_logits(logits, t, *shard) - lse);
      // d loss / d logp of this chunk's tokens: a per-token loss needs no other token's value.
      torch::Tensor g;
      {
        torch::AutoGradMode grad_mode(true);
        auto x = logprobs.detach().clone().requires_grad_(true);
        g = torch::autograd::grad({(*loss_of)(x)}, {x})[0].narrow(0, start, len).unsqueeze(-1);
      }
      // d logp_i / d logit_ij = (1[j = t_i] - p_ij) / temperature.
      if (with_entropy) entropy.narrow(0, start, len).copy_(entropy_of(logits, lse, *shard));
      auto grad_logits = into_logprob_gradient(logits, lse, g, t, temperature, *shard);
      auto grad_logits_model = grad_logits.to(hidden.scalar_type());
      grad_hidden.narrow(0, start, len).copy_(torch::matmul(grad_logits_model, weight));
      if (!weight_grad) continue;
      if (h.scalar_type() == acc) {
        grad_weight.addmm_(grad_logits_model.t(), h);
      } else {
        grad_weight.add_(torch::matmul(grad_logits_model.t(), h).to(acc));
      }
    }
    if (weight_grad) grad_weight = grad_weight.to(weight.scalar_type());
    sum_hidden_gradient(grad_hidden, *shard);
    ctx->save_for_backward({grad_hidden, weight_grad ? grad_weight : torch::zeros({0}, weight.options())});
    ctx->saved_data["weight_grad"] = weight_grad;
    auto loss = (*loss_of)(logprobs);
    ctx->mark_non_differentiable({logprobs, entropy});
    return {loss, logprobs, entropy};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto saved = ctx->get_saved_variables();
    const auto& go = grad_outputs[0];
    torch::Tensor grad_weight;
    if (ctx->saved_data["weight_grad"].toBool()) grad_weight = saved[1] * go.to(saved[1].scalar_type());
    return {saved[0] * go.to(saved[0].scalar_type()), grad_weight, torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

void check_inputs(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& targets,
                  double temperature) {
  RLCPP_CHECK(hidden.dim() == 2 && weight.dim() == 2 && hidden.size(1) == weight.size(1),
              "hidden {} and weight {} must be [N, H] and [V, H]", hidden.sizes(), weight.sizes());
  RLCPP_CHECK(targets.dim() == 1 && targets.size(0) == hidden.size(0), "targets {} must be [N] for hidden {}",
              targets.sizes(), hidden.sizes());
  RLCPP_CHECK(temperature > 0, "temperature must be positive, got {}", temperature);
}

}  // namespace

torch::Tensor token_logprobs_chunked(const torch::Tensor& hidden, const torch::Tensor& weight,
                                     const torch::Tensor& targets, double temperature, int64_t chunk_tokens,
                                     torch::Tensor* entropy, const VocabShard& shard) {
  check_inputs(hidden, weight, targets, temperature);
  RLCPP_CHECK(chunk_tokens > 0, "chunk_tokens must be positive, got {}", chunk_tokens);
  // Only the rows with a target reach the head: the others are 0 (and get no gradient).
  const auto all_targets = targets.to(torch::kInt64);
  const auto rows = all_targets.ge(0).nonzero().squeeze(-1);
  const auto acc = logprob_dtype(hidden.scalar_type());
  auto outputs = ChunkedLogprobFunction::apply(hidden.index_select(0, rows), weight, all_targets.index_select(0, rows),
                                               temperature, chunk_tokens, entropy != nullptr, &shard);
  auto zeros = torch::zeros({hidden.size(0)}, hidden.options().dtype(acc));
  if (entropy != nullptr) *entropy = zeros.index_copy(0, rows, outputs[1]);
  return zeros.index_copy(0, rows, outputs[0]);
}

LossAndLogprobs fused_token_loss_head(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& targets,
                                      double temperature, int64_t chunk_tokens,
                                      const std::function<torch::Tensor(const torch::Tensor&)>& loss_of,
                                      bool with_entropy, const VocabShard& shard) {
  check_inputs(hidden, weight, targets, temperature);
  RLCPP_CHECK(chunk_tokens > 0, "chunk_tokens must be positive, got {}", chunk_tokens);
  auto out = FusedLossHeadFunction::apply(hidden, weight, targets.to(torch::kInt64), temperature, chunk_tokens, &loss_of,
                                          with_entropy, &shard);
  return {out[0], out[1], with_entropy ? out[2] : torch::Tensor()};
}

torch::Tensor token_logprobs_reference(const torch::Tensor& hidden, const torch::Tensor& weight,
                                       const torch::Tensor& targets, double temperature) {
  check_inputs(hidden, weight, targets, temperature);
  auto logits = chunk_logits(hidden, weight, temperature);
  auto logp = torch::log_softmax(logits, -1).gather(-1, targets.clamp_min(0).unsqueeze(-1)).squeeze(-1);
  return logp * targets.ge(0).to(logp.scalar_type());
}

LogprobsEntropy token_logprobs_entropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                       const torch::Tensor& targets, double temperature, int64_t chunk_tokens,
                                       const VocabShard& shard) {
  check_inputs(hidden, weight, targets, temperature);
  RLCPP_CHECK(chunk_tokens > 0, "chunk_tokens must be positive, got {}", chunk_tokens);
  torch::NoGradGuard no_grad;
  const auto dtype = logprob_dtype(hidden.scalar_type());
  LogprobsEntropy out{torch::zeros({hidden.size(0)}, hidden.options().dtype(dtype)),
                      torch::zeros({hidden.size(0)}, hidden.options().dtype(dtype))};
  // Only rows with a target need the vocabulary projection: prompts are skipped entirely.
  const auto rows = targets.ge(0).nonzero().squeeze(-1);
  const int64_t n = rows.size(0);
  for (int64_t start = 0; start < n; start += chunk_tokens) {
    const auto index = rows.narrow(0, start, std::min(chunk_tokens, n - start));
    auto logits = chunk_logits(hidden.index_select(0, index), weight, temperature);
    auto lse = vocab_logsumexp(logits, shard);
    auto picked = target_logits(logits, targets.index_select(0, index), shard);
    out.logprobs.index_copy_(0, index, picked - lse);
    out.entropy.index_copy_(0, index, entropy_of(logits, lse, shard));
  }
  return out;
}

torch::Tensor token_entropy(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& targets,
                            double temperature, const VocabShard& shard) {
  check_inputs(hidden, weight, targets, temperature);
  const auto rows = targets.ge(0).nonzero().squeeze(-1);
  torch::Tensor entropy;
  if (!shard.split()) {
    auto logits = chunk_logits(hidden.index_select(0, rows), weight, temperature);
    auto logp = torch::log_softmax(logits, -1);
    entropy = -(logp.exp() * logp).sum(-1);
  } else {
    // The same with the sums over the vocabulary made over the group: lse = M + log Σ exp(z - M),
    // entropy = -Σ p log p; the hidden states enter the parallel region (their gradient is summed).
    auto logits = chunk_logits(tp_enter(hidden.index_select(0, rows), *shard.group), weight, temperature);
    auto local_max = std::get<0>(logits.detach().max(-1)).contiguous();
    auto all = torch::empty({shard.group->size(), local_max.size(0)}, local_max.options());
    auto flat = all.view({-1});
    shard.group->all_gather(local_max, flat);
    const auto m = std::get<0>(all.max(0)).unsqueeze(-1);
    auto lse = m.squeeze(-1) + sum_over_vocab((logits - m).exp().sum(-1), shard).log();
    // lse, the same on every rank, enters each rank's own sum: its gradient is summed (f again).
    const auto logp = logits - tp_enter(lse, *shard.group).unsqueeze(-1);
    entropy = -sum_over_vocab((logp.exp() * logp).sum(-1), shard);
  }
  return torch::zeros({hidden.size(0)}, entropy.options()).index_put({rows}, entropy);
}

}  // namespace rlcpp
