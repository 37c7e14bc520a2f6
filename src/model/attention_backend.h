// The seam between the transformer and whoever keeps keys and values between calls (the engine's
// paged KV cache). The model computes q, k, v for the new tokens and hands them over per layer;
// the backend stores k, v and returns attention over each sequence's whole context.
#pragma once

#include <torch/types.h>

namespace rlcpp {

class AttentionBackend {
 public:
  virtual ~AttentionBackend() = default;
  // q [T, Hq, D], k and v [T, Hkv, D] for the T new tokens of this step (all sequences packed),
  // already rotated. Returns [T, Hq * D]: softmax(q K^T / sqrt(D)) V over each token's sequence,
  // causal in position.
  virtual torch::Tensor attend(int64_t layer, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) = 0;
};

}  // namespace rlcpp
