// Attention on the GPU through the library's public path (programs, bindings, mask analysis,
// JIT kernels), on the shapes and masks of the peers' benchmark (FlexAttention, cuDNN, FA2), so
// the JSON lines it prints sit next to theirs row for row. TFLOP/s are counted on unmasked
// elements (forward 4·B·Hq·D·pairs, backward 2.5× that), like the peers.
//
//   attention_gpu_bench [--quick] [--masks causal,alibi_causal] [--shapes "B,H,S,D,Hkv;..."]
//                       [--windows 1024,4096] (the sliding-window cases, sliding_window_<w>)
//                       [--reps N] [--no-scaling] [--spacer-mb N] [--scratch-spacer-mb N]
//                       > attention.jsonl
//
// --spacer-mb N allocates N MiB before the first shape's tensors, so every buffer lands
// elsewhere in memory: the backward's time depends on where its buffers land (up to 10% at
// D 128, bench/NOTES.md), so a figure is best taken over a few spacers, one process each.
// --scratch-spacer-mb N allocates N MiB after each shape's tensors instead: only the scratch
// the library allocates at its first calls moves. The buffers' addresses go to stderr.
// With TILEJIT_LAUNCH_TRACE set, each case's launches go to that file (bench/launch_gaps.py
// --kernels sums them per kernel).
// Also: the first call per program (kernel compile or cache load, whichever the cache gives),
// and mask-building time on the GPU and the CPU, up to 1M tokens for a document mask.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench/device_tensor.h"
#include "compiler/Lower.h"
#include "dsl/Stdlib.h"
#include "runtime/Attention.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "runtime/LaunchTrace.h"
#include "runtime/MaskAnalysis.h"
#include "runtime/MaskAnalysisGpu.h"

namespace tilejit {
namespace {

using bench::device_tensor;
using bench::DeviceTensor;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Median milliseconds of `reps` runs of `f` on the default stream, after `warmup` runs.
template <class F>
double median_ms(F&& f, int warmup, int reps) {
  Driver& d = *Driver::get();
  for (int i = 0; i < warmup; ++i) f();
  std::vector<CUevent> ev(reps + 1);
  for (CUevent& e : ev) e = d.event_create();
  d.event_record(ev[0], nullptr);
  for (int i = 0; i < reps; ++i) {
    f();
    d.event_record(ev[i + 1], nullptr);
  }
  d.stream_synchronize(nullptr);
  std::vector<double> ms(reps);
  for (int i = 0; i < reps; ++i) ms[i] = d.event_elapsed_ms(ev[i], ev[i + 1]);
  for (CUevent e : ev) d.event_destroy(e);
  std::nth_element(ms.begin(), ms.begin() + reps / 2, ms.end());
  return ms[reps / 2];
}

// bf16 values ~ N(0, 1) from a cheap generator (tens of millions of elements per tensor).
DeviceTensor random_bf16(std::vector<int64_t> shape, const std::string& name, uint64_t seed) {
  int64_t n = 1;
  for (int64_t e : shape) n *= e;
  std::vector<uint16_t> bits(n);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < n; ++i) {
    float s = 0;  // Irwin-Hall of 4 uniforms, rescaled to unit variance
    for (int j = 0; j < 4; ++j) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      s += float(x >> 40) * (1.f / 16777216.f);
    }
    float v = (s - 2.f) * std::sqrt(3.f);
    uint32_t u;
    std::memcpy(&u, &v, 4);
    bits[i] = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
  return device_tensor(DType::BF16, std::move(shape), name, bits.data());
}

// Document ids as the peers draw them: 64 documents of S/16 .. S/4 tokens, truncated to S, the
// remainder (if any) one more document.
std::vector<int32_t> peer_documents(int S, std::mt19937& rng) {
  std::uniform_int_distribution<int> len(S / 16, S / 4 - 1);
  std::vector<int32_t> doc;
  for (int d = 0; d < 64 && int(doc.size()) < S; ++d) doc.insert(doc.end(), len(rng), d);
  doc.resize(S, 64);
  return doc;
}

struct MaskCase {
  std::string name;
  AttentionProgram program;
  Bindings host, device;
  std::vector<DeviceTensor> keep;
  double density = 0;  // fraction of (q, kv) pairs unmasked
};

std::vector<MaskCase> mask_cases(int B, int H, int S, const std::vector<int>& windows) {
  std::mt19937 rng(S + H);
  std::vector<MaskCase> cases;
  auto add = [&](std::string name, const char* program) {
    cases.push_back({std::move(name), stdlib::standard_attention_program(program), {}, {}, {}, 0});
    return &cases.back();
  };
  const double pairs = double(S) * S;
  double causal_pairs = double(S) * (S + 1) / 2;
  add("causal", "causal")->density = causal_pairs / pairs;

  MaskCase* c = nullptr;
  for (int window : windows) {
    c = add(fmt::format("sliding_window_{}", window), "sliding_window");
    c->host.param("window", window), c->device.param("window", window);
    double sw = 0;
    for (int q = 0; q < S; ++q) sw += std::min(q + 1, window);
    c->density = sw / pairs;
  }

  c = add("document_causal", "document_causal");
  std::vector<int32_t> doc1 = peer_documents(S, rng), doc;
  for (int b = 0; b < B; ++b) doc.insert(doc.end(), doc1.begin(), doc1.end());
  c->keep.push_back(device_tensor(DType::I32, {B, S}, "doc", doc.data()));
  c->device.buffer("doc", c->keep.back().view);
  double dp = 0;
  for (int q = 0, start = 0; q < S; ++q) {
    if (q > 0 && doc1[q] != doc1[q - 1]) start = q;
    dp += q - start + 1;
  }
  c->density = dp / pairs;

  c = add("prefix_lm", "prefix_lm");
  std::vector<int32_t> prefix(B, S / 4);
  c->keep.push_back(device_tensor(DType::I32, {B}, "prefix", prefix.data()));
  c->device.buffer("prefix", c->keep.back().view);
  double pl = 0;
  for (int q = 0; q < S; ++q) pl += std::max(q + 1, S / 4);
  c->density = pl / pairs;

  c = add("alibi_causal", "alibi_causal");
  std::vector<float> slopes(H);
  for (int h = 0; h < H; ++h) slopes[h] = std::exp2(-8.f * (h + 1) / H);
  c->keep.push_back(device_tensor(DType::F32, {H}, "slopes", slopes.data()));
  c->device.buffer("slopes", c->keep.back().view);
  c->density = causal_pairs / pairs;

  c = add("softcap_causal", "softcap_causal");
  c->host.param("cap", 30.f), c->device.param("cap", 30.f);
  c->density = causal_pairs / pairs;
  return cases;
}

// Host copies of the device buffers, for the CPU analysis (the GPU one reads device memory).
void bind_host_buffers(MaskCase& c, std::vector<std::vector<uint8_t>>& storage) {
  for (const auto& [name, view] : c.device.buffers()) {
    storage.emplace_back(view.numel() * dtype_size(view.dtype));
    Driver::get()->memcpy_dtoh(storage.back().data(), view.device_ptr(), storage.back().size());
    c.host.buffer(name, TensorView::contiguous(storage.back().data(), view.dtype, view.shape,
                                               TensorView::Where::Host, name));
  }
}

struct BenchOptions {
  bool quick = false;
  int reps = 20;                           // timed runs per direction (median)
  std::vector<std::string> masks;          // empty: every mask case
  std::vector<std::array<int, 5>> shapes;  // B, H, S, D, Hkv; empty: the default list
  bool scaling = true;                     // the mask-analysis scaling rows
  int spacer_mb = 0;                       // allocated before the tensors (memory placement)
  int scratch_spacer_mb = 0;               // allocated after them: only the library's scratch moves
  std::vector<int> windows{1024};          // the sliding-window cases' windows
};

bool wanted(const BenchOptions& o, const std::string& mask) {
  return o.masks.empty() || std::find(o.masks.begin(), o.masks.end(), mask) != o.masks.end();
}

void bench_shape(int B, int H, int S, int D, int Hkv, const BenchOptions& opt) {
  DeviceTensor q = random_bf16({B, H, S, D}, "q", 1), k = random_bf16({B, Hkv, S, D}, "k", 2),
               v = random_bf16({B, Hkv, S, D}, "v", 3),
               d_out = random_bf16({B, H, S, D}, "d_out", 4);
  DeviceTensor out = device_tensor(DType::BF16, {B, H, S, D}, "out"),
               lse = device_tensor(DType::F32, {B, H, S}, "lse");
  DeviceTensor dq = device_tensor(DType::BF16, {B, H, S, D}, "dq"),
               dk = device_tensor(DType::BF16, {B, Hkv, S, D}, "dk"),
               dv = device_tensor(DType::BF16, {B, Hkv, S, D}, "dv");
  // Allocated after the tensors and before the library's first call: only the scratch the
  // library allocates then (the backward's dQ accumulator, delta) lands elsewhere.
  std::optional<DeviceTensor> scratch_spacer;
  if (opt.scratch_spacer_mb > 0)
    scratch_spacer.emplace(
        device_tensor(DType::F32, {int64_t{opt.scratch_spacer_mb} << 18}, "scratch spacer"));
  fmt::print(stderr, "buffers (MiB): q {} k {} v {} d_out {} out {} dq {} dk {} dv {}\n",
             reinterpret_cast<uintptr_t>(q.view.data) >> 20,
             reinterpret_cast<uintptr_t>(k.view.data) >> 20,
             reinterpret_cast<uintptr_t>(v.view.data) >> 20,
             reinterpret_cast<uintptr_t>(d_out.view.data) >> 20,
             reinterpret_cast<uintptr_t>(out.view.data) >> 20,
             reinterpret_cast<uintptr_t>(dq.view.data) >> 20,
             reinterpret_cast<uintptr_t>(dk.view.data) >> 20,
             reinterpret_cast<uintptr_t>(dv.view.data) >> 20);
  const double dense_fwd = 4.0 * B * H * double(S) * S * D;
  const int reps = opt.reps;
  for (MaskCase& c : mask_cases(B, H, S, opt.windows)) {
    if (!wanted(opt, c.name)) continue;
    std::vector<std::vector<uint8_t>> host_copies;
    bind_host_buffers(c, host_copies);
    LoweredAttention lowered = lower(c.program);
    BlockMaskShape ms =
        mask_extents(lowered.program.mask, {.batch = B, .heads = H, .seq_q = S, .seq_kv = S});
    auto t0 = std::chrono::steady_clock::now();
    BlockMask mask = analyse_block_mask(lowered, c.host, ms);
    const double cpu_mask_ms = seconds_since(t0) * 1e3;
    analyse_block_mask_gpu(lowered, c.device, ms);  // warm (module load)
    t0 = std::chrono::steady_clock::now();
    BlockMask gpu_mask = analyse_block_mask_gpu(lowered, c.device, ms);
    const double gpu_mask_ms = seconds_since(t0) * 1e3;

    auto fwd = [&] {
      attention_forward(c.program, q.view, k.view, v.view, c.device, mask, {}, nullptr, out.view,
                        lse.view);
    };
    auto bwd = [&] {
      attention_backward(c.program, q.view, k.view, v.view, out.view, lse.view, d_out.view,
                         c.device, mask, {}, nullptr, dq.view, dk.view, dv.view);
    };
    t0 = std::chrono::steady_clock::now();
    fwd();
    bwd();
    Driver::get()->context_synchronize();
    const double first_s = seconds_since(t0);
    const double fwd_ms = median_ms(fwd, 3, reps), bwd_ms = median_ms(bwd, 3, reps);
    const double flops = dense_fwd * c.density;
    BlockMask::Counts n = mask.counts();
    fmt::print(
        "{{\"system\": \"tilejit\", \"mask\": \"{}\", \"B\": {}, \"H\": {}, \"Hkv\": {}, "
        "\"S\": {}, \"D\": {}, \"density\": {:.4f}, \"fwd_ms\": {:.4f}, \"bwd_ms\": {:.4f}, "
        "\"fwd_tflops\": {:.1f}, \"bwd_tflops\": {:.1f}, \"mask_build_ms\": {:.3f}, "
        "\"mask_build_cpu_ms\": {:.3f}, \"mask_bytes\": {}, \"tiles_full\": {}, "
        "\"tiles_partial\": {}, \"first_call_s\": {:.3f}}}\n",
        c.name, B, H, Hkv, S, D, c.density, fwd_ms, bwd_ms, flops / fwd_ms / 1e9,
        2.5 * flops / bwd_ms / 1e9, gpu_mask_ms, cpu_mask_ms, mask.bytes(), n.full, n.partial,
        first_s);
    std::fflush(stdout);
    if (launch_trace_enabled()) flush_launch_trace();  // TILEJIT_LAUNCH_TRACE: this case's launches
  }
}

// Document mask (32 sorted random ids) built from the program: GPU and CPU, up to 1M tokens.
void mask_build_scaling() {
  AttentionProgram prog = stdlib::standard_attention_program("document_causal");
  LoweredAttention lowered = lower(prog);
  for (int S : {8192, 32768, 65536, 131072, 1 << 20}) {
    std::mt19937 rng(S);
    std::vector<int32_t> doc(S);
    for (int32_t& d : doc) d = int32_t(rng() % 32);
    std::sort(doc.begin(), doc.end());
    DeviceTensor dev = device_tensor(DType::I32, {1, S}, "doc", doc.data());
    Bindings host{{"doc", TensorView::contiguous(doc.data(), DType::I32, {1, S},
                                                 TensorView::Where::Host, "doc")}};
    Bindings device{{"doc", dev.view}};
    BlockMaskShape ms = mask_extents(lowered.program.mask, {.batch = 1, .seq_q = S, .seq_kv = S});
    analyse_block_mask_gpu(lowered, device, ms);
    auto t0 = std::chrono::steady_clock::now();
    BlockMask g = analyse_block_mask_gpu(lowered, device, ms);
    const double gpu_ms = seconds_since(t0) * 1e3;
    t0 = std::chrono::steady_clock::now();
    BlockMask c = analyse_block_mask(lowered, host, ms);
    const double cpu_ms = seconds_since(t0) * 1e3;
    fmt::print(
        "{{\"system\": \"tilejit_mask_analysis\", \"mask\": \"document_causal\", \"S\": {}, "
        "\"mask_build_ms\": {:.3f}, \"mask_build_cpu_ms\": {:.3f}, \"mask_bytes\": {}, "
        "\"gpu_mask_bytes\": {}}}\n",
        S, gpu_ms, cpu_ms, c.bytes(), g.bytes());
    std::fflush(stdout);
  }
}

}  // namespace
}  // namespace tilejit

int main(int argc, char** argv) {
  using namespace tilejit;
  BenchOptions opt;
  auto split = [](const std::string& s, char sep) {
    std::vector<std::string> out;
    std::stringstream in(s);
    for (std::string item; std::getline(in, item, sep);)
      if (!item.empty()) out.push_back(item);
    return out;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--quick") {
      opt.quick = true, opt.reps = 5;
    } else if (a == "--masks" && has_value) {
      opt.masks = split(argv[++i], ',');
    } else if (a == "--shapes" && has_value) {
      for (const std::string& shape : split(argv[++i], ';')) {
        std::vector<std::string> v = split(shape, ',');
        if (v.size() != 5) {
          fmt::print(stderr, "attention_gpu_bench: shape '{}' is not B,H,S,D,Hkv\n", shape);
          return 2;
        }
        opt.shapes.push_back(
            {std::stoi(v[0]), std::stoi(v[1]), std::stoi(v[2]), std::stoi(v[3]), std::stoi(v[4])});
      }
    } else if (a == "--reps" && has_value) {
      opt.reps = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--spacer-mb" && has_value) {
      opt.spacer_mb = std::max(0, std::atoi(argv[++i]));
    } else if (a == "--scratch-spacer-mb" && has_value) {
      opt.scratch_spacer_mb = std::max(0, std::atoi(argv[++i]));
    } else if (a == "--windows" && has_value) {
      opt.windows.clear();
      for (const std::string& w : split(argv[++i], ',')) opt.windows.push_back(std::stoi(w));
    } else if (a == "--no-scaling") {
      opt.scaling = false;
    } else {
      fmt::print(stderr, "attention_gpu_bench: unknown argument '{}'\n", a);
      return 2;
    }
  }
  if (!gpu_available()) {
    fmt::print(stderr, "attention_gpu_bench: no GPU: {}\n", Driver::unavailable_reason());
    return 2;
  }
  Driver::get()->ensure_context();
  try {
    if (opt.shapes.empty()) {
      // The peers' shapes: B·S = 16k at D 128, 32k at one sequence, D 64, GQA 32/8.
      opt.shapes = {{8, 16, 2048, 128, 16}, {2, 16, 8192, 128, 16}};
      if (!opt.quick)
        opt.shapes.insert(opt.shapes.end(),
                          {{1, 16, 32768, 128, 16}, {2, 16, 8192, 64, 16}, {2, 32, 8192, 128, 8}});
    }
    std::optional<DeviceTensor> spacer;
    if (opt.spacer_mb > 0)
      spacer.emplace(device_tensor(DType::F32, {int64_t{opt.spacer_mb} << 18}, "spacer"));
    for (const auto& [B, H, S, D, Hkv] : opt.shapes) bench_shape(B, H, S, D, Hkv, opt);
    if (opt.scaling) mask_build_scaling();
  } catch (const std::exception& e) {
    fmt::print(stderr, "attention_gpu_bench: {}\n", e.what());
    return 1;
  }
  return 0;
}
