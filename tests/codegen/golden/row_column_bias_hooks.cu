struct TjProgram {
  static constexpr bool kMaskIsTrue = false;
  static constexpr bool kScoreIsIdentity = false;
  static constexpr bool kMaskReadsBuffers = false;
  static constexpr bool kScoreUsesXu = false;

  // mask = q >= kv
  struct MaskQ {
  };
  __device__ __forceinline__ static MaskQ mask_q(const TjArgs& a, int b, int h, int q) {
    return {};
  }
  struct MaskKv {
  };
  __device__ __forceinline__ static MaskKv mask_kv(const TjArgs& a, int b, int h, int kv) {
    return {};
  }
  __device__ __forceinline__ static bool mask_mod(const TjArgs& a, const MaskQ& qp, const MaskKv& kp, int b, int h, int q, int kv) {
#line 1 "row_column_bias.tj"
    const bool t0 = q >= kv;
    return t0;
  }
  __device__ __forceinline__ static bool mask_mod(const TjArgs& a, int b, int h, int q, int kv) {
    return mask_mod(a, mask_q(a, b, h, q), mask_kv(a, b, h, kv), b, h, q, kv);
  }

  // score = rows[h, q] + score + slopes[h] * f32(kv - q) - w * cols[b, kv]
  struct ScoreQ {
    float v0;  // rows[h, q]
    float v1;  // slopes[h]
    static constexpr bool kGathers = true;  // reads buffers per q
  };
  __device__ __forceinline__ static ScoreQ score_q(const TjArgs& a, int b, int h, int q) {
#line 1 "row_column_bias.tj"
    const float t0 = tj_load(a.rows, h, q);
    const float t1 = tj_load(a.slopes, h);
    return {t0, t1};
  }
  struct ScoreKv {
    float v0;  // w * cols[b, kv]
    static constexpr bool kGathers = true;  // reads buffers per kv
  };
  __device__ __forceinline__ static ScoreKv score_kv(const TjArgs& a, int b, int h, int kv) {
#line 1 "row_column_bias.tj"
    const float t0 = tj_load(a.cols, b, kv);
    const float t1 = a.w * t0;
    return {t1};
  }
  __device__ __forceinline__ static float score_mod(const TjArgs& a, const ScoreQ& qp, const ScoreKv& kp, float score, int b, int h, int q, int kv) {
#line 1 "row_column_bias.tj"
    const float t0 = qp.v0 + score;
    const int t1 = tj_sub(kv, q);
    const float t2 = static_cast<float>(t1);
    const float t3 = qp.v1 * t2;
    const float t4 = t0 + t3;
    const float t5 = t4 - kp.v0;
    return t5;
  }
  __device__ __forceinline__ static float score_mod(const TjArgs& a, float score, int b, int h, int q, int kv) {
    return score_mod(a, score_q(a, b, h, q), score_kv(a, b, h, kv), score, b, h, q, kv);
  }

  // log2e * score_mod(scale * acc), its factors folded per row (compiler/codegen/ScoreFold.h)
  static constexpr bool kScoreLog2 = true;
  __device__ __forceinline__ static float score_log2(const TjArgs& a, const ScoreQ& qp, const ScoreKv& kp, float acc, float scale, int b, int h, int q, int kv) {
#line 1 "row_column_bias.tj"
    const int t0 = tj_sub(kv, q);
    const float t1 = static_cast<float>(t0);
    return ((((qp.v0 * 1.4426950408889634f) + (acc * (scale * 1.4426950408889634f))) + (t1 * (qp.v1 * 1.4426950408889634f))) - (kp.v0 * 1.4426950408889634f));  // log2e = 1.4426950408889634
  }

  // score_log2 = score_log2_unscaled * score_log2_factor, the factor free of score and of
  // the positions (OnlineSoftmax's s_scale)
  static constexpr bool kScoreLog2Factored = true;
  __device__ __forceinline__ static float score_log2_factor(const TjArgs& a, const ScoreQ& qp, float scale, int b, int h) {
#line 1 "row_column_bias.tj"
    return scale * 1.4426950408889634f;
  }
  __device__ __forceinline__ static float score_log2_unscaled(const TjArgs& a, const ScoreQ& qp, const ScoreKv& kp, float acc, float scale, int b, int h, int q, int kv) {
#line 1 "row_column_bias.tj"
    const int t0 = tj_sub(kv, q);
    const float t1 = static_cast<float>(t0);
    return ((((qp.v0 * (1.0f / scale)) + acc) + (t1 * (qp.v1 * (1.0f / scale)))) - (kp.v0 * (1.0f / scale)));
  }

  static constexpr bool kGradReadsScore = false;
  // d score / d score = 1.0
  struct GradQ {
  };
  __device__ __forceinline__ static GradQ grad_q(const TjArgs& a, int b, int h, int q) {
    return {};
  }
  struct GradKv {
  };
  __device__ __forceinline__ static GradKv grad_kv(const TjArgs& a, int b, int h, int kv) {
    return {};
  }
  __device__ __forceinline__ static float score_grad(const TjArgs& a, const GradQ& qp, const GradKv& kp, float score, int b, int h, int q, int kv) {
#line 1 "row_column_bias.tj"
    return 1.0f;
  }
  __device__ __forceinline__ static float score_grad(const TjArgs& a, float score, int b, int h, int q, int kv) {
    return score_grad(a, grad_q(a, b, h, q), grad_kv(a, b, h, kv), score, b, h, q, kv);
  }
};
