// int8 weights times x quantized to int16, on the CPU's integer dot-product instruction (x86's
// AVX512-VNNI `vpdpwssd`: two products of int16 pairs summed into each int32 lane; the int8 codes
// are widened to int16 as they are loaded). Like kernels/bf16_dot.h this is written with
// intrinsics, compiled for the extension by attribute and called only where `cpuid` reports it.
// matmul_nt uses it for int8 weights up to kDotRows rows (decode's few sequences, where widening
// the codes to fp32 bounds the speed): each row of x gets a scale, max|x[j]| / 32767, and its
// elements the nearest multiples of it, so x is kept to 2^-16 of its largest element. The integer
// sums are moved into fp32 every 4,096 products, long before they could overflow.
#pragma once

#include <cstdint>

namespace rlcpp::kernels::int8dot {

// Whether this CPU (and the OS) runs AVX512-VNNI. False on every other architecture.
bool cpu_has();

// xq[j, k] = round(x[j, k] / xs[j]) with xs[j] = max_k |x[j, k]| / 32767 (1 for a row of zeros),
// for the n rows of x [n, in]. Only where cpu_has().
void quantize_rows(const float* x, int64_t n, int64_t in, int16_t* xq, float* xs);

// y[j, r] = scales[r] · xs[j] · Σ_k w[r, k] · xq[j, k] (+ bias[r]) for the weight rows [r0, r1) (int8
// codes, rows of `in`) and n ≤ kMaxRows rows of quantized x. Only where cpu_has().
constexpr int64_t kMaxRows = 8;
void dot_range(const int16_t* xq, const float* xs, int64_t n, int64_t in, const int8_t* w, const float* scales,
               int64_t r0, int64_t r1, const float* bias, float* y, int64_t out);

}  // namespace rlcpp::kernels::int8dot
