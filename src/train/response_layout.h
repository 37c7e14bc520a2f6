// Per-sample response values (log-probs, values, returns) to and from a packed batch's response
// positions: shared by the trainer's steps (trainer.cpp, value_steps.cpp).
#pragma once

#include <torch/types.h>

#include <vector>

#include "train/sample.h"
#include "train/trainer.h"

namespace rlcpp {

// Each sample's response values from a packed [B, L] fp32 CPU tensor, appended to `out`.
void append_response_values(const torch::Tensor& values, const PackedBatch& batch, const std::vector<Sample>& samples,
                            size_t begin, std::vector<std::vector<float>>& out);
// Per-sample vectors (rows [begin, begin + B) of `values`; an empty one leaves its row 0) laid onto
// the packed batch's response positions: [B, L], fp32 or fp64 as the values.
torch::Tensor lay_out(const std::vector<std::vector<float>>& values, const PackedBatch& batch, size_t begin);
torch::Tensor lay_out(const std::vector<std::vector<double>>& values, const PackedBatch& batch, size_t begin);

}  // namespace rlcpp
