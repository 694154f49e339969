// Cases of tests/gpu/linear_ce_harness.cu: correctness against the fp64 reference (small
// shapes), then timing of the PERF.md loss shapes. Included by the harness after Runner.
#pragma once

struct ErrAcc {
  double num = 0, den = 0;
  bool nan = false;
  void add(float a, double b) {
    if (!std::isfinite(a)) nan = true;
    num += (a - b) * (a - b);
    den += b * b;
  }
  double rel() const { return nan ? INFINITY : (den > 0 ? std::sqrt(num / den) : std::sqrt(num)); }
};

struct CheckCase {
  const char* name;
  DataSpec data;
  Options opt;
  // Also run in natural order and require the same results up to fp32 summation order (the
  // order changes which ids share a tile, never a value): for cases that visit every tile.
  bool same_as_natural = false;
  int expect_kept_order = -1;  // 1 / 0: the backward must keep / drop the order; -1: either
};

std::vector<CheckCase> check_cases() {
  const float thr = 1.f / 4096;  // 2^-12
  std::vector<CheckCase> c;
  auto spec = [](int n, int d, std::vector<std::pair<int, int>> segs, double ignored, bool bias,
                 double zipf, uint64_t seed) {
    DataSpec s;
    s.n_rows = n;
    s.dim = d;
    s.segments = segs;
    s.ignored = ignored;
    s.bias = bias;
    s.zipf = zipf;
    if (zipf == 0) s.lift = 3, s.noise = 1;
    s.seed = seed;
    return s;
  };
  auto opt = [](int red, float eps, float z, float thr, float cap) {
    Options o;
    o.reduction = red;
    o.label_smoothing = eps;
    o.z_loss = z;
    o.threshold = thr;
    o.cap = cap;
    return o;
  };
  c.push_back(
      {"one_row", spec(1, 64, {{0, 1000}}, 0, false, 1.1, 1), opt(kReduceMean, 0, 0, 0, 0)});
  c.push_back({"gap_softcap_smooth", spec(37, 128, {{0, 515}, {600, 300}}, 0.2, true, 1.1, 2),
               opt(kReduceSum, 0.1f, 1e-4f, 0, 30)});
  c.push_back({"three_seg_none_filter",
               spec(300, 256, {{5, 700}, {800, 129}, {1000, 1}}, 0.1, false, 1.1, 3),
               opt(kReduceNone, 0.1f, 1e-3f, thr, 0)});
  c.push_back({"n2048_filter_zloss", spec(2048, 64, {{0, 3000}}, 0.1, false, 1.1, 4),
               opt(kReduceMean, 0.05f, 1e-4f, thr, 0)});
  c.push_back({"d2304_softcap_filter", spec(64, 2304, {{0, 1500}}, 0.1, true, 1.1, 5),
               opt(kReduceMean, 0, 0, thr, 30)});
  c.push_back(
      {"d520_flat_sum", spec(513, 520, {{0, 777}}, 0.3, false, 0, 6), opt(kReduceSum, 0, 0, 0, 0)});
  c.push_back({"two_seg_half_ignored",
               spec(1000, 1024, {{0, 1000}, {1130, 200}}, 0.5, false, 1.1, 7),
               opt(kReduceMean, 0, 0, thr, 0)});
  c.push_back({"two_seg_exact_bias_none",
               spec(700, 192, {{0, 1000}, {1130, 200}}, 0.1, true, 1.1, 8),
               opt(kReduceNone, 0, 1e-4f, 0, 0)});
  // Peaked rows (target logit +30, the rest ~N(0, 1)): every tile is cold or target-only, and
  // the skipped entries are negligible, so filtering must match the exact reference.
  c.push_back({"peaked_filter_smooth", spec(16, 128, {{0, 20000}}, 0, false, 0, 10),
               opt(kReduceMean, 0.1f, 1e-4f, thr, 0)});
  c.back().data.lift = 30;
  c.push_back({"peaked_filter_two_seg", spec(300, 256, {{0, 5000}, {5100, 3000}}, 0.2, true, 0, 12),
               opt(kReduceSum, 0.05f, 0, thr, 0)});
  c.back().data.lift = 14;
  c.push_back({"sparse_filter_softcap_bias",
               spec(40, 256, {{0, 6000}, {7000, 4000}}, 0.1, true, 1.1, 11),
               opt(kReduceSum, 0, 0, 1e-3f, 30)});
  c.push_back({"small_chunks_flat", spec(300, 128, {{0, 2000}, {2100, 300}}, 0.1, true, 0, 9),
               opt(kReduceMean, 0.1f, 0, 0, 0)});
  c.back().opt.grad_buffer_bytes = 9 * 128 * 128 * 2;  // 9 G blocks (3 dense tiles) a chunk

  // Vocabulary ordered by average logit (gathered weight rows, dC / dbias scattered back, target
  // corrections in skipped tiles). "Always" keeps the order whatever survives.
  const Order ordered = Order::ByAverageLogit, always = Order::ByAverageLogitAlways;
  c.push_back({"zipf_ordered_filter", spec(1024, 256, {{0, 6000}}, 0.1, false, 1.1, 21),
               opt(kReduceMean, 0, 0, thr, 0)});
  c.back().opt.order = ordered;
  c.push_back({"zipf_ordered_gap_bias_smooth",
               spec(600, 192, {{0, 3000}, {3100, 900}}, 0.2, true, 1.1, 22),
               opt(kReduceSum, 0.1f, 1e-4f, thr, 0)});
  c.back().opt.order = always;
  c.push_back({"zipf_ordered_softcap_none", spec(300, 2304, {{0, 2500}}, 0.1, true, 1.1, 23),
               opt(kReduceNone, 0, 1e-4f, thr, 30)});
  c.back().opt.order = always;
  c.push_back({"peaked_ordered_three_seg_chunks",
               spec(400, 128, {{5, 2000}, {2100, 129}, {2300, 1}}, 0.1, true, 0, 24),
               opt(kReduceMean, 0.05f, 0, thr, 0)});
  c.back().data.lift = 14;
  c.back().opt.order = always;
  c.back().opt.grad_buffer_bytes = 16 * 128 * 128 * 2;  // 16 G blocks with staged rows a chunk
  c.push_back({"ordered_exact_two_seg_bias",
               spec(500, 320, {{0, 1500}, {1600, 700}}, 0.1, true, 1.1, 25),
               opt(kReduceMean, 0.1f, 1e-4f, 0, 0), true});
  c.back().opt.order = always;
  c.push_back({"ordered_exact_softcap", spec(257, 520, {{0, 1300}}, 0.2, false, 1.1, 26),
               opt(kReduceNone, 0, 0, 0, 30), true});
  c.back().opt.order = always;
  c.push_back({"flat_ordered_goes_natural", spec(512, 128, {{0, 1000}}, 0.1, false, 0, 27),
               opt(kReduceMean, 0, 0, thr, 0)});
  data_kind(c.back().data, "flat");
  c.back().opt.order = ordered;
  c.back().expect_kept_order = 0;  // every tile survives: natural order, every tile
  // Peaked rows: most tiles hold a probability above the threshold even in order (0.94
  // measured), above the 65% from which an ordered backward stops paying; the backward goes
  // natural. (Orders kept are checked against fp64 by tests/ce/LinearCeGpuTest.cpp.)
  c.push_back({"peaked_ordered_goes_natural", spec(256, 128, {{0, 8000}}, 0.1, true, 0, 28),
               opt(kReduceMean, 0, 0, thr, 0)});
  c.back().data.lift = 14;
  c.back().opt.order = ordered;
  c.back().expect_kept_order = 0;
  return c;
}

// Relative L2 distance of two host vectors.
double host_rel(const std::vector<float>& a, const std::vector<float>& b) {
  ErrAcc e;
  for (size_t i = 0; i < a.size(); ++i) e.add(a[i], b[i]);
  return e.rel();
}

const char* order_name(Order o) {
  return o == Order::Natural ? "natural" : o == Order::ByAverageLogit ? "ordered" : "ordered!";
}

std::string fmt_rel(const char* label, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s%.1e", label, v);
  return buf;
}

int check_case(const CheckCase& c) {
  Problem P = make_problem(c.data);
  const int n = P.n_rows, d = P.dim;
  std::vector<float> E = to_host(P.hidden, size_t(n) * d);
  std::vector<std::vector<float>> W, B;
  tilejit::testing::RefLinearCe ref;
  ref.n_rows = n;
  ref.dim = d;
  ref.hidden = E.data();
  ref.targets = P.h_targets.data();
  ref.ignore_index = kIgnore;
  ref.label_smoothing = c.opt.label_smoothing;
  ref.z_loss = c.opt.z_loss;
  ref.reduction = c.opt.reduction == kReduceNone  ? tilejit::testing::RefReduction::None
                  : c.opt.reduction == kReduceSum ? tilejit::testing::RefReduction::Sum
                                                  : tilejit::testing::RefReduction::Mean;
  if (c.opt.cap > 0) {
    double cap = c.opt.cap;
    ref.logit_mod = [cap](double x, int64_t, int64_t) { return cap * std::tanh(x / cap); };
    ref.logit_grad = [cap](double x, int64_t, int64_t) {
      double t = std::tanh(x / cap);
      return 1 - t * t;
    };
  }
  int live = 0;
  for (auto& s : P.segs) {
    W.push_back(to_host(s.weight, size_t(s.size) * d));
    B.push_back(s.bias ? to_host(s.bias, s.size) : std::vector<float>());
    live += s.size;
  }
  for (size_t s = 0; s < P.segs.size(); ++s)
    ref.segments.push_back(
        {P.segs[s].begin, P.segs[s].size, W[s].data(), B[s].empty() ? nullptr : B[s].data()});

  int failures = 0;
  with_program(c.opt, [&](auto prog, auto args) {
    Runner<decltype(prog), decltype(args)> run(P, c.opt, args);
    ref.upstream = run.h_upstream.data();
    auto R = tilejit::testing::reference_linear_ce(ref);
    std::vector<float> snap_dh, snap_dw, snap_db, snap_loss;
    bool deterministic = true;
    double hot = 1, tgt = 0;
    ErrAcc el, eh, ew, eb;
    for (int rep = 0; rep < 2; ++rep) {
      P.poison();
      run.forward();
      run.backward();
      CK(cudaDeviceSynchronize());
      if (rep == 0) {
        const auto f = run.tile_fractions();
        hot = f.hot, tgt = f.tgt;
      }
      std::vector<float> dh = to_host(P.d_hidden, size_t(n) * d), dw;
      for (auto& s : P.segs) {
        auto v = to_host(s.d_weight, size_t(s.size) * d);
        dw.insert(dw.end(), v.begin(), v.end());
      }
      if (rep == 1) {
        deterministic = dh == snap_dh && dw == snap_dw;
        break;
      }
      snap_dh = dh;
      snap_dw = dw;
      snap_loss = c.opt.reduction == kReduceNone ? to_host(P.loss_rows, n) : to_host(P.loss, 1);
      for (auto& s : P.segs)
        if (s.d_bias) {
          auto v = to_host(s.d_bias, s.size);
          snap_db.insert(snap_db.end(), v.begin(), v.end());
        }
      if (c.opt.reduction == kReduceNone) {
        auto rows = to_host(P.loss_rows, n);
        for (int i = 0; i < n; ++i) el.add(rows[i], R.row_loss[i]);
      } else {
        el.add(to_host(P.loss, 1)[0], R.loss);
      }
      for (size_t i = 0; i < dh.size(); ++i) eh.add(dh[i], R.d_hidden[i]);
      size_t o = 0;
      for (size_t s = 0; s < P.segs.size(); ++s) {
        for (size_t i = 0; i < R.d_weight[s].size(); ++i) ew.add(dw[o + i], R.d_weight[s][i]);
        o += R.d_weight[s].size();
        if (P.segs[s].d_bias) {
          auto db = to_host(P.segs[s].d_bias, P.segs[s].size);
          for (int i = 0; i < P.segs[s].size; ++i) eb.add(db[i], R.d_bias[s][i]);
        }
      }
    }
    // The same problem in natural order: equal up to fp32 summation order.
    double vs_natural = 0;
    if (c.same_as_natural) {
      Options natural = c.opt;
      natural.order = Order::Natural;
      Runner<decltype(prog), decltype(args)> nat(P, natural, args);
      P.poison();
      nat.forward();
      nat.backward();
      CK(cudaDeviceSynchronize());
      std::vector<float> dw, db;
      for (auto& s : P.segs) {
        auto v = to_host(s.d_weight, size_t(s.size) * d);
        dw.insert(dw.end(), v.begin(), v.end());
        if (s.d_bias) {
          auto b = to_host(s.d_bias, s.size);
          db.insert(db.end(), b.begin(), b.end());
        }
      }
      auto loss = c.opt.reduction == kReduceNone ? to_host(P.loss_rows, n) : to_host(P.loss, 1);
      vs_natural =
          std::max({host_rel(snap_dh, to_host(P.d_hidden, size_t(n) * d)), host_rel(snap_dw, dw),
                    host_rel(snap_db, db), host_rel(snap_loss, loss)});
    }
    const double tol = 1e-2;
    bool ok = el.rel() <= tol && eh.rel() <= tol && ew.rel() <= tol && eb.rel() <= tol &&
              deterministic && vs_natural <= 1e-5 &&
              (c.expect_kept_order < 0 || c.expect_kept_order == int(run.kept_order));
    failures += !ok;
    std::printf(
        "%-31s %-8s N %5d D %5d V %5d thr %.1e | loss %.2e dE %.2e dC %.2e db %.2e | hot %.3f "
        "tgt %.3f | kept order %s%s | det %s  %s\n",
        c.name, order_name(c.opt.order), n, d, live, c.opt.threshold, el.rel(), eh.rel(), ew.rel(),
        eb.rel(), hot, tgt, run.kept_order ? "yes" : "no",
        c.same_as_natural ? fmt_rel(" | vs natural ", vs_natural).c_str() : "",
        deterministic ? "yes" : "NO", ok ? "ok" : "FAIL");
  });
  P.free_all();
  return failures;
}

int run_checks() {
  std::printf("== correctness vs fp64 reference (relative L2 error, tolerance 1e-2)\n");
  int f = 0;
  for (auto& c : check_cases()) f += check_case(c);
  return f;
}

// ---- timing ----------------------------------------------------------------------------------

__global__ void diff_kernel(const float* a, const float* b, size_t n, double* acc) {
  double num = 0, den = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    double x = a[i], y = b[i];
    num += (x - y) * (x - y);
    den += y * y;
  }
  atomicAdd(acc, num);
  atomicAdd(acc + 1, den);
}

// ||a - b|| / ||b|| over several (a, b, n) pieces, on the device.
double device_rel(const std::vector<std::tuple<const float*, const float*, size_t>>& parts) {
  double* acc;
  CK(cudaMalloc(&acc, 16));
  CK(cudaMemset(acc, 0, 16));
  for (auto& [a, b, n] : parts) diff_kernel<<<1024, 256>>>(a, b, n, acc);
  double h[2];
  CK(cudaMemcpy(h, acc, 16, cudaMemcpyDeviceToHost));
  cudaFree(acc);
  return h[1] > 0 ? std::sqrt(h[0] / h[1]) : std::sqrt(h[0]);
}

template <class F>
float median_ms(int reps, F f) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(a));
    f();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct TimeRow {
  std::string name, kind, order;
  float thr, fwd, bwd, fb, order_ms;
  double surviving, hot, tgt, halves, err_dh, err_dw, err_loss, vs_exact, tflops, extra_gb;
  bool kept_order, paused;
};

// One timed configuration: exact (filtering off), filtered in natural order, filtered with the
// vocabulary ordered by average logit (the library's choice of backward).
struct TimeMode {
  const char* name;
  float threshold;
  Order order;
};

void run_timings(const std::string& only, const std::vector<std::string>& kinds) {
  struct TimeCase {
    const char* name;
    int n, d;
    std::vector<std::pair<int, int>> segs;
    double ignored;
    float cap;
  };
  std::vector<TimeCase> cases = {
      {"gemma2_head", 8192, 2304, {{0, 256000}}, 0.1, 30.f},
      {"llama3_head", 8192, 4096, {{0, 128256}}, 0.1, 0.f},
      {"two_segments", 8192, 2048, {{0, 151936}, {151936 + 130, 1024}}, 0.5, 0.f},
  };
  const std::vector<TimeMode> modes = {{"exact", 0.f, Order::Natural},
                                       {"filtered", 1.f / 4096, Order::Natural},
                                       {"ordered", 1.f / 4096, Order::ByAverageLogit}};
  std::vector<TimeRow> rows;
  std::printf("\n== timing (bf16, median of CUDA-event timings; errors against the exact run)\n");
  for (auto& tc : cases) {
    if (!only.empty() && only != tc.name) continue;
    for (const std::string& kind : kinds) {
      DataSpec s;
      s.n_rows = tc.n;
      s.dim = tc.d;
      s.segments = tc.segs;
      s.ignored = tc.ignored;
      data_kind(s, kind);
      Problem P = make_problem(s);
      size_t nh = size_t(tc.n) * tc.d, nw = 0;
      for (auto& g : P.segs) nw += size_t(g.size) * tc.d;
      float *ref_dh = nullptr, *ref_dw = nullptr;
      CK(cudaMalloc(&ref_dh, nh * 4));
      CK(cudaMalloc(&ref_dw, nw * 4));
      float exact_fb = 0, exact_loss = 0;
      for (const TimeMode& mode : modes) {
        Options o;
        o.cap = tc.cap;
        o.threshold = mode.threshold;
        o.order = mode.order;
        with_program(o, [&](auto prog, auto args) {
          Runner<decltype(prog), decltype(args)> run(P, o, args);
          for (int i = 0; i < 2; ++i) run.forward(), run.backward();
          TimeRow r{tc.name, kind, mode.name};
          r.thr = mode.threshold;
          r.order_ms =
              mode.order == Order::Natural ? 0.f : median_ms(5, [&] { run.build_order(); });
          r.surviving = run.surviving;
          r.kept_order = run.kept_order;
          const auto f = run.tile_fractions();
          r.hot = f.hot, r.tgt = f.tgt, r.halves = f.halves;
          if (r.surviving < 0) r.surviving = r.hot;  // natural order: the classes say it
          // A reusable order that left nearly every tile alive pauses filtering until its next
          // rebuild (runtime/VocabOrder.h): between rebuilds a training loop runs the exact path.
          run.paused = mode.order == Order::ByAverageLogit &&
                       run.surviving >= tilejit::kOrderedBackwardSurvival;
          r.paused = run.paused;
          r.fwd = median_ms(10, [&] { run.forward(); });
          r.bwd = median_ms(10, [&] { run.backward(); });
          r.fb = median_ms(5, [&] { run.forward(), run.backward(); });
          CK(cudaDeviceSynchronize());
          const float loss = to_host(P.loss, 1)[0];
          double live = 0;
          for (auto& g : P.segs) live += g.size;
          r.tflops = 2.0 * run.n_kept * tc.d * live / (r.fwd * 1e-3) / 1e12;
          r.extra_gb = run.extra_bytes() / 1e9;
          // Gradients against the exact run's (the first mode).
          std::vector<std::tuple<const float*, const float*, size_t>> pw;
          size_t off = 0;
          for (auto& g : P.segs) {
            size_t n = size_t(g.size) * tc.d;
            if (mode.threshold == 0)
              CK(cudaMemcpy(ref_dw + off, g.d_weight, n * 4, cudaMemcpyDeviceToDevice));
            pw.emplace_back(g.d_weight, ref_dw + off, n);
            off += n;
          }
          if (mode.threshold == 0) {
            CK(cudaMemcpy(ref_dh, P.d_hidden, nh * 4, cudaMemcpyDeviceToDevice));
            exact_fb = r.fb;
            exact_loss = loss;
          }
          r.err_dh = device_rel({{P.d_hidden, ref_dh, nh}});
          r.err_dw = device_rel(pw);
          r.err_loss = std::fabs(loss - exact_loss) / std::max(std::fabs(exact_loss), 1e-30f);
          r.vs_exact = exact_fb > 0 ? r.fb / exact_fb : 1;
          rows.push_back(r);
          std::printf(
              "{\"case\":\"%s\",\"loop\":\"%s\",\"data\":\"%s\",\"mode\":\"%s\",\"N\":%d,\"kept\":%d,\"D\":%d,"
              "\"V\":%.0f,\"softcap\":%g,\"threshold\":%g,\"surviving_fraction\":%.4f,"
              "\"kept_order\":%s,\"paused\":%s,\"target_only_fraction\":%.4f,"
              "\"computed_halves_fraction\":%.4f,\"order_ms\":%.3f,"
              "\"fwd_ms\":%.3f,"
              "\"bwd_ms\":%.3f,\"fwd_bwd_ms\":%.3f,\"fwd_bwd_vs_exact\":%.3f,\"fwd_tflops\":%.1f,"
              "\"extra_bytes\":%lld,\"loss\":%.6f,\"err_loss\":%.2e,\"err_dE\":%.2e,"
              "\"err_dC\":%.2e,\"plan\":\"%s\"}\n",
              tc.name, loop_name(), kind.c_str(), mode.name, tc.n, run.n_kept, tc.d, live, tc.cap,
              mode.threshold, r.surviving, r.kept_order ? "true" : "false",
              r.paused ? "true" : "false", r.tgt, r.halves, r.order_ms, r.fwd, r.bwd, r.fb,
              r.vs_exact, r.tflops, (long long)run.extra_bytes(), loss, r.err_loss, r.err_dh,
              r.err_dw, tilejit::describe(run.ws).c_str());
          std::fflush(stdout);
        });
      }
      cudaFree(ref_dh);
      cudaFree(ref_dw);
      P.free_all();
    }
  }
  std::printf("\n%-13s %-6s %-8s %8s %7s %6s %8s %8s %8s %8s %7s %8s %8s %8s\n", "case", "data",
              "mode", "survive", "halves", "order", "prep ms", "fwd ms", "bwd ms", "f+b ms",
              "/exact", "errLoss", "errdE", "errdC");
  int slower = 0;
  for (auto& r : rows) {
    std::printf("%-13s %-6s %-8s %8.3f %7.3f %6s %8.2f %8.2f %8.2f %8.2f %7.3f %8.1e %8.1e %8.1e\n",
                r.name.c_str(), r.kind.c_str(), r.order.c_str(), r.surviving, r.halves,
                r.order != "ordered" ? "-"
                : r.paused           ? "paused"
                : r.kept_order       ? "kept"
                                     : "drop",
                r.order_ms, r.fwd, r.bwd, r.fb, r.vs_exact, r.err_loss, r.err_dh, r.err_dw);
    slower += r.vs_exact > 1.02;
  }
  std::printf("filtered fwd+bwd more than 2%% slower than exact: %d configuration(s)\n", slower);
  std::printf(
      "(prep ms: pre-pass, sort and upload of an order, paid on the forwards that rebuild "
      "it; survive: the fraction measured before any pause; halves: the fraction of 64-row "
      "halves of the (row tile, vocabulary tile) grid computed)\n");
}
