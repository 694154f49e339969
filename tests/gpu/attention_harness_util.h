// Host-side plumbing of the attention GPU harness: 16-bit conversions, device buffers, block
// masks classified by brute force and uploaded, error metrics, TMA tensor maps and kernel
// launches (the portable kernels, the sm_90a forward and the sm_90a backward).
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "kernels_templates/attention_bwd.cuh"
#include "kernels_templates/attention_bwd_sm90.cuh"
#include "kernels_templates/attention_fwd_sm90.cuh"
#include "runtime/AttentionTma.h"
#include "tests/gpu/tma_encode.h"
#include "runtime/BlockMask.h"

#define CUDA_CHECK(expr)                                                 \
  do {                                                                   \
    cudaError_t err_ = (expr);                                           \
    if (err_ != cudaSuccess) {                                           \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, \
                   cudaGetErrorString(err_));                            \
      std::exit(2);                                                      \
    }                                                                    \
  } while (0)

namespace attn_test {

// 16-bit <-> float on the host, through the toolkit's conversion routines.
template <class T>
struct HostElem;
template <>
struct HostElem<tjk::bf16> {
  static constexpr const char* kName = "bf16";
  static uint16_t from_float(float f) {
    __nv_bfloat16 h = __float2bfloat16_rn(f);
    uint16_t b;
    std::memcpy(&b, &h, 2);
    return b;
  }
  static float to_float(uint16_t b) {
    __nv_bfloat16 h;
    std::memcpy(&h, &b, 2);
    return __bfloat162float(h);
  }
};
template <>
struct HostElem<tjk::f16> {
  static constexpr const char* kName = "fp16";
  static uint16_t from_float(float f) {
    __half h = __float2half_rn(f);
    uint16_t b;
    std::memcpy(&b, &h, 2);
    return b;
  }
  static float to_float(uint16_t b) {
    __half h;
    std::memcpy(&h, &b, 2);
    return __half2float(h);
  }
};

template <class E>
struct DevBuf {
  E* p = nullptr;
  size_t n = 0;
  DevBuf() = default;
  explicit DevBuf(size_t count) : n(count) {
    CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(E)));
  }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  DevBuf(DevBuf&& o) noexcept : p(o.p), n(o.n) { o.p = nullptr; }
  DevBuf& operator=(DevBuf&& o) noexcept {
    std::swap(p, o.p);
    std::swap(n, o.n);
    return *this;
  }
  ~DevBuf() {
    if (p) cudaFree(p);
  }
  void upload(const std::vector<E>& h) {
    CUDA_CHECK(cudaMemcpy(p, h.data(), h.size() * sizeof(E), cudaMemcpyHostToDevice));
  }
  std::vector<E> download() const {
    std::vector<E> h(n);
    CUDA_CHECK(cudaMemcpy(h.data(), p, n * sizeof(E), cudaMemcpyDeviceToHost));
    return h;
  }
  void poison() { CUDA_CHECK(cudaMemset(p, 0xff, n * sizeof(E))); }  // NaN in f32/bf16/f16
};

template <class F>
void parallel_for(int n, const F& body) {
  int workers = std::min<int>(std::max(1u, std::thread::hardware_concurrency()), std::max(n, 1));
  std::atomic<int> next{0};
  std::vector<std::thread> pool;
  for (int w = 0; w < workers; ++w)
    pool.emplace_back([&] {
      for (int i = next++; i < n; i = next++) body(i);
    });
  for (auto& t : pool) t.join();
}

// A block mask classified element by element with the program's own mask_mod, and the number
// of unmasked (q, kv) pairs over the mask's (b, h) extents.
struct ClassifiedMask {
  tilejit::BlockMask mask;
  double pairs = 0;
};

template <class Prog>
ClassifiedMask classify_mask(const typename Prog::Args& host_args, int mask_batch, int mask_heads,
                             int seq_q, int seq_kv) {
  tilejit::BlockMaskShape shape{mask_batch, mask_heads, seq_q, seq_kv, 128, 64};
  const int qt_n = (seq_q + shape.block_q - 1) / shape.block_q;
  const int kt_n = (seq_kv + shape.block_kv - 1) / shape.block_kv;
  std::vector<tilejit::TileClass> classes(static_cast<size_t>(mask_batch) * mask_heads * qt_n *
                                          kt_n);
  std::vector<double> pairs(static_cast<size_t>(mask_batch) * mask_heads * qt_n, 0.0);
  parallel_for(mask_batch * mask_heads * qt_n, [&](int idx) {
    int qt = idx % qt_n, bh = idx / qt_n, b = bh / mask_heads, h = bh % mask_heads;
    int q0 = qt * shape.block_q, q1 = std::min(seq_q, q0 + shape.block_q);
    for (int kt = 0; kt < kt_n; ++kt) {
      int k0 = kt * shape.block_kv, k1 = std::min(seq_kv, k0 + shape.block_kv);
      long kept = 0;
      for (int q = q0; q < q1; ++q)
        for (int kv = k0; kv < k1; ++kv) kept += Prog::mask_mod(host_args, b, h, q, kv) ? 1 : 0;
      long area = static_cast<long>(q1 - q0) * (k1 - k0);
      classes[static_cast<size_t>(idx) * kt_n + kt] = kept == 0      ? tilejit::TileClass::Empty
                                                      : kept == area ? tilejit::TileClass::Full
                                                                     : tilejit::TileClass::Partial;
      pairs[idx] += static_cast<double>(kept);
    }
  });
  ClassifiedMask r{tilejit::BlockMask::from_tile_classes(shape, classes), 0.0};
  for (double p : pairs) r.pairs += p;
  return r;
}

struct DevMask {
  DevBuf<int> offsets, t_offsets;
  DevBuf<int2> runs, t_runs;
  tjk::BlockMaskView view{};

  explicit DevMask(const tilejit::BlockMask& m)
      : offsets(m.offsets().size()),
        t_offsets(m.t_offsets().size()),
        runs(m.runs().size()),
        t_runs(m.t_runs().size()) {
    static_assert(sizeof(tilejit::TileRun) == sizeof(int2), "run layouts must agree");
    offsets.upload(m.offsets());
    t_offsets.upload(m.t_offsets());
    CUDA_CHECK(cudaMemcpy(runs.p, m.runs().data(), m.runs().size() * sizeof(int2),
                          cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(t_runs.p, m.t_runs().data(), m.t_runs().size() * sizeof(int2),
                          cudaMemcpyHostToDevice));
    view = {offsets.p,       runs.p,      t_offsets.p,  t_runs.p,          m.shape().batch,
            m.shape().heads, m.q_tiles(), m.kv_tiles(), m.shape().block_q, m.shape().block_kv};
  }
};

// ||a - ref|| / ||ref|| over entries where `use` holds; NaN anywhere in `a` gives NaN.
inline double rel_l2(const std::vector<double>& a, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i])) return NAN;
    num += (a[i] - ref[i]) * (a[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// Where a [B, H, S, D] tensor (D = 1 for [B, H, S]) and its reference disagree, element by
// element: a NaN, an infinity that is not the reference's, or |got - ref| > atol + rtol |ref|.
struct Mismatch {
  long count = 0;
  size_t first = 0;    // the first bad element (row-major index)
  size_t worst = 0;    // the largest |got - ref| (NaN counts as the largest)
  double max_err = 0;  // that error
};
inline Mismatch find_mismatches(const std::vector<double>& got, const std::vector<double>& ref,
                                double atol, double rtol) {
  Mismatch m;
  for (size_t i = 0; i < got.size(); ++i) {
    double g = got[i], r = ref[i];
    bool same_inf = std::isinf(g) && std::isinf(r) && (g > 0) == (r > 0);
    double err = same_inf ? 0.0 : std::fabs(g - r);
    if (std::isnan(err)) err = INFINITY;
    if (err > m.max_err) m.max_err = err, m.worst = i;
    if (err > atol + rtol * std::fabs(r)) {
      if (m.count == 0) m.first = i;
      ++m.count;
    }
  }
  return m;
}
inline std::string element_name(size_t i, int H, int S, int D) {
  size_t d = i % D, q = i / D % S, h = i / D / S % H, b = i / D / S / H;
  return D == 1 ? "(b " + std::to_string(b) + ", h " + std::to_string(h) + ", q " +
                      std::to_string(q) + ")"
                : "(b " + std::to_string(b) + ", h " + std::to_string(h) + ", q " +
                      std::to_string(q) + ", d " + std::to_string(d) + ")";
}
// Prints where `m` found disagreements: the first one, the worst one and their values.
inline void print_mismatches(const char* what, const Mismatch& m, const std::vector<double>& got,
                             const std::vector<double>& ref, int H, int S, int D) {
  std::printf("  %-22s max |err| %.3e at %s (got %.6g, ref %.6g)\n", what, m.max_err,
              element_name(m.worst, H, S, D).c_str(), got[m.worst], ref[m.worst]);
  if (m.count > 0)
    std::printf("  %-22s %ld elements out of tolerance; first at %s (got %.6g, ref %.6g)\n", what,
                m.count, element_name(m.first, H, S, D).c_str(), got[m.first], ref[m.first]);
}

// Tensor layouts: [B, H, S, D] or [B, S, H, D], element strides for b, h, s.
inline tjk::AttnTensor make_tensor(void* p, int H, int S, int D, bool bshd) {
  if (bshd) return {p, static_cast<long long>(S) * H * D, D, static_cast<long long>(H) * D};
  return {p, static_cast<long long>(H) * S * D, static_cast<long long>(S) * D, D};
}
inline size_t layout_index(int b, int h, int s, int d, int H, int S, int D, bool bshd) {
  return bshd ? ((static_cast<size_t>(b) * S + s) * H + h) * D + d
              : ((static_cast<size_t>(b) * H + h) * S + s) * D + d;
}

// The TMA tensor map of an attention operand, encoded as the runtime does.
inline tjk::TmaDescriptor tensor_map(const tjk::AttnTensor& t, int B, int H, int S, int D,
                                     bool f16, unsigned box_rows = 64) {
  const int64_t shape[4] = {B, H, S, D};
  const int64_t strides[3] = {t.stride_b, t.stride_h, t.stride_s};
  return encode_tensor_map(
      tilejit::attention_tensor_map_args(t.ptr, shape, strides, f16, box_rows),
      "an attention operand");
}

// The forward's maps: Q, K, V in 64-row boxes, the output in 16-row boxes (one warp's rows, which
// its epilogue stores by TMA), as runtime/Attention.cpp encodes them.
inline tjk::AttnFwdTmaMaps tensor_maps(const tjk::AttentionFwdParams& p, int D, bool f16) {
  const tjk::AttnShape& s = p.shape;
  return {tensor_map(p.q, s.batch, s.heads_q, s.seq_q, D, f16),
          tensor_map(p.k, s.batch, s.heads_kv, s.seq_kv, D, f16),
          tensor_map(p.v, s.batch, s.heads_kv, s.seq_kv, D, f16),
          tensor_map(p.out, s.batch, s.heads_q, s.seq_q, D, f16, 16)};
}

// The backward's maps: Q and dO shaped like Q, K and V like K, and the fp32 dQ accumulator.
inline tjk::AttnBwdTmaMaps tensor_maps(const tjk::AttentionBwdParams& p, int D, bool f16) {
  const tjk::AttnShape& s = p.shape;
  const int64_t dq_shape[4] = {s.batch, s.heads_q, s.seq_q, D};
  return {tensor_map(p.q, s.batch, s.heads_q, s.seq_q, D, f16),
          tensor_map(p.k, s.batch, s.heads_kv, s.seq_kv, D, f16),
          tensor_map(p.v, s.batch, s.heads_kv, s.seq_kv, D, f16),
          tensor_map(p.d_out, s.batch, s.heads_q, s.seq_q, D, f16),
          p.dq_accum ? encode_tensor_map(tilejit::dq_accum_tensor_map_args(p.dq_accum, dq_shape),
                                         "the dQ accumulator")
                     : tjk::TmaDescriptor{}};
}

// Whether this binary carries the sm_90a forward for the current device (built for sm_90a and
// running on compute capability 9.0); elsewhere the kernel is a trap.
__global__ void sm90_probe_kernel(int* has) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  *has = 1;
#else
  *has = 0;
#endif
}
inline bool sm90_forward_available() {
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  if (prop.major != 9 || prop.minor != 0) return false;
  DevBuf<int> has(1);
  sm90_probe_kernel<<<1, 1>>>(has.p);
  CUDA_CHECK(cudaDeviceSynchronize());
  return has.download()[0] == 1;
}

// The Hopper kernels' two work-item counters (AttentionFwdParams::work, AttentionBwdParams::work):
// zeroed once, and left zero by every launch, which the harness checks after each one it checks.
inline int* sm90_work_counters() {
  static int* counters = [] {
    int* c = nullptr;
    CUDA_CHECK(cudaMalloc(&c, 2 * sizeof(int)));
    CUDA_CHECK(cudaMemset(c, 0, 2 * sizeof(int)));
    return c;
  }();
  return counters;
}

// Launches of the portable kernels and the sm_90a kernels for one (program, dtype, head dim).
template <class Prog, class T, int D>
struct Launch {
  using Args = typename Prog::Args;
  using Cfg = tjk::AttnFwdConfig<D>;

  static void fwd(const tjk::AttentionFwdParams& p, const Args& a) {
    auto kernel = tjk::attention_fwd_kernel<Prog, Args, T, D, Cfg::kWarps, Cfg::kMTiles>;
    constexpr int smem = tjk::AttnFwdSmem<D, Cfg::kWarps, Cfg::kMTiles>::kBytes;
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    dim3 grid(p.shape.batch * p.shape.heads_q, p.mask.q_tiles);
    kernel<<<grid, Cfg::kWarps * 32, smem>>>(p, a);
    CUDA_CHECK(cudaGetLastError());
  }

  // The Hopper forward: same params and hooks, plus the Q, K, V tensor maps; p.work as
  // sm90_work_counters() gives it.
  static void fwd_sm90(const tjk::AttentionFwdParams& p, const Args& a,
                       const tjk::AttnFwdTmaMaps& maps) {
    auto kernel = tjk::attention_fwd_sm90_kernel<Prog, Args, T, D>;
    constexpr int smem = tjk::AttnFwdSm90Layout<D>::kBytes;
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    // Persistent CTAs, at most one per SM (attention_fwd_sm90.cuh).
    int sms = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const long long items = (long long)p.shape.batch * p.shape.heads_q * p.mask.q_tiles;
    kernel<<<(unsigned)(items < sms ? items : sms), tjk::kAttnFwdSm90Threads, smem>>>(p, a, maps);
    CUDA_CHECK(cudaGetLastError());
  }

  static long long rows(const tjk::AttentionBwdParams& p) {
    return static_cast<long long>(p.shape.batch) * p.shape.heads_q * p.shape.seq_q;
  }

  // Atomic mode needs p.dq_accum; deterministic mode ignores it.
  static void bwd(tjk::AttentionBwdParams p, const Args& a, bool deterministic) {
    if (deterministic) p.dq_accum = nullptr;
    tjk::attention_bwd_preprocess_kernel<T, D><<<(rows(p) + 7) / 8, 256>>>(p);
    auto main_kernel = deterministic ? tjk::attention_bwd_kernel<Prog, Args, T, D, false>
                                     : tjk::attention_bwd_kernel<Prog, Args, T, D, true>;
    const int smem = deterministic ? tjk::AttnBwdSmem<D, tjk::attn_bwd_q_step<D, false>()>::kBytes
                                   : tjk::AttnBwdSmem<D, tjk::attn_bwd_q_step<D, true>()>::kBytes;
    CUDA_CHECK(
        cudaFuncSetAttribute(main_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    main_kernel<<<dim3(p.shape.batch * p.shape.heads_kv, p.mask.kv_tiles), 128, smem>>>(p, a);
    dq_pass(p, a, deterministic);
  }

  // The Hopper backward: the portable preprocess, the sm_90a dK / dV (+ atomic dQ) kernel, then
  // the portable dq_convert (atomic mode) or deterministic dQ kernel. `band`: key blocks of one
  // head side by side in the grid (attention_bwd_sm90.cuh).
  static void bwd_sm90(tjk::AttentionBwdParams p, const Args& a, const tjk::AttnBwdTmaMaps& maps,
                       bool deterministic, int band = 1) {
    if (deterministic) p.dq_accum = nullptr;
    tjk::attention_bwd_preprocess_kernel<T, D><<<(rows(p) + 7) / 8, 256>>>(p);
    auto main_kernel = deterministic ? tjk::attention_bwd_sm90_kernel<Prog, Args, T, D, false>
                                     : tjk::attention_bwd_sm90_kernel<Prog, Args, T, D, true>;
    constexpr int smem = tjk::AttnBwdSm90Layout<D>::kBytes;
    CUDA_CHECK(
        cudaFuncSetAttribute(main_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    // Persistent: a CTA per SM (at most one per item) takes the items from the counters
    // (BwdSm90Item).
    const long long items = 1LL * p.shape.batch * p.shape.heads_kv * ((p.mask.kv_tiles + 1) / 2);
    int sms = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    p.work = sm90_work_counters();
    p.key_band = band;
    p.items = static_cast<int>(items);
    if (items > 0)
      main_kernel<<<static_cast<unsigned>(std::min<long long>(items, sms)),
                    tjk::kAttnBwdSm90Threads, smem>>>(p, a, maps);
    dq_pass(p, a, deterministic);
  }

  // dQ after the main backward kernel: converted from dq_accum, or computed without atomics.
  static void dq_pass(const tjk::AttentionBwdParams& p, const Args& a, bool deterministic) {
    if (deterministic) {
      auto dq_kernel = tjk::attention_bwd_dq_kernel<Prog, Args, T, D>;
      constexpr int dq_smem = tjk::AttnBwdDqSmem<D>::kBytes;
      CUDA_CHECK(
          cudaFuncSetAttribute(dq_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, dq_smem));
      dq_kernel<<<dim3(p.shape.batch * p.shape.heads_q, p.mask.q_tiles), 256, dq_smem>>>(p, a);
    } else {
      long long threads = rows(p) * (D / 8);
      tjk::attention_bwd_dq_convert_kernel<T, D><<<(threads + 255) / 256, 256>>>(p);
    }
    CUDA_CHECK(cudaGetLastError());
  }
};

}  // namespace attn_test
