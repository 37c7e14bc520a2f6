// Per-target helpers shared by the kernels (included after foreach_target.h, once per SIMD target,
// with Highway's include-guard toggle): widening loads and scalar reads of fp32, bf16 and fp16.
#if defined(RLCPP_KERNELS_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef RLCPP_KERNELS_SIMD_INL_H_
#undef RLCPP_KERNELS_SIMD_INL_H_
#else
#define RLCPP_KERNELS_SIMD_INL_H_
#endif

#include <hwy/highway.h>

#include <cstring>

#include "kernels/half.h"

HWY_BEFORE_NAMESPACE();
namespace rlcpp::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

inline float scalar_of(float w) { return w; }
inline float scalar_of(hwy::bfloat16_t w) { return hwy::F32FromBF16(w); }
inline float scalar_of(hwy::float16_t w) {
  uint16_t h;
  std::memcpy(&h, &w, 2);
  return f16_bits_to_float(h);
}

// A vector of floats from fp32, bf16 or fp16 elements (half types widened in registers).
template <class DF>
HWY_INLINE hn::Vec<DF> load_as_float(DF df, const float* HWY_RESTRICT p) {
  return hn::LoadU(df, p);
}
template <class DF>
HWY_INLINE hn::Vec<DF> load_as_float(DF df, const hwy::bfloat16_t* HWY_RESTRICT p) {
  return hn::PromoteTo(df, hn::LoadU(hn::Rebind<hwy::bfloat16_t, DF>(), p));
}
template <class DF>
HWY_INLINE hn::Vec<DF> load_as_float(DF df, const hwy::float16_t* HWY_RESTRICT p) {
  return hn::PromoteTo(df, hn::LoadU(hn::Rebind<hwy::float16_t, DF>(), p));
}

}  // namespace rlcpp::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // RLCPP_KERNELS_SIMD_INL_H_
