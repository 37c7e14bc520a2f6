// DAPO's pieces: group filtering by accuracy, soft over-length punishment, truncation masking.
#pragma once

#include <torch/types.h>

#include <vector>

namespace rlcpp {

// A group is kept when its fraction of correct answers lies strictly inside (lo, hi): with the
// reference [0.01, 0.99], all-right and all-wrong groups (no learning signal) are dropped.
// correct [n_groups * group_size] bool → keep [n_groups] bool.
torch::Tensor filter_groups_by_accuracy(const torch::Tensor& correct, int64_t group_size, double lo, double hi);

// Soft over-length punishment (DAPO eq. 13) for a response of `length` tokens: 0 up to
// max_length - cache_length, then linearly down to -1 at max_length, -1 beyond; times `scale`
// (the reward scale's correct value), to be added to the reward.
double overlong_penalty(int64_t length, int64_t max_length, int64_t cache_length, double scale = 1.0);

// min(1024, max_new_tokens / 4): the reference system's default cache length.
int64_t default_overlong_cache(int64_t max_new_tokens);

// filter_truncated_response: mask [B, T] with the rows of truncated samples zeroed.
torch::Tensor mask_truncated(const torch::Tensor& mask, const torch::Tensor& truncated);

}  // namespace rlcpp
