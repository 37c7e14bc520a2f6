// AVX512-VNNI dot-product and outer-product tiles for int8 weights (kernels/int8_dot.h), compiled
// for the extension by attribute; on other architectures cpu_has() is false and only the packing
// of x runs here.
#include "kernels/int8_dot.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/unroll.h"
#include "util/error.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define RLCPP_X86_VNNI 1
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's own widening intrinsics start from an "undefined" vector it then reports as uninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#else
#define RLCPP_X86_VNNI 0
#endif

namespace rlcpp::kernels::int8dot {

bool cpu_has() {
#if RLCPP_X86_VNNI
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

void pack_pairs(const int16_t* xq, int64_t n, int64_t in, int16_t* xp, int64_t ldx, int64_t p0, int64_t p1) {
  const int64_t pairs = (in + 1) / 2;
  for (int64_t j0 = 0; j0 < ldx; j0 += kPanel) {
    const int64_t width = std::min(kPanel, ldx - j0);
    int16_t* panel = xp + j0 * pairs * 2;
    const int64_t cols = std::clamp<int64_t>(n - j0, 0, width);
    for (int64_t p = p0; p < p1; ++p) {
      int16_t* row = panel + p * width * 2;
      const int64_t k = 2 * p;
      for (int64_t c = 0; c < cols; ++c) {
        const int16_t* xj = xq + (j0 + c) * in;
        row[2 * c] = xj[k];
        row[2 * c + 1] = k + 1 < in ? xj[k + 1] : int16_t{0};
      }
      std::fill(row + 2 * cols, row + 2 * width, int16_t{0});
    }
  }
}

#if RLCPP_X86_VNNI

#define RLCPP_VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

namespace {

// acc + the pairwise int16 products of a and b (vpdpwssd). GCC 12's intrinsic keeps its
// accumulator in the first 16 vector registers, so a tile of more accumulators than that copies
// each in and out of them around every instruction (and to the stack); the instruction itself
// takes any of the 32.
RLCPP_VNNI_TARGET __attribute__((always_inline)) inline __m512i dpwssd(__m512i acc, __m512i a, __m512i b) {
#if defined(__GNUC__) && !defined(__clang__)
  asm("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
#else
  return _mm512_dpwssd_epi32(acc, a, b);
#endif
}

// Products of one int8 weight and one int16 input are at most 128 · 32767 in size, two per lane
// and step: 128 steps of 32 elements keep each int32 lane below 2^31 / 2.
constexpr int64_t kStep = 32;
constexpr int64_t kFlushSteps = 128;

// y[j, r] for RW weight rows and RX rows of x: each step widens 32 codes of each weight row to
// int16 and multiplies them with 32 elements of each x row, one vpdpwssd per (row, x row) pair;
// the last step's loads are masked to the row's end. Every kFlushSteps steps the int32 sums are
// added into fp32 ones.
template <int RW, int RX, bool kPrefetch = true>
RLCPP_VNNI_TARGET void dot_tile(const int16_t* __restrict xq, const float* xs, int64_t in, const int8_t* __restrict w,
                                const float* scales, const float* bias, float* __restrict y, int64_t ldy) {
  float sums[RW][RX] = {};
  __m512i acc[RW][RX];
  constexpr int64_t ahead = 16384;  // bytes of each weight row fetched ahead, as the fp32 dot tiles
  for (int64_t k0 = 0; k0 < in; k0 += kStep * kFlushSteps) {
    RLCPP_UNROLL
    for (int r = 0; r < RW; ++r) {
      RLCPP_UNROLL
      for (int j = 0; j < RX; ++j) acc[r][j] = _mm512_setzero_si512();
    }
    const int64_t k1 = std::min(in, k0 + kStep * kFlushSteps);
    int64_t k = k0;
    for (; k + kStep <= k1; k += kStep) {
      __m512i wv[RW];
      RLCPP_UNROLL
      for (int r = 0; r < RW; ++r) {
        if constexpr (kPrefetch) _mm_prefetch(reinterpret_cast<const char*>(w + r * in + k + ahead), _MM_HINT_T0);
        wv[r] = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + r * in + k)));
      }
      RLCPP_UNROLL
      for (int j = 0; j < RX; ++j) {
        const __m512i xv = _mm512_loadu_si512(xq + j * in + k);
        RLCPP_UNROLL
        for (int r = 0; r < RW; ++r) acc[r][j] = dpwssd(acc[r][j], wv[r], xv);
      }
    }
    if (k < k1) {  // the last elements of each row, masked loads
      const __mmask32 mask = (__mmask32{1} << (k1 - k)) - 1;
      __m512i wv[RW];
      RLCPP_UNROLL
      for (int r = 0; r < RW; ++r) wv[r] = _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(mask, w + r * in + k));
      RLCPP_UNROLL
      for (int j = 0; j < RX; ++j) {
        const __m512i xv = _mm512_maskz_loadu_epi16(mask, xq + j * in + k);
        RLCPP_UNROLL
        for (int r = 0; r < RW; ++r) acc[r][j] = dpwssd(acc[r][j], wv[r], xv);
      }
    }
    for (int r = 0; r < RW; ++r) {
      for (int j = 0; j < RX; ++j) sums[r][j] += _mm512_reduce_add_ps(_mm512_cvtepi32_ps(acc[r][j]));
    }
  }
  for (int r = 0; r < RW; ++r) {
    for (int j = 0; j < RX; ++j) {
      const float s = sums[r][j] * xs[j] * scales[r];
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
RLCPP_VNNI_TARGET void dot_rows(const int16_t* xq, const float* xs, int64_t in, const int8_t* w, const float* scales,
                                int64_t r0, int64_t r1, const float* bias, float* y, int64_t out) {
  if constexpr (RX <= kStreamRows) {
    for (int64_t r = r0; r < r1; ++r) {
      dot_tile<1, RX, false>(xq, xs, in, w + r * in, scales + r, bias ? bias + r : nullptr, y + r, out);
    }
    return;
  }
  constexpr int RW = std::max(1, std::min(4, 24 / RX));
  int64_t r = r0;
  for (; r + RW <= r1; r += RW) {
    dot_tile<RW, RX>(xq, xs, in, w + r * in, scales + r, bias ? bias + r : nullptr, y + r, out);
  }
  for (; r < r1; ++r) dot_tile<1, RX>(xq, xs, in, w + r * in, scales + r, bias ? bias + r : nullptr, y + r, out);
}

// --- More rows: outer products over x packed in pairs of k (pack_pairs). ---

// The accumulators of one outer-product tile: 24 of the 32 vector registers (the rest hold x's V
// vectors and the broadcast weight pair).
constexpr int kAccumulators = 24;
// Pairs of k summed in int32 before the sums move into fp32: one pair's two products are at most
// 2 · 128 · 32767 < 2^23 in size, so 128 pairs stay below 2^30.
constexpr int64_t kBlockPairs = 128;

// RW weight rows against V vectors of a panel's columns (16 each): for every block of pairs of
// k, the RW rows' codes are widened to int16 once (into the stack), then each pair of each row is
// broadcast (one 32-bit load) against V vectors of packed x, RW·V dot products of two products per
// lane. The int32 sums move into fp32 ones (on the stack) after each block.
// One pair of k: V loads of packed x (`x`: the pair's row of the panel), RW broadcast weight pairs
// (`pairs`: the first row's, rows 2·kBlockPairs apart) and RW·V dot products.
template <int RW, int V>
RLCPP_VNNI_TARGET __attribute__((always_inline)) inline void pair_step(__m512i (&acc)[RW][V], const int16_t* x,
                                                                       const int16_t* pairs) {
  __m512i xv[V];
  RLCPP_UNROLL
  for (int v = 0; v < V; ++v) xv[v] = _mm512_loadu_si512(x + v * kLanes * 2);
  RLCPP_UNROLL
  for (int r = 0; r < RW; ++r) {
    int32_t pair;
    std::memcpy(&pair, pairs + r * 2 * kBlockPairs, sizeof(pair));
    const __m512i b = _mm512_set1_epi32(pair);
    RLCPP_UNROLL
    for (int v = 0; v < V; ++v) acc[r][v] = dpwssd(acc[r][v], b, xv[v]);
  }
}

template <int RW, int V>
RLCPP_VNNI_TARGET void outer_tile(const int16_t* __restrict xp, int64_t width, const float* xs, int64_t in,
                                  const int8_t* __restrict w, const float* scales, const float* bias, int64_t cols,
                                  float* __restrict y, int64_t ldy) {
  alignas(64) int16_t widened[RW][2 * kBlockPairs];
  alignas(64) float sums[RW][V * kLanes] = {};
  __m512i acc[RW][V];
  const int64_t pairs = (in + 1) / 2;
  for (int64_t p0 = 0; p0 < pairs; p0 += kBlockPairs) {
    const int64_t p1 = std::min(pairs, p0 + kBlockPairs);
    const int64_t k0 = 2 * p0, k1 = std::min(in, 2 * p1);
    for (int r = 0; r < RW; ++r) {  // the last load is masked to the row's end: the odd pair's second code is 0
      for (int64_t k = k0; k < k1; k += kStep) {
        const __mmask32 mask = k + kStep <= k1 ? ~__mmask32{0} : (__mmask32{1} << (k1 - k)) - 1;
        _mm512_store_si512(widened[r] + (k - k0), _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(mask, w + r * in + k)));
      }
    }
    RLCPP_UNROLL
    for (int r = 0; r < RW; ++r) {
      RLCPP_UNROLL
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_si512();
    }
    for (int64_t p = p0; p < p1; ++p) pair_step<RW, V>(acc, xp + p * width * 2, widened[0] + 2 * (p - p0));
    RLCPP_UNROLL
    for (int r = 0; r < RW; ++r) {
      RLCPP_UNROLL
      for (int v = 0; v < V; ++v) {
        float* s = sums[r] + v * kLanes;
        _mm512_store_ps(s, _mm512_add_ps(_mm512_load_ps(s), _mm512_cvtepi32_ps(acc[r][v])));
      }
    }
  }
  for (int r = 0; r < RW; ++r) {
    const float b = bias != nullptr ? bias[r] : 0.0f;
    for (int64_t j = 0; j < cols; ++j) y[j * ldy + r] = sums[r][j] * xs[j] * scales[r] + b;
  }
}

// outer_tile with V vectors of columns, or fewer where a narrower last panel has fewer.
template <int RW, int V>
RLCPP_VNNI_TARGET inline void outer_tile_within(int64_t vectors, const int16_t* xp, int64_t width, const float* xs,
                                                int64_t in, const int8_t* w, const float* scales, const float* bias,
                                                int64_t cols, float* y, int64_t ldy) {
  if constexpr (V > 1) {
    if (vectors < V) return outer_tile_within<RW, V - 1>(vectors, xp, width, xs, in, w, scales, bias, cols, y, ldy);
  }
  outer_tile<RW, V>(xp, width, xs, in, w, scales, bias, cols, y, ldy);
}

// RW weight rows against every column, a panel at a time (the rows' codes are read from cache
// after the first panel).
template <int RW, int V>
RLCPP_VNNI_TARGET void outer_rows(const int16_t* xp, int64_t ldx, const float* xs, int64_t n, int64_t in,
                                  const int8_t* w, const float* scales, const float* bias, float* y, int64_t out) {
  const int64_t pairs = (in + 1) / 2;
  for (int64_t j = 0; j < n; j += V * kLanes) {
    const int64_t width = std::min(kPanel, ldx - j);
    outer_tile_within<RW, V>(width / kLanes, xp + j * pairs * 2, width, xs + j, in, w, scales, bias,
                             std::min<int64_t>(V * kLanes, n - j), y + j * out, out);
  }
}

// Tiles of RW rows (at most 12, as the bf16 tiles), then four, then one at a time.
template <int V>
RLCPP_VNNI_TARGET void outer_block(const int16_t* xp, int64_t ldx, const float* xs, int64_t n, int64_t in,
                                   const int8_t* w, const float* scales, int64_t count, const float* bias, float* y,
                                   int64_t out) {
  constexpr int RW = std::min(kAccumulators / V, 12);
  int64_t r = 0;
  auto at = [&](int64_t row) { return bias != nullptr ? bias + row : nullptr; };
  for (; r + RW <= count; r += RW) outer_rows<RW, V>(xp, ldx, xs, n, in, w + r * in, scales + r, at(r), y + r, out);
  for (; r + 4 <= count; r += 4) outer_rows<4, V>(xp, ldx, xs, n, in, w + r * in, scales + r, at(r), y + r, out);
  for (; r < count; ++r) outer_rows<1, V>(xp, ldx, xs, n, in, w + r * in, scales + r, at(r), y + r, out);
}

}  // namespace

RLCPP_VNNI_TARGET void quantize_rows(const float* x, int64_t n, int64_t in, int16_t* xq, float* xs) {
  for (int64_t j = 0; j < n; ++j) {
    const float* row = x + j * in;
    int64_t k = 0;
    __m512 top = _mm512_setzero_ps();
    for (; k + 16 <= in; k += 16) top = _mm512_max_ps(top, _mm512_abs_ps(_mm512_loadu_ps(row + k)));
    float largest = _mm512_reduce_max_ps(top);
    for (; k < in; ++k) largest = std::max(largest, std::fabs(row[k]));
    xs[j] = largest > 0 ? largest / 32767.0f : 1.0f;
    const float inverse = 1.0f / xs[j];
    const __m512 inv = _mm512_set1_ps(inverse);
    int16_t* out = xq + j * in;
    for (k = 0; k + 16 <= in; k += 16) {  // nearest, ties to even (the default rounding); saturated to int16
      const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(row + k), inv));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k), _mm512_cvtsepi32_epi16(q));
    }
    for (; k < in; ++k) out[k] = static_cast<int16_t>(std::clamp(std::nearbyint(row[k] * inverse), -32767.0f, 32767.0f));
  }
}

void dot_range(const int16_t* xq, const float* xs, int64_t n, int64_t in, const int8_t* w, const float* scales,
               int64_t r0, int64_t r1, const float* bias, float* y, int64_t out) {
  RLCPP_CHECK(cpu_has(), "int8dot::dot_range: this CPU has no AVX512-VNNI");
  switch (n) {
    case 1: dot_rows<1>(xq, xs, in, w, scales, r0, r1, bias, y, out); break;
    case 2: dot_rows<2>(xq, xs, in, w, scales, r0, r1, bias, y, out); break;
    case 3: dot_rows<3>(xq, xs, in, w, scales, r0, r1, bias, y, out); break;
    case 4: dot_rows<4>(xq, xs, in, w, scales, r0, r1, bias, y, out); break;
    case 5: dot_rows<5>(xq, xs, in, w, scales, r0, r1, bias, y, out); break;
    case 6: dot_rows<6>(xq, xs, in, w, scales, r0, r1, bias, y, out); break;
    case 7: dot_rows<7>(xq, xs, in, w, scales, r0, r1, bias, y, out); break;
    default:
      RLCPP_CHECK(n == kMaxRows, "int8dot::dot_range: at most {} rows", kMaxRows);
      dot_rows<8>(xq, xs, in, w, scales, r0, r1, bias, y, out);
      break;
  }
}

void outer_range(const int16_t* xp, int64_t ldx, const float* xs, int64_t n, int64_t in, const int8_t* w,
                 const float* scales, int64_t r0, int64_t r1, const float* bias, float* y, int64_t out) {
  RLCPP_CHECK(cpu_has(), "int8dot::outer_range: this CPU has no AVX512-VNNI");
  const int64_t vectors = std::min<int64_t>((n + kLanes - 1) / kLanes, 4);
  const float* b = bias != nullptr ? bias + r0 : nullptr;
  const int8_t* wr = w + r0 * in;
  switch (vectors) {
    case 1: outer_block<1>(xp, ldx, xs, n, in, wr, scales + r0, r1 - r0, b, y + r0, out); break;
    case 2: outer_block<2>(xp, ldx, xs, n, in, wr, scales + r0, r1 - r0, b, y + r0, out); break;
    case 3: outer_block<3>(xp, ldx, xs, n, in, wr, scales + r0, r1 - r0, b, y + r0, out); break;
    default: outer_block<4>(xp, ldx, xs, n, in, wr, scales + r0, r1 - r0, b, y + r0, out); break;
  }
}

#else

void quantize_rows(const float*, int64_t, int64_t, int16_t*, float*) {
  RLCPP_CHECK(false, "int8dot::quantize_rows: this build has no AVX512-VNNI kernels");
}

void dot_range(const int16_t*, const float*, int64_t, int64_t, const int8_t*, const float*, int64_t, int64_t,
               const float*, float*, int64_t) {
  RLCPP_CHECK(false, "int8dot::dot_range: this build has no AVX512-VNNI kernels");
}

void outer_range(const int16_t*, int64_t, const float*, int64_t, int64_t, const int8_t*, const float*, int64_t, int64_t,
                 const float*, float*, int64_t) {
  RLCPP_CHECK(false, "int8dot::outer_range: this build has no AVX512-VNNI kernels");
}

#endif

}  // namespace rlcpp::kernels::int8dot
