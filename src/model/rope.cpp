#include "model/rope.h"

#include <cmath>

namespace rlcpp {

std::vector<double> rope_inverse_frequencies(const ModelConfig& config) {
  const int64_t half = config.head_dim / 2;
  std::vector<double> inv(half);
  for (int64_t i = 0; i < half; ++i) {
    inv[i] = 1.0 / std::pow(config.rope_theta, static_cast<double>(2 * i) / static_cast<double>(config.head_dim));
  }
  const RopeScaling& s = config.rope_scaling;
  if (s.type == RopeScalingType::kLinear) {
    for (double& f : inv) f /= s.factor;
  } else if (s.type == RopeScalingType::kLlama3) {
    // Llama 3.1: long wavelengths are divided by the factor, short ones kept, the band between blended.
    const double old_len = static_cast<double>(s.original_max_position_embeddings);
    const double low_freq_wavelen = old_len / s.low_freq_factor;
    const double high_freq_wavelen = old_len / s.high_freq_factor;
    for (double& f : inv) {
      const double wavelen = 2.0 * M_PI / f;
      if (wavelen > low_freq_wavelen) {
        f = f / s.factor;
      } else if (wavelen >= high_freq_wavelen) {
        const double smooth = (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = (1.0 - smooth) * f / s.factor + smooth * f;
      }
    }
  }
  return inv;
}

Rope::Rope(const ModelConfig& config, torch::Device device) {
  const auto inv = rope_inverse_frequencies(config);
  inv_freq_f64_ = torch::tensor(inv, torch::kFloat64).to(device);
}

std::pair<torch::Tensor, torch::Tensor> Rope::cos_sin(const torch::Tensor& positions, torch::ScalarType dtype) const {
  const auto compute = dtype == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
  auto freqs = positions.to(compute).unsqueeze(-1) * inv_freq_f64_.to(compute);  // [B, T, D/2]
  auto emb = torch::cat({freqs, freqs}, -1);                                         // [B, T, D]
  return {emb.cos().to(dtype), emb.sin().to(dtype)};
}

torch::Tensor Rope::apply(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  auto x1 = x.narrow(-1, 0, half);
  auto x2 = x.narrow(-1, half, half);
  auto rotated = torch::cat({-x2, x1}, -1);
  return x * cos.unsqueeze(1) + rotated * sin.unsqueeze(1);
}

}  // namespace rlcpp
