// Shared by the trainer tests: a fixed set of samples of different lengths (one truncated), and
// the comparison of the weights several runs end with.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "model/transformer.h"
#include "train/sample.h"

namespace rlcpp::testing {

inline std::vector<Sample> fixed_samples() {
  std::vector<Sample> s(4);
  s[0] = model_sample({5, 6, 7}, {8, 9, 10, 11}, 1.0);
  s[1] = model_sample({12}, {13, 14}, -1.0);
  s[2] = model_sample({3, 4, 5, 6, 7, 8}, {9}, 0.5, {}, 0, true);
  s[3] = model_sample({1, 2}, {3, 4, 5, 6, 7}, -0.25);
  return s;
}

inline std::vector<torch::Tensor> weights_of(Transformer& model) {
  std::vector<torch::Tensor> out;
  for (const auto& p : model.parameters()) out.push_back(p.detach().clone());
  return out;
}

// Every run's weights equal the first run's within `tolerance`.
inline void expect_same_weights(const std::vector<std::vector<torch::Tensor>>& runs, double tolerance) {
  for (size_t r = 1; r < runs.size(); ++r) {
    for (size_t k = 0; k < runs[0].size(); ++k) {
      EXPECT_LT((runs[r][k] - runs[0][k]).abs().max().item<double>(), tolerance) << "run " << r << ", parameter " << k;
    }
  }
}


}  // namespace rlcpp::testing
