// 8-bit weights with a scale per output row, for the rollout engine's copy of the model
// (--rollout-dtype int8|fp8): each row [in] of a weight [out, in] is stored as 8-bit codes and one
// fp32 scale, w[r, k] ≈ scale[r] · code(q[r, k]). The matmul kernels widen the codes in registers
// (kernels/matmul.h); the weights in fp32 stay the trainer's.
//
// int8: scale = max|w[r]| / 127, q = round(w / scale) in [-127, 127] (symmetric: -128 unused).
// fp8:  OCP's e4m3 (E4M3FN), scale = max|w[r]| / 448 (its largest finite value), q the e4m3
//       nearest w / scale (ties to even). 0x7f and 0xff, its NaN codes, are never written.
// A row of zeros has scale 0 and zero codes.
#pragma once

#include <cstdint>

#include "kernels/matmul.h"

namespace rlcpp {
class ThreadPool;
}

namespace rlcpp::kernels {

// The e4m3 code nearest v (ties to even), |v| clamped to 448; NaN gives 0x7f.
uint8_t float_to_fp8_e4m3(float v);

// q[rows, in] (int8_t for i8, uint8_t for fp8) and scales[rows] from w[rows, in] (dense fp32).
// type: i8 or fp8. pool: ThreadPool::global() when null.
void quantize_rows(const float* w, int64_t rows, int64_t in, WeightType type, void* q, float* scales,
                   ThreadPool* pool = nullptr);
// w[rows, in] = scale[r] · code(q[r, k]): what the kernels compute with.
void dequantize_rows(const void* q, const float* scales, int64_t rows, int64_t in, WeightType type, float* w,
                     ThreadPool* pool = nullptr);

}  // namespace rlcpp::kernels
