// Highway's dynamic dispatch: this file is compiled once per SIMD target (foreach_target.h includes
// it again for each), and HWY_DYNAMIC_DISPATCH calls the best one the CPU supports.
#include "kernels/matmul.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/bf16_dot.h"
#include "kernels/int8_dot.h"
#include "util/error.h"
#include "util/thread_pool.h"

#include "kernels/targets.h"
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/matmul.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include "kernels/simd-inl.h"
#include "kernels/unroll.h"

#ifndef RLCPP_PREFETCH_BYTES
#define RLCPP_PREFETCH_BYTES 16384
#endif

HWY_BEFORE_NAMESPACE();
namespace rlcpp::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Vector registers a tile's accumulators may take: AVX-512 and NEON have 32, AVX2 and SSE 16
// (the rest hold the weight and input vectors of one step).
constexpr int kAccumulators = (HWY_ARCH_ARM || HWY_MAX_BYTES >= 64) ? 24 : 12;
constexpr int64_t kMaxLanes = HWY_MAX_BYTES / sizeof(float);

// --- Up to kDotRows input rows: dot products along `in`, every weight read once for all rows. ---

// What the widened elements of an 8-bit weight row are multiplied by: its scale (fp8's widening
// gives the value / 256). 1 for the float types, which have no scales.
template <class TW>
HWY_INLINE float row_scale(const float* scales, int64_t r) {
  if constexpr (std::is_same_v<TW, uint8_t>) return scales[r] * (1.0f / kFp8Widened);
  if constexpr (std::is_same_v<TW, int8_t>) return scales[r];
  return 1.0f;
}

// y[j, r] = x[j] · w[r] (+ bias[r]) for RW weight rows and RX input rows: each weight vector is
// loaded once for the RX rows, each input vector once for the RW rows. scales: the rows' (8-bit
// types), applied to each sum.
template <int RW, int RX, class TW, bool kPrefetch = true>
HWY_INLINE void dot_tile(const float* HWY_RESTRICT x, int64_t in, const TW* HWY_RESTRICT w, const float* scales,
                         const float* bias, float* HWY_RESTRICT y, int64_t ldy) {
  const hn::ScalableTag<float> df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  hn::Vec<decltype(df)> acc[RW][RX];
  for (int r = 0; r < RW; ++r)
    for (int j = 0; j < RX; ++j) acc[r][j] = hn::Zero(df);
  // Weights stream from memory once: with kPrefetch, fetch each row's bytes ahead of the loads
  // (past a row's end that is the next rows', which the next tile reads).
  constexpr int64_t ahead = RLCPP_PREFETCH_BYTES / sizeof(TW);
  int64_t k = 0;
#if RLCPP_KERNELS_FP8_PAIRS
  if constexpr (std::is_same_v<TW, uint8_t> && RX == 1) {  // batch-1 decode: two vectors of fp8 a step
    for (; k + 2 * lanes <= in; k += 2 * lanes) {
      hn::Vec<decltype(df)> lo[RW], hi[RW];
      if constexpr (kPrefetch) {
        for (int r = 0; r < RW; ++r) hwy::Prefetch(w + r * in + k + ahead);
      }
      for (int r = 0; r < RW; ++r) load2_as_float(df, w + r * in + k, lo[r], hi[r]);
      const auto x0 = hn::LoadU(df, x + k), x1 = hn::LoadU(df, x + k + lanes);
      for (int r = 0; r < RW; ++r) acc[r][0] = hn::MulAdd(hi[r], x1, hn::MulAdd(lo[r], x0, acc[r][0]));
    }
  }
#endif
  for (; k + lanes <= in; k += lanes) {
    hn::Vec<decltype(df)> wv[RW];
    if constexpr (kPrefetch) {
      for (int r = 0; r < RW; ++r) hwy::Prefetch(w + r * in + k + ahead);
    }
    for (int r = 0; r < RW; ++r) wv[r] = load_as_float(df, w + r * in + k);
    for (int j = 0; j < RX; ++j) {
      const auto xv = hn::LoadU(df, x + j * in + k);
      for (int r = 0; r < RW; ++r) acc[r][j] = hn::MulAdd(wv[r], xv, acc[r][j]);
    }
  }
  for (int r = 0; r < RW; ++r) {
    for (int j = 0; j < RX; ++j) {
      float s = hn::GetLane(hn::SumOfLanes(df, acc[r][j]));
      for (int64_t t = k; t < in; ++t) s += scalar_of(w[r * in + t]) * x[j * in + t];
      s *= row_scale<TW>(scales, r);
      y[j * ldy + r] = bias != nullptr ? s + bias[r] : s;
    }
  }
}

// Up to this many input rows read one weight row at a time, with no software prefetch: each row
// is then a single stream, which the hardware prefetcher follows at the full memory bandwidth
// (decode of a few sequences is bound by the weights' bytes). On the AVX-512 EPYC the 0.5B's
// lm_head read 1.3-1.7x faster this way at 1-4 rows of fp32 or widened bf16, and batch-1 decode
// on fp8 ran 1.3x faster; from two rows the widening of 8-bit weights bounds them, and tiles
// sharing each x load among four weight rows measured faster (bench_kernels, bench_generate).
template <class TW>
constexpr int kStreamRows = sizeof(TW) == 1 ? 1 : 4;

// Weight rows [r0, r1) against all RX input rows: streamed one at a time (kStreamRows), or in
// tiles of as many weight rows as the accumulators allow (at most 4: one row's stream each), the
// last rows one at a time.
template <int RX, class TW>
void dot_rows(const float* x, int64_t in, const TW* w, const float* scales, int64_t r0, int64_t r1,
              const float* bias, float* y, int64_t out) {
  if constexpr (RX <= kStreamRows<TW>) {
    for (int64_t r = r0; r < r1; ++r) {
      dot_tile<1, RX, TW, false>(x, in, w + r * in, scales ? scales + r : nullptr, bias ? bias + r : nullptr, y + r,
                                 out);
    }
    return;
  }
  constexpr int RW = std::max(1, std::min(4, kAccumulators / RX));
  int64_t r = r0;
  for (; r + RW <= r1; r += RW) {
    dot_tile<RW, RX>(x, in, w + r * in, scales ? scales + r : nullptr, bias ? bias + r : nullptr, y + r, out);
  }
  for (; r < r1; ++r) {
    dot_tile<1, RX>(x, in, w + r * in, scales ? scales + r : nullptr, bias ? bias + r : nullptr, y + r, out);
  }
}

template <class TW>
void dot_range(const float* x, int64_t n, int64_t in, const TW* w, const float* scales, int64_t r0, int64_t r1,
               const float* bias, float* y, int64_t out) {
  switch (n) {
    case 1: dot_rows<1>(x, in, w, scales, r0, r1, bias, y, out); break;
    case 2: dot_rows<2>(x, in, w, scales, r0, r1, bias, y, out); break;
    case 3: dot_rows<3>(x, in, w, scales, r0, r1, bias, y, out); break;
    case 4: dot_rows<4>(x, in, w, scales, r0, r1, bias, y, out); break;
    case 5: dot_rows<5>(x, in, w, scales, r0, r1, bias, y, out); break;
    case 6: dot_rows<6>(x, in, w, scales, r0, r1, bias, y, out); break;
    case 7: dot_rows<7>(x, in, w, scales, r0, r1, bias, y, out); break;
    default: dot_rows<8>(x, in, w, scales, r0, r1, bias, y, out); break;
  }
}

// --- More rows: outer products over a transposed x, no horizontal sums. ---
//
// xt[k, j] = x[j, k] with rows of ldx floats (the row count padded to whole vectors). Each step of k
// broadcasts one weight of each of RW rows and multiplies it into V vectors of xt's row k: RW × V
// accumulators hold y[j, r] for V vectors of j. The weights are read once per V vectors of rows.
template <int RW, int V>
HWY_INLINE void outer_tile(const float* HWY_RESTRICT xt, int64_t ldx, int64_t in, const float* HWY_RESTRICT w,
                           int64_t ldw, const float* prefetch_end, const float* bias, int64_t cols,
                           float* HWY_RESTRICT y, int64_t ldy) {
  const hn::ScalableTag<float> df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  // The register tile: GCC keeps these arrays in registers only when every loop over them is unrolled.
  hn::Vec<decltype(df)> acc[RW][V];
  RLCPP_UNROLL
  for (int r = 0; r < RW; ++r) {
    RLCPP_UNROLL
    for (int v = 0; v < V; ++v) acc[r][v] = hn::Zero(df);
  }
  // While this tile runs, the next tile's rows (contiguous, RW·in floats) are fetched in order, RW
  // cache lines per line of k: the whole next tile by the end of this one (none past prefetch_end;
  // none at all when it is null).
  constexpr int64_t line = 64 / sizeof(float);
  const float* next = w + RW * ldw;
  for (int64_t k0 = 0; k0 < in; k0 += line) {
    if (prefetch_end != nullptr) {
      const float* p = next + k0 * RW;
      RLCPP_UNROLL
      for (int r = 0; r < RW; ++r) {
        if (p + r * line < prefetch_end) hwy::Prefetch(p + r * line);
      }
    }
    const int64_t k1 = std::min(in, k0 + line);
    for (int64_t k = k0; k < k1; ++k) {
      hn::Vec<decltype(df)> xv[V];
      RLCPP_UNROLL
      for (int v = 0; v < V; ++v) xv[v] = hn::LoadU(df, xt + k * ldx + v * lanes);
      RLCPP_UNROLL
      for (int r = 0; r < RW; ++r) {
        const auto b = hn::Set(df, w[r * ldw + k]);
        RLCPP_UNROLL
        for (int v = 0; v < V; ++v) acc[r][v] = hn::MulAdd(b, xv[v], acc[r][v]);
      }
    }
  }
  HWY_ALIGN float buf[RW * V * kMaxLanes];
  RLCPP_UNROLL
  for (int r = 0; r < RW; ++r) {
    RLCPP_UNROLL
    for (int v = 0; v < V; ++v) hn::Store(acc[r][v], df, buf + (r * V + v) * lanes);
  }
  for (int r = 0; r < RW; ++r) {
    const float b = bias != nullptr ? bias[r] : 0.0f;
    for (int64_t j = 0; j < cols; ++j) y[j * ldy + r] = buf[r * V * lanes + j] + b;
  }
}

// outer_tile with V vectors, or fewer where fewer are left before xt's ldx columns end.
template <int RW, int V>
HWY_INLINE void outer_tile_within(int64_t vectors, const float* xt, int64_t ldx, int64_t in, const float* w,
                                  int64_t ldw, const float* prefetch_end, const float* bias, int64_t cols, float* y,
                                  int64_t ldy) {
  if constexpr (V > 1) {
    if (vectors < V) return outer_tile_within<RW, V - 1>(vectors, xt, ldx, in, w, ldw, prefetch_end, bias, cols, y, ldy);
  }
  outer_tile<RW, V>(xt, ldx, in, w, ldw, prefetch_end, bias, cols, y, ldy);
}

// RW weight rows (f32, rows of ldw) against every input row, V vectors of them at a time (the
// last ones in as many vectors as are left).
template <int RW, int V>
void outer_rows(const float* xt, int64_t ldx, int64_t n, int64_t in, const float* w, int64_t ldw,
                const float* prefetch_end, const float* bias, float* y, int64_t out) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(hn::ScalableTag<float>()));
  for (int64_t j = 0; j < n; j += V * lanes) {
    outer_tile_within<RW, V>((ldx - j) / lanes, xt + j, ldx, in, w, ldw, prefetch_end, bias,
                             std::min<int64_t>(V * lanes, n - j), y + j * out, out);
  }
}

// Up to kMaxVectors vectors of input rows per tile, RW weight rows as the accumulators allow;
// the rows short of a whole tile go four, then one at a time.
constexpr int kMaxVectors = kAccumulators >= 24 ? 4 : 3;

template <int V>
void outer_block(const float* xt, int64_t ldx, int64_t n, int64_t in, const float* w, int64_t ldw, int64_t rows,
                 bool prefetch, const float* bias, float* y, int64_t out) {
  // At most 12 weight rows: each row's pointer takes a general register (x86-64 has 16), and past
  // that GCC reloads them from the stack on every step (24 rows of one vector ran at half speed).
  constexpr int RW = std::min(kAccumulators / V, 12);
  const float* end = prefetch ? w + rows * ldw : nullptr;
  int64_t r = 0;
  for (; r + RW <= rows; r += RW)
    outer_rows<RW, V>(xt, ldx, n, in, w + r * ldw, ldw, end, bias ? bias + r : nullptr, y + r, out);
  for (; r + 4 <= rows; r += 4)
    outer_rows<4, V>(xt, ldx, n, in, w + r * ldw, ldw, end, bias ? bias + r : nullptr, y + r, out);
  for (; r < rows; ++r)
    outer_rows<1, V>(xt, ldx, n, in, w + r * ldw, ldw, end, bias ? bias + r : nullptr, y + r, out);
}

void outer_any(int vectors, const float* xt, int64_t ldx, int64_t n, int64_t in, const float* w, int64_t ldw,
               int64_t rows, bool prefetch, const float* bias, float* y, int64_t out) {
  switch (std::min(vectors, kMaxVectors)) {
    case 1: outer_block<1>(xt, ldx, n, in, w, ldw, rows, prefetch, bias, y, out); break;
    case 2: outer_block<2>(xt, ldx, n, in, w, ldw, rows, prefetch, bias, y, out); break;
    case 3: outer_block<3>(xt, ldx, n, in, w, ldw, rows, prefetch, bias, y, out); break;
    default: outer_block<kMaxVectors>(xt, ldx, n, in, w, ldw, rows, prefetch, bias, y, out); break;
  }
}

// Weight rows [r0, r1) against the transposed input. fp32 weights are read in place; narrower ones
// are widened (and scaled) a block of rows at a time into a thread-local fp32 buffer first (they
// are then read once per vectors of input rows from cache, and widened once).
template <class TW>
void outer_range(const float* xt, int64_t ldx, int64_t n, int64_t in, const TW* w, const float* scales, int64_t r0,
                 int64_t r1, const float* bias, float* y, int64_t out) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(hn::ScalableTag<float>()));
  const int vectors = static_cast<int>(std::min<int64_t>((n + lanes - 1) / lanes, kMaxVectors));
  const float* b = bias != nullptr ? bias + r0 : nullptr;
  if constexpr (std::is_same_v<TW, float>) {
    outer_any(vectors, xt, ldx, n, in, w + r0 * in, in, r1 - r0, true, b, y + r0, out);
  } else {
    const hn::ScalableTag<float> df;
    constexpr int64_t block = 24;
    thread_local std::vector<float> wide;
    wide.resize(static_cast<size_t>(block * in));
    for (int64_t r = r0; r < r1; r += block) {
      const int64_t rows = std::min(block, r1 - r);
      for (int64_t i = 0; i < rows; ++i) {
        const TW* src = w + (r + i) * in;
        float* dst = wide.data() + i * in;
        int64_t k = 0;
        if constexpr (std::is_same_v<TW, int8_t> || std::is_same_v<TW, uint8_t>) {
          const float scale = row_scale<TW>(scales, r + i);
          const auto sv = hn::Set(df, scale);
          for (; k + lanes <= in; k += lanes) hn::StoreU(hn::Mul(load_as_float(df, src + k), sv), df, dst + k);
          for (; k < in; ++k) dst[k] = scalar_of(src[k]) * scale;
        } else {
          for (; k + lanes <= in; k += lanes) hn::StoreU(load_as_float(df, src + k), df, dst + k);
          for (; k < in; ++k) dst[k] = scalar_of(src[k]);
        }
      }
      outer_any(vectors, xt, ldx, n, in, wide.data(), in, rows, false, b ? b + (r - r0) : nullptr, y + r, out);
    }
  }
}

template <class TW>
void rows_range(const float* x, const float* xt, int64_t ldx, int64_t n, int64_t in, const TW* w, const float* scales,
                int64_t r0, int64_t r1, const float* bias, float* y, int64_t out) {
  if (xt == nullptr) {
    dot_range(x, n, in, w, scales, r0, r1, bias, y, out);
  } else {
    outer_range(xt, ldx, n, in, w, scales, r0, r1, bias, y, out);
  }
}

void MatmulRows(const float* x, const float* xt, int64_t ldx, int64_t n, int64_t in, const void* w, int type,
                const float* scales, int64_t r0, int64_t r1, const float* bias, float* y, int64_t out) {
  switch (static_cast<WeightType>(type)) {
    case WeightType::f32:
      rows_range(x, xt, ldx, n, in, static_cast<const float*>(w), nullptr, r0, r1, bias, y, out);
      break;
    case WeightType::bf16:
      rows_range(x, xt, ldx, n, in, static_cast<const hwy::bfloat16_t*>(w), nullptr, r0, r1, bias, y, out);
      break;
    case WeightType::f16:
      rows_range(x, xt, ldx, n, in, static_cast<const hwy::float16_t*>(w), nullptr, r0, r1, bias, y, out);
      break;
    case WeightType::i8:
      rows_range(x, xt, ldx, n, in, static_cast<const int8_t*>(w), scales, r0, r1, bias, y, out);
      break;
    case WeightType::fp8:
      rows_range(x, xt, ldx, n, in, static_cast<const uint8_t*>(w), scales, r0, r1, bias, y, out);
      break;
  }
}

int64_t VectorLanes() { return static_cast<int64_t>(hn::Lanes(hn::ScalableTag<float>())); }

int64_t ThisTarget() { return HWY_TARGET; }

}  // namespace rlcpp::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace rlcpp::kernels {

HWY_EXPORT(MatmulRows);
HWY_EXPORT(ThisTarget);
HWY_EXPORT(VectorLanes);

namespace {

// xt[k, j] = x[j, k] for k in [k0, k1), rows of ldx floats; the columns past n (padding to whole
// vectors) are zero.
void transpose_rows(const float* x, int64_t n, int64_t in, float* xt, int64_t ldx, int64_t k0, int64_t k1) {
  constexpr int64_t block = 16;
  for (int64_t kb = k0; kb < k1; kb += block) {
    const int64_t ke = std::min(k1, kb + block);
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t k = kb; k < ke; ++k) xt[k * ldx + j] = x[j * in + k];
    }
    for (int64_t k = kb; k < ke; ++k) std::fill(xt + k * ldx + n, xt + (k + 1) * ldx, 0.0f);
  }
}

// Whether narrow weights take the CPU's dot-product instructions: decided on first use (the
// environment), changed by use_dot_instructions.
std::atomic<bool>& dot_instructions_on() {
  static std::atomic<bool> on{[] {
    const char* env = std::getenv("RLCPP_DOT_INSTRUCTIONS");
    return !(env != nullptr && std::string(env) == "0");
  }()};
  return on;
}

// y = x · wᵀ for bf16 w on the bf16 dot-product tiles: x rounded once (and for the outer-product
// tiles packed in pairs of k, on every thread by ranges of pairs), then ranges of weight rows as
// in matmul_nt's fp32 tiles.
void bf16_dot_matmul(const float* x, int64_t n, int64_t in, const uint16_t* w, int64_t out, const float* bias,
                     float* y, ThreadPool& pool) {
  static_assert(kDotRows == bf16dot::kMaxDotRows);
  thread_local std::vector<uint16_t> packed;
  if (n <= kDotRows) {
    if (packed.size() < static_cast<size_t>(n * in)) packed.resize(static_cast<size_t>(n * in));
    bf16dot::pack_rows(x, n * in, packed.data());
    const uint16_t* xb = packed.data();
    pool.parallel_for(
        out, [&](int64_t r0, int64_t r1) { bf16dot::dot_range(xb, n, in, w, r0, r1, bias, y, out); }, 4, 64);
    return;
  }
  const int64_t ldx = (n + bf16dot::kLanes - 1) / bf16dot::kLanes * bf16dot::kLanes;
  const int64_t pairs = (in + 1) / 2;
  if (packed.size() < static_cast<size_t>(pairs * ldx * 2)) packed.resize(static_cast<size_t>(pairs * ldx * 2));
  uint16_t* xp = packed.data();
  pool.parallel_for(pairs, [&](int64_t p0, int64_t p1) { bf16dot::pack_pairs(x, n, in, xp, ldx, p0, p1); }, 8, 128);
  pool.parallel_for(
      out, [&](int64_t r0, int64_t r1) { bf16dot::outer_range(xp, ldx, n, in, w, r0, r1, bias, y, out); }, 24, 48);
}

// y = x · wᵀ for int8 w on the integer dot-product tiles: x quantized once (on every thread by
// ranges of rows, and for the outer-product tiles packed in pairs of k by ranges of pairs), then
// ranges of weight rows as in matmul_nt's fp32 tiles.
void int8_dot_matmul(const float* x, int64_t n, int64_t in, const int8_t* w, const float* scales, int64_t out,
                     const float* bias, float* y, ThreadPool& pool) {
  static_assert(kDotRows == int8dot::kMaxRows);
  thread_local std::vector<int16_t> quantized, packed;
  thread_local std::vector<float> row_scales;
  if (quantized.size() < static_cast<size_t>(n * in)) quantized.resize(static_cast<size_t>(n * in));
  row_scales.resize(static_cast<size_t>(n));
  int16_t* xq = quantized.data();
  float* xs = row_scales.data();
  pool.parallel_for(n, [&](int64_t j0, int64_t j1) { int8dot::quantize_rows(x + j0 * in, j1 - j0, in, xq + j0 * in, xs + j0); },
                    1, std::max<int64_t>(1, 65536 / std::max<int64_t>(in, 1)));
  if (n <= kDotRows) {
    pool.parallel_for(
        out, [&](int64_t r0, int64_t r1) { int8dot::dot_range(xq, xs, n, in, w, scales, r0, r1, bias, y, out); }, 4, 64);
    return;
  }
  const int64_t ldx = (n + int8dot::kLanes - 1) / int8dot::kLanes * int8dot::kLanes;
  const int64_t pairs = (in + 1) / 2;
  if (packed.size() < static_cast<size_t>(pairs * ldx * 2)) packed.resize(static_cast<size_t>(pairs * ldx * 2));
  int16_t* xp = packed.data();
  pool.parallel_for(pairs, [&](int64_t p0, int64_t p1) { int8dot::pack_pairs(xq, n, in, xp, ldx, p0, p1); }, 8, 128);
  pool.parallel_for(
      out, [&](int64_t r0, int64_t r1) { int8dot::outer_range(xp, ldx, xs, n, in, w, scales, r0, r1, bias, y, out); },
      24, 48);
}

}  // namespace

bool bf16_dot_products() {
  static const bool cpu = bf16dot::cpu_has();
  return cpu && dot_instructions_on().load();
}

bool int8_dot_products() {
  static const bool cpu = int8dot::cpu_has();
  return cpu && dot_instructions_on().load();
}

bool use_dot_instructions(bool on) { return dot_instructions_on().exchange(on); }

void matmul_nt(const float* x, int64_t n, int64_t in, StoredWeight w, int64_t out, const float* bias, float* y,
               ThreadPool* pool) {
  if (n <= 0 || out <= 0) return;
  const bool eight_bit = w.type == WeightType::i8 || w.type == WeightType::fp8;
  RLCPP_CHECK(eight_bit == (w.scales != nullptr), "matmul_nt: 8-bit weights need their row scales, and only they have them");
  if (pool == nullptr) pool = &ThreadPool::global();
  // Dispatch chooses its target on the first call: make that call here, not racing in the workers.
  (void)HWY_DYNAMIC_DISPATCH(ThisTarget)();
  if (w.type == WeightType::bf16 && bf16_dot_products()) {
    bf16_dot_matmul(x, n, in, static_cast<const uint16_t*>(w.data), out, bias, y, *pool);
    return;
  }
  if (w.type == WeightType::i8 && int8_dot_products()) {
    int8_dot_matmul(x, n, in, static_cast<const int8_t*>(w.data), w.scales, out, bias, y, *pool);
    return;
  }
  const int t = static_cast<int>(w.type);
  if (n <= kDotRows) {
    // Ranges of whole 4-row tiles, and at least 64 weight rows a thread (tiny layers stay on one).
    pool->parallel_for(
        out, [&](int64_t r0, int64_t r1) {
          HWY_DYNAMIC_DISPATCH(MatmulRows)(x, nullptr, 0, n, in, w.data, t, w.scales, r0, r1, bias, y, out);
        }, 4, 64);
    return;
  }
  // x transposed once (on every thread, by ranges of k) for the outer-product tiles. The buffer is
  // the calling thread's and grows to the largest product: steady-state decode allocates nothing.
  const int64_t lanes = HWY_DYNAMIC_DISPATCH(VectorLanes)();
  const int64_t ldx = (n + lanes - 1) / lanes * lanes;
  thread_local std::vector<float> transposed;
  if (transposed.size() < static_cast<size_t>(ldx * in)) transposed.resize(static_cast<size_t>(ldx * in));
  float* xt = transposed.data();
  pool->parallel_for(in, [&](int64_t k0, int64_t k1) { transpose_rows(x, n, in, xt, ldx, k0, k1); }, 16, 256);
  // Whole tiles of every width (6, 8, 12 and 24 rows) per range.
  pool->parallel_for(
      out, [&](int64_t r0, int64_t r1) {
        HWY_DYNAMIC_DISPATCH(MatmulRows)(x, xt, ldx, n, in, w.data, t, w.scales, r0, r1, bias, y, out);
      }, 24, 48);
}

std::string target_name(int64_t bit) { return hwy::TargetName(bit); }

std::string dispatch_target() { return target_name(HWY_DYNAMIC_DISPATCH(ThisTarget)()); }

std::vector<int64_t> supported_target_bits() {
  std::vector<int64_t> out;
  for (int64_t targets = hwy::SupportedTargets() & HWY_TARGETS; targets != 0; targets &= targets - 1) {
    out.push_back(targets & -targets);  // lowest bit first: Highway's best target first
  }
  return out;
}

std::string supported_targets() {
  std::string out;
  for (int64_t bit : supported_target_bits()) out += (out.empty() ? "" : " ") + target_name(bit);
  return out;
}

void restrict_targets_for_test(int64_t mask) { hwy::SetSupportedTargetsForTest(mask); }

}  // namespace rlcpp::kernels
#endif  // HWY_ONCE
