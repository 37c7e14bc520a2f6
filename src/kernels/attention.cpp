// Highway's dynamic dispatch, as in matmul.cpp: compiled once per SIMD target.
#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "util/error.h"
#include "util/thread_pool.h"

#include "kernels/targets.h"
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include "kernels/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace rlcpp::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Query heads handled together per pass over the keys (a KV head's group is split into these).
constexpr int kMaxGroup = 8;

// Attention of G query heads (q: G rows of `dim`, stride `q_stride`) over keys 0..n_keys-1 of one KV
// head; out: G rows of `dim`, stride `out_stride`. scores: scratch of G * n_keys floats.
template <int G, class TK>
HWY_INLINE void attend_group(const float* HWY_RESTRICT q, int64_t q_stride, const TK* k, const TK* v,
                             int64_t kv_stride, const int32_t* blocks, int64_t block_size, int64_t n_keys, int64_t dim,
                             float scale, float* HWY_RESTRICT scores, float* HWY_RESTRICT out, int64_t out_stride) {
  const hn::ScalableTag<float> df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const int64_t vec_dim = dim / lanes * lanes;
  auto row_of = [&](int64_t p) { return (static_cast<int64_t>(blocks[p / block_size]) * block_size + p % block_size) * kv_stride; };
  // Scores, and each head's maximum.
  float max[G];
  for (int g = 0; g < G; ++g) max[g] = -std::numeric_limits<float>::infinity();
  for (int64_t p = 0; p < n_keys; ++p) {
    const TK* kp = k + row_of(p);
    hn::Vec<decltype(df)> acc[G];
    for (int g = 0; g < G; ++g) acc[g] = hn::Zero(df);
    for (int64_t c = 0; c < vec_dim; c += lanes) {
      const auto kv = load_as_float(df, kp + c);
      for (int g = 0; g < G; ++g) acc[g] = hn::MulAdd(hn::LoadU(df, q + g * q_stride + c), kv, acc[g]);
    }
    for (int g = 0; g < G; ++g) {
      float s = hn::GetLane(hn::SumOfLanes(df, acc[g]));
      for (int64_t c = vec_dim; c < dim; ++c) s += q[g * q_stride + c] * scalar_of(kp[c]);
      s *= scale;
      scores[g * n_keys + p] = s;
      max[g] = std::max(max[g], s);
    }
  }
  // Probabilities (unnormalised) and their sums.
  float inv_sum[G];
  const int64_t vec_keys = n_keys / lanes * lanes;
  for (int g = 0; g < G; ++g) {
    float* s = scores + g * n_keys;
    const auto m = hn::Set(df, max[g]);
    auto sum_v = hn::Zero(df);
    for (int64_t p = 0; p < vec_keys; p += lanes) {
      const auto e = hn::Exp(df, hn::Sub(hn::LoadU(df, s + p), m));
      hn::StoreU(e, df, s + p);
      sum_v = hn::Add(sum_v, e);
    }
    float sum = hn::GetLane(hn::SumOfLanes(df, sum_v));
    for (int64_t p = vec_keys; p < n_keys; ++p) {
      s[p] = std::exp(s[p] - max[g]);
      sum += s[p];
    }
    inv_sum[g] = 1.0f / sum;
  }
  // Weighted sum of the values, a `lanes`-wide column slice of every head at a time.
  for (int64_t c = 0; c < vec_dim; c += lanes) {
    hn::Vec<decltype(df)> acc[G];
    for (int g = 0; g < G; ++g) acc[g] = hn::Zero(df);
    for (int64_t p = 0; p < n_keys; ++p) {
      const auto vv = load_as_float(df, v + row_of(p) + c);
      for (int g = 0; g < G; ++g) acc[g] = hn::MulAdd(hn::Set(df, scores[g * n_keys + p]), vv, acc[g]);
    }
    for (int g = 0; g < G; ++g) hn::StoreU(hn::Mul(acc[g], hn::Set(df, inv_sum[g])), df, out + g * out_stride + c);
  }
  for (int64_t c = vec_dim; c < dim; ++c) {
    float acc[G] = {};
    for (int64_t p = 0; p < n_keys; ++p) {
      const float vc = scalar_of(v[row_of(p) + c]);
      for (int g = 0; g < G; ++g) acc[g] += scores[g * n_keys + p] * vc;
    }
    for (int g = 0; g < G; ++g) out[g * out_stride + c] = acc[g] * inv_sum[g];
  }
}

template <class TK>
void attend_units(const float* q, const PagedQueries& queries, const PagedKv& kv, int64_t n_heads, int64_t n_kv_heads,
                  int64_t dim, float scale, float* out, int64_t first, int64_t stride) {
  static thread_local std::vector<float> scores;
  const int64_t group = n_heads / n_kv_heads;
  const auto* k = static_cast<const TK*>(kv.k);
  const auto* v = static_cast<const TK*>(kv.v);
  const int64_t kv_stride = n_kv_heads * dim;
  const int64_t n_units = queries.n_tokens * n_kv_heads;
  for (int64_t u = first; u < n_units; u += stride) {
    const int64_t t = u / n_kv_heads, h = u % n_kv_heads;
    const int64_t n_keys = static_cast<int64_t>(queries.pos[t]) + 1;
    const int32_t* blocks = queries.blocks + queries.table[t];
    if (static_cast<int64_t>(scores.size()) < kMaxGroup * n_keys) scores.resize(static_cast<size_t>(kMaxGroup * n_keys));
    for (int64_t g0 = 0; g0 < group; g0 += kMaxGroup) {
      const int64_t head = h * group + g0;
      const float* qh = q + (t * n_heads + head) * dim;
      float* oh = out + (t * n_heads + head) * dim;
      const TK* kh = k + h * dim;
      const TK* vh = v + h * dim;
      switch (std::min<int64_t>(kMaxGroup, group - g0)) {
#define RLCPP_GROUP_CASE(G)                                                                                         \
  case G:                                                                                                           \
    attend_group<G>(qh, dim, kh, vh, kv_stride, blocks, kv.block_size, n_keys, dim, scale, scores.data(), oh, dim); \
    break;
        RLCPP_GROUP_CASE(1)
        RLCPP_GROUP_CASE(2)
        RLCPP_GROUP_CASE(3)
        RLCPP_GROUP_CASE(4)
        RLCPP_GROUP_CASE(5)
        RLCPP_GROUP_CASE(6)
        RLCPP_GROUP_CASE(7)
        RLCPP_GROUP_CASE(8)
#undef RLCPP_GROUP_CASE
        default: break;
      }
    }
  }
}

void PagedAttentionUnits(const float* q, const PagedQueries& queries, const PagedKv& kv, int64_t n_heads,
                         int64_t n_kv_heads, int64_t dim, float scale, float* out, int64_t first, int64_t stride) {
  switch (kv.type) {
    case WeightType::f32: attend_units<float>(q, queries, kv, n_heads, n_kv_heads, dim, scale, out, first, stride); break;
    case WeightType::bf16:
      attend_units<hwy::bfloat16_t>(q, queries, kv, n_heads, n_kv_heads, dim, scale, out, first, stride);
      break;
    case WeightType::f16:
      attend_units<hwy::float16_t>(q, queries, kv, n_heads, n_kv_heads, dim, scale, out, first, stride);
      break;
    case WeightType::i8:
    case WeightType::fp8: break;  // a KV cache is never 8-bit: paged_attention refuses it
  }
}

}  // namespace rlcpp::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace rlcpp::kernels {

HWY_EXPORT(PagedAttentionUnits);

void paged_attention(const float* q, const PagedQueries& queries, const PagedKv& kv, int64_t n_heads,
                     int64_t n_kv_heads, int64_t head_dim, float scale, float* out, ThreadPool* pool) {
  if (queries.n_tokens <= 0) return;
  RLCPP_CHECK(kv.type != WeightType::i8 && kv.type != WeightType::fp8, "paged_attention: an 8-bit KV cache");
  if (pool == nullptr) pool = &ThreadPool::global();
  const int64_t n_units = queries.n_tokens * n_kv_heads;
  const int64_t parts = std::min<int64_t>(pool->size(), n_units);
  // Units dealt round-robin: in a prefill a later token attends to more keys, and contiguous
  // ranges would leave the first thread idle while the last works.
  pool->parallel_for(parts, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      HWY_DYNAMIC_DISPATCH(PagedAttentionUnits)(q, queries, kv, n_heads, n_kv_heads, head_dim, scale, out, p, parts);
    }
  });
}

}  // namespace rlcpp::kernels
#endif  // HWY_ONCE
