#include "kernels/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/half.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace rlcpp::kernels {

uint8_t float_to_fp8_e4m3(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  const auto sign = static_cast<uint8_t>((bits >> 24) & 0x80);
  const float a = std::fabs(v);
  if (std::isnan(a)) return 0x7f;
  if (a >= 448.0f) return sign | 0x7e;
  if (a < 0.015625f) {  // below 2^-6: subnormal, in steps of 2^-9 (8 steps is the smallest normal, 0x08)
    return sign | static_cast<uint8_t>(std::nearbyint(a * 512.0f));
  }
  // Round the float's 23-bit mantissa to e4m3's 3 (to nearest, ties to even); a carry moves into the
  // exponent. The float exponent E (bias 127) becomes E - 120 (bias 7).
  uint32_t m = bits & 0x7fffffffu;
  m += 0x7ffffu + ((m >> 20) & 1u);
  const uint32_t exponent = (m >> 23) - 120, mantissa = (m >> 20) & 7u;
  return sign | static_cast<uint8_t>((exponent << 3) | mantissa);
}

namespace {

void check_type(WeightType type) {
  RLCPP_CHECK(type == WeightType::i8 || type == WeightType::fp8, "8-bit quantization to weight type {}",
              static_cast<int>(type));
}

}  // namespace

void quantize_rows(const float* w, int64_t rows, int64_t in, WeightType type, void* q, float* scales, ThreadPool* pool) {
  check_type(type);
  if (pool == nullptr) pool = &ThreadPool::global();
  const float top = type == WeightType::i8 ? 127.0f : 448.0f;
  pool->parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* row = w + r * in;
      float amax = 0;
      for (int64_t k = 0; k < in; ++k) amax = std::max(amax, std::fabs(row[k]));
      const float scale = amax / top;
      scales[r] = scale;
      if (type == WeightType::i8) {
        auto* out = static_cast<int8_t*>(q) + r * in;
        for (int64_t k = 0; k < in; ++k) {
          const float c = scale > 0 ? std::nearbyint(row[k] / scale) : 0.0f;
          out[k] = static_cast<int8_t>(std::clamp(c, -127.0f, 127.0f));
        }
      } else {
        auto* out = static_cast<uint8_t*>(q) + r * in;
        for (int64_t k = 0; k < in; ++k) out[k] = scale > 0 ? float_to_fp8_e4m3(row[k] / scale) : 0;
      }
    }
  }, 1, 16);
}

void dequantize_rows(const void* q, const float* scales, int64_t rows, int64_t in, WeightType type, float* w,
                     ThreadPool* pool) {
  check_type(type);
  if (pool == nullptr) pool = &ThreadPool::global();
  float fp8[256];
  for (int c = 0; c < 256; ++c) fp8[c] = fp8_e4m3_to_float(static_cast<uint8_t>(c));
  pool->parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* out = w + r * in;
      if (type == WeightType::i8) {
        const auto* codes = static_cast<const int8_t*>(q) + r * in;
        for (int64_t k = 0; k < in; ++k) out[k] = scales[r] * static_cast<float>(codes[k]);
      } else {
        const auto* codes = static_cast<const uint8_t*>(q) + r * in;
        for (int64_t k = 0; k < in; ++k) out[k] = scales[r] * fp8[codes[k]];
      }
    }
  }, 1, 16);
}

}  // namespace rlcpp::kernels
