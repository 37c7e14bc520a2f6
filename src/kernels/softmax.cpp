// Highway's dynamic dispatch, as in matmul.cpp: compiled once per SIMD target.
#include "kernels/softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "util/thread_pool.h"

#include "kernels/targets.h"
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/softmax.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

HWY_BEFORE_NAMESPACE();
namespace rlcpp::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

float MaxOf(const float* HWY_RESTRICT x, int64_t n) {
  const hn::ScalableTag<float> df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  auto m = hn::Set(df, -std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) m = hn::Max(m, hn::LoadU(df, x + i));
  float best = hn::GetLane(hn::MaxOfLanes(df, m));
  for (; i < n; ++i) best = std::max(best, x[i]);
  return best;
}

double ExpSum(const float* HWY_RESTRICT x, int64_t n, float scale, float shift, float* HWY_RESTRICT out) {
  const hn::ScalableTag<float> df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const auto vs = hn::Set(df, scale), vshift = hn::Set(df, shift);
  double total = 0;
  int64_t i = 0;
  // Partial sums in float over blocks of 1024 elements, added up in double.
  while (i + lanes <= n) {
    auto acc = hn::Zero(df);
    const int64_t end = std::min(n, i + 1024) / lanes * lanes;
    for (; i < end; i += lanes) {
      const auto e = hn::Exp(df, hn::MulSub(hn::LoadU(df, x + i), vs, vshift));
      if (out != nullptr) hn::StoreU(e, df, out + i);
      acc = hn::Add(acc, e);
    }
    total += hn::GetLane(hn::SumOfLanes(df, acc));
  }
  for (; i < n; ++i) {
    const float e = std::exp(x[i] * scale - shift);
    if (out != nullptr) out[i] = e;
    total += e;
  }
  return total;
}

// x[i] = coef · exp(x[i] − shift), in place.
void ExpScaleInPlace(float* HWY_RESTRICT x, int64_t n, float shift, float coef) {
  const hn::ScalableTag<float> df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const auto vshift = hn::Set(df, shift), vcoef = hn::Set(df, coef);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    hn::StoreU(hn::Mul(vcoef, hn::Exp(df, hn::Sub(hn::LoadU(df, x + i), vshift))), df, x + i);
  }
  for (; i < n; ++i) x[i] = coef * std::exp(x[i] - shift);
}

// x[i] *= coef.
void ScaleInPlace(float* HWY_RESTRICT x, int64_t n, float coef) {
  const hn::ScalableTag<float> df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const auto vcoef = hn::Set(df, coef);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(hn::Mul(vcoef, hn::LoadU(df, x + i)), df, x + i);
  for (; i < n; ++i) x[i] *= coef;
}

// dp[i] = scale · p[i] · (dp[i] − delta).
void SoftmaxGrad(const float* HWY_RESTRICT p, float* HWY_RESTRICT dp, int64_t n, float delta, float scale) {
  const hn::ScalableTag<float> df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const auto vdelta = hn::Set(df, delta), vscale = hn::Set(df, scale);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto d = hn::Sub(hn::LoadU(df, dp + i), vdelta);
    hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(df, p + i), vscale), d), df, dp + i);
  }
  for (; i < n; ++i) dp[i] = p[i] * scale * (dp[i] - delta);
}

}  // namespace rlcpp::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace rlcpp::kernels {

HWY_EXPORT(MaxOf);
HWY_EXPORT(ExpSum);
HWY_EXPORT(ExpScaleInPlace);
HWY_EXPORT(SoftmaxGrad);
HWY_EXPORT(ScaleInPlace);

namespace {

ThreadPool& pool_or_global(ThreadPool* pool) { return pool != nullptr ? *pool : ThreadPool::global(); }

// The keys row r may read lie in [0, end); those masked out below end get -inf (exp gives 0),
// those at or past end are left for the caller. Returns end.
int64_t mask_causal_row(float* row, const CausalRows& c, int64_t r) {
  const int64_t position = c.first + r % c.block;
  const bool* mask = c.key_mask + (r / c.per_batch) * c.mask_stride;
  for (int64_t j = 0; j < position; ++j) {
    if (!mask[j]) row[j] = -std::numeric_limits<float>::infinity();
  }
  return position + 1;
}

// x[end, n) = 0: keys after the query's position.
void zero_tail(float* row, int64_t end, int64_t n) { std::fill(row + end, row + n, 0.0f); }

}  // namespace

float max_of(const float* x, int64_t n, int64_t* argmax) {
  const float m = HWY_DYNAMIC_DISPATCH(MaxOf)(x, n);
  if (argmax != nullptr) {
    int64_t i = 0;
    while (i < n - 1 && !(x[i] == m)) ++i;
    *argmax = i;
  }
  return m;
}

double exp_sum(const float* x, int64_t n, float scale, float shift, float* out) {
  return HWY_DYNAMIC_DISPATCH(ExpSum)(x, n, scale, shift, out);
}

void row_logsumexp(const float* x, int64_t rows, int64_t n, float* lse, ThreadPool* pool) {
  pool_or_global(pool).parallel_for(rows, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* row = x + r * n;
      const float m = HWY_DYNAMIC_DISPATCH(MaxOf)(row, n);
      lse[r] = static_cast<float>(m + std::log(HWY_DYNAMIC_DISPATCH(ExpSum)(row, n, 1.0f, m, nullptr)));
    }
  });
}

void exp_scale_rows(float* x, int64_t rows, int64_t n, const float* shift, const float* coef, ThreadPool* pool) {
  pool_or_global(pool).parallel_for(rows, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) HWY_DYNAMIC_DISPATCH(ExpScaleInPlace)(x + r * n, n, shift[r], coef[r]);
  });
}

void causal_softmax_rows(float* x, const CausalRows& c, float* lse, ThreadPool* pool) {
  pool_or_global(pool).parallel_for(c.rows, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      float* row = x + r * c.n;
      const int64_t end = mask_causal_row(row, c, r);
      const float shift = HWY_DYNAMIC_DISPATCH(MaxOf)(row, end) * c.scale;  // the own key keeps it finite
      const double sum = HWY_DYNAMIC_DISPATCH(ExpSum)(row, end, c.scale, shift, row);
      lse[r] = static_cast<float>(shift + std::log(sum));
      HWY_DYNAMIC_DISPATCH(ScaleInPlace)(row, end, static_cast<float>(1.0 / sum));
      zero_tail(row, end, c.n);
    }
  });
}

void causal_probs_rows(float* x, const CausalRows& c, const float* lse, ThreadPool* pool) {
  pool_or_global(pool).parallel_for(c.rows, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      float* row = x + r * c.n;
      const int64_t end = mask_causal_row(row, c, r);
      HWY_DYNAMIC_DISPATCH(ExpSum)(row, end, c.scale, lse[r], row);
      zero_tail(row, end, c.n);
    }
  });
}

void softmax_grad_rows(const float* p, float* dp, const float* delta, int64_t rows, int64_t n, float scale,
                       ThreadPool* pool) {
  pool_or_global(pool).parallel_for(rows, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) HWY_DYNAMIC_DISPATCH(SoftmaxGrad)(p + r * n, dp + r * n, n, delta[r], scale);
  });
}

}  // namespace rlcpp::kernels
#endif  // HWY_ONCE
