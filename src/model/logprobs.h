// Log-probabilities of target tokens from final hidden states, without materialising [N, V].
//
// token_logprobs_chunked computes log softmax(h W^T / temperature)[target] chunk by chunk in the
// forward pass, saves only the per-token log-sum-exp, and recomputes each chunk's logits in the
// backward pass. Peak memory grows with the chunk (chunk × V), not with the number of tokens.
// Only rows with a target are projected onto the vocabulary (prompt and padding rows cost nothing).
// token_logprobs_reference is the plain version (full logits, log_softmax, gather) it is tested against.
//
// Under tensor parallelism (a VocabShard that is split) `weight` holds this rank's rows of the
// head, tokens [begin, begin + rows): each rank computes its logits only, the log-sum-exp, the
// target's logit and the entropy are combined over the group, and the hidden states' gradient is
// summed over it. No rank ever holds a row of full logits.
#pragma once

#include <torch/types.h>

#include <functional>

#include "comm/communicator.h"

namespace rlcpp {

// The tokens a rank's head scores: [begin, begin + weight rows) of the vocabulary, the other ranks
// of `group` holding the rest. The default: the whole vocabulary, here.
struct VocabShard {
  int64_t begin = 0;
  Communicator* group = nullptr;
  bool split() const { return group != nullptr && group->size() > 1; }
};

// hidden [N, H] (model dtype), weight [V, H], targets [N] int64 (a negative target is ignored:
// its log-prob is 0 and carries no gradient). Returns [N] in fp32 (fp64 for an fp64 model).
// Differentiable with respect to hidden and weight. With `entropy`, also the entropy of
// softmax(logits / temperature) per token, [N], from the same logits (no gradient: a metric).
torch::Tensor token_logprobs_chunked(const torch::Tensor& hidden, const torch::Tensor& weight,
                                     const torch::Tensor& targets, double temperature, int64_t chunk_tokens,
                                     torch::Tensor* entropy = nullptr, const VocabShard& shard = {});

torch::Tensor token_logprobs_reference(const torch::Tensor& hidden, const torch::Tensor& weight,
                                       const torch::Tensor& targets, double temperature);

// Without autograd: the log-probs as above and the entropy of softmax(logits / temperature) per
// token ([N] each, 0 where the target is negative). Rows without a target skip the vocabulary
// projection, so prompt tokens cost nothing here.
struct LogprobsEntropy {
  torch::Tensor logprobs, entropy;
};
LogprobsEntropy token_logprobs_entropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                       const torch::Tensor& targets, double temperature, int64_t chunk_tokens,
                                       const VocabShard& shard = {});

// With autograd: the entropy of softmax(logits / temperature) per token ([N] fp32, fp64 for an
// fp64 model; 0 where the target is negative). Keeps the logits of the rows with a target for the
// backward pass (rows × V), so it is for the entropy bonus, not for every step.
torch::Tensor token_entropy(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& targets,
                            double temperature, const VocabShard& shard = {});

// The fused head of a loss that is a sum of per-token terms, each depending on its own token's
// log-prob only (the clipped policy losses and their KL penalties): one pass over the vocabulary
// per chunk computes the log-probs, the loss gradient with respect to them (autograd of `loss_of`
// with the chunk's entries set), and from the same logits the gradients of hidden and weight, so
// backward recomputes nothing. hidden [N, H] and targets [N] are rows that all have a target;
// loss_of maps log-probs [N] (in the accumulation dtype) to the scalar loss. Returns the loss,
// differentiable with respect to hidden and weight, the log-probs [N] and, with `with_entropy`,
// each token's entropy [N] (neither with gradient).
struct LossAndLogprobs {
  torch::Tensor loss, logprobs, entropy;
};
LossAndLogprobs fused_token_loss_head(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& targets,
                                      double temperature, int64_t chunk_tokens,
                                      const std::function<torch::Tensor(const torch::Tensor&)>& loss_of,
                                      bool with_entropy = false, const VocabShard& shard = {});

// The dtype log-probs are accumulated in for a model of `dtype`: fp64 stays fp64, all else fp32.
inline torch::ScalarType logprob_dtype(torch::ScalarType dtype) {
  return dtype == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
}

}  // namespace rlcpp
