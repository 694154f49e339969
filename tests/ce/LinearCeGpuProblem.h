// The fused linear cross-entropy GPU tests' problem: a random small problem in 16-bit storage,
// run through runtime/LinearCe.h with every output poisoned (NaN) first, and checked against the
// fp64 reference (tests/support/LinearCeReference.h) — relative errors, or with filtering the
// bound on the gradient mass it may drop. The cases the tests share and their fixture are in
// LinearCeGpuCases.h.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "compiler/Error.h"
#include "dsl/TextForm.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "runtime/LinearCe.h"
#include "runtime/VocabOrderPlan.h"
#include "tests/support/LinearCeReference.h"

namespace tilejit::testing::linear_ce_gpu {

// 16-bit storage of a float, and the float it rounds to.
inline uint16_t to_bits(float v, DType dtype) {
  if (dtype == DType::F16) {
    _Float16 h = static_cast<_Float16>(v);
    uint16_t b;
    std::memcpy(&b, &h, 2);
    return b;
  }
  uint32_t u;
  std::memcpy(&u, &v, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float from_bits(uint16_t b, DType dtype) {
  if (dtype == DType::F16) {
    _Float16 h;
    std::memcpy(&h, &b, 2);
    return static_cast<float>(h);
  }
  uint32_t u = uint32_t{b} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct SegSpec {
  int64_t begin, size;
  bool bias;
};

struct Case {
  const char* name;
  std::string program;  // text form; segments named W0.. (weights) and b0.. (biases)
  std::vector<SegSpec> segments;
  int64_t n = 0, d = 0;
  double ignored = 0.1;
  double peak = 0;  // > 0: E rows lean towards their target's weight (sparse softmax rows)
  float cap = 0;    // the program's `cap` param, when it has one
  float threshold = -1;
  DType dtype = DType::BF16;
  uint64_t seed = 1;
  // The vocabulary order (runtime/LinearCe.h); a bias_scale above 1 gives the ids a prior (the
  // biases' spread) that the average-logit order clusters.
  VocabOrdering ordering = VocabOrdering::Natural;
  std::shared_ptr<VocabOrder> order = nullptr;
  float bias_scale = 1;
  // A KL term (the program's `kl` line and teacher segments come from LinearCeGpuCases.h's
  // kl_text): the teacher's hidden states [n, teacher_d] lean towards the target like E's;
  // own_teacher: the teacher has its own weights (T<i>, biases tb<i> where the student's segment
  // has one), else it uses the student's (teacher_d = d); shared_segments (bit i, with
  // own_teacher and teacher_d = d): the teacher's segment i names the student's weights and bias
  // (W<i>, b<i>).
  struct Kl {
    double alpha = 0, temperature = 1;
    bool own_teacher = false;
    int64_t teacher_d = 0;
    unsigned shared_segments = 0;
  };
  std::optional<Kl> kl = std::nullopt;
  bool i64_targets = false;
  bool copy_ordered_weights = true;      // LinearCeOptions::copy_ordered_weights
  int kl_forward_cluster = 0;            // LinearCeOptions::kl_forward_cluster
  bool weight_grad_16 = false;           // dC outputs in E's dtype rather than f32
  bool grad_outputs_at_forward = false;  // dC outputs given to the forward, not the backward
  bool backward_twice = false;           // a second backward of the forward, into the same outputs
  int64_t grad_buffer_bytes = 0;         // LinearCeOptions::grad_buffer_bytes (0: the library's)
  // The forward on one stream, the backward on another that waits for it (an event), and the
  // state dropped as soon as the backward is enqueued, before either stream has finished.
  bool two_streams = false;
};

// A stream of the current context for a scope.
class ScopedStream {
 public:
  ScopedStream() : stream_(Driver::get()->stream_create()) {}
  ~ScopedStream() { Driver::get()->stream_destroy(stream_); }
  ScopedStream(const ScopedStream&) = delete;
  ScopedStream& operator=(const ScopedStream&) = delete;
  CUstream get() const { return stream_; }

 private:
  CUstream stream_;
};

// Relative L2 error of `got` against `want`; NaN anywhere is infinite.
struct RelErr {
  double num = 0, den = 0;
  bool nan = false;
  void add(float got, double want) {
    if (!std::isfinite(got)) nan = true;
    num += (got - want) * (got - want);
    den += want * want;
  }
  double value() const {
    return nan ? INFINITY : (den > 0 ? std::sqrt(num / den) : std::sqrt(num));
  }
};

class Problem {
 public:
  explicit Problem(const Case& c) : c_(c), prog_(std::get<LossProgram>(parse_program(c.program))) {
    std::mt19937_64 rng(c.seed);
    std::normal_distribution<float> normal;
    std::uniform_real_distribution<double> uni;
    int64_t live = 0;
    for (const SegSpec& s : c.segments) live += s.size;
    // Weights ~ N(0, 1/D); biases ~ N(0, 1).
    for (size_t i = 0; i < c.segments.size(); ++i) {
      const SegSpec& s = c.segments[i];
      weights_.push_back(round(random(s.size * c.d, 1.f / std::sqrt(float(c.d)), rng)));
      biases_.push_back(s.bias ? round(random(s.size, c.bias_scale, rng)) : std::vector<float>());
    }
    targets_.resize(c.n);
    hidden_.resize(c.n * c.d);
    for (int64_t r = 0; r < c.n; ++r) {
      int64_t pick = static_cast<int64_t>(uni(rng) * live);
      size_t seg = 0;
      while (pick >= c.segments[seg].size) pick -= c.segments[seg++].size;
      bool ignore = uni(rng) < c.ignored;
      targets_[r] = ignore ? -100 : static_cast<int32_t>(c.segments[seg].begin + pick);
      for (int64_t k = 0; k < c.d; ++k) {
        float lean = c.peak > 0 ? float(c.peak) * weights_[seg][pick * c.d + k] : 0.f;
        hidden_[r * c.d + k] = lean + normal(rng);
      }
    }
    hidden_ = round(hidden_);
    if (!c.kl) return;
    // The teacher: its own weights ~ N(0, 1/D_t) and biases (the student's prior plus N(0, 1/4):
    // both models learned the same id frequencies), or the student's; hidden states leaning
    // towards the target's teacher row, so both distributions peak near it.
    const int64_t dt = c.kl->own_teacher ? c.kl->teacher_d : c.d;
    for (size_t i = 0; i < c.segments.size(); ++i) {
      const SegSpec& s = c.segments[i];
      if (c.kl->own_teacher && !((c.kl->shared_segments >> i) & 1)) {
        teacher_weights_.push_back(round(random(s.size * dt, 1.f / std::sqrt(float(dt)), rng)));
        std::vector<float> b = s.bias ? random(s.size, 0.5f, rng) : std::vector<float>();
        for (size_t v = 0; v < b.size(); ++v) b[v] += biases_[i][v];
        teacher_biases_.push_back(round(b));
      } else {
        teacher_weights_.push_back(weights_[i]);
        teacher_biases_.push_back(biases_[i]);
      }
    }
    teacher_hidden_.resize(c.n * dt);
    for (int64_t r = 0; r < c.n; ++r) {
      size_t seg = 0;
      int64_t row = -1;
      for (size_t i = 0; i < c.segments.size(); ++i)
        if (targets_[r] >= c.segments[i].begin &&
            targets_[r] < c.segments[i].begin + c.segments[i].size)
          seg = i, row = targets_[r] - c.segments[i].begin;
      for (int64_t k = 0; k < dt; ++k) {
        float lean =
            c.peak > 0 && row >= 0 ? float(c.peak) * teacher_weights_[seg][row * dt + k] : 0.f;
        teacher_hidden_[r * dt + k] = lean + normal(rng);
      }
    }
    teacher_hidden_ = round(teacher_hidden_);
  }

  // Uploads, runs forward and backward with poisoned caller outputs, and compares.
  void check(double tol = 1e-2) {
    const Case& c = c_;
    Bindings bind;
    std::vector<DeviceBuffer> keep;
    auto upload16 = [&](const std::vector<float>& v, std::vector<int64_t> shape, std::string name) {
      std::vector<uint16_t> bits(v.size());
      for (size_t i = 0; i < v.size(); ++i) bits[i] = to_bits(v[i], c.dtype);
      keep.push_back(DeviceBuffer::from_host(bits));
      return TensorView::contiguous(keep.back().data(), c.dtype, std::move(shape),
                                    TensorView::Where::Device, std::move(name));
    };
    auto output = [&](size_t floats, std::vector<int64_t> shape, std::string name) {
      keep.emplace_back(std::max<size_t>(floats, 1) * 4);
      keep.back().fill_bytes(0xff);  // NaN
      return TensorView::contiguous(keep.back().data(), DType::F32, std::move(shape),
                                    TensorView::Where::Device, std::move(name));
    };
    auto output16 = [&](size_t elems, std::vector<int64_t> shape, std::string name) {  // E's dtype
      keep.emplace_back(std::max<size_t>(elems, 1) * 2);
      keep.back().fill_bytes(0xff);  // NaN
      return TensorView::contiguous(keep.back().data(), c.dtype, std::move(shape),
                                    TensorView::Where::Device, std::move(name));
    };
    for (size_t i = 0; i < c.segments.size(); ++i) {
      bind.buffer(fmt::format("W{}", i), upload16(weights_[i], {c.segments[i].size, c.d}, "W"));
      if (c.segments[i].bias)
        bind.buffer(fmt::format("b{}", i), upload16(biases_[i], {c.segments[i].size}, "b"));
    }
    if (c.cap > 0) bind.param("cap", c.cap);
    TensorView E = upload16(hidden_, {c.n, c.d}, "E");
    LinearCeTeacher teacher;
    const int64_t dt = c.kl && c.kl->own_teacher ? c.kl->teacher_d : c.d;
    if (c.kl) {
      teacher.hidden = upload16(teacher_hidden_, {c.n, dt}, "E_teacher");
      for (size_t i = 0; c.kl->own_teacher && i < c.segments.size(); ++i) {
        if ((c.kl->shared_segments >> i) & 1) continue;  // the student's W<i> and b<i>
        bind.buffer(fmt::format("T{}", i),
                    upload16(teacher_weights_[i], {c.segments[i].size, dt}, "T"));
        if (c.segments[i].bias)
          bind.buffer(fmt::format("tb{}", i),
                      upload16(teacher_biases_[i], {c.segments[i].size}, "tb"));
      }
    }
    TensorView targets;
    if (c.i64_targets) {
      keep.push_back(
          DeviceBuffer::from_host(std::vector<int64_t>(targets_.begin(), targets_.end())));
      targets = TensorView::contiguous(keep.back().data(), DType::I64, {c.n},
                                       TensorView::Where::Device, "targets");
    } else {
      keep.push_back(DeviceBuffer::from_host(targets_));
      targets = TensorView::contiguous(keep.back().data(), DType::I32, {c.n},
                                       TensorView::Where::Device, "targets");
    }
    LinearCeOutputs outs;
    outs.loss = output(1, {1}, "loss");
    outs.row_loss = output(c.n, {c.n}, "row_loss");
    outs.lse = output(c.n, {c.n}, "lse");
    LinearCeGradOutputs gouts;
    gouts.d_hidden = output(c.n * c.d, {c.n, c.d}, "dE");
    for (const SegSpec& s : c.segments) {
      gouts.d_weight.push_back(c.weight_grad_16 ? output16(s.size * c.d, {s.size, c.d}, "dC")
                                                : output(s.size * c.d, {s.size, c.d}, "dC"));
      gouts.d_bias.push_back(s.bias ? std::optional(output(s.size, {s.size}, "db")) : std::nullopt);
    }
    if (c.grad_outputs_at_forward) outs.d_weight = std::exchange(gouts.d_weight, {});
    LinearCeOptions options;
    options.filter_threshold = c.threshold;
    options.vocab_ordering = c.ordering;
    options.vocab_order = c.order;
    options.copy_ordered_weights = c.copy_ordered_weights;
    options.grad_buffer_bytes = c.grad_buffer_bytes;
    options.kl_forward_cluster = c.kl_forward_cluster;
    std::optional<ScopedStream> fwd_stream, bwd_stream;  // outlive the state
    if (c.two_streams) fwd_stream.emplace(), bwd_stream.emplace();
    LinearCeForward fwd = linear_cross_entropy_forward(
        prog_, E, bind, targets, options, fwd_stream ? fwd_stream->get() : nullptr, outs, teacher);
    early_after_forward_.clear();
    if (!outs.d_weight.empty()) {  // what the forward left in them: its first V_s x D 16-bit words
      Driver::get()->context_synchronize();
      for (size_t s = 0; s < outs.d_weight.size(); ++s) {
        std::vector<uint16_t> bits(size_t(c.segments[s].size * c.d));
        Driver::get()->memcpy_dtoh(bits.data(), outs.d_weight[s]->device_ptr(), bits.size() * 2);
        early_after_forward_.push_back(std::move(bits));
      }
    }

    const bool none = prog_.reduction == Reduction::None;
    std::vector<float> upstream(none ? c.n : 1, 1.f);
    std::mt19937 rng(c.seed + 7);
    for (float& u : upstream) u = 0.5f + float(rng() % 1000) / 1000.f;
    keep.push_back(DeviceBuffer::from_host(upstream));
    TensorView grad_loss =
        TensorView::contiguous(keep.back().data(), DType::F32, {int64_t(upstream.size())},
                               TensorView::Where::Device, "grad_loss");
    if (c.two_streams) {
      Driver& d = *Driver::get();
      CUevent forward_done = d.event_create(CU_EVENT_DISABLE_TIMING);
      d.event_record(forward_done, fwd_stream->get());
      d.stream_wait_event(bwd_stream->get(), forward_done);
      d.event_destroy(forward_done);
    }
    LinearCeGradients g = linear_cross_entropy_backward(
        fwd, grad_loss, bwd_stream ? bwd_stream->get() : nullptr, gouts);
    for (size_t s = 0; s < outs.d_weight.size(); ++s)  // the forward's buffers hold the results
      EXPECT_EQ(g.d_weight[s].data, outs.d_weight[s]->data) << c.name << " segment " << s;
    // The same dC again, bit for bit (each tile's in one kernel, whatever the chunks; dE sums
    // chunk by chunk, so it is checked against the reference below, the second backward's).
    if (c.backward_twice) {
      Driver::get()->context_synchronize();
      auto bytes_of = [](const TensorView& t) {
        std::vector<uint8_t> bytes(size_t(t.numel()) * (t.dtype == DType::F32 ? 4 : 2));
        Driver::get()->memcpy_dtoh(bytes.data(), t.device_ptr(), bytes.size());
        return bytes;
      };
      std::vector<std::vector<uint8_t>> first;
      for (const TensorView& t : g.d_weight) first.push_back(bytes_of(t));
      g = linear_cross_entropy_backward(fwd, grad_loss, bwd_stream ? bwd_stream->get() : nullptr,
                                        gouts);
      Driver::get()->context_synchronize();
      for (size_t s = 0; s < g.d_weight.size(); ++s)
        EXPECT_TRUE(first[s] == bytes_of(g.d_weight[s]))
            << c.name << ": the second backward's dC of segment " << s;
    }
    if (c.two_streams) fwd.state.reset();  // its workspace goes back after both streams' work
    Driver::get()->context_synchronize();

    RefLinearCe ref;
    ref.n_rows = c.n;
    ref.dim = c.d;
    ref.hidden = hidden_.data();
    ref.targets = targets_.data();
    ref.ignore_index = prog_.ignore_index;
    ref.label_smoothing = prog_.label_smoothing;
    ref.z_loss = prog_.z_loss;
    ref.reduction = none                                ? RefReduction::None
                    : prog_.reduction == Reduction::Sum ? RefReduction::Sum
                                                        : RefReduction::Mean;
    if (c.cap > 0) {
      double cap = c.cap;
      ref.logit_mod = [cap](double x, int64_t, int64_t) { return cap * std::tanh(x / cap); };
      ref.logit_grad = [cap](double x, int64_t, int64_t) {
        double t = std::tanh(x / cap);
        return 1 - t * t;
      };
    }
    for (size_t i = 0; i < c.segments.size(); ++i)
      ref.segments.push_back({c.segments[i].begin, c.segments[i].size, weights_[i].data(),
                              c.segments[i].bias ? biases_[i].data() : nullptr});
    ref.upstream = upstream.data();
    if (c.kl) {
      RefKl kl{.alpha = c.kl->alpha,
               .temperature = c.kl->temperature,
               .teacher_hidden = teacher_hidden_.data(),
               .teacher_dim = dt};
      for (size_t i = 0; c.kl->own_teacher && i < c.segments.size(); ++i)
        kl.teacher_segments.push_back({c.segments[i].begin, c.segments[i].size,
                                       teacher_weights_[i].data(),
                                       c.segments[i].bias ? teacher_biases_[i].data() : nullptr});
      ref.kl = kl;
    }
    RefLinearCeResult want = reference_linear_ce(ref);

    auto host = [](const TensorView& t) {  // f32, or a 16-bit type widened
      std::vector<float> v(t.numel());
      if (t.dtype == DType::F32) {
        Driver::get()->memcpy_dtoh(v.data(), t.device_ptr(), v.size() * 4);
        return v;
      }
      std::vector<uint16_t> bits(v.size());
      Driver::get()->memcpy_dtoh(bits.data(), t.device_ptr(), bits.size() * 2);
      for (size_t i = 0; i < v.size(); ++i) v[i] = from_bits(bits[i], t.dtype);
      return v;
    };
    RelErr loss, rows, lse, dh, dw, db;
    last_loss_ = host(fwd.loss)[0];
    loss.add(last_loss_, want.loss);
    std::vector<float> got_rows = host(fwd.row_loss), got_lse = host(fwd.lse);
    for (int64_t r = 0; r < c.n; ++r) {
      rows.add(got_rows[r], want.row_loss[r]);
      lse.add(got_lse[r], want.lse[r]);
    }
    std::vector<float> got_dh = host(g.d_hidden);
    for (size_t i = 0; i < got_dh.size(); ++i) dh.add(got_dh[i], want.d_hidden[i]);
    last_dw_.clear();
    for (size_t s = 0; s < c.segments.size(); ++s) {
      std::vector<float> got = host(g.d_weight[s]);
      EXPECT_EQ(g.d_weight[s].dtype, c.weight_grad_16 ? c.dtype : DType::F32);
      last_dw_.insert(last_dw_.end(), got.begin(), got.end());
      for (size_t i = 0; i < got.size(); ++i) dw.add(got[i], want.d_weight[s][i]);
      if (!c.segments[s].bias) continue;
      std::vector<float> gb = host(*g.d_bias[s]);
      for (size_t i = 0; i < gb.size(); ++i) db.add(gb[i], want.d_bias[s][i]);
    }
    std::printf("%-28s loss %.2e rows %.2e lse %.2e dE %.2e dC %.2e db %.2e (kept %lld, thr %g)\n",
                c.name, loss.value(), rows.value(), lse.value(), dh.value(), dw.value(), db.value(),
                (long long)fwd.n_kept, fwd.filter_threshold);
    EXPECT_LE(loss.value(), tol);
    EXPECT_LE(rows.value(), tol);
    EXPECT_LE(lse.value(), tol);
    if (fwd.filter_threshold > 0) {
      // Filtering drops gradient entries below the threshold: on peaked rows those are the whole
      // gradient of the row, so a relative bound does not hold; the dropped mass does.
      check_filtering_bound(fwd.filter_threshold, upstream, got_dh, g, host, want, tol);
    } else {
      EXPECT_LE(dh.value(), tol);
      EXPECT_LE(dw.value(), tol);
      EXPECT_LE(db.value(), tol);
    }
    last_dh_ = got_dh;
    last_threshold_ = fwd.filter_threshold;
    ordered_forward_ = fwd.vocab_ordered;
    ordered_backward_ = g.vocab_ordered;
    surviving_ = g.surviving_fraction;
    // Every visited tile computes one or both of its 64-row halves; with no row kept, nothing
    // is classified and both fractions stay unset (-1).
    if (g.surviving_fraction >= 0) {
      EXPECT_GE(g.computed_half_fraction, 0.5);
      EXPECT_LE(g.computed_half_fraction, 1.0);
    } else {
      EXPECT_EQ(g.computed_half_fraction, -1);
    }
  }

  // Every dropped gradient entry g[r, v] is below thr * w_r (w_r: row r's upstream weight times
  // the largest coefficient a probability below thr enters dL/dz with: |1 - alpha + 2 lambda lse|
  // for p, plus alpha T for q and pt), so
  //   |dE[r, k] error| <= thr * w_r * sum_v |C[v, k]|,   |dC[v, k] error| <= thr * sum_r w_r |E[r,
  //   k]|, |dbias[v] error| <= thr * sum_r w_r,
  // plus the 16-bit staging's rounding (tol relative to the largest reference entry).
  template <class Host>
  void check_filtering_bound(float thr, const std::vector<float>& upstream,
                             const std::vector<float>& got_dh, const LinearCeGradients& g,
                             Host host, const RefLinearCeResult& want, double tol) const {
    const Case& c = c_;
    const bool none = prog_.reduction == Reduction::None;
    int64_t kept = 0;
    for (int32_t t : targets_) kept += t != prog_.ignore_index;
    std::vector<double> w(c.n, 0);
    const double alpha = c.kl ? c.kl->alpha : 0, kl_weight = c.kl ? alpha * c.kl->temperature : 0;
    for (int64_t r = 0; r < c.n; ++r)
      if (targets_[r] != prog_.ignore_index)
        w[r] = (none ? upstream[r]
                     : upstream[0] / (prog_.reduction == Reduction::Mean ? double(kept) : 1.0)) *
               (std::fabs(1 - alpha + 2 * prog_.z_loss * want.lse[r]) + 2 * kl_weight);
    std::vector<double> col_c(c.d, 0), col_e(c.d, 0);
    for (size_t s = 0; s < c.segments.size(); ++s)
      for (int64_t v = 0; v < c.segments[s].size; ++v)
        for (int64_t k = 0; k < c.d; ++k) col_c[k] += std::fabs(weights_[s][v * c.d + k]);
    double w_sum = 0;
    for (int64_t r = 0; r < c.n; ++r) {
      w_sum += w[r];
      for (int64_t k = 0; k < c.d; ++k) col_e[k] += w[r] * std::fabs(hidden_[r * c.d + k]);
    }
    auto max_abs = [](const std::vector<double>& v) {
      double m = 0;
      for (double x : v) m = std::max(m, std::fabs(x));
      return m;
    };
    int failures = 0;
    auto expect_within = [&](const char* what, float got, double ref, double bound, double scale,
                             size_t i) {
      const double allowed = bound + tol * scale;
      if (!(std::fabs(got - ref) <= allowed) && ++failures <= 5)
        ADD_FAILURE() << what << "[" << i << "] = " << got << ", reference " << ref
                      << ", allowed error " << allowed << " (threshold " << thr << ")";
    };
    const double dh_scale = max_abs(want.d_hidden);
    for (size_t i = 0; i < got_dh.size(); ++i)
      expect_within("dE", got_dh[i], want.d_hidden[i], thr * w[i / c.d] * col_c[i % c.d], dh_scale,
                    i);
    for (size_t s = 0; s < c.segments.size(); ++s) {
      std::vector<float> got = host(g.d_weight[s]);
      const double scale = max_abs(want.d_weight[s]);
      for (size_t i = 0; i < got.size(); ++i)
        expect_within("dC", got[i], want.d_weight[s][i], thr * col_e[i % c.d], scale, i);
      if (!c.segments[s].bias) continue;
      std::vector<float> gb = host(*g.d_bias[s]);
      const double bscale = max_abs(want.d_bias[s]);
      for (size_t i = 0; i < gb.size(); ++i)
        expect_within("dbias", gb[i], want.d_bias[s][i], thr * w_sum, bscale, i);
    }
    EXPECT_EQ(failures, 0) << "entries outside the filtering bound";
  }

  const std::vector<float>& last_d_hidden() const { return last_dh_; }
  const std::vector<float>& last_d_weight() const { return last_dw_; }  // segments in order
  float last_threshold() const { return last_threshold_; }
  float last_loss() const { return last_loss_; }
  std::vector<int32_t>& targets() { return targets_; }
  // The last check's filtering: whether the forward and the backward followed a vocabulary
  // order, and the surviving fraction the backward reported.
  bool ordered_forward() const { return ordered_forward_; }
  bool ordered_backward() const { return ordered_backward_; }
  double surviving() const { return surviving_; }
  // With grad_outputs_at_forward: each segment's gradient buffer as the last forward left it
  // (V_s x D words of E's dtype from its start), before the backward wrote it.
  const std::vector<std::vector<uint16_t>>& early_after_forward() const {
    return early_after_forward_;
  }
  const std::vector<float>& weights(size_t s) const { return weights_[s]; }
  DType dtype() const { return c_.dtype; }

 private:
  static std::vector<float> random(int64_t n, float scale, std::mt19937_64& rng) {
    std::normal_distribution<float> normal;
    std::vector<float> v(n);
    for (float& x : v) x = scale * normal(rng);
    return v;
  }
  std::vector<float> round(std::vector<float> v) const {
    for (float& x : v) x = from_bits(to_bits(x, c_.dtype), c_.dtype);
    return v;
  }

  Case c_;
  LossProgram prog_;
  std::vector<std::vector<float>> weights_, biases_, teacher_weights_, teacher_biases_;
  std::vector<float> hidden_, teacher_hidden_;
  std::vector<int32_t> targets_;
  std::vector<float> last_dh_;
  float last_threshold_ = -1;
  float last_loss_ = 0;
  std::vector<float> last_dw_;
  bool ordered_forward_ = false, ordered_backward_ = false;
  double surviving_ = -1;
  std::vector<std::vector<uint16_t>> early_after_forward_;
};

}  // namespace tilejit::testing::linear_ce_gpu
