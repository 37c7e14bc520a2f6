// The element-wise steps of a decoder layer, fused, for generation's small batches in fp32: RMSNorm,
// SiLU(gate) · up and rotary embedding each in one pass over their rows, rows split over the
// kernel thread pool. Same run-time dispatch as matmul.h.
#pragma once

#include <cstdint>

namespace rlcpp {
class ThreadPool;
}

namespace rlcpp::kernels {

// out[r] = weight * x[r] / sqrt(mean(x[r]²) + eps) for rows x [rows, dim].
void rms_norm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps, float* out,
              ThreadPool* pool = nullptr);

// out[i] = silu(gate[i]) * up[i] = gate[i] / (1 + exp(-gate[i])) * up[i], i < n.
void silu_mul(const float* gate, const float* up, int64_t n, float* out, ThreadPool* pool = nullptr);

// Rotary embedding, split-half convention: x [tokens, heads, dim] with cos/sin [tokens, dim];
// out = x * cos + rotate_half(x) * sin, rotate_half(x) = (-x[half:], x[:half]).
void rope(const float* x, const float* cos, const float* sin, int64_t tokens, int64_t heads, int64_t dim, float* out,
          ThreadPool* pool = nullptr);

}  // namespace rlcpp::kernels
