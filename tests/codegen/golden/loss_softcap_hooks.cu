struct TjProgram {
  static constexpr bool kLogitIsIdentity = false;
  static constexpr bool kLogitReadsBuffers = false;

  // logit = 30.0 * tanh(logit * inv_t)
  __device__ __forceinline__ static float logit_mod(const TjArgs& a, float logit, int row, int id) {
#line 1 "loss_softcap.tj"
    const float t0 = logit * a.inv_t;
    const float t1 = tj_tanh(t0);
    const float t2 = 30.0f * t1;
    return t2;
  }

  // d logit / d logit = 30.0 * inv_t * (1.0 - tanh(logit * inv_t) * tanh(logit * inv_t))
  __device__ __forceinline__ static float logit_grad(const TjArgs& a, float logit, int row, int id) {
#line 1 "loss_softcap.tj"
    const float t0 = 30.0f * a.inv_t;
    const float t1 = logit * a.inv_t;
    const float t2 = tj_tanh(t1);
    const float t3 = t2 * t2;
    const float t4 = 1.0f - t3;
    const float t5 = t0 * t4;
    return t5;
  }
};
