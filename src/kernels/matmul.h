// Small-batch matrix products for generation on CPU: y = x · Wᵀ (+ b) with W stored in fp32, bf16,
// fp16, int8 or fp8 (e4m3; both 8-bit types with a scale per output row: kernels/quantize.h) and
// every product and sum in fp32: narrow weights are widened in registers as they are read. One source (Google Highway) compiled for each SIMD
// target; the fastest one this CPU supports is picked at run time, so one binary runs well on
// AVX2, AVX-512 and NEON machines. The output rows are split over the kernel thread pool.
//
// Up to kDotRows rows of x (decode's few sequences) a matmul is a pass over W that memory bounds:
// each weight is read once for every row, in dot products along `in` (tiles of up to 4 weight rows
// by all of x's rows). More rows are bound by arithmetic: x is transposed once and each weight is
// broadcast into vectors of x's rows (outer products; up to 24 accumulator registers on AVX-512,
// no horizontal sums), reaching most of the FMA units' peak where LibTorch's BLAS reaches half.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rlcpp {
class ThreadPool;
}

namespace rlcpp::kernels {

// i8: int8 codes, w[r, k] = scale[r] · q[r, k]; fp8: fp8 e4m3 codes (bias 7, no infinities; the
// code 0x7f, e4m3's NaN, reads as 480), w[r, k] = scale[r] · e4m3(q[r, k]).
enum class WeightType { f32, bf16, f16, i8, fp8 };

// A weight matrix [out, in] as stored: its elements, their type, and for i8 and fp8 the scale of
// each output row (null for the others).
struct StoredWeight {
  const void* data = nullptr;
  WeightType type = WeightType::f32;
  const float* scales = nullptr;
};

// The most rows of x the dot-product tiles take; more go to the outer-product tiles.
constexpr int64_t kDotRows = 8;

// y[n, out] = x[n, in] · w[out, in]ᵀ + bias[out] (bias may be null). x, w and y are dense
// row-major. pool: ThreadPool::global() when null.
void matmul_nt(const float* x, int64_t n, int64_t in, StoredWeight w, int64_t out, const float* bias, float* y,
               ThreadPool* pool = nullptr);

// The CPU's dot-product instructions for narrow weights, where it has them. The sums stay fp32.
// - bf16 weights on AVX512-BF16 (`vdpbf16ps`, two multiplies per fp32 lane; kernels/bf16_dot.h):
//   x is rounded to bf16 (to nearest even), at every row count.
// - int8 weights on AVX512-VNNI (`vpdpwssd`; kernels/int8_dot.h): x is quantized to int16 with a
//   scale per row (2^-16 of its largest element), at every row count.
// Elsewhere (other CPUs, other types, or turned off) narrow weights are widened to fp32 and x is
// used as it is. On by default; RLCPP_DOT_INSTRUCTIONS=0 in the environment turns them off.
bool bf16_dot_products();
bool int8_dot_products();
// Turns them on or off for the process (tests, benchmarks); returns the setting it replaces.
bool use_dot_instructions(bool on);

// The SIMD target the dispatcher picks on this CPU ("AVX3", "AVX2", "NEON", ...), and every
// target this binary carries that the CPU supports, best first.
std::string dispatch_target();
std::string supported_targets();

// Tests: restrict dispatch to targets in `mask` (a Highway target bit set; 0 restores all).
void restrict_targets_for_test(int64_t mask);
// Bits of the compiled targets this CPU supports, best first (for the tests to try each).
std::vector<int64_t> supported_target_bits();
std::string target_name(int64_t bit);

}  // namespace rlcpp::kernels
