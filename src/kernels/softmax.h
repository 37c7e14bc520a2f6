// Row statistics for sampling over a large vocabulary: the maximum, and exp(x * scale - shift)
// with its sum, vectorised with the same run-time dispatch as matmul.h. Single-threaded: the
// sampler runs rows in parallel; the row-wise pair below does so itself.
#pragma once

#include <cstdint>

namespace rlcpp {
class ThreadPool;
}

namespace rlcpp::kernels {

// max_i x[i] (n >= 1), and the first index holding it.
float max_of(const float* x, int64_t n, int64_t* argmax = nullptr);

// out[i] = exp(x[i] * scale - shift) (out may be null: the sum alone); returns the sum in double.
double exp_sum(const float* x, int64_t n, float scale, float shift, float* out);

// For the training head's chunks of logits x [rows, n], rows split over the pool (ThreadPool::global()
// when null): lse[r] = log Σ_j exp(x[r][j]) (max-shifted, summed in double), and in place
// x[r][j] = coef[r] · exp(x[r][j] − shift[r]).
void row_logsumexp(const float* x, int64_t rows, int64_t n, float* lse, ThreadPool* pool = nullptr);
void exp_scale_rows(float* x, int64_t rows, int64_t n, const float* shift, const float* coef, ThreadPool* pool = nullptr);

}  // namespace rlcpp::kernels
