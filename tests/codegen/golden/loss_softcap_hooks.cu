struct TjProgram {
  static constexpr bool kLogitIsIdentity = false;
  static constexpr bool kLogitReadsBuffers = false;
  static constexpr bool kKlTempered = false;
  static constexpr bool kLabelSmoothing = false;
  static constexpr bool kBias = false;

  // logit = 30.0 * tanh(logit * inv_t)
  struct LogitConst {
  };
  __device__ __forceinline__ static LogitConst logit_const(const TjArgs& a) {
    return {};
  }
  struct LogitRow {
  };
  __device__ __forceinline__ static LogitRow logit_row(const TjArgs& a, int row) {
    return {};
  }
  __device__ __forceinline__ static float logit_mod(const TjArgs& a, const LogitConst& cp, const LogitRow& rp, float logit, int row, int id) {
#line 1 "loss_softcap.tj"
    const float t0 = logit * a.inv_t;
    const float t1 = tj_tanh(t0);
    const float t2 = 30.0f * t1;
    return t2;
  }
  __device__ __forceinline__ static float logit_mod(const TjArgs& a, float logit, int row, int id) {
    return logit_mod(a, logit_const(a), logit_row(a, row), logit, row, id);
  }

  // d logit / d logit = 30.0 * inv_t * (1.0 - tanh(logit * inv_t) * tanh(logit * inv_t))
  struct GradConst {
    float v0;  // 30.0 * inv_t
  };
  __device__ __forceinline__ static GradConst grad_const(const TjArgs& a) {
#line 1 "loss_softcap.tj"
    const float t0 = 30.0f * a.inv_t;
    return {t0};
  }
  struct GradRow {
  };
  __device__ __forceinline__ static GradRow grad_row(const TjArgs& a, int row) {
    return {};
  }
  __device__ __forceinline__ static float logit_grad(const TjArgs& a, const GradConst& cp, const GradRow& rp, float logit, int row, int id) {
#line 1 "loss_softcap.tj"
    const float t0 = logit * a.inv_t;
    const float t1 = tj_tanh(t0);
    const float t2 = t1 * t1;
    const float t3 = 1.0f - t2;
    const float t4 = cp.v0 * t3;
    return t4;
  }
  __device__ __forceinline__ static float logit_grad(const TjArgs& a, float logit, int row, int id) {
    return logit_grad(a, grad_const(a), grad_row(a, row), logit, row, id);
  }
};
