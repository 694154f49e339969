// Warpgroup matrix multiply (wgmma.mma_async, sm_90a): shared-memory matrix descriptors for
// 128-byte-swizzled tiles, the fences that order register accesses around the asynchronous
// products, and m64nNk16 products (f32 accumulators, bf16 / f16 inputs) with A from shared
// memory (K-major) or from registers. Device-only; compiles under NVRTC; callers guard their use
// with __CUDA_ARCH_FEAT_SM90_ALL.
//
// Layouts (PTX ISA 9.7.15.5.1 "Register Fragments and Shared Memory Matrix Layouts"):
//   Accumulator D of m64nNk16 (9.7.15.5.1.1.1): warp w of the warpgroup holds rows 16w..16w+15;
//   with lane = 4g + t, d[i][c] (i < N/8) is D(16w + g + 8 * (c >> 1), 8i + 2t + (c & 1)) -- for
//   each warp the mma.m16n8 C fragment repeated over N/8 column groups.
//   A in registers: four 32-bit registers of two 16-bit values, a[0] = A(16w + g, 2t..2t+1),
//   a[1] = A(16w + g + 8, 2t..), a[2] = A(16w + g, 2t+8..), a[3] = A(16w + g + 8, 2t+8..) --
//   the mma.m16n8k16 A fragment of the warp's 16 rows.
//   128-byte swizzle, K-major (9.7.15.5.1.2.1.3, ((8,m),(T,2k)):((8T,SBO),(1,T)) o Swizzle<3,4,3>):
//   rows of 64 16-bit elements (128 B), 8-row groups SBO bytes apart; the leading offset is
//   unused (encoded 1). A k16 slice starts 32 * (k / 16) bytes into the row.
//   128-byte swizzle, MN-major (((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)) o Swizzle<3,4,3>): 64
//   contiguous MN elements per 128-B row, the next 64 MN elements LBO bytes further, K rows
//   128 B apart and 8-row groups SBO bytes apart. A k16 slice starts 16 rows further.
//   Swizzle<3,4,3>: byte-address bits [4, 7) are XORed with bits [7, 10), i.e. 16-B chunk c of
//   row r sits at chunk c ^ (r & 7); with the swizzle pattern starting on a 1024-B boundary the
//   descriptor's base offset is 0 (9.7.15.5.1.2.2 "Matrix Descriptor Format").
#pragma once

#include "mma.cuh"

namespace tjk {

template <class T>
struct IsBf16 {
  static constexpr bool value = false;
};
template <>
struct IsBf16<bf16> {
  static constexpr bool value = true;
};

// Matrix descriptor (9.7.15.5.1.2.2): start address, leading and stride byte offsets, each
// encoded as (x & 0x3FFFF) >> 4 in 14 bits; bits 62-63 = 1: 128-byte swizzle.
__device__ __forceinline__ unsigned long long smem_descriptor_sw128(unsigned addr,
                                                                    unsigned leading_bytes,
                                                                    unsigned stride_bytes) {
  auto encode = [](unsigned x) { return static_cast<unsigned long long>((x & 0x3FFFF) >> 4); };
  return encode(addr) | (encode(leading_bytes) << 16) | (encode(stride_bytes) << 32) | (1ull << 62);
}

// threadIdx.x / 128, read through a shuffle from lane 0 so that the compiler knows it is the same
// in every lane: values derived from it (shared-memory addresses, descriptors) then live in
// uniform registers, which wgmma reads its descriptors from, instead of being built per lane
// and moved over before each product.
__device__ __forceinline__ int warpgroup_index() {
  return __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) >> 7, 0);
}

// The descriptor of the matrix `bytes` (a multiple of 16) past the one `d` describes: the start
// address field (bits 0-13) holds addr >> 4, and shared-memory addresses stay below 2^18, so
// adding to it never carries into the next field. One add where a fresh descriptor takes a mask,
// a shift and an or per product.
__device__ __forceinline__ unsigned long long smem_descriptor_advance(unsigned long long d,
                                                                      unsigned bytes) {
  return d + (bytes >> 4);
}

// Orders this thread's earlier register writes before the next wgmma reads them (accumulators,
// A fragments). Required before the first wgmma of each batch that follows ordinary code.
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
// Waits until at most kPending of this warpgroup's committed groups are still running.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}

// Four 8 x 8 matrices of 16-bit elements to shared memory (stmatrix, sm_90): lane 8j + i gives
// the address of row i of matrix j (16 contiguous bytes); register j of lane 4r + c holds
// elements 2c, 2c + 1 of row r of matrix j, the layout of an mma / wgmma accumulator's pairs.
__device__ __forceinline__ void stmatrix_x4(unsigned addr, unsigned r0, unsigned r1, unsigned r2,
                                            unsigned r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr),
               "r"(r0), "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}

// Stores a warp's 16 rows (from `row0`) of 16-bit A fragments (f[kk]: columns 16 kk .. + 15, the
// registers in the order rows + 0 / + 8, columns + 0 / + 8) into a tile at shared address `tile`
// laid out as the 128-byte-swizzle operands are: per 64-column block 128 rows of 128 B (16384 B),
// 16-byte chunk c of row r at chunk c ^ (r & 7). One stmatrix per k16 slice.
template <int kK16>
__device__ __forceinline__ void stmatrix_rows_sw128(unsigned tile, const unsigned (&f)[kK16][4],
                                                    int row0, int lane) {
  const int j = lane >> 3;  // the matrix whose row this lane addresses
  const int r = row0 + (lane & 7) + 8 * (j & 1);
#pragma unroll
  for (int kk = 0; kk < kK16; ++kk) {
    const int c = 16 * kk + 8 * (j >> 1);
    const unsigned at = (c >> 6) * (128 * 128) + r * 128 + ((((c & 63) >> 3) ^ (r & 7)) << 4);
    stmatrix_x4(tile + at, f[kk][0], f[kk][1], f[kk][2], f[kk][3]);
  }
}

// Transposes a quad's 4 x 4 words (the quad = lanes 4g .. 4g + 3, `quad_lane` = lane & 3): on
// return w[i] of lane t is what w[t] of lane i was. Two exchanges: the off-diagonal 2 x 2 blocks
// (lanes t, t ^ 2), then the words within each block (lanes t, t ^ 1). For an accumulator row's
// pairs (lane t holds columns 8n + 2t, + 1 of n = 4k .. 4k + 3) it leaves lane t the eight
// contiguous columns of n = 4k + t. Every lane of the warp takes part.
__device__ __forceinline__ void quad_transpose(unsigned (&w)[4], int quad_lane) {
  const bool hi = quad_lane & 2, lo = quad_lane & 1;
#pragma unroll
  for (int m = 0; m < 2; ++m) {
    const unsigned got = __shfl_xor_sync(0xffffffffu, hi ? w[m] : w[2 + m], 2);
    if (hi)
      w[m] = got;
    else
      w[2 + m] = got;
  }
#pragma unroll
  for (int m = 0; m < 2; ++m) {
    const unsigned got = __shfl_xor_sync(0xffffffffu, lo ? w[2 * m] : w[2 * m + 1], 1);
    if (lo)
      w[2 * m] = got;
    else
      w[2 * m + 1] = got;
  }
}

// Makes this thread's ordinary shared-memory writes visible to the async proxy, which is how
// wgmma reads its shared-memory operands (PTX ISA 9.7.13.4 fence.proxy.async): between writing
// a tile with st.shared and the barrier after which a wgmma reads it.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Pins the registers of an accumulator (or fragment array) at this point of the program: the
// values must be computed before it and are re-read after it, and it keeps its place among the
// volatile asm (wgmma issue, commit, wait). After a wgmma_wait it keeps code that uses the
// results from being hoisted above the wait; before one, it keeps work meant to overlap the
// running products from being sunk below the wait.
template <int kN>
__device__ __forceinline__ void pin_registers(float (&x)[kN][4]) {
#pragma unroll
  for (int i = 0; i < kN; ++i)
#pragma unroll
    for (int c = 0; c < 4; ++c) asm volatile("" : "+f"(x[i][c])::"memory");
}
template <int kN>
__device__ __forceinline__ void pin_registers(float (&x)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(x[i])::"memory");
}
template <int kN>
__device__ __forceinline__ void pin_registers(unsigned (&x)[kN][4]) {
#pragma unroll
  for (int i = 0; i < kN; ++i)
#pragma unroll
    for (int c = 0; c < 4; ++c) asm volatile("" : "+r"(x[i][c])::"memory");
}

// wgmma.mma_async m64nNk16, f32 accumulate, issued by the whole warpgroup. d is the first N / 8
// column groups of an accumulator of kN >= N / 8 groups.
//   ss: D (+)= A * B, A [64 x 16] and B [16 x N] both K-major in shared memory (descriptors);
//       scale_d = 0 overwrites D. ss also takes either operand MN-major (kTransA, kTransB).
//   rs: D += A * B, A [64 x 16] in registers, B [16 x N] N-major in shared memory
//       (imm-trans-b = 1).
template <int N>
struct Wgmma;

template <>
struct Wgmma<64> {
  // kTransA / kTransB = 1: that operand is MN-major in shared memory (imm-trans-a / -b).
  template <class T, int kTransA = 0, int kTransB = 0, int kN>
  __device__ static __forceinline__ void ss(float (&d)[kN][4], unsigned long long desc_a,
                                            unsigned long long desc_b, int scale_d) {
    static_assert(kN >= 8, "the accumulator holds 64 columns");
    if constexpr (IsBf16<T>::value) {
      asm volatile(
          "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
          "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
          "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
          "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
          "%32, %33, p, 1, 1, %35, %36;\n}\n"
          : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]),
            "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]),
            "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]),
            "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
            "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]),
            "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),
            "+f"(d[7][2]), "+f"(d[7][3])
          : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransA), "n"(kTransB));
    } else {
      asm volatile(
          "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
          "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {"
          "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
          "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
          "%32, %33, p, 1, 1, %35, %36;\n}\n"
          : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]),
            "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]),
            "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]),
            "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
            "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]),
            "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),
            "+f"(d[7][2]), "+f"(d[7][3])
          : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransA), "n"(kTransB));
    }
  }
  template <class T, int kN>
  __device__ static __forceinline__ void rs(float (&d)[kN][4], const unsigned (&a)[4],
                                            unsigned long long desc_b, int scale_d = 1) {
    static_assert(kN >= 8, "the accumulator holds 64 columns");
    if constexpr (IsBf16<T>::value) {
      asm volatile(
          "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
          "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
          "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
          "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
          "{%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
          : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]),
            "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]),
            "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]),
            "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
            "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]),
            "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),
            "+f"(d[7][2]), "+f"(d[7][3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
    } else {
      asm volatile(
          "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
          "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {"
          "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
          "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
          "{%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
          : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]),
            "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]),
            "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]),
            "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
            "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]),
            "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),
            "+f"(d[7][2]), "+f"(d[7][3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
    }
  }
};

template <>
struct Wgmma<128> {
  // kTransA / kTransB = 1: that operand is MN-major in shared memory (imm-trans-a / -b).
  template <class T, int kTransA = 0, int kTransB = 0, int kN>
  __device__ static __forceinline__ void ss(float (&d)[kN][4], unsigned long long desc_a,
                                            unsigned long long desc_b, int scale_d) {
    static_assert(kN >= 16, "the accumulator holds 128 columns");
    if constexpr (IsBf16<T>::value) {
      asm volatile(
          "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
          "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
          "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
          "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
          "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
          "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
          "%64, %65, p, 1, 1, %67, %68;\n}\n"
          : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]),
            "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]),
            "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]),
            "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
            "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]),
            "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),
            "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]),
            "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]),
            "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]),
            "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]),
            "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]),
            "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]),
            "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
          : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransA), "n"(kTransB));
    } else {
      asm volatile(
          "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
          "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {"
          "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
          "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
          "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
          "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
          "%64, %65, p, 1, 1, %67, %68;\n}\n"
          : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]),
            "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]),
            "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]),
            "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
            "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]),
            "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),
            "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]),
            "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]),
            "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]),
            "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]),
            "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]),
            "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]),
            "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
          : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransA), "n"(kTransB));
    }
  }
  template <class T, int kN>
  __device__ static __forceinline__ void rs(float (&d)[kN][4], const unsigned (&a)[4],
                                            unsigned long long desc_b, int scale_d = 1) {
    static_assert(kN >= 16, "the accumulator holds 128 columns");
    if constexpr (IsBf16<T>::value) {
      asm volatile(
          "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
          "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
          "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
          "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
          "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
          "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
          "{%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
          : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]),
            "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]),
            "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]),
            "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
            "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]),
            "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),
            "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]),
            "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]),
            "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]),
            "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]),
            "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]),
            "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]),
            "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
    } else {
      asm volatile(
          "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
          "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {"
          "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
          "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
          "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
          "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
          "{%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
          : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]),
            "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]),
            "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]),
            "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
            "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]),
            "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),
            "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]),
            "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]),
            "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]),
            "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]),
            "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]),
            "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]),
            "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
    }
  }
};

}  // namespace tjk
