// Per-target helpers shared by the kernels (included after foreach_target.h, once per SIMD target,
// with Highway's include-guard toggle): widening loads and scalar reads of fp32, bf16, fp16, int8
// and fp8 e4m3 (stored as uint8_t).
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
inline float scalar_of(int8_t w) { return static_cast<float>(w); }
// fp8 e4m3 reads as its value / 256 (kFp8Widened), as the vector load below gives it.
inline float scalar_of(uint8_t w) { return fp8_e4m3_to_float(w) * kFp8Widened; }

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
// int8 codes, exactly.
template <class DF>
HWY_INLINE hn::Vec<DF> load_as_float(DF df, const int8_t* HWY_RESTRICT p) {
  const hn::Rebind<int32_t, DF> di;
  return hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(hn::Rebind<int8_t, DF>(), p)));
}
// fp8 e4m3 codes, as their value / 256: the byte s.eeee.mmm sign-extended to 16 bits and shifted
// left by 7 is s.s.eeee.mmm.0000000; with the second bit cleared it is the fp16 s.0eeee.mmm0000000,
// the value with fp16's exponent bias (8 more than e4m3's). F16C then widens it exactly, subnormals
// included: three integer operations and the conversion per vector.
template <class DF>
HWY_INLINE hn::Vec<DF> load_as_float(DF df, const uint8_t* HWY_RESTRICT p) {
  const hn::Rebind<int16_t, DF> di16;
  const auto codes = hn::PromoteTo(di16, hn::LoadU(hn::Rebind<int8_t, DF>(), reinterpret_cast<const int8_t*>(p)));
  const auto half = hn::And(hn::ShiftLeft<7>(codes), hn::Set(di16, static_cast<int16_t>(0xBF80)));
  return hn::PromoteTo(df, hn::BitCast(hn::Rebind<hwy::float16_t, DF>(), half));
}

// Two vectors of fp8 e4m3 codes at once, as load_as_float gives each: the integer steps run on
// one full vector of 16-bit lanes, a third fewer instructions per weight (batch-1 decode on fp8
// weights is bound by them, not by memory). Not on the one-lane targets.
#undef RLCPP_KERNELS_FP8_PAIRS  // set again for each target
#if HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128
#define RLCPP_KERNELS_FP8_PAIRS 1
template <class DF>
HWY_INLINE void load2_as_float(DF df, const uint8_t* HWY_RESTRICT p, hn::Vec<DF>& lo, hn::Vec<DF>& hi) {
  const hn::Repartition<int16_t, DF> di16;
  const auto codes = hn::PromoteTo(di16, hn::LoadU(hn::Rebind<int8_t, decltype(di16)>(), reinterpret_cast<const int8_t*>(p)));
  const auto half = hn::And(hn::ShiftLeft<7>(codes), hn::Set(di16, static_cast<int16_t>(0xBF80)));
  const hn::Repartition<hwy::float16_t, DF> dh;
  const auto h = hn::BitCast(dh, half);
  lo = hn::PromoteTo(df, hn::LowerHalf(hn::Half<decltype(dh)>(), h));
  hi = hn::PromoteTo(df, hn::UpperHalf(hn::Half<decltype(dh)>(), h));
}
#else
#define RLCPP_KERNELS_FP8_PAIRS 0
#endif

}  // namespace rlcpp::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // RLCPP_KERNELS_SIMD_INL_H_
