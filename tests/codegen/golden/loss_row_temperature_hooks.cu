struct TjProgram {
  static constexpr bool kLogitIsIdentity = false;
  static constexpr bool kLogitReadsBuffers = true;
  static constexpr bool kKlTempered = false;
  static constexpr bool kLabelSmoothing = false;
  static constexpr bool kBias = false;

  // logit = cap * tanh(logit / cap) / temp[row]
  struct LogitConst {
    TjRecip r0;  // 1 / (cap)
  };
  __device__ __forceinline__ static LogitConst logit_const(const TjArgs& a) {
#line 1 "loss_row_temperature.tj"
    return {tj_recip(a.cap)};
  }
  struct LogitRow {
    TjRecip r0;  // 1 / (temp[row])
  };
  __device__ __forceinline__ static LogitRow logit_row(const TjArgs& a, int row) {
#line 1 "loss_row_temperature.tj"
    const float t0 = tj_load(a.temp, row);
    return {tj_recip(t0)};
  }
  __device__ __forceinline__ static float logit_mod(const TjArgs& a, const LogitConst& cp, const LogitRow& rp, float logit, int row, int id) {
#line 1 "loss_row_temperature.tj"
    const float t0 = tj_fdiv_recip(logit, cp.r0);
    const float t1 = tj_tanh(t0);
    const float t2 = a.cap * t1;
    const float t3 = tj_fdiv_recip(t2, rp.r0);
    return t3;
  }
  __device__ __forceinline__ static float logit_mod(const TjArgs& a, float logit, int row, int id) {
    return logit_mod(a, logit_const(a), logit_row(a, row), logit, row, id);
  }

  // d logit / d logit = (1.0 - tanh(logit / cap) * tanh(logit / cap)) / temp[row]
  struct GradConst {
    TjRecip r0;  // 1 / (cap)
  };
  __device__ __forceinline__ static GradConst grad_const(const TjArgs& a) {
#line 1 "loss_row_temperature.tj"
    return {tj_recip(a.cap)};
  }
  struct GradRow {
    TjRecip r0;  // 1 / (temp[row])
  };
  __device__ __forceinline__ static GradRow grad_row(const TjArgs& a, int row) {
#line 1 "loss_row_temperature.tj"
    const float t0 = tj_load(a.temp, row);
    return {tj_recip(t0)};
  }
  __device__ __forceinline__ static float logit_grad(const TjArgs& a, const GradConst& cp, const GradRow& rp, float logit, int row, int id) {
#line 1 "loss_row_temperature.tj"
    const float t0 = tj_fdiv_recip(logit, cp.r0);
    const float t1 = tj_tanh(t0);
    const float t2 = t1 * t1;
    const float t3 = 1.0f - t2;
    const float t4 = tj_fdiv_recip(t3, rp.r0);
    return t4;
  }
  __device__ __forceinline__ static float logit_grad(const TjArgs& a, float logit, int row, int id) {
    return logit_grad(a, grad_const(a), grad_row(a, row), logit, row, id);
  }
};
