// Fused linear cross-entropy on the GPU through the library's public path (loss programs in
// text form, runtime/LinearCe.h), on the loss targets of shared PERF.md and the data kinds of the
// peers' generator (bench/ce_bench_data.h), so the JSON lines it prints sit next to the peers'
// rows in torch_ce_peers.json (same shape names, `data`, `fwd_ms`, `fwd_bwd_ms`, `*_mem_mb`).
//
//   linear_ce_gpu_bench [--quick] [--kinds zipf,flat,peaked] [--shapes gemma2_2b,...]
//                       [--modes exact,filtered,state] [--iters N] [--refresh-every K]
//                       > ce_bench.jsonl          (progress on stderr; no GPU: a message, exit 0)
//
// Modes: exact (filter_threshold 0); filtered (the dtype's default threshold, natural vocabulary
// order); state (default threshold, one VocabOrder::by_average_logit(K) reused over every step of
// the row: its median is the steady state, its mean amortizes the rebuilds).
// A row per shape x data kind x mode: the shape (N, D, V live ids, segments, softcap, kl_alpha,
// ignored_fraction, seed); fwd_ms, fwd_bwd_ms (median of `iters` steps after 2 warm-up steps,
// CUDA events around each call), fwd_ms_mean, fwd_bwd_ms_mean, fwd_tflops (2·N·D·V per GEMM),
// first_call_s (kernel compile or cache load); fwd_mem_mb, fwd_bwd_mem_mb (peak device memory
// above the inputs, measured: mem_method says how; the caller's f32 gradient outputs included, as
// the peers count their gradients; the workspace pool emptied before the step, not within it),
// fwd_saved_mb (what the forward keeps for backward), pool_held_mb (what the workspace pool keeps
// for the next step), grad_outputs_mb; filter_threshold (as the forward ran),
// filter_threshold_requested (-1: the default), vocab_ordered, surviving_fraction and
// computed_half_fraction (of the surviving tiles' 64-row halves, those not all zero; null where the
// library does not read them back, as in natural order); loss, nan_outputs (outputs are
// NaN-poisoned first), d_hidden_rel_diff_vs_exact (|dE - dE_exact| / |dE_exact|); state mode:
// order_* statistics of the VocabOrder. A row that failed (a KL term before the GPU path has one)
// has "error" instead.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "bench/ce_bench_data.h"
#include "bench/ce_bench_problem.h"
#include "bench/ce_bench_shapes.h"
#include "bench/device_memory_probe.h"
#include "bench/json_line.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "runtime/LaunchTrace.h"
#include "runtime/LinearCe.h"
#include "runtime/VocabOrder.h"
#include "runtime/WorkspacePool.h"

namespace tilejit::bench {
namespace {

enum class Mode { Exact, Filtered, State };
constexpr Mode kModes[] = {Mode::Exact, Mode::Filtered, Mode::State};
std::string_view mode_name(Mode m) {
  return m == Mode::Exact ? "exact" : m == Mode::Filtered ? "filtered" : "state";
}

struct Settings {
  std::vector<std::string> shapes, kinds, modes;
  int iters = 10;
  int refresh_every = 8;
  bool weight_grad_16 = false;  // --weight-grad bf16: dC outputs in E's dtype (else f32)
  int64_t grad_buffer_mb = 0;   // --grad-buffer-mb N: LinearCeOptions::grad_buffer_bytes
  int kl_cluster = 0;           // --kl-cluster N: LinearCeOptions::kl_forward_cluster
  // --grad-outputs-at forward: the dC outputs are allocated before the forward and given to it
  // (LinearCeOutputs::d_weight), as an autograd function that allocates them there would
  bool outputs_at_forward = false;
  bool selected(const std::vector<std::string>& list, std::string_view name) const {
    return std::find(list.begin(), list.end(), name) != list.end();
  }
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Milliseconds of each of `reps` calls of `f` on the default stream: events around each call
// (every loss call synchronizes the stream itself once, so calls never overlap). With
// TILEJIT_LAUNCH_TRACE set, each call is also marked in the launch trace ("LABEL i begin/end").
template <class F>
std::vector<double> step_ms(F&& f, int reps, const std::string& label) {
  Driver& d = *Driver::get();
  CUevent start = d.event_create(), stop = d.event_create();
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    mark_launch_trace(fmt::format("{} {} begin", label, i), nullptr);
    d.event_record(start, nullptr);
    f();
    d.event_record(stop, nullptr);
    mark_launch_trace(fmt::format("{} {} end", label, i), nullptr);
    d.stream_synchronize(nullptr);
    ms.push_back(d.event_elapsed_ms(start, stop));
  }
  d.event_destroy(start);
  d.event_destroy(stop);
  return ms;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / double(v.size());
}

std::vector<float> to_host_f32(const TensorView& v) {
  std::vector<float> out(size_t(v.numel()));
  Driver::get()->memcpy_dtoh(out.data(), v.device_ptr(), out.size() * sizeof(float));
  return out;
}

// ||a - b|| / ||b||, or nullopt when sizes differ or b is empty.
std::optional<double> relative_difference(const std::vector<float>& a,
                                          const std::vector<float>& b) {
  if (a.size() != b.size() || b.empty()) return std::nullopt;
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double d = double(a[i]) - b[i];
    num += d * d, den += double(b[i]) * b[i];
  }
  return den > 0 ? std::optional(std::sqrt(num / den)) : std::nullopt;
}

JsonLine row_head(const CeShape& shape, CeDataKind kind, Mode mode) {
  JsonLine j;
  int64_t live = 0;
  for (const auto& s : shape.segments) live += s.second;
  std::vector<int64_t> sizes;
  for (const auto& s : shape.segments) sizes.push_back(s.second);
  j.add("system", "tilejit").add("shape", shape.name).add("data", ce_data_kind_name(kind));
  j.add("mode", mode_name(mode)).add("N", shape.rows).add("D", shape.dim).add("V", live);
  j.add("segments", sizes)
      .add("softcap", shape.softcap > 0 ? std::optional(double(shape.softcap)) : std::nullopt);
  j.add("kl_alpha", shape.kl_alpha > 0 ? std::optional(shape.kl_alpha) : std::nullopt);
  j.add("ignored_fraction", shape.ignored).add("seed", int64_t(kDataSeed));
  return j;
}

LinearCeOptions mode_options(Mode mode, const Settings& settings) {
  LinearCeOptions o;
  if (mode == Mode::Exact) o.filter_threshold = 0;  // others: the dtype's default (< 0)
  if (mode == Mode::State) {
    o.vocab_ordering = VocabOrdering::State;
    o.vocab_order = VocabOrder::by_average_logit(settings.refresh_every);
  }
  if (settings.grad_buffer_mb > 0) o.grad_buffer_bytes = settings.grad_buffer_mb << 20;
  o.kl_forward_cluster = settings.kl_cluster;
  return o;
}

// One mode's calls on one problem: the same forward every step, the caller's gradient outputs.
struct ModeCalls {
  const LossProgram& prog;
  CeProblem& p;
  LinearCeOptions options;
  LinearCeTeacher teacher;

  LinearCeForward forward(LinearCeOutputs outputs = {}) const {
    outputs.loss = p.loss.view;
    outputs.row_loss = p.row_loss.view;
    outputs.lse = p.lse.view;
    return linear_cross_entropy_forward(prog, p.hidden.view, p.bind, p.targets.view, options,
                                        nullptr, outputs, teacher);
  }
  LinearCeGradients backward(const LinearCeForward& f, const LinearCeGradOutputs& outs = {}) const {
    return linear_cross_entropy_backward(f, p.grad_loss.view, nullptr, outs);
  }
};

// Seconds of the first step (kernel compile or cache load, whichever the cache gives), after
// which one more warm-up step runs.
double warm_up(const ModeCalls& calls) {
  double first_s = 0;
  for (int i = 0; i < 2; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    LinearCeForward f = calls.forward();
    LinearCeGradients g = calls.backward(f);
    Driver::get()->stream_synchronize(nullptr);
    if (i == 0) first_s = seconds_since(t0);
  }
  return first_s;
}

struct MemoryAndValues {
  double fwd_mb = 0, fwd_bwd_mb = 0, saved_mb = 0;  // above the inputs
  double pool_held_mb = 0;  // what the workspace pool keeps for the next step
  float loss = 0;
  std::vector<float> d_hidden;
  bool non_finite = false;  // in the loss or dE (the outputs were NaN-poisoned)
};

// One step with the memory probe running: everything above the inputs, the gradient outputs
// (allocated after the forward, as an autograd engine would, or before it with
// --grad-outputs-at forward) included; the forward's (2N + 1 floats) are the problem's. The
// workspace pool (runtime/WorkspacePool.h) is emptied first and then left alone, as in training:
// the step's peak counts what the pool maps during it, freed parts it keeps included; what it keeps
// for the next step is reported apart.
MemoryAndValues memory_and_values(const ModeCalls& calls, GradOutputs& outs, const CeShape& shape,
                                  const DeviceMemoryProbe& probe, const Settings& settings) {
  Driver& d = *Driver::get();
  constexpr double kMiB = 1 << 20;
  d.stream_synchronize(nullptr);
  trim_workspace_pool();
  const double free0 = double(probe.free_bytes());
  LinearCeOutputs early;
  if (settings.outputs_at_forward) {
    outs = grad_outputs(shape, settings.weight_grad_16);
    early.d_weight = outs.views.d_weight;
  }
  for (DeviceTensor* t : {&calls.p.loss, &calls.p.row_loss, &calls.p.lse})
    t->buffer.fill_bytes(0xFF);  // NaN: a loss the forward did not write fails
  LinearCeForward f;
  const double least_fwd = double(probe.min_free_during([&] {
    f = calls.forward(early);
    d.stream_synchronize(nullptr);
  }));
  // What the forward keeps for the backward: not what the pool keeps reserved and unused.
  const double after_fwd =
      double(probe.free_bytes()) +
      std::max(0.0, double(workspace_pool_held_bytes()) - double(workspace_pool_in_use_bytes()));
  if (!settings.outputs_at_forward) outs = grad_outputs(shape, settings.weight_grad_16);
  LinearCeGradients g;
  const double least_bwd = double(probe.min_free_during([&] {
    g = calls.backward(f, outs.views);
    d.stream_synchronize(nullptr);
  }));
  MemoryAndValues m;
  m.fwd_mb = (free0 - least_fwd) / kMiB;
  m.fwd_bwd_mb = (free0 - std::min(least_fwd, least_bwd)) / kMiB;
  m.saved_mb = (free0 - after_fwd) / kMiB;
  m.loss = to_host_f32(f.loss)[0];
  m.d_hidden = to_host_f32(outs.views.d_hidden.value());
  m.non_finite = !std::isfinite(m.loss) || std::any_of(m.d_hidden.begin(), m.d_hidden.end(),
                                                       [](float v) { return !std::isfinite(v); });
  f = {};
  g = {};
  d.stream_synchronize(nullptr);
  m.pool_held_mb = double(workspace_pool_held_bytes()) / kMiB;
  return m;
}

struct Timing {
  std::vector<double> fwd_ms, fwd_bwd_ms;
  // As the last forward + backward ran.
  double surviving = -1, halves = -1, threshold = 0;
  bool ordered = false;
};

// The forward alone, then forward + backward into the caller's outputs, `reps` steps each.
Timing time_steps(const ModeCalls& calls, const GradOutputs& outs, bool outputs_at_forward,
                  int reps, const std::string& label) {
  Timing t;
  t.fwd_ms = step_ms([&] { calls.forward(); }, reps, label + " fwd");
  LinearCeOutputs early;
  if (outputs_at_forward) early.d_weight = outs.views.d_weight;
  t.fwd_bwd_ms = step_ms(
      [&] {
        LinearCeForward f = calls.forward(early);
        LinearCeGradients g = calls.backward(f, outs.views);
        t.surviving = g.surviving_fraction, t.threshold = f.filter_threshold;
        t.halves = g.computed_half_fraction;
        t.ordered = f.vocab_ordered;
      },
      reps, label + " fwd+bwd");
  flush_launch_trace();  // (TILEJIT_LAUNCH_TRACE)
  return t;
}

// Measures one mode and prints its row; `exact_d_hidden` is the exact mode's dE (filled by it,
// compared against by the others).
void measure_mode(const CeShape& shape, const LossProgram& prog, CeProblem& p, CeDataKind kind,
                  Mode mode, const Settings& settings, const DeviceMemoryProbe& probe,
                  std::vector<float>& exact_d_hidden) {
  ModeCalls calls{prog, p, mode_options(mode, settings), {}};
  if (shape.kl_alpha > 0) calls.teacher.hidden = p.teacher.view;
  const double first_s = warm_up(calls);
  GradOutputs outs;
  MemoryAndValues m = memory_and_values(calls, outs, shape, probe, settings);
  std::optional<double> diff;
  if (mode == Mode::Exact)
    exact_d_hidden = std::move(m.d_hidden);
  else
    diff = relative_difference(m.d_hidden, exact_d_hidden);
  // A reused order gets at least one rebuild period: its median is the steady state.
  const int reps =
      mode == Mode::State ? std::max(settings.iters, settings.refresh_every) : settings.iters;
  const Timing t = time_steps(calls, outs, settings.outputs_at_forward, reps,
                              fmt::format("{} {}", shape.name, mode_name(mode)));

  // 2·N·D·V per logit GEMM, as the peers count; a KL term adds the teacher's.
  const double flops = 2.0 * double(shape.rows) * double(shape.dim) * double(prog.live_ids()) *
                       (shape.kl_alpha > 0 ? 2 : 1);
  const std::optional<double> surviving =
      t.surviving >= 0 ? std::optional(t.surviving) : std::nullopt;
  JsonLine j = row_head(shape, kind, mode);
  j.add("n_kept", p.kept_rows).add("loss", double(m.loss)).add("nan_outputs", m.non_finite);
  j.add("filter_threshold", t.threshold)
      .add("filter_threshold_requested", double(calls.options.filter_threshold));
  j.add("vocab_ordered", t.ordered).add("surviving_fraction", surviving);
  j.add("computed_half_fraction", t.halves >= 0 ? std::optional(t.halves) : std::nullopt);
  j.add("d_hidden_rel_diff_vs_exact", diff);
  j.add("fwd_ms", median(t.fwd_ms)).add("fwd_bwd_ms", median(t.fwd_bwd_ms));
  j.add("fwd_ms_mean", mean(t.fwd_ms)).add("fwd_bwd_ms_mean", mean(t.fwd_bwd_ms));
  j.add("fwd_tflops", flops / median(t.fwd_ms) / 1e9).add("iters", int64_t(reps));
  j.add("first_call_s", first_s);
  j.add("fwd_mem_mb", m.fwd_mb).add("fwd_bwd_mem_mb", m.fwd_bwd_mb);
  j.add("fwd_saved_mb", m.saved_mb)
      .add("pool_held_mb", m.pool_held_mb)
      .add("grad_outputs_mb", double(outs.bytes) / (1 << 20));
  j.add("weight_grad_dtype", settings.weight_grad_16 ? "bf16" : "f32");
  j.add("grad_outputs_at", settings.outputs_at_forward ? "forward" : "backward");
  j.add("grad_buffer_mb", double(calls.options.grad_buffer_bytes) / (1 << 20));
  j.add("kl_forward_cluster", int64_t(calls.options.kl_forward_cluster));
  j.add("mem_method", DeviceMemoryProbe::method());
  j.add("timing",
        "median of per-call CUDA event times on the default stream after 2 warm-up "
        "steps; dE (f32) and dC (weight_grad_dtype) given by the caller");
  if (const auto& order = calls.options.vocab_order) {
    VocabOrder::Stats st = order->stats();
    j.add("order_refresh_every", int64_t(settings.refresh_every));
    j.add("order_forwards", st.forwards).add("order_ordered_forwards", st.ordered_forwards);
    j.add("order_rebuilds", st.rebuilds).add("order_set_aside", st.set_aside);
    j.add("order_last_survival",
          st.last_survival >= 0 ? std::optional(st.last_survival) : std::nullopt);
  }
  j.print();
  fmt::print(stderr,
             "  {:9s} first {:6.2f} s  fwd {:8.2f} ms  fwd+bwd {:8.2f} ms  {:7.0f} MB  {}\n",
             mode_name(mode), first_s, median(t.fwd_ms), median(t.fwd_bwd_ms), m.fwd_bwd_mb,
             surviving ? fmt::format("tiles {:.3f} halves {:.3f}", *surviving, t.halves) : "");
}

void emit_error(const CeShape& shape, CeDataKind kind, Mode mode, const std::string& message) {
  JsonLine j = row_head(shape, kind, mode);
  j.add("error", message).print();
  fmt::print(stderr, "  {:9s} error: {}\n", mode_name(mode), message);
}

void bench_shape(const CeShape& shape, const Settings& settings, const DeviceMemoryProbe& probe) {
  const LossProgram prog = shape_program(shape);
  std::vector<Mode> modes;
  for (Mode m : kModes)
    if (settings.selected(settings.modes, mode_name(m))) modes.push_back(m);
  for (const std::string& kind_name : settings.kinds) {
    const CeDataKind kind = *parse_ce_data_kind(kind_name);
    fmt::print(stderr, "{} {} (N {}, D {}, V {}):\n", shape.name, kind_name, shape.rows, shape.dim,
               prog.live_ids());
    try {
      check_linear_ce_supported(prog);  // a KL term: a UserError on this path for now
    } catch (const std::exception& e) {
      for (Mode m : modes) emit_error(shape, kind, m, e.what());
      continue;
    }
    auto t0 = std::chrono::steady_clock::now();
    CeDataSpec spec{.rows = shape.rows,
                    .dim = shape.dim,
                    .segments = shape.segments,
                    .kind = kind,
                    .ignored = shape.ignored,
                    .teacher = shape.kl_alpha > 0,
                    .seed = kDataSeed};
    std::optional<CeProblem> problem;
    {
      CeHostData data = make_ce_data(spec);
      problem.emplace(upload_problem(shape, data));
    }
    fmt::print(stderr, "  data generated and uploaded in {:.1f} s\n", seconds_since(t0));
    std::vector<float> exact_d_hidden;
    for (Mode m : modes) {
      try {
        measure_mode(shape, prog, *problem, kind, m, settings, probe, exact_d_hidden);
      } catch (const std::exception& e) {
        emit_error(shape, kind, m, e.what());
      }
    }
  }
}

}  // namespace
}  // namespace tilejit::bench

namespace {

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    if (end > start) out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

constexpr const char* kUsage =
    "usage: linear_ce_gpu_bench [--quick] [--kinds zipf,flat,peaked] [--shapes NAME,...]\n"
    "                           [--modes exact,filtered,state] [--iters N] [--refresh-every K]\n"
    "                           [--weight-grad f32|bf16] [--grad-buffer-mb N]\n"
    "                           [--grad-outputs-at backward|forward] [--kl-cluster 1|2|4]\n"
    "  --quick: 3 iterations, zipf only, the first two shapes (explicit lists win)\n"
    "  --weight-grad: the dtype of the dC outputs the caller gives (default f32)\n"
    "  --grad-buffer-mb: the backward's G buffer budget (default: the library's, 512, or 128\n"
    "    where it reads the weights in position order)\n"
    "  --grad-outputs-at: when the dC outputs are allocated; forward gives them to the forward\n"
    "    too, which builds an ordered segment's weight copy there (default backward)\n"
    "  --kl-cluster: CTAs per cluster of the KL forward on the Hopper path (default: the\n"
    "    library's)\n";

// Settings from the command line; nullopt (after a message) on a bad one.
std::optional<tilejit::bench::Settings> parse_settings(int argc, char** argv,
                                                       const std::vector<std::string>& shapes) {
  using tilejit::bench::Settings;
  Settings s;
  bool quick = false;
  std::optional<std::vector<std::string>> kinds, shape_list, modes;
  std::optional<int> iters;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::optional<std::string> {
      if (i + 1 < argc) return std::string(argv[++i]);
      fmt::print(stderr, "linear_ce_gpu_bench: {} needs a value\n{}", a, kUsage);
      return std::nullopt;
    };
    std::optional<std::string> v;
    if (a == "--quick") {
      quick = true;
      continue;
    }
    if (a != "--kinds" && a != "--shapes" && a != "--modes" && a != "--iters" &&
        a != "--refresh-every" && a != "--weight-grad" && a != "--grad-buffer-mb" &&
        a != "--grad-outputs-at" && a != "--kl-cluster") {
      fmt::print(stderr, "linear_ce_gpu_bench: unknown argument '{}'\n{}", a, kUsage);
      return std::nullopt;
    }
    if (!(v = value())) return std::nullopt;
    if (a == "--weight-grad") {
      if (*v != "f32" && *v != "bf16") {
        fmt::print(stderr, "linear_ce_gpu_bench: --weight-grad is f32 or bf16, got '{}'\n", *v);
        return std::nullopt;
      }
      s.weight_grad_16 = *v == "bf16";
    }
    if (a == "--grad-outputs-at") {
      if (*v != "forward" && *v != "backward") {
        fmt::print(stderr,
                   "linear_ce_gpu_bench: --grad-outputs-at is forward or backward, got '{}'\n", *v);
        return std::nullopt;
      }
      s.outputs_at_forward = *v == "forward";
    }
    if (a == "--kinds") kinds = split_list(*v);
    if (a == "--shapes") shape_list = split_list(*v);
    if (a == "--modes") modes = split_list(*v);
    if (a == "--iters" || a == "--refresh-every" || a == "--grad-buffer-mb" ||
        a == "--kl-cluster") {
      int n = std::atoi(v->c_str());
      if (n < 1) {
        fmt::print(stderr, "linear_ce_gpu_bench: {} must be a positive integer, got '{}'\n", a, *v);
        return std::nullopt;
      }
      if (a == "--iters")
        iters = n;
      else if (a == "--refresh-every")
        s.refresh_every = n;
      else if (a == "--kl-cluster")
        s.kl_cluster = n;
      else
        s.grad_buffer_mb = n;
    }
  }
  s.iters = iters.value_or(quick ? 3 : 10);
  s.kinds = kinds.value_or(quick ? std::vector<std::string>{"zipf"}
                                 : std::vector<std::string>{"zipf", "flat", "peaked"});
  s.shapes = shape_list.value_or(
      quick ? std::vector<std::string>(shapes.begin(), shapes.begin() + 2) : shapes);
  s.modes = modes.value_or(std::vector<std::string>{"exact", "filtered", "state"});
  for (std::string& k : s.kinds) {
    auto kind = tilejit::bench::parse_ce_data_kind(k);
    if (!kind) {
      fmt::print(stderr, "linear_ce_gpu_bench: unknown data kind '{}' (zipf, flat, peaked)\n", k);
      return std::nullopt;
    }
    k = tilejit::bench::ce_data_kind_name(*kind);
  }
  for (const std::string& n : s.shapes)
    if (std::find(shapes.begin(), shapes.end(), n) == shapes.end()) {
      fmt::print(stderr, "linear_ce_gpu_bench: unknown shape '{}' (known: {})\n", n,
                 fmt::join(shapes, ", "));
      return std::nullopt;
    }
  for (const std::string& m : s.modes)
    if (m != "exact" && m != "filtered" && m != "state") {
      fmt::print(stderr, "linear_ce_gpu_bench: unknown mode '{}' (exact, filtered, state)\n", m);
      return std::nullopt;
    }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tilejit;
  using namespace tilejit::bench;
  std::vector<CeShape> all = perf_shapes();
  std::vector<std::string> names;
  for (const CeShape& s : all) names.push_back(s.name);
  std::optional<Settings> settings = parse_settings(argc, argv, names);
  if (!settings) return 2;
  try {
    for (const CeShape& s : all)  // every program parses, with or without a GPU
      if (settings->selected(settings->shapes, s.name)) shape_program(s);
  } catch (const std::exception& e) {
    fmt::print(stderr, "linear_ce_gpu_bench: {}\n", e.what());
    return 1;
  }
  if (!gpu_available()) {
    fmt::print(stderr, "linear_ce_gpu_bench: no GPU ({}); nothing measured\n",
               Driver::unavailable_reason());
    return 0;
  }
  try {
    Driver::get()->ensure_context();
    fmt::print(stderr, "linear_ce_gpu_bench on {} ({})\n", Driver::get()->device_name(0),
               device_arch(0));
    DeviceMemoryProbe probe;
    for (const CeShape& s : all)
      if (settings->selected(settings->shapes, s.name)) bench_shape(s, *settings, probe);
  } catch (const std::exception& e) {
    fmt::print(stderr, "linear_ce_gpu_bench: {}\n", e.what());
    return 1;
  }
  return 0;
}
