// Rotary position embedding, split-half convention (Hugging Face `rotate_half`), with the
// inverse frequencies adjusted for `rope_scaling` (linear, llama3).
#pragma once

#include <torch/types.h>

#include <vector>

#include "model/model_config.h"

namespace rlcpp {

// The head_dim/2 inverse frequencies, computed in double, scaling applied.
std::vector<double> rope_inverse_frequencies(const ModelConfig& config);

class Rope {
 public:
  Rope(const ModelConfig& config, torch::Device device);
  // cos and sin for `positions` [B, T] (int64): each [B, T, head_dim] in `dtype`
  // (computed in fp32, or fp64 for an fp64 model, as Hugging Face does).
  std::pair<torch::Tensor, torch::Tensor> cos_sin(const torch::Tensor& positions, torch::ScalarType dtype) const;
  // x [B, H, T, D] rotated by cos/sin [B, T, D]; or packed x [T, H, D] by cos/sin [T, D].
  static torch::Tensor apply(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

 private:
  torch::Tensor inv_freq_f64_;  // [head_dim / 2] on the model's device
};

}  // namespace rlcpp
