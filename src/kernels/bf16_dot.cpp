// AVX512-BF16 dot-product and outer-product tiles for bf16 weights (kernels/bf16_dot.h). The functions that use
// the extension are compiled for it by attribute, so the rest of the binary keeps the build's
// baseline and this file builds with any x86-64 compiler flags; on other architectures only the
// scalar packing is here and cpu_has() is false.
#include "kernels/bf16_dot.h"

#include <algorithm>
#include <cstring>

#include "kernels/half.h"
#include "kernels/unroll.h"
#include "util/error.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define RLCPP_X86_BF16 1
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's own reduction intrinsics start from an "undefined" vector it then reports as uninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#else
#define RLCPP_X86_BF16 0
#endif

namespace rlcpp::kernels::bf16dot {

bool cpu_has() {
#if RLCPP_X86_BF16
  __builtin_cpu_init();
  // The compiler's checks include the OS's saving of the 512-bit state (XGETBV).
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

void pack_rows(const float* x, int64_t count, uint16_t* xb) {
  for (int64_t i = 0; i < count; ++i) xb[i] = bf16_bits_nearest(x[i]);
}

void pack_pairs(const float* x, int64_t n, int64_t in, uint16_t* xp, int64_t ldx, int64_t p0, int64_t p1) {
  const int64_t pairs = (in + 1) / 2;
  for (int64_t j0 = 0; j0 < ldx; j0 += kPanel) {
    const int64_t width = std::min(kPanel, ldx - j0);
    uint16_t* panel = xp + j0 * pairs * 2;
    for (int64_t p = p0; p < p1; ++p) {
      uint16_t* row = panel + p * width * 2;
      const int64_t k = 2 * p;
      const int64_t cols = std::clamp<int64_t>(n - j0, 0, width);
      for (int64_t c = 0; c < cols; ++c) {
        const float* xj = x + (j0 + c) * in;
        row[2 * c] = bf16_bits_nearest(xj[k]);
        row[2 * c + 1] = k + 1 < in ? bf16_bits_nearest(xj[k + 1]) : 0;
      }
      std::fill(row + 2 * cols, row + 2 * width, uint16_t{0});
    }
  }
}

#if RLCPP_X86_BF16

#define RLCPP_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

namespace {

// The accumulators of one tile: 24 of the 32 vector registers (the rest hold x's V vectors and
// the broadcast weight pair).
constexpr int kAccumulators = 24;

// One pair of k, p, in a panel of `width` columns: V loads of packed x, RW broadcast weight pairs (w[r, 2p], w[r, 2p + 1]) and
// RW·V dot products. kOddEnd: the pair past an odd row's end, whose second weight is taken as zero
// (x's is zero there too) rather than read from the next row.
template <int RW, int V, bool kOddEnd>
RLCPP_BF16_TARGET __attribute__((always_inline)) inline void pair_step(__m512 (&acc)[RW][V], const uint16_t* xp,
                                                                       int64_t width, int64_t p, const uint16_t* w,
                                                                       int64_t in) {
  __m512i xv[V];
  RLCPP_UNROLL
  for (int v = 0; v < V; ++v) xv[v] = _mm512_loadu_si512(xp + (p * width + v * kLanes) * 2);
  RLCPP_UNROLL
  for (int r = 0; r < RW; ++r) {
    uint32_t pair = w[r * in + 2 * p];
    if constexpr (!kOddEnd) std::memcpy(&pair, w + r * in + 2 * p, 4);
    const __m512 b = _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int32_t>(pair)));
    RLCPP_UNROLL
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], (__m512bh)b, (__m512bh)xv[v]);
  }
}

// RW weight rows against V vectors of x's columns (16 each): for every pair of k, V loads of
// packed x, RW broadcast weight pairs and RW·V dot products, each two multiplies per lane. Like the
// fp32 tiles (kernels/matmul.cpp), the next tile's rows are fetched while this one runs.
template <int RW, int V>
RLCPP_BF16_TARGET void tile(const uint16_t* __restrict xp, int64_t width, int64_t in, const uint16_t* __restrict w,
                            const uint16_t* prefetch_end, const float* bias, int64_t cols, float* __restrict y,
                            int64_t ldy) {
  __m512 acc[RW][V];
  RLCPP_UNROLL
  for (int r = 0; r < RW; ++r) {
    RLCPP_UNROLL
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  const int64_t pairs = in / 2;  // whole pairs; an odd row's last weight is a pair of its own below
  constexpr int64_t line = 64 / sizeof(uint16_t);  // weights per cache line
  const uint16_t* next = w + RW * in;
  for (int64_t p0 = 0; p0 < pairs; p0 += line / 2) {
    const uint16_t* ahead = next + p0 * 2 * RW;
    RLCPP_UNROLL
    for (int r = 0; r < RW; ++r) {
      if (ahead + r * line < prefetch_end) _mm_prefetch(reinterpret_cast<const char*>(ahead + r * line), _MM_HINT_T0);
    }
    const int64_t p1 = std::min(pairs, p0 + line / 2);
    for (int64_t p = p0; p < p1; ++p) pair_step<RW, V, false>(acc, xp, width, p, w, in);
  }
  if (in % 2 == 1) pair_step<RW, V, true>(acc, xp, width, pairs, w, in);
  alignas(64) float buf[RW * V * kLanes];
  RLCPP_UNROLL
  for (int r = 0; r < RW; ++r) {
    RLCPP_UNROLL
    for (int v = 0; v < V; ++v) _mm512_store_ps(buf + (r * V + v) * kLanes, acc[r][v]);
  }
  for (int r = 0; r < RW; ++r) {
    const float b = bias != nullptr ? bias[r] : 0.0f;
    for (int64_t j = 0; j < cols; ++j) y[j * ldy + r] = buf[r * V * kLanes + j] + b;
  }
}

// tile with V vectors of columns, or fewer where a narrower last panel has fewer.
template <int RW, int V>
RLCPP_BF16_TARGET inline void tile_within(int64_t vectors, const uint16_t* xp, int64_t width, int64_t in,
                                          const uint16_t* w, const uint16_t* prefetch_end, const float* bias,
                                          int64_t cols, float* y, int64_t ldy) {
  if constexpr (V > 1) {
    if (vectors < V) return tile_within<RW, V - 1>(vectors, xp, width, in, w, prefetch_end, bias, cols, y, ldy);
  }
  tile<RW, V>(xp, width, in, w, prefetch_end, bias, cols, y, ldy);
}

// RW weight rows against every column, a panel at a time (V vectors of columns are a whole panel,
// or the only one; the weight tile is read from cache after the first).
template <int RW, int V>
RLCPP_BF16_TARGET void rows(const uint16_t* xp, int64_t ldx, int64_t n, int64_t in, const uint16_t* w,
                            const uint16_t* prefetch_end, const float* bias, float* y, int64_t out) {
  const int64_t pairs = (in + 1) / 2;
  for (int64_t j = 0; j < n; j += V * kLanes) {
    const int64_t width = std::min(kPanel, ldx - j);
    tile_within<RW, V>(width / kLanes, xp + j * pairs * 2, width, in, w, prefetch_end, bias,
                       std::min<int64_t>(V * kLanes, n - j), y + j * out, out);
  }
}

// Tiles of RW rows (at most 12: one general register per row's pointer, as in the fp32 tiles),
// then four, then one at a time.
template <int V>
RLCPP_BF16_TARGET void block(const uint16_t* xp, int64_t ldx, int64_t n, int64_t in, const uint16_t* w, int64_t count,
                             const float* bias, float* y, int64_t out) {
  constexpr int RW = std::min(kAccumulators / V, 12);
  const uint16_t* end = w + count * in;
  int64_t r = 0;
  for (; r + RW <= count; r += RW) rows<RW, V>(xp, ldx, n, in, w + r * in, end, bias ? bias + r : nullptr, y + r, out);
  for (; r + 4 <= count; r += 4) rows<4, V>(xp, ldx, n, in, w + r * in, end, bias ? bias + r : nullptr, y + r, out);
  for (; r < count; ++r) rows<1, V>(xp, ldx, n, in, w + r * in, end, bias ? bias + r : nullptr, y + r, out);
}

// --- Up to kDotRows rows: dot products along `in`, x's rows rounded to bf16 (pack_rows). ---

// y[j, r] for RW weight rows and RX rows of x: each step loads 32 weights of each row and 32 of
// each x row, one dot product per (row, x row) pair (16 lanes of two products); the last step's
// loads are masked to the row's end. Horizontal sums at the end.
template <int RW, int RX, bool kPrefetch = true>
RLCPP_BF16_TARGET void dot_tile(const uint16_t* __restrict xb, int64_t in, const uint16_t* __restrict w,
                                const float* bias, float* __restrict y, int64_t ldy) {
  __m512 acc[RW][RX];
  RLCPP_UNROLL
  for (int r = 0; r < RW; ++r) {
    RLCPP_UNROLL
    for (int j = 0; j < RX; ++j) acc[r][j] = _mm512_setzero_ps();
  }
  constexpr int64_t step = 2 * kLanes;
  constexpr int64_t ahead = 16384 / sizeof(uint16_t);  // as the fp32 dot tiles (RLCPP_PREFETCH_BYTES)
  int64_t k = 0;
  for (; k + step <= in; k += step) {
    __m512i wv[RW];
    RLCPP_UNROLL
    for (int r = 0; r < RW; ++r) {
      if constexpr (kPrefetch) _mm_prefetch(reinterpret_cast<const char*>(w + r * in + k + ahead), _MM_HINT_T0);
      wv[r] = _mm512_loadu_si512(w + r * in + k);
    }
    RLCPP_UNROLL
    for (int j = 0; j < RX; ++j) {
      const __m512i xv = _mm512_loadu_si512(xb + j * in + k);
      RLCPP_UNROLL
      for (int r = 0; r < RW; ++r) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], (__m512bh)wv[r], (__m512bh)xv);
    }
  }
  if (k < in) {  // the last weights of each row, masked loads
    const __mmask32 mask = (__mmask32{1} << (in - k)) - 1;
    __m512i wv[RW];
    RLCPP_UNROLL
    for (int r = 0; r < RW; ++r) wv[r] = _mm512_maskz_loadu_epi16(mask, w + r * in + k);
    RLCPP_UNROLL
    for (int j = 0; j < RX; ++j) {
      const __m512i xv = _mm512_maskz_loadu_epi16(mask, xb + j * in + k);
      RLCPP_UNROLL
      for (int r = 0; r < RW; ++r) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], (__m512bh)wv[r], (__m512bh)xv);
    }
  }
  for (int r = 0; r < RW; ++r) {
    for (int j = 0; j < RX; ++j) {
      const float s = _mm512_reduce_add_ps(acc[r][j]);
      y[j * ldy + r] = bias != nullptr ? s + bias[r] : s;
    }
  }
}

// Up to this many rows of x read one weight row at a time, with no software prefetch: each row is
// then a single stream of bytes, which the hardware prefetcher follows at the full memory
// bandwidth (on Zen 4, 1.4-1.8x the rate of four interleaved rows fetched ahead by software:
// bench_kernels' lm_head). With more rows the tiles sharing each x load among rows measured faster.
constexpr int kStreamRows = 2;

template <int RX>
RLCPP_BF16_TARGET void dot_rows(const uint16_t* xb, int64_t in, const uint16_t* w, int64_t r0, int64_t r1,
                                const float* bias, float* y, int64_t out) {
  if constexpr (RX <= kStreamRows) {
    for (int64_t r = r0; r < r1; ++r) dot_tile<1, RX, false>(xb, in, w + r * in, bias ? bias + r : nullptr, y + r, out);
    return;
  }
  constexpr int RW = std::max(1, std::min(4, kAccumulators / RX));
  int64_t r = r0;
  for (; r + RW <= r1; r += RW) dot_tile<RW, RX>(xb, in, w + r * in, bias ? bias + r : nullptr, y + r, out);
  for (; r < r1; ++r) dot_tile<1, RX>(xb, in, w + r * in, bias ? bias + r : nullptr, y + r, out);
}

}  // namespace

void dot_range(const uint16_t* xb, int64_t n, int64_t in, const uint16_t* w, int64_t r0, int64_t r1, const float* bias,
               float* y, int64_t out) {
  RLCPP_CHECK(cpu_has(), "bf16dot::dot_range: this CPU has no AVX512-BF16");
  switch (n) {
    case 1: dot_rows<1>(xb, in, w, r0, r1, bias, y, out); break;
    case 2: dot_rows<2>(xb, in, w, r0, r1, bias, y, out); break;
    case 3: dot_rows<3>(xb, in, w, r0, r1, bias, y, out); break;
    case 4: dot_rows<4>(xb, in, w, r0, r1, bias, y, out); break;
    case 5: dot_rows<5>(xb, in, w, r0, r1, bias, y, out); break;
    case 6: dot_rows<6>(xb, in, w, r0, r1, bias, y, out); break;
    case 7: dot_rows<7>(xb, in, w, r0, r1, bias, y, out); break;
    default:
      RLCPP_CHECK(n == kMaxDotRows, "bf16dot::dot_range: at most 8 rows");
      dot_rows<8>(xb, in, w, r0, r1, bias, y, out);
      break;
  }
}

void outer_range(const uint16_t* xp, int64_t ldx, int64_t n, int64_t in, const uint16_t* w, int64_t r0, int64_t r1,
                 const float* bias, float* y, int64_t out) {
  RLCPP_CHECK(cpu_has(), "bf16dot::outer_range: this CPU has no AVX512-BF16");
  const int64_t vectors = std::min<int64_t>((n + kLanes - 1) / kLanes, 4);
  const float* b = bias != nullptr ? bias + r0 : nullptr;
  const uint16_t* wr = w + r0 * in;
  switch (vectors) {
    case 1: block<1>(xp, ldx, n, in, wr, r1 - r0, b, y + r0, out); break;
    case 2: block<2>(xp, ldx, n, in, wr, r1 - r0, b, y + r0, out); break;
    case 3: block<3>(xp, ldx, n, in, wr, r1 - r0, b, y + r0, out); break;
    default: block<4>(xp, ldx, n, in, wr, r1 - r0, b, y + r0, out); break;
  }
}

#else

void dot_range(const uint16_t*, int64_t, int64_t, const uint16_t*, int64_t, int64_t, const float*, float*, int64_t) {
  RLCPP_CHECK(false, "bf16dot::dot_range: this build has no AVX512-BF16 kernels");
}

void outer_range(const uint16_t*, int64_t, int64_t, int64_t, const uint16_t*, int64_t, int64_t, const float*, float*,
                 int64_t) {
  RLCPP_CHECK(false, "bf16dot::outer_range: this build has no AVX512-BF16 kernels");
}

#endif

}  // namespace rlcpp::kernels::bf16dot
