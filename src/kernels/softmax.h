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

// One block of training's causal attention scores (model/attention.cpp), x [rows, n] = q·kᵀ
// unscaled. Row r is the query at position `first + r % block` of batch element `r / per_batch`
// (rows are ordered [batch][head][block]); it may read key j when j <= its position and
// key_mask[b * mask_stride + j], and always its own position. Rows split over the pool.
struct CausalRows {
  int64_t rows = 0, n = 0;    // x is [rows, n]; n = the block's last position + 1
  int64_t block = 1;          // query rows per head
  int64_t first = 0;          // position of each head's first query row
  int64_t per_batch = 1;      // rows per batch element: heads × block
  const bool* key_mask = nullptr;
  int64_t mask_stride = 0;
  float scale = 1;            // > 0
};

// Forward: x becomes softmax(scale · x) over the readable keys (0 elsewhere), in place, and
// lse[r] = log Σ exp(scale · x) over them (max-shifted, summed in double).
void causal_softmax_rows(float* x, const CausalRows& rows, float* lse, ThreadPool* pool = nullptr);
// Backward's recompute: x becomes exp(scale · x − lse[r]) over the readable keys, 0 elsewhere.
void causal_probs_rows(float* x, const CausalRows& rows, const float* lse, ThreadPool* pool = nullptr);
// The scores' gradient, in place: dp[r][j] = scale · p[r][j] · (dp[r][j] − delta[r]) over [rows, n].
void softmax_grad_rows(const float* p, float* dp, const float* delta, int64_t rows, int64_t n, float scale,
                       ThreadPool* pool = nullptr);

}  // namespace rlcpp::kernels
