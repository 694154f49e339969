// The f32 side of generated hooks on the GPU: score_mod, its derivative and the log2-domain logit
// kernels read (log2e * score_mod(scale * acc), its factors folded per row where the generator
// folds them: compiler/codegen/ScoreFold.h) for random programs, evaluated by a small kernel at
// many points and compared with the interpreter (fp64). The
// hardware approximations (tanh.approx ~2^-11, ex2/lg2 ~2^-22) and FMA contraction make this a
// tolerance check; a wrong spelling or operand order shows up as nearly every point wrong.
// Skips without a GPU.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>

#include "compiler/Interpreter.h"
#include "compiler/Lower.h"
#include "compiler/Printer.h"
#include "compiler/codegen/CudaCodegen.h"
#include "kernels_templates/Embedded.h"
#include "runtime/Bindings.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "runtime/Launch.h"
#include "runtime/Nvrtc.h"
#include "tests/support/RandomProgram.h"

namespace tilejit::testing {
namespace {

constexpr int kB = 2, kH = 2, kSq = 8, kSkv = 16, kPoints = kB * kH * kSq * kSkv;

std::string hook_source(const LoweredAttention& l) {
  ArgLayout layout = arg_layout(l.program);
  return "#include \"common.cuh\"\n#include \"hook_parts.cuh\"\n" + generate_args_struct(layout) +
         generate_hooks(l.program, l.score_grad) +
         fmt::format(R"(
extern "C" __global__ void tj_hook_values(const __grid_constant__ TjArgs a, const float* scores,
                                          float scale, float* out) {{
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= {0}) return;
  const int kv = i % {4}, q = i / {4} % {3}, h = i / ({4} * {3}) % {2}, b = i / ({4} * {3} * {2});
  using H = tjk::HookParts<TjProgram>;
  const auto qp = TjProgram::score_q(a, b, h, q);
  const auto kp = TjProgram::score_kv(a, b, h, kv);
  out[4 * i] = TjProgram::score_mod(a, scores[i], b, h, q, kv);
  out[4 * i + 1] = TjProgram::score_grad(a, scores[i], b, h, q, kv);
  out[4 * i + 2] = H::score_log2(a, qp, kp, scores[i], scale, b, h, q, kv);
  // a factored score_log2's two factors, multiplied (score_log2 again where it is not factored)
  if constexpr (tjk::ScoreLog2Factored<TjProgram>::value)
    out[4 * i + 3] = H::score_log2_unscaled(a, qp, kp, scores[i], scale, b, h, q, kv) *
                     H::score_log2_factor(a, qp, scale, b, h);
  else
    out[4 * i + 3] = out[4 * i + 2];
}}
)",
                     kPoints, kB, kH, kSq, kSkv);
}

bool close(double got, double want) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  // The interpreter's fp64 may go past the f32 range where the kernel overflows.
  if (std::abs(want) > 3.4e38) return std::isinf(got) || std::isnan(got) || std::abs(got) > 1e30;
  return std::abs(got - want) <= 4e-3 * std::abs(want) + 1e-3;
}

TEST(HookValuesGpu, RandomScoreModsAndDerivatives) {
  if (!gpu_available()) GTEST_SKIP() << "no GPU: " << Driver::unavailable_reason();
  Driver* driver = Driver::get();
  driver->use_device(0);
  const std::string arch = device_arch(0);

  // A fixed seed by default: random float programs occasionally sit on a discontinuity (a
  // comparison a hardware approximation tips the other way). TILEJIT_TEST_SEED explores others.
  const char* seed_env = std::getenv("TILEJIT_TEST_SEED");
  const uint64_t seed = seed_env ? std::strtoull(seed_env, nullptr, 10) : 12345;
  SCOPED_TRACE(fmt::format("TILEJIT_TEST_SEED={}", seed));
  std::mt19937_64 rng(seed);
  RandomProgramOptions opt;
  opt.use_buffers = false;  // values of buffers are covered by dense_mask; keep points simple
  opt.use_special_floats = false;
  std::vector<float> scores(kPoints);
  for (float& s : scores) s = std::uniform_real_distribution<float>(-4, 4)(rng);
  DeviceBuffer d_scores = DeviceBuffer::from_host(scores);
  DeviceBuffer d_out(4 * kPoints * sizeof(float));

  int64_t total = 0, bad = 0, programs = 0;
  // TILEJIT_HOOK_PROGRAMS=N checks N programs instead of 40 (soak runs).
  const char* count_env = std::getenv("TILEJIT_HOOK_PROGRAMS");
  const int64_t wanted = count_env ? std::atoi(count_env) : 40;
  for (int n = 0; programs < wanted && n < 10 * wanted; ++n) {
    AttentionProgram p = random_attention_program(rng, opt);
    LoweredAttention l;
    try {
      l = lower(p);
    } catch (const UserError&) {
      continue;
    }
    ++programs;
    CompileRequest req{.program_name = "hook_values.cu",
                       .source = hook_source(l),
                       .headers = {{"common.cuh", std::string(embedded_template("common.cuh"))},
                                   {"hook_parts.cuh",
                                    std::string(embedded_template("hook_parts.cuh"))}},
                       .options = {"-std=c++17"},
                       .arch = arch};
    CompileResult r = nvrtc_compile(req);
    CUmodule module = driver->module_load_data(r.cubin.data());
    CUfunction fn = driver->module_function(module, "tj_hook_values");

    Bindings bind;
    EvalContext ctx;
    for (const ParamDecl& d : l.program.params) {
      float v = std::uniform_real_distribution<float>(-3, 3)(rng);
      if (d.type == Type::I32) {
        int32_t iv = static_cast<int32_t>(rng() % 11) - 3;
        bind.param(d.name, iv);
        ctx.params[d.name] = int64_t{iv};
      } else {
        bind.param(d.name, v);
        ctx.params[d.name] = double{v};
      }
    }
    std::vector<unsigned char> args = pack_args(arg_layout(l.program), bind);
    d_out.fill_bytes(0xFF);
    CUdeviceptr s_ptr = d_scores.ptr(), o_ptr = d_out.ptr();
    // The log2-domain logit multiplies the raw product by the kernels' scale first.
    float scale = std::uniform_real_distribution<float>(0.05f, 2.f)(rng);
    void* params[] = {args.data(), &s_ptr, &scale, &o_ptr};
    launch(fn, Dim3{(kPoints + 127) / 128, 1, 1}, Dim3{128, 1, 1}, 0, nullptr, params);
    driver->context_synchronize();
    std::vector<float> got = d_out.to_host<float>();
    driver->module_unload(module);

    CompiledEval score(l.program.score, ctx), grad(l.score_grad, ctx);
    int64_t program_bad = 0;
    for (int i = 0; i < kPoints; ++i) {
      int kv = i % kSkv, q = i / kSkv % kSq, h = i / (kSkv * kSq) % kH, b = i / (kSkv * kSq * kH);
      const double scaled = static_cast<double>(scores[i]) * scale;
      const double log2_logit = score.eval_score(scaled, b, h, q, kv) * M_LOG2E;
      double want[4] = {score.eval_score(scores[i], b, h, q, kv),
                        grad.eval_score(scores[i], b, h, q, kv), log2_logit, log2_logit};
      for (int k = 0; k < 4; ++k) {
        ++total;
        if (close(got[4 * i + k], want[k])) continue;
        ++bad;
        if (++program_bad <= 2)
          fmt::print("{} at b={} h={} q={} kv={} score={} scale={}: got {}, interpreter {}\n",
                     k == 0   ? "score_mod"
                     : k == 1 ? "score_grad"
                     : k == 2 ? "score_log2"
                              : "score_log2_unscaled * score_log2_factor",
                     b, h, q, kv, scores[i], scale, got[4 * i + k], want[k]);
      }
    }
    // Ill-conditioned expressions (cancellation, huge intermediates) may lose a few points, but
    // never most of them.
    EXPECT_LE(program_bad, kPoints / 2) << "score = " << print_expr(l.program.score)
                                        << "\nscore_grad = " << print_expr(l.score_grad);
  }
  fmt::print("{} programs, {} values, {} outside tolerance\n", programs, total, bad);
  EXPECT_GE(programs, wanted / 2);
  EXPECT_LE(bad, total / 50);
}

}  // namespace
}  // namespace tilejit::testing
