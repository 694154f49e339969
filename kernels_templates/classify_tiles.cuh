// Tile classification on the GPU: the mask's interval lowering (compiler/codegen/
// IntervalCodegen.h) evaluated over boxes of tiles, and the buffer summaries it reads. The same
// rules as the CPU analysis (compiler/IntervalEval.h), with one simplification: f32
// sub-expressions are not tracked (any float, possibly NaN), which is sound and costs nothing
// for the masks people write.
//
//   i32 values:  TjIv, an interval plus an affine form c_b b + c_h h + c_q q + c_kv kv + c that
//                is exact over the box when `aff` is set (comparisons of two affine values
//                compare their difference: causal and window masks classify exactly)
//   bool values: TjTri, 0 false / 1 true / 2 maybe (Kleene logic)
//   f32 values:  TjFv, carries nothing
//
// Kernels:
//   summarise_kernel       one buffer's block min / max (one thread per block of one row): level
//                          0 of its range table (range_table.cuh)
//   summary_level_kernel   one level of that table from the level below
//   classify_rows_kernel   one thread per (list, q tile) row, bisecting its kv tiles
//                          (row_bisection.cuh). Pass 1 stores each row's runs in a slot of
//                          `capacity` runs and its run count; the host turns the counts into
//                          offsets; pass 2 writes every row's runs at its offset, from the slot or,
//                          for the rows that did not fit, by classifying them again. Work is
//                          O(class changes * log kv_tiles) per row and what comes back is O(runs).
#pragma once

#include "range_table.cuh"
#include "row_bisection.cuh"

namespace tjk {

enum { kTjEq, kTjNe, kTjLt, kTjLe, kTjGt, kTjGe };

constexpr long long kTjI32Min = -2147483647LL - 1, kTjI32Max = 2147483647LL;
// Affine coefficients above this are dropped, so that ranges over a box fit in 64 bits.
constexpr long long kTjCoefLimit = 1LL << 28;

struct TjBox {
  long long lo[4], hi[4];  // b, h, q, kv, inclusive
};

struct TjIv {
  long long lo, hi;
  long long co[4];
  long long c;
  bool aff;
};

struct TjFv {};

__device__ __forceinline__ TjIv tj_iv_range(long long lo, long long hi) {
  TjIv v = {};
  if (lo < kTjI32Min || hi > kTjI32Max) lo = kTjI32Min, hi = kTjI32Max;
  v.lo = lo;
  v.hi = hi;
  return v;
}
__device__ __forceinline__ TjIv tj_iv_top() { return tj_iv_range(kTjI32Min, kTjI32Max); }
__device__ __forceinline__ TjIv tj_iv_const(long long x) {
  TjIv v = tj_iv_range(x, x);
  v.aff = true;
  v.c = x;
  return v;
}

__device__ __forceinline__ bool tj_small(long long x) {
  return x > -kTjCoefLimit && x < kTjCoefLimit;
}

// Keeps the affine form `f` when it is small and its exact range over the box fits in i32 (so
// the wrapping computation equals it); else the plain interval `plain`.
__device__ __forceinline__ TjIv tj_iv_affine(TjIv f, const TjBox& box, const TjIv& plain) {
  if (!tj_small(f.c)) return plain;
  long long lo = f.c, hi = f.c;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if (!tj_small(f.co[i])) return plain;
    long long x = f.co[i] * box.lo[i], y = f.co[i] * box.hi[i];
    lo += x < y ? x : y;
    hi += x < y ? y : x;
  }
  if (lo < kTjI32Min || hi > kTjI32Max) return plain;
  f.lo = lo;
  f.hi = hi;
  f.aff = true;
  return f;
}

__device__ __forceinline__ TjIv tj_iv_var(const TjBox& box, int i) {
  TjIv f = {};
  f.co[i] = 1;
  return tj_iv_affine(f, box, tj_iv_range(box.lo[i], box.hi[i]));
}

__device__ __forceinline__ bool tj_iv_is_const(const TjIv& a) {
  return a.aff && a.co[0] == 0 && a.co[1] == 0 && a.co[2] == 0 && a.co[3] == 0;
}

__device__ __forceinline__ TjIv tj_iv_combine(const TjIv& a, const TjIv& b, long long s,
                                              const TjBox& box, const TjIv& plain) {
  if (!a.aff || !b.aff) return plain;
  TjIv f = {};
#pragma unroll
  for (int i = 0; i < 4; ++i) f.co[i] = a.co[i] + s * b.co[i];
  f.c = a.c + s * b.c;
  return tj_iv_affine(f, box, plain);
}

__device__ __forceinline__ TjIv tj_iv_add(const TjIv& a, const TjIv& b, const TjBox& box) {
  return tj_iv_combine(a, b, 1, box, tj_iv_range(a.lo + b.lo, a.hi + b.hi));
}
__device__ __forceinline__ TjIv tj_iv_sub(const TjIv& a, const TjIv& b, const TjBox& box) {
  return tj_iv_combine(a, b, -1, box, tj_iv_range(a.lo - b.hi, a.hi - b.lo));
}

__device__ __forceinline__ TjIv tj_iv_hull4(long long p, long long q, long long r, long long s) {
  long long lo = min(min(p, q), min(r, s)), hi = max(max(p, q), max(r, s));
  return tj_iv_range(lo, hi);
}

__device__ __forceinline__ TjIv tj_iv_mul(const TjIv& a, const TjIv& b, const TjBox& box) {
  TjIv plain = tj_iv_hull4(a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi);
  if (!a.aff || !b.aff || !(tj_iv_is_const(a) || tj_iv_is_const(b))) return plain;
  const TjIv& k = tj_iv_is_const(a) ? a : b;
  const TjIv& x = tj_iv_is_const(a) ? b : a;
  if (!tj_small(k.c)) return plain;
  TjIv f = {};
#pragma unroll
  for (int i = 0; i < 4; ++i) f.co[i] = x.co[i] * k.c;
  f.c = x.c * k.c;
  return tj_iv_affine(f, box, plain);
}

// Truncating division: extremes at the corners of each sign part of the divisor; by zero, 0.
__device__ __forceinline__ TjIv tj_iv_div(const TjIv& a, const TjIv& b, const TjBox&) {
  long long lo = 0, hi = 0;
  bool any = b.lo <= 0 && b.hi >= 0;  // the 0 of a zero divisor
  long long parts[2][2] = {{b.lo, b.hi < -1 ? b.hi : -1}, {b.lo > 1 ? b.lo : 1, b.hi}};
  for (int p = 0; p < 2; ++p) {
    if (parts[p][0] > parts[p][1]) continue;
    long long v[4] = {a.lo / parts[p][0], a.lo / parts[p][1], a.hi / parts[p][0],
                      a.hi / parts[p][1]};
    for (int i = 0; i < 4; ++i) {
      if (!any) lo = hi = v[i], any = true;
      lo = min(lo, v[i]);
      hi = max(hi, v[i]);
    }
  }
  return tj_iv_range(lo, hi);  // INT_MIN / -1 = 2^31 falls out of range: the whole range
}

__device__ __forceinline__ TjIv tj_iv_mod(const TjIv& a, const TjIv& b, const TjBox&) {
  if (b.lo == b.hi && b.lo > 1 && a.lo / b.lo == a.hi / b.lo && (a.lo >= 0 || a.hi <= 0))
    return tj_iv_range(a.lo % b.lo, a.hi % b.lo);  // one bucket: the remainder is a shift
  long long m = max(b.lo < 0 ? -b.lo : b.lo, b.hi < 0 ? -b.hi : b.hi) - 1;
  if (m < 0) m = 0;
  long long lo = a.lo >= 0 ? 0 : max(a.lo, -m), hi = a.hi <= 0 ? 0 : min(a.hi, m);
  return tj_iv_range(min(lo, 0LL), max(hi, 0LL));
}

__device__ __forceinline__ TjIv tj_iv_min(const TjIv& a, const TjIv& b, const TjBox&) {
  return tj_iv_range(min(a.lo, b.lo), min(a.hi, b.hi));
}
__device__ __forceinline__ TjIv tj_iv_max(const TjIv& a, const TjIv& b, const TjBox&) {
  return tj_iv_range(max(a.lo, b.lo), max(a.hi, b.hi));
}

__device__ __forceinline__ TjIv tj_iv_neg(const TjIv& a, const TjBox& box) {
  if (a.lo == kTjI32Min) return tj_iv_top();  // -INT_MIN wraps
  TjIv zero = tj_iv_const(0);
  return tj_iv_combine(zero, a, -1, box, tj_iv_range(-a.hi, -a.lo));
}
__device__ __forceinline__ TjIv tj_iv_abs(const TjIv& a, const TjBox& box) {
  if (a.lo == kTjI32Min) return tj_iv_top();
  if (a.lo >= 0) return a;
  if (a.hi <= 0) return tj_iv_neg(a, box);
  return tj_iv_range(0, max(-a.lo, a.hi));
}

__device__ __forceinline__ TjTri tj_decide(bool yes, bool no) {
  return yes ? kTjTrue : no ? kTjFalse : kTjMaybe;
}

// Compares the range of a - b (exact for two affine values) with 0.
template <int OP>
__device__ __forceinline__ TjTri tj_iv_cmp(const TjIv& a, const TjIv& b, const TjBox& box) {
  long long lo = a.lo - b.hi, hi = a.hi - b.lo;
  if (a.aff && b.aff) {
    TjIv d = tj_iv_combine(a, b, -1, box, tj_iv_top());
    if (d.aff) lo = max(lo, d.lo), hi = min(hi, d.hi);
  }
  switch (OP) {
    case kTjEq: return tj_decide(lo == 0 && hi == 0, lo > 0 || hi < 0);
    case kTjNe: return tj_decide(lo > 0 || hi < 0, lo == 0 && hi == 0);
    case kTjLt: return tj_decide(hi < 0, lo >= 0);
    case kTjLe: return tj_decide(hi <= 0, lo > 0);
    case kTjGt: return tj_decide(lo > 0, hi <= 0);
    default: return tj_decide(lo >= 0, hi < 0);
  }
}

template <int OP>
__device__ __forceinline__ TjTri tj_tri_cmp(TjTri a, TjTri b) {
  if (a == kTjMaybe || b == kTjMaybe) return kTjMaybe;
  switch (OP) {
    case kTjEq: return a == b;
    case kTjNe: return a != b;
    case kTjLt: return a < b;
    case kTjLe: return a <= b;
    case kTjGt: return a > b;
    default: return a >= b;
  }
}

template <int OP>
__device__ __forceinline__ TjTri tj_fv_cmp(TjFv, TjFv) { return kTjMaybe; }

__device__ __forceinline__ TjTri tj_tri_not(TjTri a) { return a == kTjMaybe ? a : !a; }
__device__ __forceinline__ TjTri tj_tri_and(TjTri a, TjTri b) {
  if (a == kTjFalse || b == kTjFalse) return kTjFalse;
  return a == kTjTrue && b == kTjTrue ? kTjTrue : kTjMaybe;
}
__device__ __forceinline__ TjTri tj_tri_or(TjTri a, TjTri b) {
  if (a == kTjTrue || b == kTjTrue) return kTjTrue;
  return a == kTjFalse && b == kTjFalse ? kTjFalse : kTjMaybe;
}

__device__ __forceinline__ TjTri tj_select(TjTri c, TjTri a, TjTri b) {
  return c == kTjTrue ? a : c == kTjFalse ? b : a == b ? a : kTjMaybe;
}
__device__ __forceinline__ TjIv tj_select(TjTri c, const TjIv& a, const TjIv& b) {
  return c == kTjTrue ? a : c == kTjFalse ? b : tj_iv_range(min(a.lo, b.lo), max(a.hi, b.hi));
}
__device__ __forceinline__ TjFv tj_select(TjTri, TjFv, TjFv) { return TjFv{}; }

// Casts. Bool -> i32 is 0/1; i32 -> bool is "!= 0"; anything from f32 is unknown.
__device__ __forceinline__ TjIv tj_iv_of(TjTri t) {
  return t == kTjMaybe ? tj_iv_range(0, 1) : tj_iv_const(t);
}
__device__ __forceinline__ TjIv tj_iv_of(TjFv) { return tj_iv_top(); }
__device__ __forceinline__ TjTri tj_tri_of(const TjIv& a) {
  return tj_decide(a.lo > 0 || a.hi < 0, a.lo == 0 && a.hi == 0);
}
__device__ __forceinline__ TjTri tj_tri_of(TjFv) { return kTjMaybe; }
template <class T>
__device__ __forceinline__ TjFv tj_fv_of(const T&) { return TjFv{}; }

// The summary of one buffer: per row of the axes other than `axis` (row-major), the range table
// (range_table.cuh) of the min / max of its blocks of `granule` elements along `axis`; `all_*`
// the whole buffer's range (filled by the host; -inf / +inf are sound).
template <int RANK>
struct TjSummary {
  const double* mn;  // [levels * rows * blocks]
  const double* mx;
  long long size[RANK > 0 ? RANK : 1];
  long long rows, blocks;
  int axis, granule, levels, unused;
  double all_min, all_max;
};

// Values an i32 buffer reads over the index ranges; 0 joins when a range leaves the shape. O(1)
// per row of the other axes the box spans (up to kMaxRows, else the whole buffer's range).
template <int RANK>
__device__ TjIv tj_iv_load(const TjSummary<RANK>& s, const TjIv (&ix)[RANK > 0 ? RANK : 1]) {
  constexpr int kMaxRows = 16;
  long long lo[RANK > 0 ? RANK : 1], hi[RANK > 0 ? RANK : 1], rows = 1;
  bool outside = false;
  for (int d = 0; d < RANK; ++d) {
    outside |= ix[d].lo < 0 || ix[d].hi >= s.size[d];
    lo[d] = max(ix[d].lo, 0LL);
    hi[d] = min(ix[d].hi, s.size[d] - 1);
    if (lo[d] > hi[d]) return tj_iv_const(0);
    if (d != s.axis) rows *= hi[d] - lo[d] + 1;
  }
  double vlo = s.all_min, vhi = s.all_max;
  long long b0 = RANK == 0 ? 0 : lo[s.axis] / s.granule,
            b1 = RANK == 0 ? 0 : hi[s.axis] / s.granule;
  if (rows <= kMaxRows) {
    vlo = __longlong_as_double(0x7ff0000000000000LL);
    vhi = -vlo;
    long long index[RANK > 0 ? RANK : 1];
    for (int d = 0; d < RANK; ++d) index[d] = lo[d];
    for (;;) {
      long long row = 0;
      for (int d = 0; d < RANK; ++d)
        if (d != s.axis) row = row * s.size[d] + index[d];
      tj_range_query(s.mn, s.mx, s.rows, s.blocks, row, b0, b1, vlo, vhi);
      int d = RANK - 1;
      for (; d >= 0; --d) {
        if (d == s.axis) continue;
        if (++index[d] <= hi[d]) break;
        index[d] = lo[d];
      }
      if (d < 0) break;
    }
  }
  if (outside) vlo = fmin(vlo, 0.0), vhi = fmax(vhi, 0.0);
  if (!(vlo <= vhi)) return tj_iv_top();
  return tj_iv_range(static_cast<long long>(floor(fmax(vlo, -2147483648.0))),
                     static_cast<long long>(ceil(fmin(vhi, 2147483647.0))));
}
template <int RANK>
__device__ __forceinline__ TjFv tj_fv_load(const TjSummary<RANK>&) { return TjFv{}; }

// A param's exact value, read from the TjArgs bytes at its ArgLayout offset.
template <class T>
__device__ __forceinline__ T tj_arg(const TjArgs& a, int offset) {
  return *reinterpret_cast<const T*>(reinterpret_cast<const char*>(&a) + offset);
}

// ---- summaries ----

struct SummariseParams {
  double* mn;  // level 0 of the range table: [rows * blocks]
  double* mx;
  long long rows, blocks;
  int axis, granule;
};

// One thread per (row, block), grid-stride: the min / max of the block's elements (a NaN makes
// the block unknown, -inf / +inf; i32 buffers have none).
template <class T, int RANK>
__device__ void summarise_kernel(const SummariseParams& p, const TjBuffer<T, RANK>& buf) {
  const double inf = __longlong_as_double(0x7ff0000000000000LL);
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < p.rows * p.blocks; i += static_cast<long long>(gridDim.x) * blockDim.x) {
    long long row = i / p.blocks, blk = i % p.blocks;
    long long offset = 0, rest = row;
    for (int d = RANK - 1; d >= 0; --d) {
      if (d == p.axis) continue;
      offset += (rest % buf.size[d]) * buf.stride[d];
      rest /= buf.size[d];
    }
    double lo = inf, hi = -inf;
    long long len = buf.size[p.axis], j0 = blk * p.granule;
    for (long long j = j0; j < j0 + p.granule && j < len; ++j) {
      double v = tj_decode(buf.ptr[offset + j * buf.stride[p.axis]]);
      if (v != v) {
        lo = -inf;
        hi = inf;
        break;
      }
      lo = fmin(lo, v);
      hi = fmax(hi, v);
    }
    p.mn[i] = lo;
    p.mx[i] = hi;
  }
}

// A rank-0 buffer is one value.
template <class T>
__device__ void summarise_kernel(const SummariseParams& p, const TjBuffer<T, 0>& buf) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  double v = tj_decode(buf.ptr[0]);
  double inf = __longlong_as_double(0x7ff0000000000000LL);
  p.mn[0] = v == v ? v : -inf;
  p.mx[0] = v == v ? v : inf;
}

struct SummaryLevelParams {
  double* mn;  // the whole range table: [levels * rows * blocks]
  double* mx;
  long long rows, blocks;
  int level, unused;
};

// Level `p.level` >= 1 of a range table from the level below, one thread per entry.
__device__ inline void summary_level_kernel(const SummaryLevelParams& p) {
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < p.rows * p.blocks; i += static_cast<long long>(gridDim.x) * blockDim.x)
    tj_range_table_entry(p.mn, p.mx, p.rows, p.blocks, p.level, i);
}

// ---- classification ----

struct ClassifyRowsParams {
  TjRun* slots;        // [rows * capacity]: pass 1 stores a row's first runs here
  int* counts;         // [rows]: pass 1 writes each row's run count
  const int* offsets;  // [rows + 1]: pass 2 reads where each row's runs go (from the counts)
  TjRun* runs;         // [offsets[rows]]: pass 2 writes the runs
  int rows, capacity, pass;
  int heads;  // the mask's head extent (1: broadcast); lists are b * heads + h
  int seq_q, seq_kv, block_q, block_kv, q_tiles, kv_tiles;
};

// One thread per row (grid-stride), row r = list * q_tiles + q tile, as BlockMask orders them.
template <class P, class S>
__device__ void classify_rows_kernel(const ClassifyRowsParams& p, const TjArgs& a, const S& s) {
  for (long long r = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; r < p.rows;
       r += static_cast<long long>(gridDim.x) * blockDim.x) {
    long long qt = r % p.q_tiles, list = r / p.q_tiles;
    TjBox row;
    row.lo[0] = row.hi[0] = list / p.heads;
    row.lo[1] = row.hi[1] = list % p.heads;
    row.lo[2] = qt * p.block_q;
    row.hi[2] = min(row.lo[2] + p.block_q, static_cast<long long>(p.seq_q)) - 1;
    // The box of kv tiles k0..k1 (the last one clipped to seq_kv).
    auto eval = [&](int k0, int k1) -> TjTri {
      TjBox box = row;
      box.lo[3] = static_cast<long long>(k0) * p.block_kv;
      box.hi[3] = min((k1 + 1LL) * p.block_kv, static_cast<long long>(p.seq_kv)) - 1;
      return P::mask_box(a, s, box);
    };
    TjRun* slot = p.slots + r * p.capacity;
    if (p.pass == 1) {
      p.counts[r] = tj_row_count_pass(p.kv_tiles, eval, slot, p.capacity);
    } else {
      int begin = p.offsets[r];
      tj_row_write_pass(p.kv_tiles, eval, slot, p.capacity, p.runs + begin,
                        p.offsets[r + 1] - begin);
    }
  }
}

}  // namespace tjk
