// bf16 weights times bf16 activations on the CPU's own bf16 dot-product instruction (x86's
// AVX512-BF16 `vdpbf16ps`: two products of bf16 pairs summed into each fp32 lane, twice the
// multiplies of an fp32 FMA). Highway 1.0 has no such operation, so this is the one kernel written
// with intrinsics, in functions compiled for that extension and called only where `cpuid` says the
// CPU has it. matmul_nt uses it for bf16 weights at any row count, in the same two shapes of tile
// as its fp32 ones (dot products along `in` up to kDotRows rows, outer products past them): x is
// rounded to bf16 (to nearest even) and every sum is kept in fp32. On CPUs without the extension
// bf16 weights are widened to fp32.
#pragma once

#include <cstdint>

namespace rlcpp::kernels::bf16dot {

// Whether this CPU (and the OS) runs AVX512-BF16. False on every other architecture.
bool cpu_has();

// The most rows dot_range takes (kernels::kDotRows).
constexpr int64_t kMaxDotRows = 8;

// xb[i] = bf16(x[i]) for i < count: x's rows for dot_range.
void pack_rows(const float* x, int64_t count, uint16_t* xb);

// y[j, r] = Σ_k bf16(x[j, k]) · w[r, k] (+ bias[r]) for the weight rows [r0, r1) and n ≤ kMaxDotRows
// rows of x, rounded by pack_rows (xb: [n, in]). Only where cpu_has().
void dot_range(const uint16_t* xb, int64_t n, int64_t in, const uint16_t* w, int64_t r0, int64_t r1,
               const float* bias, float* y, int64_t out);

// The fp32 lanes of a 512-bit vector, and the columns of x (4 vectors) a tile covers at most.
constexpr int64_t kLanes = 16;
constexpr int64_t kPanel = 4 * kLanes;

// x [n, in] rounded to bf16 and laid out in pairs of k for the tiles, in panels of kPanel columns
// (the last one narrower): with P = ⌈in/2⌉ pairs and the panel of column j starting at column
// j0 = j - j mod kPanel, of width w = min(kPanel, ldx - j0), xp[j0·P·2 + (p·w + j - j0)·2 + e] =
// bf16(x[j, 2p + e]). A tile reads its panel in one stream. Writes the pairs p in [p0, p1); columns
// in [n, ldx) are zero (ldx: n rounded up to kLanes), and so is the second element of the last
// pair when `in` is odd.
void pack_pairs(const float* x, int64_t n, int64_t in, uint16_t* xp, int64_t ldx, int64_t p0, int64_t p1);

// y[j, r] = Σ_k bf16(x[j, k]) · w[r, k] (+ bias[r]) for the weight rows [r0, r1) (bf16 bits, rows of
// `in`) and every j < n, from the packed x (pack_pairs over every pair). y has rows of `out`. Only
// where cpu_has().
void outer_range(const uint16_t* xp, int64_t ldx, int64_t n, int64_t in, const uint16_t* w, int64_t r0, int64_t r1,
                 const float* bias, float* y, int64_t out);

}  // namespace rlcpp::kernels::bf16dot
