// Hand-written stand-ins for generated attention programs: the hook interface the code
// generator emits (mask_mod / score_mod / score_grad over captured Args), plus fp64 versions of
// the score hooks for the CPU reference. mask_mod is __host__ __device__ so the harness can
// classify tiles by brute force with the very same predicate.
#pragma once

#include <cmath>

namespace attn_test {

__device__ __forceinline__ float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

struct NoArgs {
  int unused;
};

// Identity score mod; score_grad = 1.
template <class Args>
struct IdentityScore {
  static constexpr bool kScoreIsIdentity = true;
  static constexpr bool kGradReadsScore = false;  // as the generator marks it
  __device__ static float score_mod(const Args&, float s, int, int, int, int) { return s; }
  __device__ static float score_grad(const Args&, float, int, int, int, int) { return 1.f; }
  static double ref_score(const Args&, double s, int, int, int, int) { return s; }
  static double ref_grad(const Args&, double, int, int, int, int) { return 1.0; }
};

struct FullProgram : IdentityScore<NoArgs> {
  using Args = NoArgs;
  static constexpr const char* kName = "full";
  static constexpr bool kMaskIsTrue = true;
  __host__ __device__ static bool mask_mod(const Args&, int, int, int, int) { return true; }
};

struct CausalProgram : IdentityScore<NoArgs> {
  using Args = NoArgs;
  static constexpr const char* kName = "causal";
  static constexpr bool kMaskIsTrue = false;
  __host__ __device__ static bool mask_mod(const Args&, int, int, int q, int kv) { return q >= kv; }
};

struct WindowArgs {
  int window;
};
// Causal sliding window: q - window < kv <= q.
struct WindowProgram : IdentityScore<WindowArgs> {
  using Args = WindowArgs;
  static constexpr const char* kName = "sliding_window";
  static constexpr bool kMaskIsTrue = false;
  __host__ __device__ static bool mask_mod(const Args& a, int, int, int q, int kv) {
    return kv <= q && q - kv < a.window;
  }
};

struct DocArgs {
  const int* doc_q;   // [B, Sq]
  const int* doc_kv;  // [B, Skv]
  int seq_q, seq_kv;
};
// Document packing, causal within a document.
struct DocProgram : IdentityScore<DocArgs> {
  using Args = DocArgs;
  static constexpr const char* kName = "document";
  static constexpr bool kMaskIsTrue = false;
  __host__ __device__ static bool mask_mod(const Args& a, int b, int, int q, int kv) {
    return kv <= q && a.doc_q[b * a.seq_q + q] == a.doc_kv[b * a.seq_kv + kv];
  }
};

struct AlibiArgs {
  int heads;
};
// ALiBi (causal): score + slope_h * (kv - q), slope_h = 2^(-8 (h + 1) / H).
struct AlibiProgram {
  using Args = AlibiArgs;
  static constexpr const char* kName = "alibi";
  static constexpr bool kMaskIsTrue = false, kScoreIsIdentity = false, kGradReadsScore = false;
  __host__ __device__ static bool mask_mod(const Args&, int, int, int q, int kv) { return q >= kv; }
  __device__ static float score_mod(const Args& a, float s, int, int h, int q, int kv) {
    return s + exp2f(-8.f * (h + 1) / a.heads) * static_cast<float>(kv - q);
  }
  __device__ static float score_grad(const Args&, float, int, int, int, int) { return 1.f; }
  static double ref_score(const Args& a, double s, int, int h, int q, int kv) {
    return s + std::exp2(-8.0 * (h + 1) / a.heads) * (kv - q);
  }
  static double ref_grad(const Args&, double, int, int, int, int) { return 1.0; }
};

struct SoftcapArgs {
  float cap;
};
// Soft-capping (causal): cap * tanh(score / cap), with the hardware tanh like generated code.
struct SoftcapProgram {
  using Args = SoftcapArgs;
  static constexpr const char* kName = "softcap";
  static constexpr bool kMaskIsTrue = false, kScoreIsIdentity = false;
  __host__ __device__ static bool mask_mod(const Args&, int, int, int q, int kv) { return q >= kv; }
  __device__ static float score_mod(const Args& a, float s, int, int, int, int) {
    return a.cap * tanh_approx(s * (1.f / a.cap));
  }
  __device__ static float score_grad(const Args& a, float s, int, int, int, int) {
    float t = tanh_approx(s * (1.f / a.cap));
    return 1.f - t * t;
  }
  static double ref_score(const Args& a, double s, int, int, int, int) {
    return a.cap * std::tanh(s / a.cap);
  }
  static double ref_grad(const Args& a, double s, int, int, int, int) {
    double t = std::tanh(s / a.cap);
    return 1.0 - t * t;
  }
};

// Rows with q % 4 == 1 and all of q in [256, 384) are fully masked (so one whole q tile has no
// runs); kv in [128, 192) is never attended (a kv tile with no runs); the rest is a sparse
// pattern that makes every other tile partial.
struct MaskedRowsProgram : IdentityScore<NoArgs> {
  using Args = NoArgs;
  static constexpr const char* kName = "masked_rows";
  static constexpr bool kMaskIsTrue = false;
  __host__ __device__ static bool mask_mod(const Args&, int, int, int q, int kv) {
    if (q % 4 == 1 || (q >= 256 && q < 384) || (kv >= 128 && kv < 192)) return false;
    return (q + kv) % 3 != 0;
  }
};

}  // namespace attn_test
