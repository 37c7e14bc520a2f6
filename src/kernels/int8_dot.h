// int8 weights times x quantized to int16, on the CPU's integer dot-product instruction (x86's
// AVX512-VNNI `vpdpwssd`: two products of int16 pairs summed into each int32 lane; the int8 codes
// are widened to int16 as they are loaded). Like kernels/bf16_dot.h this is written with
// intrinsics, compiled for the extension by attribute and called only where `cpuid` reports it.
// matmul_nt uses it for int8 weights at any row count, in the same two shapes of tile as its fp32
// ones (dot products along `in` up to kDotRows rows, outer products past them): each row of x
// gets a scale, max|x[j]| / 32767, and its elements the nearest multiples of it, so x is kept to
// 2^-16 of its largest element. The integer sums are moved into fp32 every 256 products (outer
// products) or 4,096 (dot products), long before they could overflow.
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

// The int32 lanes of a 512-bit vector (each holds a pair of int16), and the columns of x (4
// vectors) an outer-product tile covers at most.
constexpr int64_t kLanes = 16;
constexpr int64_t kPanel = 4 * kLanes;

// The quantized x [n, in] (quantize_rows) laid out in pairs of k for the outer-product tiles, in
// panels of kPanel columns (the last one narrower), as bf16dot::pack_pairs lays out bf16: with
// P = ⌈in/2⌉ pairs and the panel of column j starting at j0 = j - j mod kPanel, of width
// w = min(kPanel, ldx - j0), xp[j0·P·2 + (p·w + j - j0)·2 + e] = xq[j, 2p + e]. Writes the pairs p
// in [p0, p1); columns in [n, ldx) are zero (ldx: n rounded up to kLanes), and so is the second
// element of the last pair when `in` is odd.
void pack_pairs(const int16_t* xq, int64_t n, int64_t in, int16_t* xp, int64_t ldx, int64_t p0, int64_t p1);

// y[j, r] = scales[r] · xs[j] · Σ_k w[r, k] · xq[j, k] (+ bias[r]) for the weight rows [r0, r1) and
// every j < n, from the packed x (pack_pairs over every pair). y has rows of `out`. Only where
// cpu_has().
void outer_range(const int16_t* xp, int64_t ldx, const float* xs, int64_t n, int64_t in, const int8_t* w,
                 const float* scales, int64_t r0, int64_t r1, const float* bias, float* y, int64_t out);

}  // namespace rlcpp::kernels::int8dot
