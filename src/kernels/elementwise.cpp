// Highway's dynamic dispatch, as in matmul.cpp: compiled once per SIMD target.
#include "kernels/elementwise.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "util/thread_pool.h"

#include "kernels/targets.h"
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/elementwise.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

HWY_BEFORE_NAMESPACE();
namespace rlcpp::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// 1 / sqrt(mean(x²) + eps) from the lanes' partial sums of squares (acc) and the tail past `vec`,
// summed and rounded once in double: the statistic every element of the row is scaled by.
template <class D, class V>
HWY_INLINE float rms_scale(D df, V acc, const float* HWY_RESTRICT xr, int64_t vec, int64_t dim, float eps) {
  HWY_ALIGN float lanes[hn::MaxLanes(df)];
  hn::Store(acc, df, lanes);
  double ss = 0;
  for (size_t i = 0; i < hn::Lanes(df); ++i) ss += lanes[i];
  for (int64_t i = vec; i < dim; ++i) ss += static_cast<double>(xr[i]) * xr[i];
  return static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(dim) + eps));
}

void RmsNormRows(const float* HWY_RESTRICT x, const float* HWY_RESTRICT w, int64_t r0, int64_t r1, int64_t dim,
                 float eps, float* HWY_RESTRICT out) {
  const hn::ScalableTag<float> df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const int64_t vec = dim / lanes * lanes;
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * dim;
    float* o = out + r * dim;
    auto acc = hn::Zero(df);
    for (int64_t i = 0; i < vec; i += lanes) {
      const auto v = hn::LoadU(df, xr + i);
      acc = hn::MulAdd(v, v, acc);
    }
    const float scale = rms_scale(df, acc, xr, vec, dim, eps);
    const auto vs = hn::Set(df, scale);
    for (int64_t i = 0; i < vec; i += lanes) {
      hn::StoreU(hn::Mul(hn::LoadU(df, w + i), hn::Mul(hn::LoadU(df, xr + i), vs)), df, o + i);
    }
    for (int64_t i = vec; i < dim; ++i) o[i] = w[i] * (xr[i] * scale);
  }
}

// Rows [r0, r1) of rms_norm's backward; dw (when not null) accumulates Σ g·x·scale over them.
void RmsNormBackwardRows(const float* HWY_RESTRICT x, const float* HWY_RESTRICT w, const float* HWY_RESTRICT g,
                         int64_t r0, int64_t r1, int64_t dim, float eps, float* HWY_RESTRICT dx, float* HWY_RESTRICT dw) {
  const hn::ScalableTag<float> df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const int64_t vec = dim / lanes * lanes;
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * dim;
    const float* gr = g + r * dim;
    float* o = dx + r * dim;
    auto acc_ss = hn::Zero(df), acc_dot = hn::Zero(df);
    for (int64_t i = 0; i < vec; i += lanes) {
      const auto v = hn::LoadU(df, xr + i);
      acc_ss = hn::MulAdd(v, v, acc_ss);
      acc_dot = hn::MulAdd(hn::Mul(hn::LoadU(df, gr + i), hn::LoadU(df, w + i)), v, acc_dot);
    }
    float dot = hn::GetLane(hn::SumOfLanes(df, acc_dot));
    for (int64_t i = vec; i < dim; ++i) dot += gr[i] * w[i] * xr[i];
    const float scale = rms_scale(df, acc_ss, xr, vec, dim, eps);
    const float coef = scale * scale * scale * dot / static_cast<float>(dim);
    const auto vs = hn::Set(df, scale), vc = hn::Set(df, coef);
    for (int64_t i = 0; i < vec; i += lanes) {
      const auto v = hn::LoadU(df, xr + i), gv = hn::LoadU(df, gr + i);
      hn::StoreU(hn::NegMulAdd(v, vc, hn::Mul(hn::Mul(gv, hn::LoadU(df, w + i)), vs)), df, o + i);
      if (dw != nullptr) hn::StoreU(hn::MulAdd(hn::Mul(gv, v), vs, hn::LoadU(df, dw + i)), df, dw + i);
    }
    for (int64_t i = vec; i < dim; ++i) {
      o[i] = gr[i] * w[i] * scale - xr[i] * coef;
      if (dw != nullptr) dw[i] += gr[i] * xr[i] * scale;
    }
  }
}

void SiluMulRange(const float* HWY_RESTRICT gate, const float* HWY_RESTRICT up, int64_t b, int64_t e,
                  float* HWY_RESTRICT out) {
  const hn::ScalableTag<float> df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const auto one = hn::Set(df, 1.0f);
  int64_t i = b;
  for (; i + lanes <= e; i += lanes) {
    const auto g = hn::LoadU(df, gate + i);
    const auto s = hn::Div(g, hn::Add(one, hn::Exp(df, hn::Neg(g))));
    hn::StoreU(hn::Mul(s, hn::LoadU(df, up + i)), df, out + i);
  }
  for (; i < e; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void SiluMulBackwardRange(const float* HWY_RESTRICT gate, const float* HWY_RESTRICT up, const float* HWY_RESTRICT grad,
                          int64_t b, int64_t e, float* HWY_RESTRICT dgate, float* HWY_RESTRICT dup) {
  const hn::ScalableTag<float> df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const auto one = hn::Set(df, 1.0f);
  int64_t i = b;
  for (; i + lanes <= e; i += lanes) {
    const auto g = hn::LoadU(df, gate + i), gr = hn::LoadU(df, grad + i);
    const auto sig = hn::Div(one, hn::Add(one, hn::Exp(df, hn::Neg(g))));
    hn::StoreU(hn::Mul(gr, hn::Mul(g, sig)), df, dup + i);
    const auto dsilu = hn::Mul(sig, hn::MulAdd(g, hn::Sub(one, sig), one));
    hn::StoreU(hn::Mul(hn::Mul(gr, hn::LoadU(df, up + i)), dsilu), df, dgate + i);
  }
  for (; i < e; ++i) {
    const float sig = 1.0f / (1.0f + std::exp(-gate[i]));
    dup[i] = grad[i] * (gate[i] * sig);
    dgate[i] = grad[i] * up[i] * (sig * (gate[i] * (1.0f - sig) + 1.0f));
  }
}

void AdamWRange(float* HWY_RESTRICT p, const float* HWY_RESTRICT g, float* HWY_RESTRICT m, float* HWY_RESTRICT v,
                int64_t b, int64_t e, const AdamWScalars& s) {
  const hn::ScalableTag<float> df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const auto decay = hn::Set(df, s.decay), b1 = hn::Set(df, s.beta1), c1 = hn::Set(df, s.one_minus_beta1);
  const auto b2 = hn::Set(df, s.beta2), c2 = hn::Set(df, s.one_minus_beta2), eps = hn::Set(df, s.eps);
  const auto step = hn::Set(df, -s.step_size), bias2 = hn::Set(df, s.bias2_sqrt);
  int64_t i = b;
  for (; i + lanes <= e; i += lanes) {
    const auto gv = hn::LoadU(df, g + i);
    const auto mv = hn::MulAdd(c1, gv, hn::Mul(hn::LoadU(df, m + i), b1));
    const auto vv = hn::MulAdd(hn::Mul(gv, gv), c2, hn::Mul(hn::LoadU(df, v + i), b2));
    const auto denom = hn::Add(hn::Div(hn::Sqrt(vv), bias2), eps);
    const auto pv = hn::Mul(hn::LoadU(df, p + i), decay);
    hn::StoreU(mv, df, m + i);
    hn::StoreU(vv, df, v + i);
    hn::StoreU(hn::MulAdd(step, hn::Div(mv, denom), pv), df, p + i);
  }
  for (; i < e; ++i) {
    m[i] = m[i] * s.beta1 + s.one_minus_beta1 * g[i];
    v[i] = v[i] * s.beta2 + g[i] * g[i] * s.one_minus_beta2;
    p[i] = p[i] * s.decay - s.step_size * (m[i] / (std::sqrt(v[i]) / s.bias2_sqrt + s.eps));
  }
}

// Rotary embedding over rows [r0, r1) (r = token * heads + head), halves x1 = x[:half], x2 = x[half:]:
// forward   out1 = x1·cos1 − x2·sin1,  out2 = x2·cos2 + x1·sin2;
// backward  dx1  = g1·cos1 + g2·sin2,  dx2  = g2·cos2 − g1·sin1 (the transpose of the forward).
template <bool kBackward>
HWY_INLINE void RopeRowsOf(const float* HWY_RESTRICT x, const float* HWY_RESTRICT cos, const float* HWY_RESTRICT sin,
                           int64_t r0, int64_t r1, int64_t heads, int64_t dim, float* HWY_RESTRICT out) {
  const hn::ScalableTag<float> df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const int64_t half = dim / 2, vec = half / lanes * lanes;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t t = r / heads;
    const float* c = cos + t * dim;
    const float* s = sin + t * dim;
    const float* x1 = x + r * dim;
    const float* x2 = x1 + half;
    float* o1 = out + r * dim;
    float* o2 = o1 + half;
    for (int64_t i = 0; i < vec; i += lanes) {
      const auto a = hn::LoadU(df, x1 + i), b = hn::LoadU(df, x2 + i);
      const auto c1 = hn::LoadU(df, c + i), c2 = hn::LoadU(df, c + half + i);
      const auto s1 = hn::LoadU(df, s + i), s2 = hn::LoadU(df, s + half + i);
      if constexpr (kBackward) {
        hn::StoreU(hn::MulAdd(a, c1, hn::Mul(b, s2)), df, o1 + i);
        hn::StoreU(hn::NegMulAdd(a, s1, hn::Mul(b, c2)), df, o2 + i);
      } else {
        hn::StoreU(hn::Sub(hn::Mul(a, c1), hn::Mul(b, s1)), df, o1 + i);
        hn::StoreU(hn::Add(hn::Mul(b, c2), hn::Mul(a, s2)), df, o2 + i);
      }
    }
    for (int64_t i = vec; i < half; ++i) {
      if constexpr (kBackward) {
        o1[i] = x1[i] * c[i] + x2[i] * s[half + i];
        o2[i] = x2[i] * c[half + i] - x1[i] * s[i];
      } else {
        o1[i] = x1[i] * c[i] - x2[i] * s[i];
        o2[i] = x2[i] * c[half + i] + x1[i] * s[half + i];
      }
    }
  }
}

void RopeRows(const float* HWY_RESTRICT x, const float* HWY_RESTRICT cos, const float* HWY_RESTRICT sin, int64_t r0,
              int64_t r1, int64_t heads, int64_t dim, float* HWY_RESTRICT out) {
  RopeRowsOf<false>(x, cos, sin, r0, r1, heads, dim, out);
}

void RopeBackwardRows(const float* HWY_RESTRICT g, const float* HWY_RESTRICT cos, const float* HWY_RESTRICT sin,
                      int64_t r0, int64_t r1, int64_t heads, int64_t dim, float* HWY_RESTRICT dx) {
  RopeRowsOf<true>(g, cos, sin, r0, r1, heads, dim, dx);
}

}  // namespace rlcpp::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace rlcpp::kernels {

HWY_EXPORT(AdamWRange);
HWY_EXPORT(RmsNormRows);
HWY_EXPORT(SiluMulRange);
HWY_EXPORT(RopeRows);
HWY_EXPORT(RmsNormBackwardRows);
HWY_EXPORT(SiluMulBackwardRange);
HWY_EXPORT(RopeBackwardRows);

namespace {
ThreadPool& pool_or_global(ThreadPool* pool) { return pool != nullptr ? *pool : ThreadPool::global(); }
// Elements below which a call stays on one thread (waking the pool costs more).
constexpr int64_t kMinElementsPerThread = 16384;
}  // namespace

void rms_norm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps, float* out, ThreadPool* pool) {
  pool_or_global(pool).parallel_for(
      rows, [&](int64_t b, int64_t e) { HWY_DYNAMIC_DISPATCH(RmsNormRows)(x, weight, b, e, dim, eps, out); }, 1,
      std::max<int64_t>(1, kMinElementsPerThread / std::max<int64_t>(dim, 1)));
}

void silu_mul(const float* gate, const float* up, int64_t n, float* out, ThreadPool* pool) {
  pool_or_global(pool).parallel_for(
      n, [&](int64_t b, int64_t e) { HWY_DYNAMIC_DISPATCH(SiluMulRange)(gate, up, b, e, out); }, 64,
      kMinElementsPerThread);
}

void rope(const float* x, const float* cos, const float* sin, int64_t tokens, int64_t heads, int64_t dim, float* out,
          ThreadPool* pool) {
  pool_or_global(pool).parallel_for(
      tokens * heads, [&](int64_t b, int64_t e) { HWY_DYNAMIC_DISPATCH(RopeRows)(x, cos, sin, b, e, heads, dim, out); },
      1, std::max<int64_t>(1, kMinElementsPerThread / std::max<int64_t>(dim, 1)));
}

void rms_norm_backward(const float* x, const float* weight, const float* grad, int64_t rows, int64_t dim, float eps,
                       float* dx, float* dweight, ThreadPool* pool) {
  ThreadPool& p = pool_or_global(pool);
  // Each part of the rows sums its own dweight; the parts are added at the end (a fixed order for
  // a given pool size, so a step is reproducible).
  const int64_t parts = std::clamp<int64_t>(rows * dim / kMinElementsPerThread, 1, std::min<int64_t>(p.size(), rows));
  std::vector<float> partial(dweight != nullptr ? static_cast<size_t>(parts * dim) : 0, 0.0f);
  p.parallel_for(parts, [&](int64_t b, int64_t e) {
    for (int64_t part = b; part < e; ++part) {
      HWY_DYNAMIC_DISPATCH(RmsNormBackwardRows)(x, weight, grad, rows * part / parts, rows * (part + 1) / parts, dim, eps,
                                                dx, dweight != nullptr ? partial.data() + part * dim : nullptr);
    }
  });
  if (dweight == nullptr) return;
  std::copy(partial.begin(), partial.begin() + dim, dweight);
  for (int64_t part = 1; part < parts; ++part) {
    for (int64_t i = 0; i < dim; ++i) dweight[i] += partial[static_cast<size_t>(part * dim + i)];
  }
}

void silu_mul_backward(const float* gate, const float* up, const float* grad, int64_t n, float* dgate, float* dup,
                       ThreadPool* pool) {
  pool_or_global(pool).parallel_for(
      n, [&](int64_t b, int64_t e) { HWY_DYNAMIC_DISPATCH(SiluMulBackwardRange)(gate, up, grad, b, e, dgate, dup); }, 64,
      kMinElementsPerThread);
}

void rope_backward(const float* grad, const float* cos, const float* sin, int64_t tokens, int64_t heads, int64_t dim,
                   float* dx, ThreadPool* pool) {
  pool_or_global(pool).parallel_for(
      tokens * heads,
      [&](int64_t b, int64_t e) { HWY_DYNAMIC_DISPATCH(RopeBackwardRows)(grad, cos, sin, b, e, heads, dim, dx); }, 1,
      std::max<int64_t>(1, kMinElementsPerThread / std::max<int64_t>(dim, 1)));
}

void adamw(float* p, const float* g, float* m, float* v, int64_t n, const AdamWScalars& s, ThreadPool* pool) {
  pool_or_global(pool).parallel_for(
      n, [&](int64_t b, int64_t e) { HWY_DYNAMIC_DISPATCH(AdamWRange)(p, g, m, v, b, e, s); }, 64,
      kMinElementsPerThread);
}

}  // namespace rlcpp::kernels
#endif  // HWY_ONCE
