// Gradient checks against central finite differences in fp64, shared by the model tests.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace rlcpp::testing {

// For each named fp64 tensor (its .grad() already computed from `loss`), compares three entries
// (first, middle, last) with (loss(x + eps) - loss(x - eps)) / 2eps; returns how many it checked.
// Truncation O(eps^2) and rounding O(1e-16 / eps) ≈ 1e-10 bound the difference.
inline int expect_finite_difference_gradients(const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                                              const std::function<torch::Tensor()>& loss) {
  torch::NoGradGuard no_grad;
  int checked = 0;
  for (const auto& [name, tensor] : tensors) {
    auto flat = tensor.view({-1});
    auto grad = tensor.grad().view({-1});
    for (int64_t index : {int64_t{0}, flat.numel() / 2, flat.numel() - 1}) {
      const double saved = flat[index].item<double>();
      const double eps = 1e-6;
      flat[index] = saved + eps;
      const double up = loss().item<double>();
      flat[index] = saved - eps;
      const double down = loss().item<double>();
      flat[index] = saved;
      const double numeric = (up - down) / (2 * eps);
      EXPECT_NEAR(grad[index].item<double>(), numeric, 1e-6 + 1e-5 * std::abs(numeric)) << name << "[" << index << "]";
      ++checked;
    }
  }
  return checked;
}

}  // namespace rlcpp::testing
