// Problems for tests/gpu/linear_ce_harness.cu: device tensors of one linear cross-entropy
// problem, and the data generator of shared/peers/torch_ce_peers.py make() written for the GPU:
// "zipf" (a Zipf(s) unigram log-prior over a shuffled vocabulary in the weights' last column,
// context noise of logit std 2, the target logit lifted by 12), "flat" (logits ~ N(0, 1), uniform
// targets, no lift) and "peaked" (logit std 3, uniform targets lifted by 20: a few large logits
// scattered uniformly over the vocabulary). See data_kind().
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

constexpr int kIgnore = -100;

inline void fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "\n");
  std::exit(2);
}
inline void check_cuda(cudaError_t e, const char* what, int line) {
  if (e != cudaSuccess) fail("CUDA error %s at line %d: %s", cudaGetErrorString(e), line, what);
}
#define CK(x) check_cuda((x), #x, __LINE__)

struct DeviceSegment {
  int begin = 0, size = 0;
  unsigned short* weight = nullptr;  // bf16 [size, dim]
  unsigned short* bias = nullptr;    // bf16 [size] or nullptr
  float* d_weight = nullptr;         // [size, dim]
  float* d_bias = nullptr;
};

struct Problem {
  int n_rows = 0, dim = 0;
  unsigned short* hidden = nullptr;  // bf16 [n_rows, dim]
  int* targets = nullptr;
  std::vector<int> h_targets;
  std::vector<DeviceSegment> segs;
  float* d_hidden = nullptr;
  float* loss = nullptr;       // [1]
  float* loss_rows = nullptr;  // [n_rows]
  int64_t input_bytes = 0, output_bytes = 0;

  void free_all() {
    for (auto& s : segs) {
      cudaFree(s.weight);
      cudaFree(s.bias);
      cudaFree(s.d_weight);
      cudaFree(s.d_bias);
    }
    cudaFree(hidden);
    cudaFree(targets);
    cudaFree(d_hidden);
    cudaFree(loss);
    cudaFree(loss_rows);
  }
  // NaN everywhere the kernels must write.
  void poison() {
    CK(cudaMemset(d_hidden, 0xff, size_t(n_rows) * dim * 4));
    CK(cudaMemset(loss, 0xff, 4));
    CK(cudaMemset(loss_rows, 0xff, size_t(n_rows) * 4));
    for (auto& s : segs) {
      CK(cudaMemset(s.d_weight, 0xff, size_t(s.size) * dim * 4));
      if (s.d_bias) CK(cudaMemset(s.d_bias, 0xff, size_t(s.size) * 4));
    }
  }
};

struct DataSpec {
  int n_rows = 0, dim = 0;
  std::vector<std::pair<int, int>> segments;  // (begin, size)
  bool bias = false;
  double zipf = 1.1;   // 0: flat prior
  double noise = 2.0;  // std of the context logit noise
  double lift = 12.0;  // added to the target logit
  double ignored = 0.1;
  uint64_t seed = 1;
};

// The data kinds of PERF.md / torch_ce_peers.py make(), applied to `d`.
inline void data_kind(DataSpec& d, const std::string& kind) {
  if (kind == "zipf") {
    d.zipf = 1.1, d.noise = 2, d.lift = 12;
  } else if (kind == "flat") {
    d.zipf = 0, d.noise = 1, d.lift = 0;
  } else if (kind == "peaked") {
    d.zipf = 0, d.noise = 3, d.lift = 20;
  } else {
    fail("unknown data kind '%s' (zipf, flat, peaked)", kind.c_str());
  }
}

__device__ __forceinline__ unsigned long long mix64(unsigned long long x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
__device__ __forceinline__ float normal01(unsigned long long seed, unsigned long long i) {
  unsigned long long h = mix64(seed ^ mix64(i));
  float u1 = (float((h >> 40) & 0xffffff) + 0.5f) * (1.f / 16777216.f);
  float u2 = float((h >> 16) & 0xffffff) * (1.f / 16777216.f);
  return sqrtf(-2.f * logf(u1)) * cospif(2.f * u2);
}
__device__ __forceinline__ unsigned short to_bf16(float v) {
  unsigned u = __float_as_uint(v);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}
__device__ __forceinline__ float from_bf16(unsigned short b) {
  return __uint_as_float(unsigned(b) << 16);
}
inline float host_bf16(unsigned short b) {
  unsigned u = unsigned(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Weight rows ~ N(0, 1); with a prior, the last column holds it.
__global__ void gen_weight_kernel(unsigned short* w, long long rows, int dim, const float* prior,
                                  unsigned long long seed) {
  long long n = rows * dim;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    long long r = i / dim;
    int c = int(i % dim);
    w[i] = to_bf16(prior && c == dim - 1 ? prior[r] : normal01(seed, i));
  }
}

struct WeightTable {
  const unsigned short* w[4];
};

// One block per row: noise (logit std `noise`) plus lift * C[t] / |C[t]|^2, last column 1 when
// the weights carry a prior.
__global__ void gen_hidden_kernel(unsigned short* e, int dim, const int* tseg, const int* trow,
                                  WeightTable table, float noise, float lift, int prior_col,
                                  unsigned long long seed) {
  __shared__ float red[32];
  int r = blockIdx.x, cols = prior_col ? dim - 1 : dim;
  const unsigned short* ct = tseg[r] >= 0 ? table.w[tseg[r]] + (long long)trow[r] * dim : nullptr;
  float sq = 0.f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    float v = ct ? from_bf16(ct[c]) : 0.f;
    sq += v * v;
  }
  for (int o = 16; o; o >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, o);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = sq;
  __syncthreads();
  float tot = 0.f;
  for (int i = 0; i < int(blockDim.x >> 5); ++i) tot += red[i];
  float scale = noise / sqrtf(float(cols)), gain = tot > 0.f ? lift / tot : 0.f;
  for (int c = threadIdx.x; c < dim; c += blockDim.x) {
    float v = c < cols ? scale * normal01(seed, (long long)r * dim + c) +
                             (ct ? gain * from_bf16(ct[c]) : 0.f)
                       : 1.f;
    e[(long long)r * dim + c] = to_bf16(v);
  }
}

inline Problem make_problem(const DataSpec& d) {
  Problem P;
  P.n_rows = d.n_rows;
  P.dim = d.dim;
  std::mt19937_64 rng(d.seed);
  int live = 0;
  for (auto& s : d.segments) live += s.second;
  // Zipf log-prior over a shuffled live vocabulary; targets drawn from it.
  std::vector<int> rank(live);
  for (int i = 0; i < live; ++i) rank[i] = i + 1;
  std::shuffle(rank.begin(), rank.end(), rng);
  std::vector<float> prior(live);
  std::vector<double> cdf(live);
  double acc = 0;
  for (int i = 0; i < live; ++i) {
    prior[i] = float(-d.zipf * std::log(double(rank[i])));
    acc += std::exp(double(prior[i]));
    cdf[i] = acc;
  }
  std::uniform_real_distribution<double> uni(0, 1);
  std::vector<int> tseg(d.n_rows), trow(d.n_rows);
  P.h_targets.resize(d.n_rows);
  for (int r = 0; r < d.n_rows; ++r) {
    int j = int(std::lower_bound(cdf.begin(), cdf.end(), uni(rng) * acc) - cdf.begin());
    j = std::min(j, live - 1);
    int s = 0;
    while (j >= d.segments[s].second) j -= d.segments[s++].second;
    tseg[r] = s;
    trow[r] = j;
    P.h_targets[r] = d.segments[s].first + j;
    if (uni(rng) < d.ignored) P.h_targets[r] = kIgnore;
  }
  float* dprior = nullptr;
  CK(cudaMalloc(&dprior, size_t(live) * 4));
  CK(cudaMemcpy(dprior, prior.data(), size_t(live) * 4, cudaMemcpyHostToDevice));
  WeightTable table{};
  int off = 0;
  for (size_t s = 0; s < d.segments.size(); ++s) {
    DeviceSegment g;
    g.begin = d.segments[s].first;
    g.size = d.segments[s].second;
    size_t n = size_t(g.size) * d.dim;
    CK(cudaMalloc(&g.weight, n * 2));
    CK(cudaMalloc(&g.d_weight, n * 4));
    gen_weight_kernel<<<4096, 256>>>(g.weight, g.size, d.dim, d.zipf > 0 ? dprior + off : nullptr,
                                     d.seed * 977 + s);
    if (d.bias) {
      CK(cudaMalloc(&g.bias, size_t(g.size) * 2));
      CK(cudaMalloc(&g.d_bias, size_t(g.size) * 4));
      gen_weight_kernel<<<256, 256>>>(g.bias, g.size, 1, nullptr, d.seed * 131 + s);
    }
    P.input_bytes += n * 2;
    P.output_bytes += n * 4;
    table.w[s] = g.weight;
    off += g.size;
    P.segs.push_back(g);
  }
  int *dseg, *drow;
  CK(cudaMalloc(&dseg, d.n_rows * 4));
  CK(cudaMalloc(&drow, d.n_rows * 4));
  CK(cudaMemcpy(dseg, tseg.data(), d.n_rows * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(drow, trow.data(), d.n_rows * 4, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&P.hidden, size_t(d.n_rows) * d.dim * 2));
  gen_hidden_kernel<<<d.n_rows, 256>>>(P.hidden, d.dim, dseg, drow, table, float(d.noise),
                                       float(d.lift), d.zipf > 0, d.seed * 7919);
  CK(cudaMalloc(&P.targets, d.n_rows * 4));
  CK(cudaMemcpy(P.targets, P.h_targets.data(), d.n_rows * 4, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&P.d_hidden, size_t(d.n_rows) * d.dim * 4));
  CK(cudaMalloc(&P.loss, 4));
  CK(cudaMalloc(&P.loss_rows, size_t(d.n_rows) * 4));
  P.input_bytes += size_t(d.n_rows) * d.dim * 2;
  P.output_bytes += size_t(d.n_rows) * d.dim * 4;
  CK(cudaDeviceSynchronize());
  cudaFree(dprior);
  cudaFree(dseg);
  cudaFree(drow);
  return P;
}

// Device bf16 tensor -> host floats.
inline std::vector<float> to_host(const unsigned short* p, size_t n) {
  std::vector<unsigned short> b(n);
  CK(cudaMemcpy(b.data(), p, n * 2, cudaMemcpyDeviceToHost));
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) f[i] = host_bf16(b[i]);
  return f;
}
inline std::vector<float> to_host(const float* p, size_t n) {
  std::vector<float> f(n);
  CK(cudaMemcpy(f.data(), p, n * 4, cudaMemcpyDeviceToHost));
  return f;
}
inline std::vector<int> to_host(const int* p, size_t n) {
  std::vector<int> v(n);
  CK(cudaMemcpy(v.data(), p, n * 4, cudaMemcpyDeviceToHost));
  return v;
}
