#include "bench/ce_bench_shapes.h"

#include <fmt/format.h>

#include "dsl/TextForm.h"

namespace tilejit::bench {

std::vector<CeShape> perf_shapes() {
  return {
      {.name = "gemma2_2b", .dim = 2304, .segments = {{0, 256000}}, .softcap = 30},
      {.name = "llama3_8b", .dim = 4096, .segments = {{0, 128256}}},
      {.name = "qwen_248k", .dim = 5120, .segments = {{0, 248320}}},
      {.name = "mistral_7b", .dim = 4096, .segments = {{0, 32000}}},
      {.name = "two_segments",
       .dim = 2048,
       .segments = {{0, 151936}, {152066, 1024}},
       .ignored = 0.5},
      {.name = "one_segment_152960", .dim = 2048, .segments = {{0, 152960}}, .ignored = 0.5},
      {.name = "ce_kl_248k",
       .rows = 24576,
       .dim = 5120,
       .segments = {{0, 248320}},
       .kl_alpha = 0.15},
  };
}

std::string weight_name(size_t s) { return fmt::format("W{}", s); }

LossProgram shape_program(const CeShape& shape) {
  std::string text = fmt::format("loss {} {{\n", shape.name);
  if (shape.softcap > 0) text += "  param cap : f32\n";
  for (size_t s = 0; s < shape.segments.size(); ++s) {
    auto [first, size] = shape.segments[s];
    text +=
        fmt::format("  segment s{} : [{}, {}) weight {}\n", s, first, first + size, weight_name(s));
  }
  if (shape.softcap > 0) text += "  logit = cap * tanh(logit / cap)\n";
  if (shape.kl_alpha > 0) text += fmt::format("  kl alpha = {} temperature = 1\n", shape.kl_alpha);
  text += "  ignore_index = -100\n  reduction = mean\n}\n";
  return parse_loss(text, shape.name + ".tj");
}

}  // namespace tilejit::bench
