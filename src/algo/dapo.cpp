#include "algo/dapo.h"

#include <algorithm>

#include "util/error.h"
#include "util/torch_format.h"

namespace rlcpp {

torch::Tensor filter_groups_by_accuracy(const torch::Tensor& correct, int64_t group_size, double lo, double hi) {
  RLCPP_CHECK(correct.dim() == 1 && group_size > 0 && correct.size(0) % group_size == 0,
              "correct {} is not whole groups of {}", correct.sizes(), group_size);
  auto accuracy = correct.to(torch::kFloat64).view({-1, group_size}).mean(1);
  return accuracy.gt(lo).logical_and(accuracy.lt(hi));
}

double overlong_penalty(int64_t length, int64_t max_length, int64_t cache_length, double scale) {
  RLCPP_CHECK(cache_length > 0 && cache_length <= max_length, "cache length {} for max length {}", cache_length,
              max_length);
  const int64_t expected = max_length - cache_length;
  if (length <= expected) return 0.0;
  if (length >= max_length) return -scale;
  return scale * static_cast<double>(expected - length) / static_cast<double>(cache_length);
}

int64_t default_overlong_cache(int64_t max_new_tokens) { return std::max<int64_t>(1, std::min<int64_t>(1024, max_new_tokens / 4)); }

torch::Tensor mask_truncated(const torch::Tensor& mask, const torch::Tensor& truncated) {
  RLCPP_CHECK(mask.dim() == 2 && truncated.dim() == 1 && truncated.size(0) == mask.size(0),
              "mask {} and truncated {}", mask.sizes(), truncated.sizes());
  return mask * truncated.logical_not().to(mask.scalar_type()).unsqueeze(1);
}

}  // namespace rlcpp
