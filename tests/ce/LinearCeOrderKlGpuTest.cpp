// Fused linear cross-entropy on the GPU against the fp64 reference (LinearCeGpuProblem.h): the
// vocabulary order (by average logit, the caller's, a reusable state) and when the backward
// keeps filtering, the KL (distillation) term, i64 targets. Skipped without a GPU.
#include "tests/ce/LinearCeGpuCases.h"

namespace tilejit::testing {
namespace {

using namespace linear_ce_gpu;

// ---- vocabulary order ----------------------------------------------------------------------

TEST_F(LinearCeGpu, OrderedByAverageLogit) {
  Problem natural(prior_case("prior_natural", VocabOrdering::Natural));
  natural.check();
  EXPECT_FALSE(natural.ordered_forward());
  Problem ordered(prior_case("prior_ordered", VocabOrdering::AverageLogit));
  ordered.check();
  EXPECT_TRUE(ordered.ordered_forward());
  EXPECT_TRUE(ordered.ordered_backward()) << "surviving fraction " << ordered.surviving();
  EXPECT_GE(ordered.surviving(), 0.0);
  EXPECT_LT(ordered.surviving(), 0.3);
}

// The average-logit order is sorted on the device. With scores that fp32 computes exactly (small
// integer weights, biases and hidden states, 256 kept rows: every sum an integer below 2^24, the
// mean a multiple of 1/256), it is order_by_score's order of the exact scores, bit for bit, with
// its inverse: many ties (kept in ascending row order), segments of many sort blocks (the last
// one partial), a bias.
TEST_F(LinearCeGpu, AverageLogitOrderIsTheHostSortOfExactScores) {
  const int64_t n = 256, d = 64;
  const std::vector<SegSpec> segs = {{0, 70001, true}, {70101, 3001, false}};
  const LossProgram prog =
      std::get<LossProgram>(parse_program("loss exact_scores {\n" + layout_text(segs) + "}\n"));
  std::mt19937 rng(41);
  auto ints = [&](size_t count, int lo, int hi) {
    std::uniform_int_distribution<int> pick(lo, hi);
    std::vector<float> v(count);
    for (float& x : v) x = static_cast<float>(pick(rng));
    return v;
  };
  std::vector<DeviceBuffer> keep;
  auto upload = [&](const std::vector<float>& v, std::vector<int64_t> shape, std::string name) {
    std::vector<uint16_t> bits(v.size());
    for (size_t i = 0; i < v.size(); ++i) bits[i] = to_bits(v[i], DType::BF16);  // exact
    keep.push_back(DeviceBuffer::from_host(bits));
    return TensorView::contiguous(keep.back().data(), DType::BF16, std::move(shape),
                                  TensorView::Where::Device, std::move(name));
  };
  const std::vector<float> hidden = ints(n * d, -1, 1);
  std::vector<double> column_sum(d, 0.0);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t k = 0; k < d; ++k) column_sum[k] += hidden[r * d + k];
  Bindings bind;
  std::vector<std::vector<float>> scores;
  for (size_t s = 0; s < segs.size(); ++s) {
    const std::vector<float> w = ints(segs[s].size * d, -2, 2);
    const std::vector<float> b = segs[s].bias ? ints(segs[s].size, -8, 8) : std::vector<float>();
    bind.buffer(fmt::format("W{}", s), upload(w, {segs[s].size, d}, "W"));
    if (segs[s].bias) bind.buffer(fmt::format("b{}", s), upload(b, {segs[s].size}, "b"));
    scores.emplace_back(segs[s].size);
    for (int64_t v = 0; v < segs[s].size; ++v) {
      double dot = 0;
      for (int64_t k = 0; k < d; ++k) dot += w[v * d + k] * column_sum[k];
      scores[s][v] = static_cast<float>(dot / n + (b.empty() ? 0.0 : b[v]));
    }
  }
  std::vector<int32_t> targets(n);
  for (int32_t& t : targets) t = static_cast<int32_t>(rng() % segs[0].size);
  keep.push_back(DeviceBuffer::from_host(targets));
  const TensorView target_view = TensorView::contiguous(keep.back().data(), DType::I32, {n},
                                                        TensorView::Where::Device, "targets");
  LinearCeOptions options;
  options.vocab_ordering = VocabOrdering::State;
  options.vocab_order = VocabOrder::by_average_logit(1);
  linear_cross_entropy_forward(prog, upload(hidden, {n, d}, "E"), bind, target_view, options,
                               nullptr);
  const std::shared_ptr<const VocabOrderTables> tables = options.vocab_order->current();
  ASSERT_TRUE(tables);
  ASSERT_EQ(tables->segments(), segs.size());
  for (size_t s = 0; s < segs.size(); ++s) {
    const std::vector<int32_t> want = order_by_score(scores[s].data(), segs[s].size);
    EXPECT_EQ(tables->order(s), want) << "segment " << s;
    EXPECT_EQ(tables->rank(s), inverse_order(want)) << "segment " << s;
  }
}

// The ordered path (position-order weight copy, staged rows, pool scratch) with the forward and
// the backward on different streams and the state dropped as soon as the backward is enqueued:
// right results, and the same again from a second step served by the pool. A smoke test of the
// two-stream path: it cannot catch a free ordered too early, since the filtered backward
// synchronises its stream mid-call and nothing allocates before the next synchronisation.
TEST_F(LinearCeGpu, OrderedStateDroppedAcrossStreams) {
  Case c = prior_case("prior_two_streams", VocabOrdering::AverageLogit);
  c.two_streams = true;
  Problem p(c);
  p.check();
  EXPECT_TRUE(p.ordered_forward());
  const std::vector<float> first = p.last_d_hidden();
  p.check();  // a second step reuses the pool's memory
  EXPECT_EQ(std::memcmp(first.data(), p.last_d_hidden().data(), first.size() * 4), 0)
      << "the second step's dE differs from the first's";
}

// A reusable order's forwards between rebuilds know their order before their rows: the Hopper
// forward queues the weights' position-order copies before the targets' read-back (LinearCe.cpp)
// rather than after it, as the forward that built the order did. Same order, same inputs: the
// same bits, into the pool or into the caller's 16-bit gradient buffers given to the forward
// (which the backward then reads the weights from), and each step against the reference.
TEST_F(LinearCeGpu, OrderedStateCopiesWeightsBeforeTheTargetsAreRead) {
  for (bool at_forward : {false, true}) {
    auto state = VocabOrder::by_average_logit(3);
    Case c = prior_case(at_forward ? "prior_state_copies_at_forward" : "prior_state_copies",
                        VocabOrdering::State);
    c.order = state;
    c.weight_grad_16 = at_forward;
    c.grad_outputs_at_forward = at_forward;
    Problem p(c);
    p.check();  // builds the order; copies after the read-back
    ASSERT_TRUE(p.ordered_forward());
    ASSERT_TRUE(p.ordered_backward()) << p.surviving();
    const std::vector<float> first_dh = p.last_d_hidden(), first_dw = p.last_d_weight();
    const float first_loss = p.last_loss();
    for (int step = 2; step <= 3; ++step) {
      p.check();  // no rebuild: the copies go before the read-back
      EXPECT_TRUE(p.ordered_forward());
      EXPECT_EQ(std::memcmp(first_dh.data(), p.last_d_hidden().data(), first_dh.size() * 4), 0)
          << "dE, step " << step << (at_forward ? ", buffers at the forward" : "");
      EXPECT_EQ(std::memcmp(first_dw.data(), p.last_d_weight().data(), first_dw.size() * 4), 0)
          << "dC, step " << step << (at_forward ? ", buffers at the forward" : "");
      EXPECT_EQ(first_loss, p.last_loss()) << "step " << step;
    }
    EXPECT_EQ(state->stats().rebuilds, 1);
    EXPECT_EQ(state->stats().ordered_forwards, 3);
  }
}

TEST_F(LinearCeGpu, OrderedForwardOverEveryTileMatchesTheExactResult) {
  Problem exact(flat_case("flat_exact", 0, VocabOrdering::Natural));
  exact.check();
  Problem ordered(flat_case("flat_ordered_forward", -1, VocabOrdering::AverageLogit));
  ordered.check();
  EXPECT_TRUE(ordered.ordered_forward());
  EXPECT_FALSE(ordered.ordered_backward());
  EXPECT_GE(ordered.surviving(), kOrderedBackwardSurvival);
  RelErr diff;
  for (size_t i = 0; i < exact.last_d_hidden().size(); ++i)
    diff.add(ordered.last_d_hidden()[i], exact.last_d_hidden()[i]);
  EXPECT_LE(diff.value(), 1e-4) << "dE, ordered forward vs exact";
}

// In natural order too, a backward that finds nearly every tile alive visits them all exactly as
// with filtering off: bit-identical gradients.
TEST_F(LinearCeGpu, NaturalOrderFilterOverEveryTileIsTheExactBackward) {
  Problem exact(flat_case("flat_natural_exact", 0, VocabOrdering::Natural));
  exact.check();
  Problem filtered(flat_case("flat_natural_filtered", -1, VocabOrdering::Natural));
  filtered.check();
  EXPECT_GT(filtered.last_threshold(), 0.f);
  EXPECT_GE(filtered.surviving(), kNaturalBackwardSurvival);
  EXPECT_FALSE(filtered.ordered_backward());
  ASSERT_EQ(exact.last_d_hidden().size(), filtered.last_d_hidden().size());
  EXPECT_EQ(std::memcmp(exact.last_d_hidden().data(), filtered.last_d_hidden().data(),
                        exact.last_d_hidden().size() * 4),
            0);
}

// The gapped layout (three segments, biases) visited in a random order the caller fixed.
std::vector<std::vector<int32_t>> gapped_orders() {
  std::mt19937 rng(31);
  std::vector<std::vector<int32_t>> orders;
  for (const SegSpec& s : kGapped) {
    orders.emplace_back(s.size);
    std::iota(orders.back().begin(), orders.back().end(), 0);
    std::shuffle(orders.back().begin(), orders.back().end(), rng);
  }
  return orders;
}

Case gapped_fixed_order(const char* name) {
  Case c = gapped(name, -1);
  c.ordering = VocabOrdering::State;
  c.order = VocabOrder::fixed(gapped_orders());
  return c;
}

TEST_F(LinearCeGpu, CallersOrderWithGapsAndBias) {
  Problem p(gapped_fixed_order("gaps_bias_fixed_order"));
  p.check();
  EXPECT_TRUE(p.ordered_forward());
  EXPECT_TRUE(p.ordered_backward()) << p.surviving();
}

// Weight gradients in E's dtype (half the memory of f32 ones): every entry is the f32 run's
// entry rounded once to nearest even, sparse target corrections included (they are added before
// the rounding), so bit-identical to rounding the f32 result; bf16 and f16, filtered in a
// caller's order (three segments, biases, corrections).
TEST_F(LinearCeGpu, WeightGradientsInTheOperandsDtype) {
  for (DType dtype : {DType::BF16, DType::F16}) {
    Case wide = gapped_fixed_order("gaps_bias_dC_f32");
    wide.dtype = dtype;
    Case narrow = wide;
    narrow.name = "gaps_bias_dC_16bit";
    narrow.weight_grad_16 = true;
    Problem a(wide), b(narrow);
    a.check();
    b.check();
    ASSERT_GT(a.last_threshold(), 0.f);  // filtered: corrections to add before the rounding
    ASSERT_EQ(a.last_d_weight().size(), b.last_d_weight().size());
    size_t off = 0, first = 0;
    for (size_t i = 0; i < a.last_d_weight().size(); ++i) {
      const float want = from_bits(to_bits(a.last_d_weight()[i], dtype), dtype);
      if (std::memcmp(&want, &b.last_d_weight()[i], 4) != 0 && off++ == 0) first = i;
    }
    EXPECT_EQ(off, 0u) << dtype_name(dtype) << ": dC entries other than the f32 run's rounded, "
                       << "first at " << first << ": " << b.last_d_weight()[first] << " for "
                       << a.last_d_weight()[first];
  }
}

// The Hopper forward copies an ordered segment's weights into position order and takes its tiles
// from the copy (LinearCeOptions::copy_ordered_weights); gathering the rows instead changes where
// the tiles come from, never a value: bit-identical results. (Elsewhere both run the same kernels.)
TEST_F(LinearCeGpu, OrderedWeightsCopiedOrGatheredAlike) {
  Case gathered_case = gapped_fixed_order("gaps_bias_gathered");
  gathered_case.copy_ordered_weights = false;
  Problem copied(gapped_fixed_order("gaps_bias_copied")), gathered(gathered_case);
  copied.check();
  gathered.check();
  EXPECT_TRUE(copied.ordered_forward());
  EXPECT_TRUE(gathered.ordered_forward());
  ASSERT_EQ(copied.last_d_hidden().size(), gathered.last_d_hidden().size());
  EXPECT_EQ(std::memcmp(copied.last_d_hidden().data(), gathered.last_d_hidden().data(),
                        copied.last_d_hidden().size() * 4),
            0);
  EXPECT_EQ(copied.last_loss(), gathered.last_loss());
}

// The weights' gradient buffers given to the forward (LinearCeOutputs::d_weight): the Hopper
// forward builds the ordered segments' position-order copies in them (contiguous rows: read back
// between the forward and the backward), and the backward writes the gradients there,
// bit-identical to buffers given to the backward; f32 and 16-bit buffers. (With 16-bit ones the
// backward reads the weights from the copy and writes dC over it by position, then in row
// order; a second backward of the same forward, the copy gone, stages them: the same bits. With
// a budget of a few G blocks the backward works in many chunks: each chunk's dC rows go over the
// copy's rows of its own tiles while later chunks still read theirs.)
TEST_F(LinearCeGpu, WeightGradientBuffersGivenToTheForward) {
  // (the Hopper loop's forward, not the portable one that TILEJIT_CE_LOOP=portable selects)
  const bool hopper =
      Driver::get()->attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0) == 9 &&
      linear_ce_tile_loop() == CeTileLoop::Sm90;
  const std::vector<std::vector<int32_t>> orders = gapped_orders();
  for (int variant = 0; variant < 3; ++variant) {
    const bool narrow = variant > 0;
    Case late = gapped_fixed_order("gaps_bias_dC_at_backward");
    late.weight_grad_16 = narrow;
    if (variant == 2) late.grad_buffer_bytes = 4 * 128 * 128 * 2;  // 4 G blocks a chunk
    Case early = late;
    early.name = "gaps_bias_dC_at_forward";
    early.grad_outputs_at_forward = true;
    early.backward_twice = true;
    Problem a(late), b(early);
    a.check();
    b.check();
    EXPECT_TRUE(b.ordered_forward());
    EXPECT_TRUE(b.ordered_backward()) << b.surviving();
    ASSERT_EQ(b.early_after_forward().size(), kGapped.size());
    for (size_t s = 0; hopper && s < kGapped.size(); ++s) {
      const int64_t d = gapped("dims", -1).d;
      const std::vector<uint16_t>& copy = b.early_after_forward()[s];
      size_t wrong = 0;
      for (int64_t pos = 0; pos < kGapped[s].size; ++pos)
        for (int64_t k = 0; k < d; ++k)
          wrong += from_bits(copy[pos * d + k], b.dtype()) !=
                   b.weights(s)[int64_t(orders[s][pos]) * d + k];
      EXPECT_EQ(wrong, 0u) << "segment " << s
                           << ": the buffer did not hold the position-order copy";
    }
    ASSERT_EQ(a.last_d_weight().size(), b.last_d_weight().size());
    EXPECT_EQ(std::memcmp(a.last_d_weight().data(), b.last_d_weight().data(),
                          a.last_d_weight().size() * 4),
              0)
        << (narrow ? "16-bit" : "f32") << " dC" << (variant == 2 ? ", many chunks" : "");
    EXPECT_EQ(a.last_loss(), b.last_loss());
  }
}

// Rows so peaked that every tile is cold (each target a sparse correction; D 256 keeps every
// target's logit above 0.7 x 64, the others' std near 4) over 1,032 vocabulary tiles: the
// backward's two chunks hold no pair (the first, 1,024 tiles, still writes dE; the second
// launches no gradient tile and no dE), and dC is written everywhere.
TEST_F(LinearCeGpu, EveryTileColdOverTwoChunks) {
  // Flat rows over 132,000 ids (logits ~ N(0, 2) with the biases, lse ~ 13): no probability
  // reaches 1e-2, so at a threshold of 2^-6 no tile is hot, while the loss (~13 a row) stays well
  // conditioned. (Rows peaked enough to leave every tile cold at the default threshold have a
  // loss near 0, which fp32's lse - z cannot resolve to 1%.)
  std::vector<SegSpec> segs = {{0, 132000, true}};
  Case c{.name = "every_tile_cold",
         .program = "loss cold {\n" + layout_text(segs) + "}\n",
         .segments = segs,
         .n = 128,
         .d = 256,
         .threshold = 1.f / 64,
         .seed = 51};
  Problem p(c);
  p.check();
  EXPECT_GT(p.last_threshold(), 0.f);
  EXPECT_EQ(p.surviving(), 0.0);
}

TEST_F(LinearCeGpu, NearlyEveryTileSurvivingPausesFilteringUntilTheNextRebuild) {
  // Flat rows: every tile holds probabilities above the threshold, so the backward visits every
  // tile in natural order, and a reusable order pauses filtering until its next rebuild.
  auto state = VocabOrder::by_average_logit(2);
  Case c = flat_case("flat_state_order", -1, VocabOrdering::State);
  c.order = state;
  Problem p(c);
  p.check();
  EXPECT_TRUE(p.ordered_forward());
  EXPECT_FALSE(p.ordered_backward());
  EXPECT_GE(p.surviving(), kOrderedBackwardSurvival);
  EXPECT_TRUE(state->stats().set_aside);
  p.check();  // second forward: no rebuild due, unfiltered
  EXPECT_FALSE(p.ordered_forward());
  EXPECT_EQ(p.last_threshold(), 0.f);
  EXPECT_EQ(p.surviving(), 1.0);
  p.check();  // third: rebuilt, looked at again
  EXPECT_TRUE(p.ordered_forward());
  EXPECT_GT(p.last_threshold(), 0.f);
  VocabOrder::Stats s = state->stats();
  EXPECT_EQ(s.forwards, 3);
  EXPECT_EQ(s.rebuilds, 2);
}

TEST_F(LinearCeGpu, NoOrderWithoutFiltering) {
  Case c = gapped("exact_ignores_order", 0);
  c.ordering = VocabOrdering::AverageLogit;
  Problem p(c);
  p.check();
  EXPECT_FALSE(p.ordered_forward());
  EXPECT_EQ(p.surviving(), 1.0);
}

// ---- KL term and i64 targets -------------------------------------------------------------------

// Distillation on the student's own weights: gapped layout with a bias, smoothing, z-loss, T 2.
TEST_F(LinearCeGpu, KlSharedWeightsExact) {
  Case c = gapped("kl_shared_exact", 0);
  c.kl = Case::Kl{.alpha = 0.3, .temperature = 2};
  c.program = "loss distill {\n" + layout_text(kGapped) + kl_text(*c.kl, kGapped) +
              "  label_smoothing = 0.1\n  z_loss = 0.0001\n}\n";
  Problem(c).check();
}

// A teacher with its own weights, biases and width (D_t 136 vs D 72: K steps of both GEMMs padded
// to the longer), soft-capped (logit_mod applies to the teacher too), filtered, sum reduction.
TEST_F(LinearCeGpu, KlOwnTeacherSoftcapFiltered) {
  std::vector<SegSpec> segs = {{0, 900, true}, {1000, 300, false}};
  Case c{.name = "kl_own_teacher_softcap",
         .program = "",
         .segments = segs,
         .n = 333,
         .d = 72,
         .peak = 30,
         .cap = 30,
         .threshold = -1,
         .seed = 41,
         .kl = Case::Kl{.alpha = 0.5, .temperature = 1.5, .own_teacher = true, .teacher_d = 136}};
  c.program = "loss distill {\n  param cap : f32\n" + layout_text(segs) + kl_text(*c.kl, segs) +
              "  logit = cap * tanh(logit / cap)\n  reduction = sum\n}\n";
  Problem(c).check();
}

// Pure distillation (alpha 1: the CE probabilities leave the gradient), f16, none reduction,
// vocabulary ordered by average logit (the teacher's tiles follow the student's order).
TEST_F(LinearCeGpu, KlOnlyOrderedF16) {
  std::vector<SegSpec> segs = {{0, 4000, true}};
  Case c = prior_case("kl_only_ordered_f16", VocabOrdering::AverageLogit);
  c.dtype = DType::F16;
  c.peak = 10;
  c.kl = Case::Kl{.alpha = 1, .temperature = 1, .own_teacher = true, .teacher_d = 64};
  c.program =
      "loss distill {\n" + layout_text(segs) + kl_text(*c.kl, segs) + "  reduction = none\n}\n";
  Problem p(c);
  p.check();
  EXPECT_TRUE(p.ordered_forward());
  // Both distributions peak near the target and the prior: most tiles hold no probability, of
  // the student's or the teacher's, above the threshold.
  EXPECT_TRUE(p.ordered_backward()) << "surviving fraction " << p.surviving();
  EXPECT_LT(p.surviving(), 0.5);
}

// The ordered KL forward's weight tiles on the Hopper loop: gathered through the order
// (copy_ordered_weights off); copied into position order, the student's copy built in the
// caller's gradient buffers (given to the forward) and the teacher's from the pool; or, the
// teacher sharing the student's weights, one copy for both or one gathered tile for both
// products of a step.
TEST_F(LinearCeGpu, KlOrderedGatheredOrCopied) {
  std::vector<SegSpec> segs = {{0, 4000, true}};
  enum Weights { Gathered, Copied, SharedCopy, SharedGathered };
  for (Weights w : {Gathered, Copied, SharedCopy, SharedGathered}) {
    Case c = prior_case(w == Gathered         ? "kl_ordered_gathered"
                        : w == Copied         ? "kl_ordered_copied"
                        : w == SharedGathered ? "kl_ordered_shared_gathered"
                                              : "kl_ordered_shared_copy",
                        VocabOrdering::AverageLogit);
    c.kl = Case::Kl{.alpha = 0.4, .temperature = 1.5};
    const bool shared = w == SharedCopy || w == SharedGathered;
    if (!shared) {
      c.kl->own_teacher = true;
      c.kl->teacher_d = 96;
    }
    c.program = "loss distill {\n" + layout_text(segs) + kl_text(*c.kl, segs) + "}\n";
    c.copy_ordered_weights = w != Gathered && w != SharedGathered;
    c.grad_outputs_at_forward = w == Copied;
    Problem p(c);
    p.check();
    EXPECT_TRUE(p.ordered_forward()) << c.name;
  }
}

// A KL program's 16-bit weight gradients given to the forward: the forward copies the student's
// ordered weights into them; the backward's gradient tiles (a teacher sharing the weights reads
// the student's tile, one with weights of its own gathers its rows) and dE read that copy by
// position, and dC goes over it by position, then into row order. Bit-identical to the buffers
// given to the backward (which stages the weights per chunk), in one chunk and in many (4 G
// blocks a chunk), and again in a second backward of the same forward (the copy gone: staged).
TEST_F(LinearCeGpu, KlWeightGradientBuffersGivenToTheForward) {
  std::vector<SegSpec> segs = {{0, 4000, true}};
  for (bool shared : {true, false})
    for (int64_t budget : {int64_t{0}, int64_t{4 * 128 * 128 * 2}}) {
      Case late = prior_case(shared ? "kl_shared_dC_at_backward" : "kl_own_dC_at_backward",
                             VocabOrdering::AverageLogit);
      late.peak = 10;  // peaked rows, as KlOnlyOrderedF16's: the backward keeps filtering
      late.kl = Case::Kl{.alpha = 0.4, .temperature = 1};
      if (!shared) {
        late.kl->own_teacher = true;
        late.kl->teacher_d = 64;
      }
      late.program = "loss distill {\n" + layout_text(segs) + kl_text(*late.kl, segs) + "}\n";
      late.weight_grad_16 = true;
      late.grad_buffer_bytes = budget;
      Case early = late;
      early.name = shared ? "kl_shared_dC_at_forward" : "kl_own_dC_at_forward";
      early.grad_outputs_at_forward = true;
      early.backward_twice = true;
      Problem a(late), b(early);
      a.check();
      b.check();
      EXPECT_TRUE(b.ordered_forward()) << early.name;
      EXPECT_TRUE(b.ordered_backward()) << early.name << ": surviving " << b.surviving();
      ASSERT_EQ(a.last_d_weight().size(), b.last_d_weight().size());
      EXPECT_EQ(std::memcmp(a.last_d_weight().data(), b.last_d_weight().data(),
                            a.last_d_weight().size() * 4),
                0)
          << early.name << (budget ? ", many chunks" : "");
      EXPECT_EQ(a.last_loss(), b.last_loss()) << early.name;
    }
}

// More visited pairs than SMs, unfiltered (504 pairs: on the Hopper loop each persistent CTA of
// the gradient tiles takes several, its ring and output tiles carried from one to the next), a
// teacher wider than the student (D_t 96 vs D 64), two segments with and without a bias.
TEST_F(LinearCeGpu, KlManyPairsPerCta) {
  std::vector<SegSpec> segs = {{0, 6000, true}, {6100, 2000, false}};
  Case c{.name = "kl_many_pairs",
         .program = "",
         .segments = segs,
         .n = 1000,
         .d = 64,
         .peak = 8,
         .threshold = 0,
         .seed = 47,
         .kl = Case::Kl{.alpha = 0.25, .temperature = 2, .own_teacher = true, .teacher_d = 96}};
  c.program = "loss distill {\n" + layout_text(segs) + kl_text(*c.kl, segs) + "}\n";
  Problem(c).check();
}

// A teacher sharing the student's weights and bias in its first segment and not in its second
// (its own weights there, D_t = D): on the Hopper loop the pairs of the first segment read one
// weight tile for both products and those of the second two, and a CTA's run of pairs crosses
// from one to the other (forward splits and persistent gradient CTAs alike). Natural order at
// T 1.25, then ordered with the weights gathered at T 1 (the kernels without tempered exps).
TEST_F(LinearCeGpu, KlTeacherSharingOneSegment) {
  std::vector<SegSpec> segs = {{0, 6000, true}, {6100, 2000, false}};
  for (bool ordered : {false, true}) {
    Case c{.name = ordered ? "kl_share_one_segment_ordered" : "kl_share_one_segment",
           .program = "",
           .segments = segs,
           .n = 700,
           .d = 64,
           .peak = 8,
           .threshold = ordered ? -1.f : 0.f,
           .seed = 59,
           .kl = Case::Kl{.alpha = 0.35,
                          .temperature = ordered ? 1 : 1.25,  // 1: untempered kernels
                          .own_teacher = true,
                          .teacher_d = 64,
                          .shared_segments = 1}};
    c.program = "loss distill {\n" + layout_text(segs) + kl_text(*c.kl, segs) + "}\n";
    if (ordered) {
      c.ordering = VocabOrdering::AverageLogit;
      c.copy_ordered_weights = false;
    }
    Problem(c).check();
  }
}

// The KL forward on the Hopper loop in clusters of 1, 2 and 4 CTAs along the vocabulary splits
// (each CTA of a cluster reading a slice of the kept rows for all): 63 vocabulary tiles, so the
// last cluster's splits are short or empty and its CTAs run pairs they skip; 1000 rows, the last
// row tile partial (its slices past the rows read as zeros). Ordered weights copied into position
// order (all tiles by TMA) and gathered (the weights by cp.async beside the multicast rows).
TEST_F(LinearCeGpu, KlForwardClusters) {
  std::vector<SegSpec> segs = {{0, 6000, true}, {6100, 2000, false}};
  for (int cluster : {1, 2, 4}) {
    for (bool copied : {true, false}) {
      const std::string name =
          fmt::format("kl_cluster_{}_{}", cluster, copied ? "copied" : "gathered");
      Case c{
          .name = name.c_str(),
          .program = "",
          .segments = segs,
          .n = 1000,
          .d = 64,
          .peak = 8,
          .threshold = -1,
          .seed = uint64_t(53 + cluster),
          .kl = Case::Kl{.alpha = 0.3, .temperature = 1.5, .own_teacher = true, .teacher_d = 96}};
      c.program = "loss distill {\n" + layout_text(segs) + kl_text(*c.kl, segs) + "}\n";
      c.ordering = VocabOrdering::AverageLogit;
      c.copy_ordered_weights = copied;
      c.kl_forward_cluster = cluster;
      Problem(c).check();
    }
  }
  // The teacher through the student's head: each CTA's multicast rows of both sides beside one
  // weight tile for both products.
  Case shared = gapped("kl_cluster_2_shared_head", -1);
  shared.kl = Case::Kl{.alpha = 0.2, .temperature = 2};
  shared.program = "loss distill {\n" + layout_text(kGapped) + kl_text(*shared.kl, kGapped) + "}\n";
  shared.kl_forward_cluster = 2;
  Problem(shared).check();
  Case bad = gapped("kl_cluster_3", -1);
  bad.kl = Case::Kl{.alpha = 0.15, .temperature = 1};
  bad.program = "loss distill {\n" + layout_text(kGapped) + kl_text(*bad.kl, kGapped) + "}\n";
  bad.kl_forward_cluster = 3;
  try {
    Problem(bad).check();
    FAIL() << "a cluster of 3 was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("kl_forward_cluster is 3"), std::string::npos) << e.what();
  }
}

TEST_F(LinearCeGpu, KlDeterministic) {
  Case c = gapped("kl_deterministic", -1);
  c.kl = Case::Kl{.alpha = 0.15, .temperature = 1};
  c.program = "loss distill {\n" + layout_text(kGapped) + kl_text(*c.kl, kGapped) + "}\n";
  expect_same_d_hidden_twice(c);
}

TEST_F(LinearCeGpu, I64Targets) {
  Case c = gapped("i64_targets", -1);
  c.i64_targets = true;
  Problem(c).check();
  Problem dead(c);
  dead.targets()[5] = 1100;  // between the two segments
  try {
    dead.check();
    FAIL() << "a dead i64 target was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("'targets'[5] = 1100"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tilejit::testing
