// The common layer of every tilejit kernel template: the captured-buffer type TjBuffer, bounds-
// checked loads, the IR's i32 semantics (wrapping arithmetic, division by zero = 0), saturating
// f32 -> i32 casts and the hardware approximations generated hooks call.
//
// This header is compiled by NVRTC from memory (it is embedded into the library), so it
// includes nothing: no toolkit header, no host header. Everything below is device code.
#pragma once

// f32 division by a constant zero is well defined here (IEEE: +-inf or NaN, as IR.h says), so
// the front end's "division by zero" warning (#39) is noise in generated hooks.
#pragma nv_diag_suppress 39

// Defined by the generated source: the program's captured buffers and params, laid out as
// compiler/codegen/ArgLayout.h describes.
struct TjArgs;

// Storage types of 16-bit float buffers: raw bits, decoded to f32 on load. Two distinct types
// (rather than one unsigned short) so a load knows which format it decodes.
struct TjBf16 {
  unsigned short bits;
};
struct TjF16 {
  unsigned short bits;
};

// A captured buffer: pointer plus shape and strides, in elements.
template <class T, int RANK>
struct TjBuffer {
  const T* ptr;
  long long size[RANK];
  long long stride[RANK];
};
template <class T>
struct TjBuffer<T, 0> {
  const T* ptr;
};

__device__ __forceinline__ int tj_decode(int v) { return v; }
__device__ __forceinline__ float tj_decode(float v) { return v; }
__device__ __forceinline__ float tj_decode(TjBf16 v) {
  return __int_as_float(static_cast<int>(static_cast<unsigned>(v.bits) << 16));
}
__device__ __forceinline__ float tj_decode(TjF16 v) {
  float r;
  asm("cvt.f32.f16 %0, %1;" : "=f"(r) : "h"(v.bits));
  return r;
}

template <class T>
struct TjValue {
  using type = float;
};
template <>
struct TjValue<int> {
  using type = int;
};

// Element [ix...] of a buffer; an index outside the bound shape reads 0 and touches no memory.
template <class T, int RANK, class... Ix>
__device__ __forceinline__ typename TjValue<T>::type tj_load(const TjBuffer<T, RANK>& buf,
                                                             Ix... ix) {
  static_assert(sizeof...(Ix) == RANK, "a load takes one index per buffer dimension");
  const int index[RANK] = {static_cast<int>(ix)...};
  long long offset = 0;
#pragma unroll
  for (int d = 0; d < RANK; ++d) {
    if (index[d] < 0 || index[d] >= buf.size[d]) return 0;
    offset += static_cast<long long>(index[d]) * buf.stride[d];
  }
  return tj_decode(buf.ptr[offset]);
}
template <class T>
__device__ __forceinline__ typename TjValue<T>::type tj_load(const TjBuffer<T, 0>& buf) {
  return tj_decode(buf.ptr[0]);
}

// i32 arithmetic wraps (two's complement): computed in unsigned, where overflow is defined.
__device__ __forceinline__ int tj_add(int a, int b) {
  return static_cast<int>(static_cast<unsigned>(a) + static_cast<unsigned>(b));
}
__device__ __forceinline__ int tj_sub(int a, int b) {
  return static_cast<int>(static_cast<unsigned>(a) - static_cast<unsigned>(b));
}
__device__ __forceinline__ int tj_mul(int a, int b) {
  return static_cast<int>(static_cast<unsigned>(a) * static_cast<unsigned>(b));
}
__device__ __forceinline__ int tj_neg(int a) {
  return static_cast<int>(0u - static_cast<unsigned>(a));
}
__device__ __forceinline__ int tj_abs(int a) { return a < 0 ? tj_neg(a) : a; }
__device__ __forceinline__ int tj_min(int a, int b) { return a < b ? a : b; }
__device__ __forceinline__ int tj_max(int a, int b) { return a > b ? a : b; }
// Truncating division and C remainder; a zero divisor gives 0, and INT_MIN / -1 wraps to
// INT_MIN (remainder 0) instead of trapping.
__device__ __forceinline__ int tj_div(int a, int b) {
  if (b == 0) return 0;
  if (b == -1) return tj_neg(a);
  return a / b;
}
__device__ __forceinline__ int tj_mod(int a, int b) {
  if (b == 0 || b == -1) return 0;
  return a % b;
}

// f32 -> i32: truncate toward zero, saturate, NaN -> 0. cvt.rzi.s32.f32 clamps out-of-range
// values to the destination range; NaN is tested explicitly so the result never depends on
// what the hardware makes of it.
__device__ __forceinline__ int tj_f2i(float x) {
  int r;
  asm("cvt.rzi.s32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return x != x ? 0 : r;
}

// i32 -> f32 for |x| <= 2^22, exactly what (float)x gives, without the conversion unit (which
// shares the 16-per-clock pipe with ex2 and tanh): the bits of 1.5 * 2^23 plus x are the float
// 1.5 * 2^23 + x, and the subtraction is exact. The code generator calls it only where the
// value is proven to lie in that range (compiler/codegen/PositionRange.h).
__device__ __forceinline__ float tj_i2f_small(int x) {
  return __int_as_float(0x4B400000 + x) - 12582912.0f;
}

// Hardware approximations (PTX .approx). ex2/lg2/rsqrt have a relative error of about 2^-22;
// tanh.approx about 2^-11. exp and log go through base 2.
__device__ __forceinline__ float tj_exp2(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
__device__ __forceinline__ float tj_exp(float x) { return tj_exp2(x * 1.4426950408889634f); }
__device__ __forceinline__ float tj_log2(float x) {
  float r;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
__device__ __forceinline__ float tj_log(float x) { return tj_log2(x) * 0.6931471805599453f; }
// tanh.approx.f32 through the compiler's builtin rather than inline asm: the compiler knows it is
// pure, so two hooks evaluated at the same point (score_mod and score_grad of a soft-cap in the
// backward) share one MUFU.TANH.
__device__ __forceinline__ float tj_tanh(float x) { return __tanhf(x); }
// f32 division: div.full.f32, at most 2 ulp over the full range (x / 0 is inf, 0 / 0 NaN), a
// handful of instructions where IEEE division (div.rn.f32) is a subroutine with a slow path.
__device__ __forceinline__ float tj_fdiv(float x, float y) {
  float r;
  asm("div.full.f32 %0, %1, %2;" : "=f"(r) : "f"(x), "f"(y));
  return r;
}

// Division by a value that stays fixed over many dividends (a param, a per-row or per-head
// buffer value): x / y as (x * s) * r, with s a power of two and r = 1 / (y * s) rounded once,
// prepared once per row by tj_recip. Two multiplies where div.full.f32 spends a MUFU.RCP per
// element, and within div.full's 2 ulp over the full range: for 2^-126 <= |y| <= 2^126 (and 0,
// inf, NaN), s = 1 and r is a normal number, so x * r is x / y with two roundings (<= 1 ulp,
// subnormal results included); a subnormal y uses s = 2^24 (x * s overflows only where x / y
// does; then exact), a huge y s = 2^-4 (x * s loses bits only where x / y rounds to 0).
struct TjRecip {
  float r, s;
};
__device__ __forceinline__ TjRecip tj_recip(float y) {
  const float a = fabsf(y);
  const float s = a > 0.f && a < 1.17549435e-38f ? 16777216.f : a > 8.50705917e37f ? 0.0625f : 1.f;
  return {__frcp_rn(y * s), s};
}
__device__ __forceinline__ float tj_fdiv_recip(float x, TjRecip d) { return (x * d.s) * d.r; }

__device__ __forceinline__ float tj_rsqrt(float x) {
  float r;
  asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
