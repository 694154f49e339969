// Tensor-core building blocks of the linear cross-entropy kernels (sm_80+): 16-bit float bit
// conversions, cp.async copies, ldmatrix fragment loads from swizzled shared tiles, the
// m16n8k16 mma, and one pipelined CTA-tile GEMM loop that every loss kernel shares.
//
// Shared tiles hold 64 16-bit elements (128 bytes) per row, in 16-byte chunks placed at
// chunk ^ (row % 8): a warp's ldmatrix touches 8 rows at one logical chunk, which lands in 8
// different bank groups. An operand is either K-major (tile [rows = M or N][64 k]) or MN-major
// (tile [2 panels of 64 m/n][64 k rows][64]); MN-major fragments are read with ldmatrix.trans.
//
// Compiles under NVRTC: device code only, no toolkit headers.
#pragma once

namespace tilejit_ce {

typedef unsigned short u16;
typedef unsigned int u32;

// ---- 16-bit floats as raw bits (no cuda_bf16.h under NVRTC) ----------------------------------

template <bool kF16>
__device__ __forceinline__ float to_float(u16 bits) {
  if (kF16) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(bits));
    return f;
  }
  return __uint_as_float(u32(bits) << 16);
}

// Packs two floats (lo in the low half), round to nearest even.
template <bool kF16>
__device__ __forceinline__ u32 pack2(float lo, float hi) {
  u32 r;
  if (kF16) {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  }
  return r;
}

// bf16 bits of the smallest bf16 >= x (x not NaN): dropped low bits round a positive value up
// and a negative one towards zero, so a maximum stored this way never shrinks.
__device__ __forceinline__ u16 bf16_bits_rounded_up(float x) {
  const u32 u = __float_as_uint(x);
  const u32 high = u >> 16;
  return u16((u & 0xffffu) && !(u >> 31) ? high + 1 : high);
}

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// ---- copies and fragments ----------------------------------------------------------------

__device__ __forceinline__ u32 smem_addr(const void* p) {
  return static_cast<u32>(__cvta_generic_to_shared(p));
}

// 16-byte async copy; a false `valid` fills the destination with zeros and reads nothing.
__device__ __forceinline__ void cp_async16(u32 dst, const void* src, bool valid) {
  int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(u32 (&r)[4], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

template <bool kF16>
__device__ __forceinline__ void mma16816(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
  if (kF16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// ---- the CTA tile ------------------------------------------------------------------------

// A CTA computes an M x N tile (M a multiple of 64) in K steps of 64 through a kStages-deep
// cp.async pipeline; (M/64) x (N/WarpN) warps, each a 64 x WarpN warp tile:
// acc[4 m16][kNI n8][4]. 64 x 32 warp tiles fit in 128 registers (two 8-warp CTAs per SM);
// 64 x 64 warp tiles need ~230 (one CTA per SM).
//
// The accumulator interface every CTA type offers (this one and the Hopper CeWgCta,
// ce_wgmma.cuh), so that epilogues are written once: Acc is float[kMI][kNI][4]; the thread holds
// tile rows row(mi, h) in acc[mi][..][2h, 2h+1] and columns col(ni), col(ni) + 1 of each; its
// columns all lie in the kWarpsN-th part col_warp() of the tile (kWarpsN parts of N / kWarpsN
// columns, reduced across warps through shared memory), and the four lanes of a quad share rows.
template <int M, int N, int Stages, int WarpN = 32>
struct CeCta {
  static constexpr bool kWgmma = false;
  // Every thread loads and computes (CeWsCta in ce_wgmma.cuh separates the two).
  static constexpr bool kWarpSpecialized = false;
  static constexpr int kM = M, kN = N, kK = 64, kStages = Stages, kWarpN = WarpN;
  static constexpr int kWarpsM = M / 64, kWarpsN = N / WarpN, kThreads = 32 * kWarpsM * kWarpsN;
  static constexpr int kMI = 4, kNI = WarpN / 8;
  static constexpr int kAElems = M * 64, kBElems = N * 64, kStageElems = kAElems + kBElems;
  static constexpr int kSmemBytes = kStages * kStageElems * 2;
  typedef float Acc[kMI][kNI][4];

  static constexpr int kLoadThreads = kThreads, kComputeThreads = kThreads;
  __device__ static __forceinline__ int load_thread() { return threadIdx.x; }
  __device__ static __forceinline__ int warp_m() { return (threadIdx.x >> 5) % kWarpsM; }
  __device__ static __forceinline__ int col_warp() { return (threadIdx.x >> 5) / kWarpsM; }
  __device__ static __forceinline__ int row(int mi, int h) {
    return warp_m() * 64 + mi * 16 + h * 8 + ((threadIdx.x & 31) >> 2);
  }
  __device__ static __forceinline__ int col(int ni) {
    return col_warp() * kWarpN + ni * 8 + (threadIdx.x & 3) * 2;
  }
};

template <class Cta>
__device__ __forceinline__ int warp_m() {
  return Cta::warp_m();
}
template <class Cta>
__device__ __forceinline__ int warp_n() {
  return Cta::col_warp();
}
template <class Cta>
__device__ __forceinline__ int acc_row(int mi, int h) {
  return Cta::row(mi, h);
}
template <class Cta>
__device__ __forceinline__ int acc_col(int ni) {
  return Cta::col(ni);
}

template <class Acc>
__device__ __forceinline__ void zero_acc(Acc& acc) {
  constexpr int kMI = sizeof(acc) / sizeof(acc[0]);
  constexpr int kNI = sizeof(acc[0]) / sizeof(acc[0][0]);
#pragma unroll
  for (int i = 0; i < kMI; ++i)
#pragma unroll
    for (int j = 0; j < kNI; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
}

template <class Acc>
__device__ __forceinline__ void copy_acc(const Acc& from, Acc& to) {
  constexpr int kMI = sizeof(from) / sizeof(from[0]);
  constexpr int kNI = sizeof(from[0]) / sizeof(from[0][0]);
#pragma unroll
  for (int i = 0; i < kMI; ++i)
#pragma unroll
    for (int j = 0; j < kNI; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) to[i][j][e] = from[i][j][e];
}

__device__ __forceinline__ int swz(int row, int chunk) {
  return row * 64 + ((chunk ^ (row & 7)) << 3);
}

// One operand tile of one K step, read from a row-major matrix: rows [0, rows) starting at
// `base` (row stride `stride` elements) and `cols` valid columns from base; everything outside
// is zero-filled (the copy names `base` and reads nothing). With `gather`, operand row r is
// matrix row gather[r] from base (a vocabulary order: weight rows visited out of place).
struct CeOperand {
  const u16* base;
  long long stride;
  int rows, cols;
  const int* gather = nullptr;
};

// Source of operand row r (r < op.rows).
__device__ __forceinline__ const u16* operand_row(const CeOperand& op, int r) {
  return op.base + (long long)op.gather[r] * op.stride;
}

// K-major kRows x 64 tile: operand row r = tile row r, columns = k.
// `tid`: this thread's index among the kThreads that load (as for load_mnmajor below).
template <int kRows, int kThreads>
__device__ __forceinline__ void load_kmajor(u16* tile, const CeOperand& op,
                                            int tid = threadIdx.x) {
  constexpr int kRowStep = kThreads / 8;  // rows between a thread's copies (a multiple of 8)
  const int row0 = tid >> 3, chunk = tid & 7;
  const bool col_ok = chunk * 8 < op.cols;
  const u32 dst = smem_addr(tile + swz(row0, chunk));
  if (op.gather) {
#pragma unroll
    for (int i = 0; i < kRows / kRowStep; ++i) {
      const int r = row0 + i * kRowStep;
      const bool ok = col_ok && r < op.rows;
      cp_async16(dst + i * kRowStep * 128, ok ? operand_row(op, r) + chunk * 8 : op.base, ok);
    }
    return;
  }
  const u16* src = op.base + row0 * op.stride + chunk * 8;
  const long long step = kRowStep * op.stride;
#pragma unroll
  for (int i = 0; i < kRows / kRowStep; ++i) {
    bool ok = col_ok && row0 + i * kRowStep < op.rows;
    cp_async16(dst + i * kRowStep * 128, ok ? src : op.base, ok);
    src += step;
  }
}

// The rows of a gathered K-major kRows x 64 tile that load_kmajor's thread `tid` copies, read
// from the gather list once and reused for every K step of the tile (a loader otherwise waits
// for the list's loads before each step's copies).
template <int kRows, int kThreads>
struct GatheredRows {
  static constexpr int kRowStep = kThreads / 8, kCount = kRows / kRowStep;
  static_assert(kRowStep % 8 == 0, "a thread's rows keep their swizzle pattern (row % 8)");
  int row[kCount];  // matrix row, or -1 past the operand's rows

  __device__ __forceinline__ void read(const int* gather, int rows, int tid) {
#pragma unroll
    for (int i = 0; i < kCount; ++i) {
      const int r = (tid >> 3) + i * kRowStep;
      row[i] = r < rows ? gather[r] : -1;
    }
  }
};

// load_kmajor of a gathered operand whose rows this thread read into `rows` (op.gather unused).
template <int kRows, int kThreads>
__device__ __forceinline__ void load_kmajor(u16* tile, const CeOperand& op,
                                            const GatheredRows<kRows, kThreads>& rows, int tid) {
  constexpr int kRowStep = GatheredRows<kRows, kThreads>::kRowStep;
  const int chunk = tid & 7;
  const bool col_ok = chunk * 8 < op.cols;
  const u32 dst = smem_addr(tile + swz(tid >> 3, chunk));
#pragma unroll
  for (int i = 0; i < GatheredRows<kRows, kThreads>::kCount; ++i) {
    const bool ok = col_ok && rows.row[i] >= 0;
    cp_async16(dst + i * kRowStep * 128,
               ok ? op.base + (long long)rows.row[i] * op.stride + chunk * 8 : op.base, ok);
  }
}

// MN-major 64 (k) x kCols (m or n) tile, stored as kCols/64 panels of [64 k][64]: operand row r
// = k row r, columns = m or n.
template <int kCols, int kThreads>
__device__ __forceinline__ void load_mnmajor(u16* tile, const CeOperand& op,
                                             int tid = threadIdx.x) {
  constexpr int kChunks = kCols / 8, kRowStep = kThreads / kChunks;
  static_assert(kRowStep % 8 == 0 || 8 % kRowStep == 0, "rows repeat their swizzle pattern");
  // A thread's copies come in kPhases swizzle patterns (row % 8): one when its row step is a
  // multiple of 8 (128 loading threads and 256 columns give a step of 4: two).
  constexpr int kPhases = kRowStep % 8 == 0 ? 1 : 8 / kRowStep;
  const int krow0 = tid / kChunks, cc = tid % kChunks;
  const bool col_ok = cc * 8 < op.cols;
  const u32 panel = smem_addr(tile + (cc >> 3) * 4096);
  auto dst = [&](int i) {  // copy i's address: a phase's base plus whole swizzle patterns
    const int ph = i % kPhases;
    return panel + 2 * swz(krow0 + ph * kRowStep, cc & 7) + (i - ph) * kRowStep * 128;
  };
  if (op.gather) {
#pragma unroll
    for (int i = 0; i < 64 / kRowStep; ++i) {
      const int r = krow0 + i * kRowStep;
      const bool ok = col_ok && r < op.rows;
      cp_async16(dst(i), ok ? operand_row(op, r) + cc * 8 : op.base, ok);
    }
    return;
  }
  const u16* src = op.base + krow0 * op.stride + cc * 8;
  const long long step = kRowStep * op.stride;
#pragma unroll
  for (int i = 0; i < 64 / kRowStep; ++i) {
    bool ok = col_ok && krow0 + i * kRowStep < op.rows;
    cp_async16(dst(i), ok ? src : op.base, ok);
    src += step;
  }
}

// Per-thread ldmatrix offsets (elements from the operand tile), computed once per kernel. With
// the swizzle, a K-major operand's offset is additive in the m/n sub-tile and a per-k16-step
// register; an MN-major operand's is additive in the k16 step and a per-sub-tile register.
struct CeFragOffsets {
  u32 a[4], b[4];
};

template <class Cta, bool kAKMajor, bool kBKMajor>
__device__ __forceinline__ CeFragOffsets frag_offsets() {
  const int lane = threadIdx.x & 31, j = lane >> 3, r = lane & 7;
  const int wm = warp_m<Cta>(), wn = warp_n<Cta>();
  CeFragOffsets f;
#pragma unroll
  for (int x = 0; x < 4; ++x) {
    if (kAKMajor)  // x = k16 step; + mi * 1024
      f.a[x] = (wm * 64 + (lane & 15)) * 64 + (((x * 2 + (lane >> 4)) ^ r) << 3);
    else  // x = mi; + kk * 1024
      f.a[x] = wm * 4096 + (r + (j >> 1) * 8) * 64 + (((x * 2 + (j & 1)) ^ r) << 3);
    const int n0 = wn * Cta::kWarpN;
    if (kBKMajor)  // x = k16 step; + np * 1024
      f.b[x] = (n0 + r + (j >> 1) * 8) * 64 + (((x * 2 + (j & 1)) ^ r) << 3);
    else  // x = np; + kk * 1024
      f.b[x] = (n0 >> 6) * 4096 + (r + (j & 1) * 8) * 64 +
               (((((n0 & 63) >> 3) + x * 2 + (j >> 1)) ^ r) << 3);
  }
  return f;
}

template <class Cta, bool kF16, bool kAKMajor, bool kBKMajor>
__device__ __forceinline__ void mma_k16(typename Cta::Acc& acc, u32 a_tile, u32 b_tile,
                                        const CeFragOffsets& f, int kk) {
  u32 a[4][4], b[Cta::kNI / 2][4];
#pragma unroll
  for (int mi = 0; mi < 4; ++mi) {
    u32 off = kAKMajor ? f.a[kk] + mi * 1024 : f.a[mi] + kk * 1024;
    if (kAKMajor)
      ldmatrix_x4(a[mi], a_tile + off * 2);
    else
      ldmatrix_x4_trans(a[mi], a_tile + off * 2);
  }
#pragma unroll
  for (int np = 0; np < Cta::kNI / 2; ++np) {
    u32 off = kBKMajor ? f.b[kk] + np * 1024 : f.b[np] + kk * 1024;
    if (kBKMajor)
      ldmatrix_x4(b[np], b_tile + off * 2);
    else
      ldmatrix_x4_trans(b[np], b_tile + off * 2);
  }
#pragma unroll
  for (int mi = 0; mi < 4; ++mi)
#pragma unroll
    for (int ni = 0; ni < Cta::kNI; ++ni)
      mma16816<kF16>(acc[mi][ni], a[mi], b[ni >> 1][(ni & 1) * 2], b[ni >> 1][(ni & 1) * 2 + 1]);
}

// tile_done for single-tile loops: the accumulators are read after the loop.
struct KeepAccumulators {
  template <class Acc>
  __device__ void operator()(int, Acc&) const {}
};

// The pipeline's start: the copies of steps 0 .. kStages - 2, one commit group each (empty past
// `steps`). Shared by gemm_loop and ce_wgmma.cuh's gemm_loop_sm90.
template <class Cta, class Load>
__device__ __forceinline__ void pipeline_prologue(u16* smem, int steps, Load& load) {
#pragma unroll
  for (int s = 0; s < Cta::kStages - 1; ++s) {
    if (s < steps) load(smem + s * Cta::kStageElems, smem + s * Cta::kStageElems + Cta::kAElems, s);
    cp_async_commit();
  }
}

// The pipelined loop over `steps` K steps. load(a_tile, b_tile, step) issues the cp.async
// copies of one step; after every `steps_per_tile` steps, tile_done(tile index, acc) consumes
// the accumulators, which then restart at zero. Loads of the next output tile overlap the
// epilogue of the current one. `smem` holds Cta::kSmemBytes.
template <class Cta, bool kF16, bool kAKMajor, bool kBKMajor, class Load, class TileDone>
__device__ __forceinline__ void gemm_loop(u16* smem, int steps, int steps_per_tile, Load load,
                                          TileDone tile_done, typename Cta::Acc& acc) {
  constexpr int S = Cta::kStages;
  const CeFragOffsets frag = frag_offsets<Cta, kAKMajor, kBKMajor>();
  const u32 smem_base = smem_addr(smem);
  zero_acc(acc);
  pipeline_prologue<Cta>(smem, steps, load);
  for (int step = 0; step < steps; ++step) {
    cp_async_wait<S - 2>();
    __syncthreads();
    const u32 cur = smem_base + (step % S) * (Cta::kStageElems * 2);
    mma_k16<Cta, kF16, kAKMajor, kBKMajor>(acc, cur, cur + Cta::kAElems * 2, frag, 0);
    int next = step + S - 1;  // the tensor cores start before this step's copies are issued
    if (next < steps) {
      u16* st = smem + (next % S) * Cta::kStageElems;
      load(st, st + Cta::kAElems, next);
    }
    cp_async_commit();
#pragma unroll
    for (int kk = 1; kk < 4; ++kk)
      mma_k16<Cta, kF16, kAKMajor, kBKMajor>(acc, cur, cur + Cta::kAElems * 2, frag, kk);
    if ((step + 1) % steps_per_tile == 0) {
      tile_done(step / steps_per_tile, acc);
      zero_acc(acc);
    }
  }
  cp_async_wait<0>();
  __syncthreads();
}

}  // namespace tilejit_ce
