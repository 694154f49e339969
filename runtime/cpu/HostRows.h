// Reading and writing rows of host tensors as fp32, for the CPU executors: f32, bf16 and f16
// elements, any strides with a contiguous last dimension. Conversions to 16-bit formats round
// to nearest even, as the GPU kernels' stores do.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "runtime/TensorView.h"

namespace tilejit::cpu {

inline float bf16_to_float(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

inline uint16_t float_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

inline float f16_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16, exponent = (h >> 10) & 0x1f,
           mantissa = h & 0x3ff;
  if (exponent == 0) {  // zero and subnormals: mantissa * 2^-24, exact in f32
    float v = static_cast<float>(mantissa) * 0x1p-24f;
    return sign ? -v : v;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

inline uint16_t float_to_f16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00;     // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00;    // rounds to infinity (>= 65520)
  if (a < 0x38800000u) {                         // subnormal or zero in f16: exact scaling
    float v = std::bit_cast<float>(a) * 0x1p24f;  // value in units of 2^-24
    return sign | static_cast<uint16_t>(std::nearbyint(v));
  }
  uint32_t rounded = a + 0xfffu + ((a >> 13) & 1);  // nearest even on the 13 dropped bits
  return sign | static_cast<uint16_t>((rounded - 0x38000000u) >> 13);
}

// Element offset of [i0, i1, ...] (the leading indices; the last dimension is contiguous).
inline int64_t row_offset(const TensorView& t, int64_t i0) { return i0 * t.strides[0]; }
inline int64_t row_offset(const TensorView& t, int64_t i0, int64_t i1, int64_t i2) {
  return i0 * t.strides[0] + i1 * t.strides[1] + i2 * t.strides[2];
}

// dst[0..n) = t's elements [offset, offset + n) as f32.
inline void load_row(const TensorView& t, int64_t offset, int64_t n, float* dst) {
  switch (t.dtype) {
    case DType::F32: std::memcpy(dst, static_cast<const float*>(t.data) + offset, n * sizeof(float)); return;
    case DType::BF16: {
      const uint16_t* p = static_cast<const uint16_t*>(t.data) + offset;
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(p[i]);
      return;
    }
    case DType::F16: {
      const uint16_t* p = static_cast<const uint16_t*>(t.data) + offset;
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_float(p[i]);
      return;
    }
    default: return;  // dtypes are checked by the executors
  }
}

inline void store_row(const TensorView& t, int64_t offset, int64_t n, const float* src) {
  switch (t.dtype) {
    case DType::F32: std::memcpy(static_cast<float*>(t.data) + offset, src, n * sizeof(float)); return;
    case DType::BF16: {
      uint16_t* p = static_cast<uint16_t*>(t.data) + offset;
      for (int64_t i = 0; i < n; ++i) p[i] = float_to_bf16(src[i]);
      return;
    }
    case DType::F16: {
      uint16_t* p = static_cast<uint16_t*>(t.data) + offset;
      for (int64_t i = 0; i < n; ++i) p[i] = float_to_f16(src[i]);
      return;
    }
    default: return;
  }
}

inline float load_scalar(const TensorView& t, int64_t offset) {
  float v = 0;
  load_row(t, offset, 1, &v);
  return v;
}

}  // namespace tilejit::cpu
