// Highway's dynamic dispatch: this file is compiled once per SIMD target (foreach_target.h includes
// it again for each), and HWY_DYNAMIC_DISPATCH calls the best one the CPU supports.
#include "kernels/matmul.h"

#include <algorithm>
#include <cstring>

#include "util/thread_pool.h"

#include "kernels/targets.h"
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/matmul.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include "kernels/simd-inl.h"

#ifndef RLCPP_PREFETCH_BYTES
#define RLCPP_PREFETCH_BYTES 4096
#endif

HWY_BEFORE_NAMESPACE();
namespace rlcpp::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// y[j, r] = x[j] · w[r] (+ bias[r]) for RW weight rows and RX input rows: each weight vector is
// loaded once for the RX rows, each input vector once for the RW rows.
template <int RW, int RX, class TW>
HWY_INLINE void tile(const float* HWY_RESTRICT x, int64_t in, const TW* HWY_RESTRICT w, const float* bias,
                     float* HWY_RESTRICT y, int64_t ldy) {
  const hn::ScalableTag<float> df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  hn::Vec<decltype(df)> acc[RW][RX];
  for (int r = 0; r < RW; ++r)
    for (int j = 0; j < RX; ++j) acc[r][j] = hn::Zero(df);
  // Weights stream from memory once: fetch each row's bytes ahead of the loads (past a row's end
  // that is the next rows', which the next tile reads).
  constexpr int64_t ahead = RLCPP_PREFETCH_BYTES / sizeof(TW);
  int64_t k = 0;
  for (; k + lanes <= in; k += lanes) {
    hn::Vec<decltype(df)> wv[RW];
    for (int r = 0; r < RW; ++r) hwy::Prefetch(w + r * in + k + ahead);
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
      y[j * ldy + r] = bias != nullptr ? s + bias[r] : s;
    }
  }
}

// Weight rows [r0, r1) against every input row.
template <int RW, class TW>
HWY_INLINE void rows_of(const float* x, int64_t n, int64_t in, const TW* w, int64_t r, const float* bias, float* y,
                        int64_t out) {
  const float* b = bias != nullptr ? bias + r : nullptr;
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) tile<RW, 4>(x + j * in, in, w + r * in, b, y + j * out + r, out);
  switch (n - j) {
    case 3: tile<RW, 3>(x + j * in, in, w + r * in, b, y + j * out + r, out); break;
    case 2: tile<RW, 2>(x + j * in, in, w + r * in, b, y + j * out + r, out); break;
    case 1: tile<RW, 1>(x + j * in, in, w + r * in, b, y + j * out + r, out); break;
    default: break;
  }
}

template <class TW>
void rows_range(const float* x, int64_t n, int64_t in, const TW* w, int64_t r0, int64_t r1, const float* bias,
                float* y, int64_t out) {
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) rows_of<4>(x, n, in, w, r, bias, y, out);
  for (; r < r1; ++r) rows_of<1>(x, n, in, w, r, bias, y, out);
}

void MatmulRows(const float* x, int64_t n, int64_t in, const void* w, int type, int64_t r0, int64_t r1,
                const float* bias, float* y, int64_t out) {
  switch (static_cast<WeightType>(type)) {
    case WeightType::f32: rows_range(x, n, in, static_cast<const float*>(w), r0, r1, bias, y, out); break;
    case WeightType::bf16: rows_range(x, n, in, static_cast<const hwy::bfloat16_t*>(w), r0, r1, bias, y, out); break;
    case WeightType::f16: rows_range(x, n, in, static_cast<const hwy::float16_t*>(w), r0, r1, bias, y, out); break;
  }
}

int64_t ThisTarget() { return HWY_TARGET; }

}  // namespace rlcpp::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace rlcpp::kernels {

HWY_EXPORT(MatmulRows);
HWY_EXPORT(ThisTarget);

void matmul_nt(const float* x, int64_t n, int64_t in, const void* w, WeightType type, int64_t out,
               const float* bias, float* y, ThreadPool* pool) {
  if (n <= 0 || out <= 0) return;
  if (pool == nullptr) pool = &ThreadPool::global();
  // Dispatch chooses its target on the first call: make that call here, not racing in the workers.
  (void)HWY_DYNAMIC_DISPATCH(ThisTarget)();
  const int t = static_cast<int>(type);
  // Ranges of whole 4-row tiles, and at least 64 weight rows a thread (tiny layers stay on one).
  pool->parallel_for(
      out, [&](int64_t r0, int64_t r1) { HWY_DYNAMIC_DISPATCH(MatmulRows)(x, n, in, w, t, r0, r1, bias, y, out); }, 4, 64);
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
