// Row statistics for sampling over a large vocabulary: the maximum, and exp(x * scale - shift)
// with its sum, vectorised with the same run-time dispatch as matmul.h. Single-threaded: the
// sampler runs rows in parallel.
#pragma once

#include <cstdint>

namespace rlcpp::kernels {

// max_i x[i] (n >= 1), and the first index holding it.
float max_of(const float* x, int64_t n, int64_t* argmax = nullptr);

// out[i] = exp(x[i] * scale - shift) (out may be null: the sum alone); returns the sum in double.
double exp_sum(const float* x, int64_t n, float scale, float shift, float* out);

}  // namespace rlcpp::kernels
