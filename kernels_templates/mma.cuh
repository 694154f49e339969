// Tensor-core building blocks of the portable (sm_80+) attention kernels: 16-bit element
// types without <cuda_bf16.h>, mma.sync m16n8k16, ldmatrix, cp.async, fp32 reductions and a
// swizzled shared-memory tile. Device-only; compiles under NVRTC (no host headers).
//
// Fragment layouts (PTX ISA, mma.m16n8k16 with .row.col), lane = 4*g + t:
//   A (16x16): a0 = (row g,   k 2t..2t+1), a1 = (row g+8, k 2t..), a2 = (row g, k 2t+8..),
//              a3 = (row g+8, k 2t+8..)
//   B (16x8):  b0 = (k 2t..2t+1, col g), b1 = (k 2t+8.., col g)
//   C (16x8):  c0,c1 = (row g, cols 2t, 2t+1), c2,c3 = (row g+8, cols 2t, 2t+1)
#pragma once

namespace tjk {

// 16-bit storage types; the kernels only move their bits and convert with PTX.
struct bf16 {
  unsigned short bits;
};
struct f16 {
  unsigned short bits;
};

template <class T>
struct ElemOps;

template <>
struct ElemOps<bf16> {
  // Packs two floats (lo in the low half) with round-to-nearest-even.
  __device__ static __forceinline__ unsigned pack(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
  }
  __device__ static __forceinline__ float lo(unsigned v) { return __uint_as_float(v << 16); }
  __device__ static __forceinline__ float hi(unsigned v) {
    return __uint_as_float(v & 0xffff0000u);
  }
  __device__ static __forceinline__ void mma(float c[4], const unsigned a[4], const unsigned b[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};

template <>
struct ElemOps<f16> {
  __device__ static __forceinline__ unsigned pack(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
  }
  __device__ static __forceinline__ float lo(unsigned v) {
    float f;
    asm("{ .reg .b16 l, h; mov.b32 {l, h}, %1; cvt.f32.f16 %0, l; }" : "=f"(f) : "r"(v));
    return f;
  }
  __device__ static __forceinline__ float hi(unsigned v) {
    float f;
    asm("{ .reg .b16 l, h; mov.b32 {l, h}, %1; cvt.f32.f16 %0, h; }" : "=f"(f) : "r"(v));
    return f;
  }
  __device__ static __forceinline__ void mma(float c[4], const unsigned a[4], const unsigned b[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// The lane index, read so that the compiler recomputes fragment addresses at each use instead
// of hoisting dozens of loop-invariant addresses into registers (which made the backward
// kernels spill). Kernels with registers to spare pass threadIdx.x & 31 instead.
__device__ __forceinline__ int lane_id() {
  int l;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(l));
  return l;
}

// Same for the thread index in the tile copies.
__device__ __forceinline__ int thread_id() {
  int t;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
  return t;
}

// `v` as a value the compiler cannot see through, so that what is computed from it is computed
// where it is used rather than hoisted out of a loop and held (lane_id()'s reason).
__device__ __forceinline__ int opaque(int v) {
  asm volatile("mov.b32 %0, %0;" : "+r"(v));
  return v;
}

__device__ __forceinline__ void ldmatrix_x4(unsigned r[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned r[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// 16-byte asynchronous copy; src_bytes = 0 writes zeros (rows past the end of a sequence).
__device__ __forceinline__ void cp_async_16(unsigned dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_4(unsigned dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N));
}

// dst[0..1] += (a, b) in fp32, done by the memory system (nothing waits for it): one vector
// reduction on sm_90, two scalar ones before.
__device__ __forceinline__ void atomic_add2(float* dst, float a, float b) {
#if __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(dst), "f"(a), "f"(b) : "memory");
#else
  atomicAdd(dst, a);
  atomicAdd(dst + 1, b);
#endif
}

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// 2^x for x <= 127 on the FMA and ALU pipes, off the 16-per-clock pipe that ex2 and tanh share:
// x = n + f with n = round(x) (the bits of 1.5 * 2^23 + x hold n in their low bits) and
// |f| <= 1/2, 2^f by a cubic (relative error below 1.1e-4, under half a bf16 ulp; p(0) = 1), times
// 2^n built from n's bits. x <= -127, -inf among them, gives +0 as ex2.approx.ftz does; NaN stays
// NaN (max.NaN). Nine instructions against one MUFU.EX2, which issues at an eighth of their rate:
// kernels whose element pass is bound by that pipe (tanh and ex2 per element) move a share of
// their exponentials here.
__device__ __forceinline__ float fma_exp2(float x) {
  float y;
  asm("max.NaN.f32 %0, %1, 0fC2FE0000;" : "=f"(y) : "f"(x));  // max(x, -127)
  const float r = y + 12582912.f;
  const float f = y - (r - 12582912.f);
  const float p = fmaf(fmaf(fmaf(0.0550084747f, f, 0.242210120f), f, 0.693282902f), f, 1.f);
  // (bits(r) << 23) is n << 23 (1.5 * 2^23 has no bits in the low 9); + 127 << 23 makes 2^n,
  // and n = -127 makes 0.
  const unsigned scale = static_cast<unsigned>(__float_as_int(r)) * 8388608u + 0x3F800000u;
  return p * __int_as_float(static_cast<int>(scale));
}

// A [kRows x kCols] tile of 16-bit elements in shared memory, rows of kCols/8 16-byte chunks;
// chunk c of row r lives at chunk c ^ (r & 7) (rows of >= 8 chunks) or c ^ ((r >> 1) & 3)
// (rows of 4 chunks, two rows per 128 bytes), so the 8 rows an ldmatrix phase (or a quad of
// fragment stores) touches fall in 8 different bank groups.
template <int kRows, int kCols>
struct SwizzledTile {
  static_assert(kCols % 64 == 0 || kCols == 32, "rows must hold 4 or a multiple of 8 chunks");
  static constexpr int kChunks = kCols / 8;
  static constexpr int kBytes = kRows * kCols * 2;

  // Byte offset of element (row, col); col is a multiple of 2 for 32-bit accesses.
  __device__ static __forceinline__ unsigned offset(int row, int col) {
    int swz = kChunks >= 8 ? (row & 7) : ((row >> 1) & 3);
    return row * (kCols * 2) + ((((col >> 3) ^ swz)) << 4) + ((col & 7) << 1);
  }

  // Copies rows [row0, row0 + kRows) of a strided global matrix; rows >= n_rows become 0.
  template <int kThreads>
  __device__ static __forceinline__ void load_async(unsigned base, const unsigned short* g,
                                                    long long row_stride, int row0, int n_rows) {
    constexpr int kTotal = kRows * kChunks;
    static_assert(kTotal % kThreads == 0, "tile chunks must divide among the threads");
    const int tid = thread_id();
#pragma unroll
    for (int i = 0; i < kTotal / kThreads; ++i) {
      int idx = i * kThreads + tid;
      int r = idx / kChunks, c = idx % kChunks;
      bool in = row0 + r < n_rows;
      const unsigned short* src = g + (in ? (row0 + r) * row_stride + c * 8 : 0);
      cp_async_16(base + offset(r, c * 8), src, in ? 16 : 0);
    }
  }

  // Fragment loads for a warp. (r0, c0) is the top-left of the 16x16 block that is read.
  // A operand, rows = M, contiguous k.
  __device__ static __forceinline__ void load_a(unsigned a[4], unsigned base, int r0, int c0,
                                                int lane) {
    ldmatrix_x4(a, base + offset(r0 + (lane & 15), c0 + ((lane >> 4) << 3)));
  }
  // A operand stored transposed: rows = k, contiguous m.
  __device__ static __forceinline__ void load_a_trans(unsigned a[4], unsigned base, int r0, int c0,
                                                      int lane) {
    ldmatrix_x4_trans(
        a, base + offset(r0 + (lane & 7) + ((lane >> 4) << 3), c0 + (((lane >> 3) & 1) << 3)));
  }
  // B operands of two adjacent n-tiles, rows = n, contiguous k: b[0..1] tile n0, b[2..3] n0+8.
  __device__ static __forceinline__ void load_b(unsigned b[4], unsigned base, int r0, int c0,
                                                int lane) {
    ldmatrix_x4(b,
                base + offset(r0 + (lane & 7) + ((lane >> 4) << 3), c0 + (((lane >> 3) & 1) << 3)));
  }
  // B operands of two adjacent n-tiles stored transposed: rows = k, contiguous n.
  __device__ static __forceinline__ void load_b_trans(unsigned b[4], unsigned base, int r0, int c0,
                                                      int lane) {
    ldmatrix_x4_trans(b, base + offset(r0 + (lane & 15), c0 + ((lane >> 4) << 3)));
  }
};

}  // namespace tjk
