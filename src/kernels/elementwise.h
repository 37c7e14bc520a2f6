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

// The backward passes of the three, for training (kernel_linear.h's autograd functions), given the
// output gradient `grad` of the same shape as the output.
// rms_norm: dx[r] = scale·(g⊙w) − x[r]·scale³·Σ(g⊙w⊙x[r])/dim with scale = 1/sqrt(mean(x[r]²) + eps);
// dweight (when not null, overwritten) = Σ_r g[r]⊙x[r]·scale[r].
void rms_norm_backward(const float* x, const float* weight, const float* grad, int64_t rows, int64_t dim, float eps,
                       float* dx, float* dweight, ThreadPool* pool = nullptr);
// silu_mul: dgate = g·up·σ(gate)·(1 + gate·(1 − σ(gate))), dup = g·silu(gate).
void silu_mul_backward(const float* gate, const float* up, const float* grad, int64_t n, float* dgate, float* dup,
                       ThreadPool* pool = nullptr);
// rope: dx = grad·cos + rotate_halfᵀ(grad·sin), i.e. dx[:half] = g1·cos1 + g2·sin2, dx[half:] = g2·cos2 − g1·sin1.
void rope_backward(const float* grad, const float* cos, const float* sin, int64_t tokens, int64_t heads, int64_t dim,
                   float* dx, ThreadPool* pool = nullptr);

// One AdamW step on n fp32 parameters in place, in torch::optim::AdamW's arithmetic:
// p *= decay; m = beta1·m + (1 − beta1)·g; v = beta2·v + (1 − beta2)·g²;
// p −= step_size · m / (√v / bias2_sqrt + eps)   (decay = 1 − lr·weight_decay, step_size = lr / (1 − beta1^t),
// bias2_sqrt = √(1 − beta2^t)). One pass over the four arrays, split over the pool.
struct AdamWScalars {
  float decay, beta1, one_minus_beta1, beta2, one_minus_beta2, eps, step_size, bias2_sqrt;
};
void adamw(float* p, const float* g, float* m, float* v, int64_t n, const AdamWScalars& s, ThreadPool* pool = nullptr);

}  // namespace rlcpp::kernels
