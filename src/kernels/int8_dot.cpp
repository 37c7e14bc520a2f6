// AVX512-VNNI dot-product tiles for int8 weights (kernels/int8_dot.h), compiled for the extension
// by attribute; on other architectures cpu_has() is false and nothing here runs.
#include "kernels/int8_dot.h"

#include <algorithm>
#include <cmath>

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

#if RLCPP_X86_VNNI

#define RLCPP_VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

namespace {

// Products of one int8 weight and one int16 input are at most 128 · 32767 in size, two per lane
// and step: 128 steps of 32 elements keep each int32 lane below 2^31 / 2.
constexpr int64_t kStep = 32;
constexpr int64_t kFlushSteps = 128;

// y[j, r] for RW weight rows and RX rows of x: each step widens 32 codes of each weight row to
// int16 and multiplies them with 32 elements of each x row, one vpdpwssd per (row, x row) pair;
// the last step's loads are masked to the row's end. Every kFlushSteps steps the int32 sums are
// added into fp32 ones.
template <int RW, int RX>
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
        _mm_prefetch(reinterpret_cast<const char*>(w + r * in + k + ahead), _MM_HINT_T0);
        wv[r] = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + r * in + k)));
      }
      RLCPP_UNROLL
      for (int j = 0; j < RX; ++j) {
        const __m512i xv = _mm512_loadu_si512(xq + j * in + k);
        RLCPP_UNROLL
        for (int r = 0; r < RW; ++r) acc[r][j] = _mm512_dpwssd_epi32(acc[r][j], wv[r], xv);
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
        for (int r = 0; r < RW; ++r) acc[r][j] = _mm512_dpwssd_epi32(acc[r][j], wv[r], xv);
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

// y[j, r] for RX ≤ kStreamRows rows of x, one weight row at a time: each row is a single stream of
// bytes, which the hardware prefetcher follows at the full memory bandwidth (on Zen 4 1.4-1.8x
// the rate of four interleaved rows fetched ahead by software, bench/kernels' lm_head). One row of
// x has two accumulators, taking alternate steps, so that its sum is not one chain of dependent
// instructions.
constexpr int kStreamRows = 2;

template <int RX>
RLCPP_VNNI_TARGET void stream_row(const int16_t* __restrict xq, const float* xs, int64_t in,
                                  const int8_t* __restrict w, float scale, const float* bias, float* __restrict y,
                                  int64_t ldy) {
  constexpr int A = RX == 1 ? 2 : 1;  // accumulators per row of x
  float sums[RX] = {};
  for (int64_t k0 = 0; k0 < in; k0 += kStep * kFlushSteps) {
    const int64_t k1 = std::min(in, k0 + kStep * kFlushSteps);
    __m512i acc[A][RX];
    RLCPP_UNROLL
    for (int a = 0; a < A; ++a) {
      RLCPP_UNROLL
      for (int j = 0; j < RX; ++j) acc[a][j] = _mm512_setzero_si512();
    }
    int64_t k = k0;
    for (; k + A * kStep <= k1; k += A * kStep) {
      RLCPP_UNROLL
      for (int a = 0; a < A; ++a) {
        const int64_t at = k + a * kStep;
        const __m512i wv = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + at)));
        RLCPP_UNROLL
        for (int j = 0; j < RX; ++j) acc[a][j] = _mm512_dpwssd_epi32(acc[a][j], wv, _mm512_loadu_si512(xq + j * in + at));
      }
    }
    for (; k < k1; k += kStep) {  // fewer than A steps, the last one masked to the row's end
      const __mmask32 mask = k + kStep <= k1 ? ~__mmask32{0} : (__mmask32{1} << (k1 - k)) - 1;
      const __m512i wv = _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(mask, w + k));
      RLCPP_UNROLL
      for (int j = 0; j < RX; ++j) {
        acc[0][j] = _mm512_dpwssd_epi32(acc[0][j], wv, _mm512_maskz_loadu_epi16(mask, xq + j * in + k));
      }
    }
    for (int j = 0; j < RX; ++j) {
      for (int a = 1; a < A; ++a) acc[0][j] = _mm512_add_epi32(acc[0][j], acc[a][j]);
      sums[j] += _mm512_reduce_add_ps(_mm512_cvtepi32_ps(acc[0][j]));
    }
  }
  for (int j = 0; j < RX; ++j) {
    const float s = sums[j] * xs[j] * scale;
    y[j * ldy] = bias != nullptr ? s + *bias : s;
  }
}

template <int RX>
RLCPP_VNNI_TARGET void dot_rows(const int16_t* xq, const float* xs, int64_t in, const int8_t* w, const float* scales,
                                int64_t r0, int64_t r1, const float* bias, float* y, int64_t out) {
  if constexpr (RX <= kStreamRows) {
    for (int64_t r = r0; r < r1; ++r) stream_row<RX>(xq, xs, in, w + r * in, scales[r], bias ? bias + r : nullptr, y + r, out);
    return;
  }
  constexpr int RW = std::max(1, std::min(4, 24 / RX));
  int64_t r = r0;
  for (; r + RW <= r1; r += RW) {
    dot_tile<RW, RX>(xq, xs, in, w + r * in, scales + r, bias ? bias + r : nullptr, y + r, out);
  }
  for (; r < r1; ++r) dot_tile<1, RX>(xq, xs, in, w + r * in, scales + r, bias ? bias + r : nullptr, y + r, out);
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

#else

void quantize_rows(const float*, int64_t, int64_t, int16_t*, float*) {
  RLCPP_CHECK(false, "int8dot::quantize_rows: this build has no AVX512-VNNI kernels");
}

void dot_range(const int16_t*, const float*, int64_t, int64_t, const int8_t*, const float*, int64_t, int64_t,
               const float*, float*, int64_t) {
  RLCPP_CHECK(false, "int8dot::dot_range: this build has no AVX512-VNNI kernels");
}

#endif

}  // namespace rlcpp::kernels::int8dot
