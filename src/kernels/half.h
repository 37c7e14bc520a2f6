// Scalar half-precision and fp8 conversion for the kernels' remainder loops (Highway 1.0 has bf16's only).
#pragma once

#include <cstdint>
#include <cmath>
#include <cstring>

namespace rlcpp::kernels {

// IEEE binary16 bits to float, exactly (subnormals, signed zeros, infinities and NaNs included).
inline float f16_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: renormalise
    int e = -1;
    uint32_t m = mant;
    do {
      ++e;
      m <<= 1;
    } while ((m & 0x400) == 0);
    bits = sign | (static_cast<uint32_t>(112 - e) << 23) | ((m & 0x3ff) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// A float's bf16 bits, rounded to the nearest (ties to even); NaNs stay NaNs (quiet).
inline uint16_t bf16_bits_nearest(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

// fp8 e4m3 (OCP's E4M3FN: bias 7, subnormals, no infinities) to float, exactly. The kernels carry
// no NaN: 0x7f and 0xff, its NaN codes, read as ±480 here as in the vector loads; quantizing
// never writes them (kernels/quantize.h).
inline float fp8_e4m3_to_float(uint8_t b) {
  const uint32_t e = (b >> 3) & 0xf, m = b & 0x7;
  // e = 0: m · 2^-9; else (8 + m) · 2^(e - 10). Both exact in float.
  const float magnitude = e == 0 ? static_cast<float>(m) * (1.0f / 512) : static_cast<float>(8 + m) * std::ldexp(1.0f, static_cast<int>(e) - 10);
  return (b & 0x80) != 0 ? -magnitude : magnitude;
}

// What the kernels' widening loads of fp8 give: the value / 256 (the row scale takes it back).
constexpr float kFp8Widened = 1.0f / 256;

}  // namespace rlcpp::kernels
