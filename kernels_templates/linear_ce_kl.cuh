// Fused linear cross-entropy with a KL (distillation) term, forward: the student's and the
// teacher's logit tiles in one sweep over the vocabulary, without materializing either [N, V].
//
// linear_ce_fwd_kl: grid (ceil(n_kept / 128), vocabulary splits), CeKlFwdCtaOf's threads. For every
// vocabulary tile a CTA runs two GEMMs through one pipeline: E[128 kept rows] . C[tile]^T (the
// student) and E_t[rows] . C_t[tile]^T (the teacher, same positions, same vocabulary order), both
// accumulators in registers. The portable loop runs the student's first, then the teacher's; the
// Hopper loop issues both at every K step (gemm_loop_sm90_ws_joint), one weight tile serving both
// where the teacher's weights are the student's. Both use ks = max(ceil(D / 64), ceil(D_t / 64))
// K steps (the shorter operand is zero-filled). The
// epilogue of the pair keeps, per row, three online softmax statistics: of z (lse, as without a
// KL term), of z / T (the tempered student) and of t / T (the teacher), the last with
// cross = sum exp(t/T - max)(t/T - z/T); compiler/IR.h "Loss" has the formula. Optionally it
// records both tiles' max logits per (tile, row) for the backward's filter, one bf16 each
// (in the portable CTA the four column warps merged through shared memory), target excluded.
// linear_ce_merge (linear_ce_fwd.cuh) combines the splits, KL included.
//
// On the Hopper loop the launch may group the splits in thread block clusters of
// CeFwdParams::split_cluster CTAs (1, 2 or 4; cluster dimension y): the CTAs of a cluster take
// the same 128 kept rows, which each vocabulary tile's products read again, and each loads
// 128 / cluster of them per K step into every CTA's ring (TMA multicast), so they cross from
// memory once per cluster rather than once per CTA. A stage is refilled once all of the
// cluster's computing warps are done with it (gemm_loop_sm90_ws_joint).
//
// The backward's KL gradient entries are computed by linear_ce_grad_kl (linear_ce_bwd.cuh: the
// portable linear_ce_grad<..., kKl = true>, or linear_ce_grad_kl_ws on the Hopper loop), which
// recomputes both tiles the same way.
#pragma once

#include "linear_ce_fwd.cuh"
#include "linear_ce_kl_operands.cuh"

namespace tilejit_ce {

// The CTA: kKlRows kept rows x kTileIds ids, 64 accumulators per thread plus the student's tile
// kept while the teacher's is computed (one CTA per SM). Portable: 8 warps of 64 x 32 (mma.sync).
// On sm_90a with the Hopper loop: CeKlWsCta (linear_ce_kl_operands.cuh; the computing warps
// issue products and run the epilogues, nothing else).
typedef CeCta<kKlRows, kTileIds, 3> CeKlFwdCta;
static_assert(CeKlFwdCta::kM == kKlRows && CeKlWsCta::kM == kKlRows,
              "one row tile for both loops (the launch's grid)");

// The KL forward's CTA type: the Hopper loop's where asked for and available (as CeFwdCtaOf).
template <bool kSm90Loop>
struct CeKlFwdCtaOf {
  typedef CeKlFwdCta type;
};
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
template <>
struct CeKlFwdCtaOf<true> {
  typedef CeKlWsCta type;
};
#endif

// The student's online softmax statistics of one row, at temperature 1 and T: the running max m
// of z (m / T is z / T's, T > 0), the sums of exp(z - m) and of exp((z - m) / T).
struct StudentStats {
  float m, s, st;
  __device__ __forceinline__ void reset() {
    m = neg_inf();
    s = st = 0.f;
  }
  // z(j), j < n: one row's logits of a tile (-inf for an absent entry), tile_max their max.
  // !kTempered (T = 1): st is not kept (it would equal s), and tempered_sum() gives s.
  template <int n, bool kTempered, class Z>
  __device__ __forceinline__ void add(const Z& z, float tile_max, float inv_t) {
    const float mx = fmaxf(m, tile_max);
    if (mx == neg_inf()) return;
    const float d = (m - mx) * kLog2e, mx2 = mx * kLog2e;
    float acc = 0.f, acc_t = 0.f;
#pragma unroll
    for (int j = 0; j < n; ++j) {
      const float x = fmaf(z(j), kLog2e, -mx2);  // log2e (z - m), -inf for an absent entry
      acc += fast_exp2(x);
      if (kTempered) acc_t += fast_exp2(x * inv_t);
    }
    s = s * fast_exp2(d) + acc;
    if (kTempered) st = st * fast_exp2(d * inv_t) + acc_t;
    m = mx;
  }
  template <bool kTempered>
  __device__ __forceinline__ float tempered_sum() const {
    return kTempered ? st : s;
  }
};

// The teacher's: running max m of u = t / T, sum of exp(u - m), and cross = sum exp(u - m)(u - y)
// with y = z / T.
struct TeacherStats {
  float m, s, cross;
  __device__ __forceinline__ void reset() {
    m = neg_inf();
    s = cross = 0.f;
  }
  // u(j), z(j), j < n: one row's tempered teacher logits and student logits of a tile, tile_max
  // the max of the u(j).
  template <int n, class U, class Z>
  __device__ __forceinline__ void add(const U& u, const Z& z, float tile_max, float inv_t) {
    const float mx = fmaxf(m, tile_max);
    if (mx == neg_inf()) return;  // the teacher puts no mass here yet
    const float scale = fast_exp2((m - mx) * kLog2e), mx2 = mx * kLog2e;
    float acc = 0.f, c = 0.f;
#pragma unroll
    for (int j = 0; j < n; ++j) {
      const float w = fast_exp2(fmaf(u(j), kLog2e, -mx2));
      acc += w;
      if (w > 0.f) c += w * (u(j) - z(j) * inv_t);
    }
    s = s * scale + acc;
    cross = cross * scale + c;
    m = mx;
  }
};

// Merges (m2, s2, c2) into (m, s, c), c rescaled like s.
__device__ __forceinline__ void lse_merge_scaled(float& m, float& s, float& c, float m2, float s2,
                                                 float c2) {
  float mn = fmaxf(m, m2);
  if (mn == neg_inf()) return;
  float a = fast_exp2((m - mn) * kLog2e), b = fast_exp2((m2 - mn) * kLog2e);
  s = s * a + s2 * b;
  c = c * a + c2 * b;
  m = mn;
}

// The KL forward on CTA type Cta (CeKlFwdCta or CeKlWsCta). Tile maxima: tile_max[tile, n_kept]
// (one part) and kl.teacher_tile_max likewise. Where a row's columns span several warps
// (kWarpsN > 1: the portable CTA) its statistics and tile maxima meet in shared memory; in the
// Hopper CTA a quad holds the whole row, and its first lane stores them.
template <class Prog, class Args, bool kF16, class Cta>
__device__ __forceinline__ void linear_ce_fwd_kl_tiles(const Args& args, const CeFwdParams& p,
                                                       const CeKlMaps& maps) {
  constexpr int kRows = 2 * Cta::kMI;  // thread-local rows: fragment r / 2, half r % 2
  constexpr int kCols = 2 * Cta::kNI;
  constexpr bool kAcrossWarps = Cta::kWarpsN > 1;
  // The Hopper loop's swizzle patterns start on 1024-byte boundaries (the block is declared as
  // linear_ce_fwd_tiles declares it).
  extern __shared__ __align__(1024) u16 fwd_smem[];
  u16* smem = fwd_smem;
  __shared__ float red[8][Cta::kWarpsN][Cta::kM];
  __shared__ float tile_red[2][Cta::kWarpsN][Cta::kM];
  // The Hopper CTA's biases of a tile, staged by each computing warpgroup: [warpgroup][the
  // student's, the teacher's][column].
  __shared__ float bias_stage[Cta::kWarpSpecialized && Prog::kBias ? 2 : 1][2][kTileIds];

  const CeLayout& L = p.layout;
  const CeTeacher& T = p.kl.teacher;
  const CeRows& R = p.rows;
  const int cluster = Cta::kWarpSpecialized ? p.split_cluster : 1;
  const FwdGridTile at = fwd_grid_tile(p.row_group, cluster);
  const int row0 = at.row_tile * Cta::kM;
  const int t_begin = at.split * p.tiles_per_split;
  const int t_end = min(L.num_tiles, t_begin + p.tiles_per_split);
  const int ks = kl_ksteps(R.dim, T.dim);
  const int pairs = t_end > t_begin ? t_end - t_begin : 0;
  // A cluster of CTAs along the splits (p.split_cluster; Hopper loop only) shares the row tile:
  // each CTA reads a slice of every step's A tile for all, so all run as many pairs as the
  // cluster's first split has (the longest), skipping those they do not have.
  int rank = 0, loop_pairs = pairs;
  if constexpr (Cta::kWarpSpecialized) {
    if (cluster > 1) {
      rank = int(tjk::cluster_ctarank());
      const int first = (at.split - rank) * p.tiles_per_split;
      loop_pairs = max(min(L.num_tiles, first + p.tiles_per_split) - first, 0);
    }
  }
  const int lane = threadIdx.x & 31, wn = warp_n<Cta>();
  constexpr bool kTempered = Prog::kKlTempered;
  const float inv_t = kTempered ? T.inv_temperature : 1.f;
  // Label smoothing's sums of z, only where the program smooths (p.part_zsum then set).
  constexpr bool smoothing = Prog::kLabelSmoothing;

  StudentStats student_row[kRows];
  TeacherStats teacher_row[kRows];
  float zs[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    student_row[r].reset();
    teacher_row[r].reset();
    zs[r] = 0.f;
  }
  const LogitHooks<Prog, Args, false> hooks(args);  // logit_mod's constant part

  // The epilogue of vocabulary tile t_begin + pair from the student's raw logits and the
  // teacher's, which it overwrites with z and t / T (-inf outside the vocabulary) row by row.
  auto pair_done = [&](int pair, typename Cta::Acc& student, typename Cta::Acc& acc) {
    const int tile = t_begin + pair, s = tile_segment(L, tile);
    const CeSegment& S = L.seg[s];
    const CeSegment& TS = T.layout.seg[s];
    const int lbase = (tile - S.first_tile) * kTileIds;
    // The tile's first row read afresh (tjk::thread_id()'s idiom): the rows' indices are then not
    // held through the K loop, where the Hopper loop's computing warps have no register to spare.
    const int first_row = tjk::opaque(row0);
    const int last = S.size - 1;
    // Column (ni, e)'s position in the segment and its row there (a position past the segment
    // takes the last row: a bias is read in bounds).
    const auto entry = [&](int ni, int e, int& pos, int& row) {
      pos = lbase + acc_col<Cta>(ni) + e;
      row = seg_row(S, min(pos, last));
    };
    // The raw logits with their biases, in place. The Hopper CTA's computing warpgroups each
    // stage the tile's biases in shared memory first (a load per thread, not one per column held:
    // the epilogue has no register for 64 loads in flight); the first barrier waits for the last
    // pair's reads.
    if constexpr (Prog::kBias) {
      [[maybe_unused]] const float* stage = nullptr;
      if constexpr (Cta::kWarpSpecialized) {
        const int wg = threadIdx.x >> 7, i = threadIdx.x & 127;
        tjk::named_barrier_sync(2 + wg, 128);
        const int row = seg_row(S, min(lbase + i, last));
        bias_stage[wg][0][i] = S.bias ? to_float<kF16>(S.bias[row]) : 0.f;
        bias_stage[wg][1][i] = TS.bias ? to_float<kF16>(TS.bias[row]) : 0.f;
        tjk::named_barrier_sync(2 + wg, 128);
        stage = &bias_stage[wg][0][0];
      }
#pragma unroll
      for (int ni = 0; ni < Cta::kNI; ++ni)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float b, bt;
          if constexpr (Cta::kWarpSpecialized) {
            b = stage[acc_col<Cta>(ni) + e];
            bt = stage[kTileIds + acc_col<Cta>(ni) + e];
          } else {
            int pos, row;
            entry(ni, e, pos, row);
            b = S.bias ? to_float<kF16>(S.bias[row]) : 0.f;
            bt = TS.bias ? to_float<kF16>(TS.bias[row]) : 0.f;
          }
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            student[r >> 1][ni][(r & 1) * 2 + e] += b;
            acc[r >> 1][ni][(r & 1) * 2 + e] += bt;
          }
        }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int mi = r >> 1, h = r & 1, k = first_row + acc_row<Cta>(mi, h);
      const bool row_ok = k < R.n_kept && pair < pairs;  // (a pair only the cluster has: none)
      const int orig = row_ok ? R.kept[k] : 0, tgt = row_ok ? R.targets[orig] : -1;
      const auto at = hooks.at_row(orig);
      const int tpos =
          row_ok && tgt >= S.begin && tgt - S.begin < S.size ? seg_position(S, tgt - S.begin) : -1;
      // The row's target in this tile (a tile in about V / 128 of a row's; the branch is uniform
      // over the row's quad): the lane holding it stores its logits, from the raw values (with
      // their biases).
      const bool target_here = tpos >= lbase && tpos < lbase + kTileIds;
      if (target_here) {
        float x = 0.f, xt = 0.f;
        bool mine = false;
#pragma unroll
        for (int ni = 0; ni < Cta::kNI; ++ni)
#pragma unroll
          for (int e = 0; e < 2; ++e)
            if (lbase + acc_col<Cta>(ni) + e == tpos) {
              x = student[mi][ni][h * 2 + e];
              xt = acc[mi][ni][h * 2 + e];
              mine = true;
            }
        if (mine) {
          p.target_logit[k] = at.mod(x, tgt);
          p.target_raw[k] = x;
          p.kl.teacher_target_logit[k] = at.mod(xt, tgt);
        }
      }
      // Every entry computed and those outside the rows or the segment then dropped, with no
      // branch per entry (where logit_mod does not read the id, an ordered segment's order is not
      // read at all). The teacher's tile max is of t, and t / T is kept: at T != 1 the max is
      // taken here, the target excluded.
      float tmax_t = neg_inf();
      float zmax = neg_inf(), umax = neg_inf();  // the tile's, the target's included
#pragma unroll
      for (int ni = 0; ni < Cta::kNI; ++ni)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          int pos, row;
          entry(ni, e, pos, row);
          const int id = S.begin + row;
          const float x = student[mi][ni][h * 2 + e], xt = acc[mi][ni][h * 2 + e];
          const bool in = row_ok && pos < S.size;
          const float zv = at.mod(x, id), tv = at.mod(xt, id);
          const float zk = in ? zv : neg_inf(), uk = in ? tv * inv_t : neg_inf();
          if (smoothing) zs[r] += in ? zv : 0.f;
          if (kTempered) tmax_t = fmaxf(tmax_t, in && pos != tpos ? tv : neg_inf());
          zmax = fmaxf(zmax, zk);
          umax = fmaxf(umax, uk);
          student[mi][ni][h * 2 + e] = zk;
          acc[mi][ni][h * 2 + e] = uk;
        }
      // The row's values in place: column j of the thread's is n8 group j / 2, element j % 2.
      const auto z = [&](int j) { return student[mi][j >> 1][h * 2 + (j & 1)]; };
      const auto u = [&](int j) { return acc[mi][j >> 1][h * 2 + (j & 1)]; };
      student_row[r].template add<kCols, kTempered>(z, zmax, inv_t);
      teacher_row[r].template add<kCols>(u, z, umax, inv_t);
      // The maxima the backward's filter reads, the target excluded (at T = 1, u is t).
      float tmax = kTempered ? tmax_t : umax;
      if (target_here) {
        zmax = umax = neg_inf();
#pragma unroll
        for (int j = 0; j < kCols; ++j) {
          const bool other = lbase + acc_col<Cta>(j >> 1) + (j & 1) != tpos;
          zmax = fmaxf(zmax, other ? z(j) : neg_inf());
          umax = fmaxf(umax, other ? u(j) : neg_inf());
        }
        if (!kTempered) tmax = umax;
      }
      if (p.tile_max) {  // the warp's columns: across the quad, then (kAcrossWarps) shared memory
#pragma unroll
        for (int o = 1; o <= 2; o <<= 1) {
          zmax = fmaxf(zmax, __shfl_xor_sync(0xffffffffu, zmax, o));
          tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, o));
        }
        if ((lane & 3) == 0) {
          if constexpr (kAcrossWarps) {
            tile_red[0][wn][acc_row<Cta>(mi, h)] = zmax;
            tile_red[1][wn][acc_row<Cta>(mi, h)] = tmax;
          } else if (row_ok) {
            const long long o = (long long)tile * R.n_kept + k;
            p.tile_max[o] = bf16_bits_rounded_up(zmax);
            p.kl.teacher_tile_max[o] = bf16_bits_rounded_up(tmax);
          }
        }
      }
    }
    if (kAcrossWarps && p.tile_max) {  // uniform: every thread reaches this barrier
      __syncthreads();
      if (threadIdx.x < Cta::kM && row0 + threadIdx.x < R.n_kept) {
        float zm = tile_red[0][0][threadIdx.x], tm = tile_red[1][0][threadIdx.x];
#pragma unroll
        for (int w = 1; w < Cta::kWarpsN; ++w) {
          zm = fmaxf(zm, tile_red[0][w][threadIdx.x]);
          tm = fmaxf(tm, tile_red[1][w][threadIdx.x]);
        }
        long long o = (long long)tile * R.n_kept + row0 + threadIdx.x;
        p.tile_max[o] = bf16_bits_rounded_up(zm);
        p.kl.teacher_tile_max[o] = bf16_bits_rounded_up(tm);
      }
      // The next writes to tile_red come after further barriers of the K loop.
    }
  };

  if constexpr (Cta::kWarpSpecialized) {  // both tiles of a pair in registers of their own
    // Step `step`: both products of vocabulary tile t_begin + step / ks.
    auto pair_of = [&](int q) {
      return kl_pair(L, T, R, t_begin + q, p.weights_in_position_order);
    };
    KlPairCopies pair_copies;
    auto load_pair = [&](u16*, u16* b_tiles, int step) {
      const int q = step / ks;
      if (q >= pairs) return;  // a pair only the cluster has: its A tiles come by TMA
      pair_copies(b_tiles, pair_of(q), q, (step % ks) * Cta::kK);
    };
    auto load_boxes = [&](u32 stage, u32 full, int step) {
      const int q = step / ks;
      const bool own = q < pairs;  // else only this CTA's slices of A, for its peers
      kl_load_step(maps, pair_of(own ? q : 0), row0, (step % ks) * Cta::kK, stage, full, own,
                   cluster, rank);
    };
    auto shares_b = [&](int q) {
      return q < pairs && T.shares_weights(tile_segment(L, t_begin + q));
    };
    const bool all_boxes = kl_all_boxes(L, T, p.weights_in_position_order);
    typename Cta::Acc student, teacher;
    if (!gemm_loop_sm90_ws_joint<Cta, kF16>(smem, loop_pairs, ks, load_pair, pair_done, student,
                                            teacher, shares_b, kl_ring(L, T), load_boxes, all_boxes,
                                            skip_when([&](int q) { return q >= pairs; }), cluster))
      return;  // a loading warpgroup: done
  } else {
    // The student's tile copied aside while the teacher's accumulates.
    // Step `step` of half h = step / ks: product h % 2 (the student's, then the teacher's) of
    // vocabulary tile t_begin + h / 2.
    auto product_of = [&](int h) {
      return kl_product(L, T, R, t_begin + (h >> 1), h & 1, p.weights_in_position_order);
    };
    KlCopies<Cta> copies;
    auto load = [&](u16* a_tile, u16* b_tile, int step) {
      const int h = step / ks;
      copies(a_tile, b_tile, product_of(h), h, row0, R.n_kept, (step % ks) * Cta::kK);
    };
    typename Cta::Acc student, acc;
    gemm_loop<Cta, kF16, true, true>(
        smem, pairs * 2 * ks, ks, load,
        [&](int half, typename Cta::Acc& a) {
          if ((half & 1) == 0)
            copy_acc(a, student);
          else
            pair_done(half >> 1, student, a);
        },
        acc);
  }

  // Row partials: across the 4 lanes of a quad, then across the column warps in order.
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    StudentStats& S = student_row[r];
    TeacherStats& Q = teacher_row[r];
    // The tempered sum as its own statistic from here on: max m / T.
    float tm = S.m * inv_t, ts = S.template tempered_sum<kTempered>();
#pragma unroll
    for (int o = 1; o <= 2; o <<= 1) {
      float m2 = __shfl_xor_sync(0xffffffffu, S.m, o);
      float s2 = __shfl_xor_sync(0xffffffffu, S.s, o);
      lse_merge(S.m, S.s, m2, s2);
      m2 = __shfl_xor_sync(0xffffffffu, tm, o);
      s2 = __shfl_xor_sync(0xffffffffu, ts, o);
      lse_merge(tm, ts, m2, s2);
      m2 = __shfl_xor_sync(0xffffffffu, Q.m, o);
      s2 = __shfl_xor_sync(0xffffffffu, Q.s, o);
      float c2 = __shfl_xor_sync(0xffffffffu, Q.cross, o);
      lse_merge_scaled(Q.m, Q.s, Q.cross, m2, s2, c2);
      zs[r] += __shfl_xor_sync(0xffffffffu, zs[r], o);
    }
    const int row = acc_row<Cta>(r >> 1, r & 1);
    if ((lane & 3) != 0) continue;
    if constexpr (kAcrossWarps) {
      const float v[8] = {S.m, S.s, zs[r], tm, ts, Q.m, Q.s, Q.cross};
#pragma unroll
      for (int i = 0; i < 8; ++i) red[i][wn][row] = v[i];
    } else if (row0 + row < R.n_kept) {  // the quad held the whole row
      const long long o = (long long)at.split * R.n_kept + row0 + row;
      p.part_max[o] = S.m;
      p.part_sum[o] = S.s;
      if (p.part_zsum) p.part_zsum[o] = zs[r];
      p.kl.tempered_max[o] = tm;
      p.kl.tempered_sum[o] = ts;
      p.kl.teacher_max[o] = Q.m;
      p.kl.teacher_sum[o] = Q.s;
      p.kl.cross[o] = Q.cross;
    }
  }
  if constexpr (!kAcrossWarps) return;
  __syncthreads();
  for (int r = threadIdx.x; r < Cta::kM; r += blockDim.x) {
    if (row0 + r >= R.n_kept) break;
    float m = red[0][0][r], s = red[1][0][r], z = red[2][0][r];
    float tm = red[3][0][r], ts = red[4][0][r], qm = red[5][0][r], qs = red[6][0][r];
    float c = red[7][0][r];
#pragma unroll
    for (int w = 1; w < Cta::kWarpsN; ++w) {
      lse_merge(m, s, red[0][w][r], red[1][w][r]);
      z += red[2][w][r];
      lse_merge(tm, ts, red[3][w][r], red[4][w][r]);
      lse_merge_scaled(qm, qs, c, red[5][w][r], red[6][w][r], red[7][w][r]);
    }
    long long o = (long long)at.split * R.n_kept + row0 + r;
    p.part_max[o] = m;
    p.part_sum[o] = s;
    if (p.part_zsum) p.part_zsum[o] = z;
    p.kl.tempered_max[o] = tm;
    p.kl.tempered_sum[o] = ts;
    p.kl.teacher_max[o] = qm;
    p.kl.teacher_sum[o] = qs;
    p.kl.cross[o] = c;
  }
}

// Launched with CeKlFwdCtaOf<kSm90Loop>::type's threads (launch bounds: one CTA per SM) and
// dynamic shared memory; `maps` is read by the Hopper loop only.
template <class Prog, class Args, bool kF16, bool kSm90Loop = false>
__device__ __forceinline__ void linear_ce_fwd_kl(const Args& args, const CeFwdParams& p,
                                                 const CeKlMaps& maps) {
  linear_ce_fwd_kl_tiles<Prog, Args, kF16, typename CeKlFwdCtaOf<kSm90Loop>::type>(args, p, maps);
}

#ifndef __CUDACC_RTC__
// nvcc builds launch the kernels directly (see linear_ce_common.cuh).
template <class Prog, class Args, bool kF16, bool kSm90Loop = false>
__global__ void __launch_bounds__(CeKlFwdCtaOf<kSm90Loop>::type::kThreads, 1)
    linear_ce_fwd_kl_kernel(const __grid_constant__ Args args,
                            const __grid_constant__ CeFwdParams p,
                            const __grid_constant__ CeKlMaps maps) {
  linear_ce_fwd_kl<Prog, Args, kF16, kSm90Loop>(args, p, maps);
}
#endif

}  // namespace tilejit_ce
