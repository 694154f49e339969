// Compiles the portable attention templates with NVRTC (no GPU needed), as the runtime will:
// a stand-in causal + soft-cap program, every kernel of the forward and backward, for sm_80
// and sm_90a, and prints ptxas's register / spill report. Exit status 1 on a compile error.
//   g++ -std=c++17 tests/gpu/nvrtc_attention_check.cpp -I$CUDA/include -L$CUDA/lib64 -lnvrtc
//   ./a.out <repo>/kernels_templates
#include <nvrtc.h>

#include <cstdio>
#include <string>
#include <vector>

namespace {

const char* kSource = R"(
#include "attention_bwd.cuh"
struct TjArgs {
  float cap;
};
struct TjProgram {
  static constexpr bool kMaskIsTrue = false, kScoreIsIdentity = false;
  __device__ static bool mask_mod(const TjArgs&, int, int, int q, int kv) { return q >= kv; }
  __device__ static float tanh_hw(float x) {
    float y;
    asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
  }
  __device__ static float score_mod(const TjArgs& a, float s, int, int, int, int) {
    return a.cap * tanh_hw(s / a.cap);
  }
  __device__ static float score_grad(const TjArgs& a, float s, int, int, int, int) {
    float t = tanh_hw(s / a.cap);
    return 1.f - t * t;
  }
};
)";

bool check(const char* dir, const char* arch) {
  nvrtcProgram prog;
  if (nvrtcCreateProgram(&prog, kSource, "attention_check.cu", 0, nullptr, nullptr) !=
      NVRTC_SUCCESS)
    return false;
  std::vector<std::string> names;
  for (const char* t : {"tjk::bf16", "tjk::f16"})
    for (int d : {64, 128}) {
      std::string tail = std::string(t) + ", " + std::to_string(d);
      names.push_back("tjk::attention_fwd_kernel<TjProgram, TjArgs, " + tail + ">");
      names.push_back("tjk::attention_bwd_kernel<TjProgram, TjArgs, " + tail + ", true>");
      names.push_back("tjk::attention_bwd_kernel<TjProgram, TjArgs, " + tail + ", false>");
      names.push_back("tjk::attention_bwd_dq_kernel<TjProgram, TjArgs, " + tail + ">");
      names.push_back("tjk::attention_bwd_preprocess_kernel<" + tail + ">");
      names.push_back("tjk::attention_bwd_dq_convert_kernel<" + tail + ">");
    }
  for (auto& n : names) nvrtcAddNameExpression(prog, n.c_str());
  std::string include = std::string("-I") + dir, gpu = std::string("-arch=") + arch;
  const char* opts[] = {"-std=c++17", gpu.c_str(), include.c_str(), "-Xptxas=-v", "-lineinfo"};
  nvrtcResult r = nvrtcCompileProgram(prog, 5, opts);
  size_t log_size;
  nvrtcGetProgramLogSize(prog, &log_size);
  std::string log(log_size, '\0');
  nvrtcGetProgramLog(prog, log.data());
  std::printf("== %s: %s\n%s\n", arch, nvrtcGetErrorString(r), log.c_str());
  nvrtcDestroyProgram(&prog);
  return r == NVRTC_SUCCESS;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <repo>/kernels_templates\n", argv[0]);
    return 2;
  }
  bool ok = check(argv[1], "sm_80") && check(argv[1], "sm_90a");
  return ok ? 0 : 1;
}
