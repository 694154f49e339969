// Row-level kernels at the boundary between the caller's tensors and the linear cross-entropy
// kernels' kept-row form (runtime/LinearCe.h): target validation and narrowing, scattering
// per-kept-row results back to original rows, and filling outputs that no kernel writes (an
// all-ignored batch). Deterministic; no atomics.
#pragma once

#include "linear_ce_common.cuh"

namespace tilejit_ce {

// The narrowed target of an ignored row, whatever the caller's ignore_index (which may not fit
// in 32 bits). Never a live id.
constexpr int kIgnoredTarget = -1;

// One block (1024 threads). Narrows targets (element stride `stride`) to 32-bit ids in out[]:
// ignore_index becomes kIgnoredTarget, a live id stays itself. *bad_row receives the first row
// whose target is neither (a dead id, a negative id, or one past the layout), or -1.
template <class T>
__device__ __forceinline__ void linear_ce_check_targets(const T* targets, long long stride,
                                                        int n_rows, long long ignore_index,
                                                        const CeLayout& layout, int* out,
                                                        int* bad_row) {
  __shared__ int first[32];
  int mine = 0x7fffffff;
  for (int i = threadIdx.x; i < n_rows; i += blockDim.x) {
    long long t = (long long)targets[(long long)i * stride];
    int v = kIgnoredTarget;
    if (t != ignore_index) {
      bool live = t >= 0 && t <= 0x7fffffffLL && id_tile(layout, (int)t) >= 0;
      if (live)
        v = (int)t;
      else
        mine = min(mine, i);
    }
    out[i] = v;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mine = min(mine, __shfl_xor_sync(0xffffffffu, mine, o));
  if ((threadIdx.x & 31) == 0) first[threadIdx.x >> 5] = mine;
  __syncthreads();
  if (threadIdx.x == 0) {
    int m = 0x7fffffff;
    for (int w = 0; w < (int)(blockDim.x >> 5); ++w) m = min(m, first[w]);
    *bad_row = m == 0x7fffffff ? -1 : m;
  }
}

// One thread per original row: out[i] = kept_values[slot[i]], 0 for an ignored row.
__device__ __forceinline__ void linear_ce_scatter_rows(const int* slot, const float* kept_values,
                                                       int n_rows, float* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n_rows) return;
  int k = slot[i];
  out[i] = k >= 0 ? kept_values[k] : 0.f;
}

// Grid-stride fill of a [rows, cols] fp32 matrix with row stride `stride` (elements).
__device__ __forceinline__ void linear_ce_fill(float* out, long long rows, long long cols,
                                               long long stride, float value) {
  long long n = rows * cols;
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n;
       e += (long long)gridDim.x * blockDim.x)
    out[(e / cols) * stride + e % cols] = value;
}

}  // namespace tilejit_ce
