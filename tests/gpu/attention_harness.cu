// Standalone GPU harness for the block-sparse attention kernels (kernels_templates/
// attention_fwd.cuh, attention_fwd_sm90.cuh, attention_bwd.cuh, attention_bwd_sm90.cuh),
// outside the CMake build:
//   tests/gpu/build_attention_harness.sh OUTDIR && OUTDIR/attention_harness [OUTDIR]
//   [--no-perf | --perf-only]
// 1. Correctness: random bf16/fp16 inputs, odd lengths, GQA, both layouts, outputs poisoned
//    with NaN bits; forward (the portable kernel, and on an sm_90a device the Hopper kernel on
//    the same inputs) and backward (atomic and deterministic dQ; on an sm_90a device the Hopper
//    backward too, on the same inputs and against the same reference) against the fp64
//    reference; all-masked rows must give O = 0, lse = -inf; deterministic runs bit-identical.
//    A failing forward names its first out-of-tolerance element (b, h, q, d) and the largest
//    error; a failing backward gradient its first element out of tolerance.
// 2. Speed: the PERF.md shapes, CUDA-event medians, TFLOP/s over unmasked pairs, both forwards
//    and both backwards side by side (table + one JSON line per case, also written to
//    OUTDIR/attention_perf.jsonl).
// 3. Built with -DTJ_BWD_SM90_PROFILE (tests/gpu/build_attention_harness.sh OUTDIR
//    -gencode=arch=compute_90a,code=sm_90a -DTJ_BWD_SM90_PROFILE): per case, the share of each
//    phase of the Hopper backward's consumer steps (attention_bwd_sm90.cuh, BwdSm90Phase) in the
//    cycles its consumers spent, one "profile" line. The clock reads cost a few instructions per
//    phase; the soft-cap kernel at D = 128 spills 16 bytes in that build.
#include <chrono>
#include <random>
#include <string>

#include "tests/gpu/attention_harness_util.h"
#include "tests/gpu/attention_programs.cuh"
#include "tests/support/AttentionReference.h"

namespace attn_test {
namespace {

// Captured values of the stand-in programs, host and device copies.
struct ProgramEnv {
  int window = 1024;
  int heads_q = 1;
  std::vector<int> doc_q, doc_kv;  // [B, S]
  DevBuf<int> d_doc_q, d_doc_kv;
  int seq_q = 0, seq_kv = 0;

  // Documents of random lengths in [min_len, max_len], the same boundaries for q and kv.
  void make_docs(int batch, int sq, int skv, int min_len, int max_len, std::mt19937& rng) {
    seq_q = sq, seq_kv = skv;
    int n = std::max(sq, skv);
    std::vector<int> ids(static_cast<size_t>(batch) * n);
    std::uniform_int_distribution<int> len(min_len, max_len);
    for (int b = 0; b < batch; ++b)
      for (int pos = 0, doc = 0; pos < n; ++doc)
        for (int l = len(rng); l > 0 && pos < n; --l) ids[static_cast<size_t>(b) * n + pos++] = doc;
    doc_q.resize(static_cast<size_t>(batch) * sq);
    doc_kv.resize(static_cast<size_t>(batch) * skv);
    for (int b = 0; b < batch; ++b) {
      std::copy_n(ids.begin() + static_cast<size_t>(b) * n, sq,
                  doc_q.begin() + static_cast<size_t>(b) * sq);
      std::copy_n(ids.begin() + static_cast<size_t>(b) * n, skv,
                  doc_kv.begin() + static_cast<size_t>(b) * skv);
    }
    d_doc_q = DevBuf<int>(doc_q.size());
    d_doc_kv = DevBuf<int>(doc_kv.size());
    d_doc_q.upload(doc_q);
    d_doc_kv.upload(doc_kv);
  }

  NoArgs args(NoArgs*, bool) const { return {0}; }
  WindowArgs args(WindowArgs*, bool) const { return {window}; }
  AlibiArgs args(AlibiArgs*, bool) const { return {heads_q}; }
  SoftcapArgs args(SoftcapArgs*, bool) const { return {30.f}; }
  DocArgs args(DocArgs*, bool device) const {
    return {device ? d_doc_q.p : doc_q.data(), device ? d_doc_kv.p : doc_kv.data(), seq_q, seq_kv};
  }
  template <class Prog>
  typename Prog::Args args_for(bool device) const {
    return args(static_cast<typename Prog::Args*>(nullptr), device);
  }
};

template <class Prog>
constexpr bool kPerBatchMask = std::is_same<typename Prog::Args, DocArgs>::value;

struct Shape {
  int batch, heads_q, heads_kv, seq_q, seq_kv;
  bool bshd;
};

// Random values rounded to T: the device bits and the exact doubles the reference sees.
template <class T>
struct Tensor16 {
  std::vector<uint16_t> bits;  // in the tested layout
  std::vector<double> ref;     // [B, H, S, D] contiguous
  DevBuf<uint16_t> dev;

  Tensor16(int B, int H, int S, int D, bool bshd, std::mt19937& rng, float sd)
      : bits(static_cast<size_t>(B) * H * S * D), ref(bits.size()), dev(bits.size()) {
    std::normal_distribution<float> dist(0.f, sd);
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h)
        for (int s = 0; s < S; ++s)
          for (int d = 0; d < D; ++d) {
            uint16_t v = HostElem<T>::from_float(dist(rng));
            bits[layout_index(b, h, s, d, H, S, D, bshd)] = v;
            ref[((static_cast<size_t>(b) * H + h) * S + s) * D + d] = HostElem<T>::to_float(v);
          }
    dev.upload(bits);
  }
};

// Device output in the tested layout, back as [B, H, S, D] doubles.
template <class T>
std::vector<double> read_back(const DevBuf<uint16_t>& buf, int B, int H, int S, int D, bool bshd) {
  std::vector<uint16_t> bits = buf.download();
  std::vector<double> out(bits.size());
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int s = 0; s < S; ++s)
        for (int d = 0; d < D; ++d)
          out[((static_cast<size_t>(b) * H + h) * S + s) * D + d] =
              HostElem<T>::to_float(bits[layout_index(b, h, s, d, H, S, D, bshd)]);
  return out;
}

int g_failures = 0;
bool g_sm90 = false;  // the device runs the sm_90a forward and backward too

bool report(const char* what, double err, double tol) {
  bool ok = err <= tol;  // false for NaN
  std::printf("  %-22s %.3e %s\n", what, err, ok ? "ok" : "FAIL");
  if (!ok) ++g_failures;
  return ok;
}

// Whether the Hopper kernels' work-item counters are zero again, as every launch must leave them
// (after a check's launches, all synchronised).
void check_work_counters() {
  int work[2] = {-1, -1};
  CUDA_CHECK(cudaMemcpy(work, sm90_work_counters(), sizeof work, cudaMemcpyDeviceToHost));
  std::printf("  %-22s %d %d\n", "work counters after", work[0], work[1]);
  if (work[0] != 0 || work[1] != 0) ++g_failures;
}

template <class Prog, class T, int D>
void check_case(const Shape& s, ProgramEnv& env, std::mt19937& rng) {
  using Args = typename Prog::Args;
  std::printf("%s %s D=%d B=%d Hq=%d Hkv=%d Sq=%d Skv=%d %s\n", Prog::kName, HostElem<T>::kName, D,
              s.batch, s.heads_q, s.heads_kv, s.seq_q, s.seq_kv, s.bshd ? "BSHD" : "BHSD");
  env.heads_q = s.heads_q;
  if (kPerBatchMask<Prog>) env.make_docs(s.batch, s.seq_q, s.seq_kv, 48, 400, rng);
  const Args host_args = env.args_for<Prog>(false), dev_args = env.args_for<Prog>(true);
  ClassifiedMask cm =
      classify_mask<Prog>(host_args, kPerBatchMask<Prog> ? s.batch : 1, 1, s.seq_q, s.seq_kv);
  DevMask mask(cm.mask);

  Tensor16<T> q(s.batch, s.heads_q, s.seq_q, D, s.bshd, rng, 1.f);
  Tensor16<T> k(s.batch, s.heads_kv, s.seq_kv, D, s.bshd, rng, 1.f);
  Tensor16<T> v(s.batch, s.heads_kv, s.seq_kv, D, s.bshd, rng, 1.f);
  Tensor16<T> d_o(s.batch, s.heads_q, s.seq_q, D, s.bshd, rng, 1.f);
  const size_t q_elems = q.bits.size(), kv_elems = k.bits.size();
  const size_t rows = static_cast<size_t>(s.batch) * s.heads_q * s.seq_q;
  DevBuf<uint16_t> o(q_elems), dq(q_elems), dk(kv_elems), dv(kv_elems);
  DevBuf<float> lse(rows), delta(rows), lse2(rows), dq_accum(q_elems);

  tjk::AttnShape shape{s.batch, s.heads_q, s.heads_kv,
                       s.seq_q, s.seq_kv,  1.f / std::sqrt(float(D))};
  tjk::AttentionFwdParams fp{make_tensor(q.dev.p, s.heads_q, s.seq_q, D, s.bshd),
                             make_tensor(k.dev.p, s.heads_kv, s.seq_kv, D, s.bshd),
                             make_tensor(v.dev.p, s.heads_kv, s.seq_kv, D, s.bshd),
                             make_tensor(o.p, s.heads_q, s.seq_q, D, s.bshd),
                             lse.p,
                             sm90_work_counters(),
                             shape,
                             mask.view};
  tilejit::testing::AttentionRefShape rs{
      s.batch, s.heads_q, s.heads_kv, s.seq_q, s.seq_kv, D, 1.0 / std::sqrt(double(D))};
  tilejit::testing::AttentionRefHooks hooks;
  if (!Prog::kMaskIsTrue)
    hooks.mask = [&](int b, int h, int qi, int kv) {
      return Prog::mask_mod(host_args, b, h, qi, kv);
    };
  if (!Prog::kScoreIsIdentity) {
    hooks.score = [&](double x, int b, int h, int qi, int kv) {
      return Prog::ref_score(host_args, x, b, h, qi, kv);
    };
    hooks.score_grad = [&](double x, int b, int h, int qi, int kv) {
      return Prog::ref_grad(host_args, x, b, h, qi, kv);
    };
  }
  auto ref = tilejit::testing::attention_forward_reference(rs, hooks, q.ref, k.ref, v.ref);
  // One forward kernel on the case's inputs, outputs poisoned first, against the reference.
  auto check_forward = [&](const char* path, const auto& launch) {
    o.poison();
    lse.poison();
    launch();
    CUDA_CHECK(cudaDeviceSynchronize());
    std::printf("  forward: %s\n", path);
    std::vector<double> o_got = read_back<T>(o, s.batch, s.heads_q, s.seq_q, D, s.bshd);
    bool ok = report("O rel l2", rel_l2(o_got, ref.out), 1e-2);
    Mismatch om = find_mismatches(o_got, ref.out, 3e-2, 3e-2);
    if (!ok || om.count > 0) {
      if (ok) ++g_failures;  // a few wrong rows can hide in a small l2 error
      print_mismatches("O", om, o_got, ref.out, s.heads_q, s.seq_q, D);
    }
    std::vector<float> lse_h = lse.download();
    std::vector<double> lse_all(lse_h.begin(), lse_h.end()), lse_got, lse_ref;
    long inf_rows = 0, inf_mismatch = 0;
    for (size_t i = 0; i < rows; ++i) {
      bool ref_inf = std::isinf(ref.lse[i]), got_inf = std::isinf(lse_h[i]) && lse_h[i] < 0;
      inf_rows += ref_inf;
      if (ref_inf != got_inf) ++inf_mismatch;
      if (!ref_inf) lse_got.push_back(lse_h[i]), lse_ref.push_back(ref.lse[i]);
    }
    ok = report("lse rel l2", rel_l2(lse_got, lse_ref), 1e-3);
    std::printf("  %-22s %ld rows, %ld mismatches\n", "lse = -inf rows", inf_rows, inf_mismatch);
    if (inf_mismatch) ++g_failures;
    Mismatch lm = find_mismatches(lse_all, ref.lse, 2e-2, 1e-3);
    if (!ok || inf_mismatch || lm.count > 0) {
      if (ok && !inf_mismatch) ++g_failures;
      print_mismatches("lse", lm, lse_all, ref.lse, s.heads_q, s.seq_q, 1);
    }
  };
  check_forward("portable", [&] { Launch<Prog, T, D>::fwd(fp, dev_args); });
  if (g_sm90) {
    const tjk::AttnFwdTmaMaps maps = tensor_maps(fp, D, !std::is_same<T, tjk::bf16>::value);
    // Both schedules (FwdWorkItem): one item at a time from the counters, and fixed shares.
    tjk::AttentionFwdParams fixed = fp;
    fixed.work = nullptr;
    check_forward("sm90", [&] { Launch<Prog, T, D>::fwd_sm90(fp, dev_args, maps); });
    check_forward("sm90, fixed shares",
                  [&] { Launch<Prog, T, D>::fwd_sm90(fixed, dev_args, maps); });
    // Items in bands of 3 q tiles (FwdWorkItem): a last band narrower than the rest where the
    // q tiles are not a multiple of 3.
    tjk::AttentionFwdParams banded = fp, banded_fixed = fixed;
    banded.q_band = banded_fixed.q_band = 3;
    check_forward("sm90, q band 3", [&] { Launch<Prog, T, D>::fwd_sm90(banded, dev_args, maps); });
    check_forward("sm90, q band 3, fixed shares",
                  [&] { Launch<Prog, T, D>::fwd_sm90(banded_fixed, dev_args, maps); });
    check_work_counters();
  }

  auto bref =
      tilejit::testing::attention_backward_reference(rs, hooks, q.ref, k.ref, v.ref, d_o.ref);
  // The backward reads the forward's out and lse: recompute them with the portable kernel.
  Launch<Prog, T, D>::fwd(fp, dev_args);
  tjk::AttentionBwdParams bp{fp.q,
                             fp.k,
                             fp.v,
                             fp.out,
                             make_tensor(d_o.dev.p, s.heads_q, s.seq_q, D, s.bshd),
                             make_tensor(dq.p, s.heads_q, s.seq_q, D, s.bshd),
                             make_tensor(dk.p, s.heads_kv, s.seq_kv, D, s.bshd),
                             make_tensor(dv.p, s.heads_kv, s.seq_kv, D, s.bshd),
                             lse.p,
                             delta.p,
                             lse2.p,
                             dq_accum.p,
                             shape,
                             mask.view};
  // One backward path in its three modes: atomic, deterministic, deterministic again (bits).
  auto check_backward = [&](const char* path, const auto& launch) {
    std::printf("  backward: %s\n", path);
    std::vector<uint16_t> first[3];
    for (int mode = 0; mode < 3; ++mode) {
      bool det = mode > 0;
      dq.poison(), dk.poison(), dv.poison(), delta.poison(), lse2.poison(), dq_accum.poison();
      launch(det);
      CUDA_CHECK(cudaDeviceSynchronize());
      if (mode == 2) {
        bool same =
            dq.download() == first[0] && dk.download() == first[1] && dv.download() == first[2];
        std::printf("  %-22s %s\n", "deterministic bits", same ? "identical ok" : "DIFFER FAIL");
        if (!same) ++g_failures;
        continue;
      }
      if (mode == 1) first[0] = dq.download(), first[1] = dk.download(), first[2] = dv.download();
      std::string tag = det ? " (det)" : " (atomic)";
      auto check_grad = [&](const char* name, const DevBuf<uint16_t>& got_buf, int H, int S,
                            const std::vector<double>& want) {
        std::vector<double> got = read_back<T>(got_buf, s.batch, H, S, D, s.bshd);
        if (!report((name + tag).c_str(), rel_l2(got, want), 1e-2))
          print_mismatches(name, find_mismatches(got, want, 3e-2, 3e-2), got, want, H, S, D);
      };
      check_grad("dQ", dq, s.heads_q, s.seq_q, bref.dq);
      check_grad("dK", dk, s.heads_kv, s.seq_kv, bref.dk);
      check_grad("dV", dv, s.heads_kv, s.seq_kv, bref.dv);
    }
  };
  check_backward("portable", [&](bool det) { Launch<Prog, T, D>::bwd(bp, dev_args, det); });
  if (g_sm90) {
    const tjk::AttnBwdTmaMaps bmaps = tensor_maps(bp, D, !std::is_same<T, tjk::bf16>::value);
    check_backward("sm90",
                   [&](bool det) { Launch<Prog, T, D>::bwd_sm90(bp, dev_args, bmaps, det); });
    // Key blocks in bands of 3 (BwdSm90Item: a last band narrower than the rest where the key
    // blocks are not a multiple of 3).
    check_backward("sm90, key band 3",
                   [&](bool det) { Launch<Prog, T, D>::bwd_sm90(bp, dev_args, bmaps, det, 3); });
    // the runtime's band (attention_schedule::backward_band), past most cases' key blocks
    check_backward("sm90, key band 16",
                   [&](bool det) { Launch<Prog, T, D>::bwd_sm90(bp, dev_args, bmaps, det, 16); });
    check_work_counters();
  }
}

__global__ void fill_random(unsigned short* p, size_t n, unsigned seed, bool is_bf16) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    unsigned x = static_cast<unsigned>(i) * 2654435761u ^ seed;
    x ^= x >> 15, x *= 2246822519u, x ^= x >> 13, x *= 3266489917u, x ^= x >> 16;
    float f = (x & 0xffffff) * (2.f / 16777216.f) - 1.f;  // uniform(-1, 1)
    p[i] = is_bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(f))
                   : __half_as_ushort(__float2half_rn(f));
  }
}

// Median time in ms of `fn` (already warmed up) over `reps` runs.
template <class F>
float median_ms(const F& fn, int reps) {
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    CUDA_CHECK(cudaEventRecord(a));
    fn();
    CUDA_CHECK(cudaEventRecord(b));
    CUDA_CHECK(cudaEventSynchronize(b));
    float ms;
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct PerfRow {
  std::string name;
  double fwd_ms, fwd_tf, bwd_ms, bwd_tf, bwd_det_ms, bwd_det_tf;
  double sm90_ms = 0, sm90_tf = 0;  // 0: not run (not an sm_90a device)
  double bwd_sm90_ms = 0, bwd_sm90_tf = 0, bwd_sm90_det_ms = 0, bwd_sm90_det_tf = 0;
};
std::vector<PerfRow> g_perf;

#if defined(TJ_BWD_SM90_PROFILE)
// The Hopper backward's consumer phases (attention_bwd_sm90.cuh, BwdSm90Phase): each one's share
// of the cycles thread 0 of every consumer spent from its first wait to its exit (the steps'
// phases, and between the step loops "item start" and "item end"), and their sum over the
// launches timed.
void print_bwd_profile(const char* name,
                       const unsigned long long (&cycles)[tjk::kBwdSm90Phases]) {
  static const char* const kNames[tjk::kBwdSm90Phases] = {
      "parts", "wait S", "P pass", "wait dP", "dS pass", "read other", "store dS", "ready other",
      "wait dV dK", "full", "wait dQ", "send dQ", "tail", "item start", "item end"};
  double total = 0;
  for (unsigned long long c : cycles) total += double(c);
  std::printf("profile %-28s %.3f Gcycles", name, total * 1e-9);
  for (int i = 0; i < tjk::kBwdSm90Phases; ++i)
    std::printf(" | %s %.1f%%", kNames[i], total > 0 ? 100.0 * double(cycles[i]) / total : 0.0);
  std::printf("\n");
}
#endif

template <class Prog, class T, int D>
void perf_case(const char* name, int B, int Hq, int Hkv, int S, ProgramEnv& env,
               std::mt19937& rng) {
  using Args = typename Prog::Args;
  env.heads_q = Hq;
  if (kPerBatchMask<Prog>) env.make_docs(B, S, S, 512, 3072, rng);
  const Args host_args = env.args_for<Prog>(false), dev_args = env.args_for<Prog>(true);
  ClassifiedMask cm = classify_mask<Prog>(host_args, kPerBatchMask<Prog> ? B : 1, 1, S, S);
  double pairs = cm.pairs * (kPerBatchMask<Prog> ? 1 : B) * Hq;
  DevMask mask(cm.mask);
  size_t qn = size_t(B) * Hq * S * D, kn = size_t(B) * Hkv * S * D, rows = size_t(B) * Hq * S;
  DevBuf<uint16_t> q(qn), k(kn), v(kn), o(qn), d_o(qn), dq(qn), dk(kn), dv(kn);
  DevBuf<float> lse(rows), delta(rows), lse2(rows), dq_accum(qn);
  bool is_bf16 = std::is_same<T, tjk::bf16>::value;
  unsigned seed = 1;
  for (auto* buf : {&q, &k, &v, &d_o})
    fill_random<<<1024, 256>>>(buf->p, buf->n, seed++ * 7919u, is_bf16);
  tjk::AttnShape shape{B, Hq, Hkv, S, S, 1.f / std::sqrt(float(D))};
  tjk::AttentionFwdParams fp{make_tensor(q.p, Hq, S, D, false),
                             make_tensor(k.p, Hkv, S, D, false),
                             make_tensor(v.p, Hkv, S, D, false),
                             make_tensor(o.p, Hq, S, D, false),
                             lse.p,
                             // the runtime's schedule (runtime/Attention.cpp)
                             cm.mask.tiles_rise_with_q() ? nullptr : sm90_work_counters(),
                             shape,
                             mask.view};
  tjk::AttentionBwdParams bp{fp.q,
                             fp.k,
                             fp.v,
                             fp.out,
                             make_tensor(d_o.p, Hq, S, D, false),
                             make_tensor(dq.p, Hq, S, D, false),
                             make_tensor(dk.p, Hkv, S, D, false),
                             make_tensor(dv.p, Hkv, S, D, false),
                             lse.p,
                             delta.p,
                             lse2.p,
                             dq_accum.p,
                             shape,
                             mask.view};
  auto fwd = [&] { Launch<Prog, T, D>::fwd(fp, dev_args); };
  auto bwd = [&] { Launch<Prog, T, D>::bwd(bp, dev_args, false); };
  auto bwd_det = [&] { Launch<Prog, T, D>::bwd(bp, dev_args, true); };
  tjk::AttnFwdTmaMaps maps{};
  tjk::AttnBwdTmaMaps bmaps{};
  if (g_sm90) maps = tensor_maps(fp, D, !is_bf16), bmaps = tensor_maps(bp, D, !is_bf16);
  auto fwd_sm90 = [&] { Launch<Prog, T, D>::fwd_sm90(fp, dev_args, maps); };
  auto bwd_sm90 = [&] { Launch<Prog, T, D>::bwd_sm90(bp, dev_args, bmaps, false); };
  auto bwd_sm90_det = [&] { Launch<Prog, T, D>::bwd_sm90(bp, dev_args, bmaps, true); };
  for (int i = 0; i < 3; ++i) {
    fwd(), bwd(), bwd_det();
    if (g_sm90) fwd_sm90(), bwd_sm90(), bwd_sm90_det();
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  PerfRow r;
  r.name = name;
  r.fwd_ms = median_ms(fwd, 25);
  r.bwd_ms = median_ms(bwd, 21);
  r.bwd_det_ms = median_ms(bwd_det, 21);
  double flops = 4.0 * D * pairs;
  r.fwd_tf = flops / (r.fwd_ms * 1e9);
  r.bwd_tf = 2.5 * flops / (r.bwd_ms * 1e9);
  r.bwd_det_tf = 2.5 * flops / (r.bwd_det_ms * 1e9);
  if (g_sm90) {
    r.sm90_ms = median_ms(fwd_sm90, 25);
    r.sm90_tf = flops / (r.sm90_ms * 1e9);
#if defined(TJ_BWD_SM90_PROFILE)
    unsigned long long zero[tjk::kBwdSm90Phases] = {}, cycles[tjk::kBwdSm90Phases];
    CUDA_CHECK(cudaMemcpyToSymbol(tjk::tj_bwd_sm90_profile, zero, sizeof(zero)));
#endif
    r.bwd_sm90_ms = median_ms(bwd_sm90, 21);
#if defined(TJ_BWD_SM90_PROFILE)
    CUDA_CHECK(cudaMemcpyFromSymbol(cycles, tjk::tj_bwd_sm90_profile, sizeof(cycles)));
    print_bwd_profile(name, cycles);
#endif
    r.bwd_sm90_tf = 2.5 * flops / (r.bwd_sm90_ms * 1e9);
    r.bwd_sm90_det_ms = median_ms(bwd_sm90_det, 21);
    r.bwd_sm90_det_tf = 2.5 * flops / (r.bwd_sm90_det_ms * 1e9);
  }
  auto c = cm.mask.counts();
  std::printf(
      "perf %-28s fwd %7.3f ms %6.1f TF/s | sm90 fwd %7.3f ms %6.1f TF/s | bwd %7.3f ms %6.1f "
      "TF/s | bwd det %7.3f ms %6.1f TF/s | sm90 bwd %7.3f ms %6.1f TF/s | sm90 bwd det %7.3f ms "
      "%6.1f TF/s  (tiles full %lld partial %lld empty %lld)\n",
      name, r.fwd_ms, r.fwd_tf, r.sm90_ms, r.sm90_tf, r.bwd_ms, r.bwd_tf, r.bwd_det_ms,
      r.bwd_det_tf, r.bwd_sm90_ms, r.bwd_sm90_tf, r.bwd_sm90_det_ms, r.bwd_sm90_det_tf,
      (long long)c.full, (long long)c.partial, (long long)c.empty);
  g_perf.push_back(r);
}

}  // namespace
}  // namespace attn_test

int main(int argc, char** argv) {
  using namespace attn_test;
  std::string outdir;
  bool perf = true, check = true;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--no-perf")
      perf = false;
    else if (a == "--perf-only")
      check = false;
    else
      outdir = a;
  }
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount);
  g_sm90 = sm90_forward_available();
  std::printf("sm90 forward and backward (wgmma + TMA): %s\n",
              g_sm90 ? "checked and timed next to the portable ones"
                     : "not run (needs compute capability 9.0 and a binary built for sm_90a)");
  auto t0 = std::chrono::steady_clock::now();
  std::mt19937 rng(20261129);
  ProgramEnv env;
  env.window = 300;
  using tjk::bf16;
  using tjk::f16;
  if (check) {
    check_case<FullProgram, bf16, 128>({1, 4, 1, 1000, 777, false}, env, rng);
    check_case<CausalProgram, bf16, 128>({2, 2, 2, 777, 1000, true}, env, rng);
    check_case<CausalProgram, bf16, 64>({1, 4, 1, 1000, 1000, false}, env, rng);
    check_case<CausalProgram, f16, 64>({1, 4, 2, 1000, 777, true}, env, rng);
    check_case<WindowProgram, bf16, 128>({1, 2, 2, 1000, 1000, false}, env, rng);
    check_case<DocProgram, bf16, 128>({2, 2, 1, 700, 700, true}, env, rng);
    check_case<DocProgram, f16, 128>({2, 2, 2, 640, 513, false}, env, rng);
    check_case<AlibiProgram, bf16, 128>({1, 4, 2, 1000, 777, false}, env, rng);
    check_case<SoftcapProgram, bf16, 128>({1, 4, 1, 1000, 777, true}, env, rng);
    check_case<SoftcapProgram, f16, 64>({1, 2, 2, 513, 1000, false}, env, rng);
    check_case<MaskedRowsProgram, bf16, 128>({1, 2, 1, 1000, 777, false}, env, rng);
    check_case<MaskedRowsProgram, f16, 64>({2, 2, 2, 1000, 777, true}, env, rng);
    // Shapes that stress the sm90 kv steps: fewer keys than one tile, one key, a window whose
    // runs end on odd tiles (one-tile steps), D = 64 with GQA.
    check_case<CausalProgram, bf16, 128>({1, 2, 1, 130, 50, false}, env, rng);
    check_case<FullProgram, f16, 128>({2, 2, 2, 77, 1, true}, env, rng);
    env.window = 100;
    check_case<WindowProgram, bf16, 64>({1, 4, 2, 700, 700, true}, env, rng);
    env.window = 300;
  }
  double check_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("correctness: %d failures (%.1f s)\n", g_failures, check_s);

  if (perf) {
    env.window = 1024;
    perf_case<CausalProgram, bf16, 128>("causal S=8k", 2, 16, 16, 8192, env, rng);
    perf_case<SoftcapProgram, bf16, 128>("softcap causal S=8k", 2, 16, 16, 8192, env, rng);
    perf_case<AlibiProgram, bf16, 128>("alibi causal S=8k", 2, 16, 16, 8192, env, rng);
    perf_case<DocProgram, bf16, 128>("document causal S=8k", 2, 16, 16, 8192, env, rng);
    perf_case<WindowProgram, bf16, 128>("sliding window 1024 S=32k", 1, 16, 16, 32768, env, rng);
    perf_case<CausalProgram, bf16, 128>("GQA 32/8 causal S=8k", 2, 32, 8, 8192, env, rng);
    perf_case<CausalProgram, bf16, 64>("D=64 causal S=8k", 2, 16, 16, 8192, env, rng);
    perf_case<FullProgram, bf16, 128>("full (no mask) S=8k", 2, 16, 16, 8192, env, rng);

    std::printf(
        "\n| case | fwd ms | fwd TFLOP/s | sm90 fwd ms | sm90 fwd TFLOP/s | bwd ms | bwd TFLOP/s "
        "| bwd det ms | bwd det TFLOP/s | sm90 bwd ms | sm90 bwd TFLOP/s | sm90 bwd det ms "
        "| sm90 bwd det TFLOP/s |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (auto& r : g_perf)
      std::printf(
          "| %s | %.3f | %.1f | %.3f | %.1f | %.3f | %.1f | %.3f | %.1f | %.3f | %.1f | %.3f "
          "| %.1f |\n",
          r.name.c_str(), r.fwd_ms, r.fwd_tf, r.sm90_ms, r.sm90_tf, r.bwd_ms, r.bwd_tf,
          r.bwd_det_ms, r.bwd_det_tf, r.bwd_sm90_ms, r.bwd_sm90_tf, r.bwd_sm90_det_ms,
          r.bwd_sm90_det_tf);
    FILE* json =
        outdir.empty() ? nullptr : std::fopen((outdir + "/attention_perf.jsonl").c_str(), "w");
    for (auto& r : g_perf) {
      char line[768];
      std::snprintf(line, sizeof line,
                    "{\"case\": \"%s\", \"fwd_ms\": %.4f, \"fwd_tflops\": %.2f, "
                    "\"fwd_sm90_ms\": %.4f, \"fwd_sm90_tflops\": %.2f, \"bwd_ms\": %.4f, "
                    "\"bwd_tflops\": %.2f, \"bwd_det_ms\": %.4f, \"bwd_det_tflops\": %.2f, "
                    "\"bwd_sm90_ms\": %.4f, \"bwd_sm90_tflops\": %.2f, "
                    "\"bwd_sm90_det_ms\": %.4f, \"bwd_sm90_det_tflops\": %.2f}",
                    r.name.c_str(), r.fwd_ms, r.fwd_tf, r.sm90_ms, r.sm90_tf, r.bwd_ms, r.bwd_tf,
                    r.bwd_det_ms, r.bwd_det_tf, r.bwd_sm90_ms, r.bwd_sm90_tf, r.bwd_sm90_det_ms,
                    r.bwd_sm90_det_tf);
      std::printf("%s\n", line);
      if (json) std::fprintf(json, "%s\n", line);
    }
    if (json) std::fclose(json);
  }
  std::printf("%s\n", g_failures ? "FAILED" : "PASSED");
  return g_failures ? 1 : 0;
}
