// The vocabulary order's host side, no GPU needed: ordering ids by score against a brute-force
// sort, inverses, the backward's keep-the-order decision, the reusable state's rebuild and
// set-aside policy (runtime/VocabOrder.h), and misuse of the ordering options.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>

#include "compiler/Error.h"
#include "dsl/TextForm.h"
#include "runtime/LinearCe.h"
#include "runtime/VocabOrder.h"
#include "runtime/VocabOrderPlan.h"

namespace tilejit::testing {
namespace {

// The specification of order_by_score, written the slow way.
std::vector<int32_t> brute_force_order(const std::vector<float>& scores) {
  std::vector<int32_t> rows(scores.size());
  std::iota(rows.begin(), rows.end(), 0);
  std::stable_sort(rows.begin(), rows.end(), [&](int32_t a, int32_t b) {
    const float x = scores[a], y = scores[b];
    if (std::isnan(x) || std::isnan(y)) return !std::isnan(x) && std::isnan(y);
    return x > y;  // -0 == +0: a tie, kept in row order
  });
  return rows;
}

std::vector<float> random_scores(int64_t n, std::mt19937& rng) {
  // Few distinct values (many ties) mixed with specials and continuous values.
  const float specials[] = {0.f,
                            -0.f,
                            1.f,
                            -1.f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::denorm_min(),
                            -std::numeric_limits<float>::max()};
  std::normal_distribution<float> normal(0.f, 30.f);
  std::vector<float> v(n);
  for (float& x : v) {
    unsigned pick = rng() % 4;
    x = pick == 0   ? specials[rng() % std::size(specials)]
        : pick == 1 ? float(int(rng() % 7) - 3)
                    : normal(rng);
  }
  return v;
}

TEST(VocabOrderPlan, OrderByScoreMatchesBruteForce) {
  std::mt19937 rng(20261201);
  for (int64_t n : {0, 1, 2, 7, 128, 1000, 70001}) {
    std::vector<float> scores = random_scores(n, rng);
    EXPECT_EQ(order_by_score(scores.data(), n), brute_force_order(scores)) << "n = " << n;
  }
}

TEST(VocabOrderPlan, OrderByScoreOnAZipfPriorPutsTheFrequentIdsFirst) {
  std::mt19937 rng(5);
  const int64_t n = 5000;
  std::vector<int32_t> rank(n);
  std::iota(rank.begin(), rank.end(), 1);
  std::shuffle(rank.begin(), rank.end(), rng);
  std::vector<float> prior(n);
  for (int64_t i = 0; i < n; ++i) prior[i] = float(-1.1 * std::log(double(rank[i])));
  std::vector<int32_t> order = order_by_score(prior.data(), n);
  for (int64_t p = 0; p < n; ++p) ASSERT_EQ(rank[order[p]], p + 1) << "position " << p;
}

TEST(VocabOrderPlan, InverseOrderInvertsAndRejectsNonPermutations) {
  std::mt19937 rng(3);
  std::vector<int32_t> order(1000);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<int32_t> rank = inverse_order(order);
  for (int32_t p = 0; p < 1000; ++p) EXPECT_EQ(rank[order[p]], p);
  EXPECT_TRUE(inverse_order({}).empty());

  auto message = [](const std::vector<int32_t>& bad) -> std::string {
    try {
      inverse_order(bad);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "accepted";
  };
  EXPECT_EQ(message({0, 2, 2}), "row 2 appears at positions 1 and 2");
  EXPECT_EQ(message({0, 3, 1}), "position 1 holds row 3, outside [0, 3)");
  EXPECT_EQ(message({-1}), "position 0 holds row -1, outside [0, 1)");
}

// position_cycles' moves, run the way the GPU runs them (linear_ce_move_cycles): every run's first
// row saved aside, then the runs' steps interleaved at random, each run from its last element
// back. Row p's content must end at row order[p]; every row is written exactly once.
TEST(VocabOrderPlan, PositionCyclesMoveEachRowToItsWeightRow) {
  std::mt19937 rng(7);
  auto random_order = [&](int64_t n, int fixed_points) {
    std::vector<int32_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    for (int i = 0; i < fixed_points && n > 1; ++i) {  // put some rows back in place
      const int32_t p = static_cast<int32_t>(rng() % n);
      const auto q = std::find(order.begin(), order.end(), p) - order.begin();
      std::swap(order[p], order[q]);
    }
    return order;
  };
  std::vector<std::vector<int32_t>> orders = {{}, {0}, {0, 1, 2}, {1, 0}, {1, 2, 3, 0}};
  for (int64_t n : {2, 3, 17, 64, 65, 1000, 4099, 30011})
    for (int fixed : {0, 5}) orders.push_back(random_order(n, fixed));
  std::vector<int32_t> one_cycle(777);  // a single cycle over every row
  for (int32_t p = 0; p < 777; ++p) one_cycle[p] = (p + 1) % 777;
  orders.push_back(one_cycle);
  for (const std::vector<int32_t>& order : orders)
    for (int32_t run : {1, 3, 64}) {
      SCOPED_TRACE("n " + std::to_string(order.size()) + ", run " + std::to_string(run));
      const RowCycles c = position_cycles(order, run);
      ASSERT_EQ(c.first.size(), c.next.size() + 1);
      const int64_t n = static_cast<int64_t>(order.size());
      std::vector<int64_t> rows(n);  // each row's content: the position it was written for
      std::iota(rows.begin(), rows.end(), 0);
      std::vector<int64_t> heads;
      for (int32_t r = 0; r < c.runs(); ++r) {
        ASSERT_LT(c.first[r], c.first[r + 1]);
        ASSERT_LE(c.first[r + 1] - c.first[r], run);
        heads.push_back(rows[c.rows[c.first[r]]]);
      }
      std::vector<int32_t> j(c.runs()), dst(c.runs()), writes(n, 0);
      std::vector<int32_t> live;
      for (int32_t r = 0; r < c.runs(); ++r) {
        j[r] = c.first[r + 1] - 1;
        dst[r] = c.next[r];
        live.push_back(r);
      }
      while (!live.empty()) {
        const size_t i = rng() % live.size();
        const int32_t r = live[i];
        rows[dst[r]] = j[r] == c.first[r] ? heads[r] : rows[c.rows[j[r]]];
        ++writes[dst[r]];
        dst[r] = c.rows[j[r]];
        if (--j[r] < c.first[r]) {
          live[i] = live.back();
          live.pop_back();
        }
      }
      for (int64_t p = 0; p < n; ++p) {
        ASSERT_EQ(rows[order[p]], p) << "position " << p;
        ASSERT_EQ(writes[p], order[p] == p ? 0 : 1) << "row " << p;
      }
    }
  EXPECT_THROW(position_cycles({0, 0}, 4), std::invalid_argument);
  EXPECT_THROW(position_cycles({1, 0}, 0), std::invalid_argument);
}

TEST(VocabOrderPlan, BackwardKeepsTheOrderUnlessNearlyEveryTileSurvives) {
  EXPECT_DOUBLE_EQ(surviving_fraction(25, 100), 0.25);
  EXPECT_DOUBLE_EQ(surviving_fraction(0, 0), 1.0);
  for (bool ordered : {false, true}) {
    EXPECT_TRUE(filter_backward(0, 100, ordered));
    EXPECT_FALSE(filter_backward(100, 100, ordered));
    EXPECT_FALSE(filter_backward(0, 0, ordered));
  }
  EXPECT_TRUE(filter_backward(94, 100, false));
  EXPECT_FALSE(filter_backward(95, 100, false));
  EXPECT_TRUE(filter_backward(64, 100, true));
  EXPECT_FALSE(filter_backward(65, 100, true));
}

// ---- the reusable state --------------------------------------------------------------------

LossProgram two_segments() {
  return std::get<LossProgram>(parse_program(R"(
loss two {
  segment base : [0, 300) weight W0
  segment extra : [400, 450) weight W1
})"));
}

// A stand-in pre-pass: fresh random scores per call, counted, the last ones kept, sorted on the
// host.
struct FakePrePass {
  std::mt19937 rng{11};
  int calls = 0;
  VocabOrder::Scores last;
  std::shared_ptr<const VocabOrderTables> operator()() {
    ++calls;
    std::normal_distribution<float> normal;
    last = {std::vector<float>(300), std::vector<float>(50)};
    for (auto& seg : last)
      for (float& x : seg) x = normal(rng);
    return VocabOrderTables::by_score(last);
  }
};

TEST(VocabOrder, RebuildsEveryKForwardsFromThePrePass) {
  LossProgram prog = two_segments();
  auto state = VocabOrder::by_average_logit(3);
  FakePrePass pass;
  auto scores = [&] { return pass(); };
  VocabOrder::Visit visit = state->for_forward(prog, scores);
  EXPECT_TRUE(visit.filter);
  std::shared_ptr<const VocabOrderTables> first = visit.tables;
  ASSERT_TRUE(first);
  EXPECT_EQ(state->current(), first);
  EXPECT_EQ(pass.calls, 1);
  ASSERT_EQ(first->segments(), 2u);
  EXPECT_EQ(first->order(0), order_by_score(pass.last[0].data(), 300));
  EXPECT_EQ(first->order(1), order_by_score(pass.last[1].data(), 50));
  EXPECT_EQ(first->rank(1), inverse_order(first->order(1)));
  EXPECT_EQ(state->for_forward(prog, scores).tables, first);
  EXPECT_EQ(state->for_forward(prog, scores).tables, first);
  EXPECT_EQ(pass.calls, 1);
  std::shared_ptr<const VocabOrderTables> second = state->for_forward(prog, scores).tables;  // 4th
  EXPECT_EQ(pass.calls, 2);
  EXPECT_NE(second, first);
  EXPECT_EQ(first->order(0).size(), 300u) << "an order handed out stays valid";
  for (int i = 0; i < 3; ++i) state->for_forward(prog, scores);  // 5th to 7th: one rebuild
  VocabOrder::Stats s = state->stats();
  EXPECT_EQ(s.forwards, 7);
  EXPECT_EQ(s.ordered_forwards, 7);
  EXPECT_EQ(s.rebuilds, 3);
  EXPECT_EQ(pass.calls, 3);
}

TEST(VocabOrder, NearlyEveryTileSurvivingPausesFilteringUntilTheNextRebuild) {
  LossProgram prog = two_segments();
  auto state = VocabOrder::by_average_logit(4);
  FakePrePass pass;
  auto scores = [&] { return pass(); };
  auto used = state->for_forward(prog, scores).tables;
  state->record_survival(*used, 0.5);  // worth it
  EXPECT_EQ(state->for_forward(prog, scores).tables, used);
  state->record_survival(*used, 0.97);  // not worth it
  EXPECT_TRUE(state->stats().set_aside);
  for (int forward : {3, 4}) {  // unfiltered, no pre-pass
    VocabOrder::Visit v = state->for_forward(prog, scores);
    EXPECT_FALSE(v.filter) << "forward " << forward;
    EXPECT_EQ(v.tables, nullptr) << "forward " << forward;
  }
  VocabOrder::Visit rebuilt = state->for_forward(prog, scores);  // 5th: rebuilt, looked at again
  EXPECT_TRUE(rebuilt.filter);
  EXPECT_NE(rebuilt.tables, nullptr);
  EXPECT_NE(rebuilt.tables, used);
  EXPECT_EQ(pass.calls, 2);
  VocabOrder::Stats s = state->stats();
  EXPECT_FALSE(s.set_aside);
  EXPECT_EQ(s.forwards, 5);
  EXPECT_EQ(s.ordered_forwards, 3);
}

// upcoming() names, without changing the state, exactly the tables the next for_forward hands
// out when it builds none, and nothing when it will build or run unfiltered.
TEST(VocabOrder, UpcomingIsWhatTheNextForwardVisitsWithoutARebuild) {
  LossProgram prog = two_segments();
  auto state = VocabOrder::by_average_logit(3);
  FakePrePass pass;
  auto scores = [&] { return pass(); };
  EXPECT_EQ(state->upcoming(prog), nullptr) << "before the first build";
  for (int forward = 1; forward <= 7; ++forward) {
    std::shared_ptr<const VocabOrderTables> expected = state->upcoming(prog);
    const int calls_before = pass.calls;
    EXPECT_EQ(state->upcoming(prog), expected) << "asking twice changes nothing";
    VocabOrder::Visit v = state->for_forward(prog, scores);
    const bool rebuilt = pass.calls > calls_before;
    EXPECT_EQ(rebuilt, forward % 3 == 1) << "forward " << forward;
    if (rebuilt)
      EXPECT_EQ(expected, nullptr) << "forward " << forward << " rebuilt but was expected";
    else
      EXPECT_EQ(expected, v.tables) << "forward " << forward;
  }
  EXPECT_EQ(state->stats().forwards, 7);
  auto used = state->current();         // 7th forward's, rebuilt there
  state->record_survival(*used, 0.97);  // set aside: the next forwards run unfiltered
  EXPECT_EQ(state->upcoming(prog), nullptr);
  LossProgram one =
      std::get<LossProgram>(parse_program("loss one {\n  segment v : [0, 64) weight W\n}\n"));
  auto fresh = VocabOrder::by_average_logit(100);
  fresh->for_forward(prog, scores);
  EXPECT_NE(fresh->upcoming(prog), nullptr);
  EXPECT_EQ(fresh->upcoming(one), nullptr) << "another layout is rebuilt";
  std::vector<int32_t> base(300), extra(50);
  std::iota(base.begin(), base.end(), 0);
  std::iota(extra.begin(), extra.end(), 0);
  auto fixed = VocabOrder::fixed({base, extra});
  EXPECT_EQ(fixed->upcoming(prog), fixed->current()) << "a fixed order is always the next";
  EXPECT_EQ(fixed->upcoming(one), nullptr);
}

TEST(VocabOrder, ASurvivalRecordedForAnOlderOrderDoesNotSetTheNewOneAside) {
  LossProgram prog = two_segments();
  auto state = VocabOrder::by_average_logit(1);
  FakePrePass pass;
  auto scores = [&] { return pass(); };
  auto old_order = state->for_forward(prog, scores).tables;
  auto new_order = state->for_forward(prog, scores).tables;
  state->record_survival(*old_order, 1.0);
  EXPECT_FALSE(state->stats().set_aside);
  EXPECT_DOUBLE_EQ(state->stats().last_survival, 1.0);
  EXPECT_NE(new_order, nullptr);
}

TEST(VocabOrder, ANewLayoutIsRebuiltAtOnce) {
  auto state = VocabOrder::by_average_logit(100);
  FakePrePass pass;
  state->for_forward(two_segments(), [&] { return pass(); });
  LossProgram one =
      std::get<LossProgram>(parse_program("loss one {\n  segment v : [0, 64) weight W\n}\n"));
  auto tables =
      state
          ->for_forward(one,
                        [] { return VocabOrderTables::by_score({std::vector<float>(64, 1.f)}); })
          .tables;
  ASSERT_TRUE(tables);
  EXPECT_EQ(tables->segments(), 1u);
  EXPECT_EQ(state->stats().rebuilds, 2);
}

TEST(VocabOrder, FixedOrderIsTheCallersAndChecked) {
  LossProgram prog = two_segments();
  std::vector<int32_t> base(300), extra(50);
  std::iota(base.rbegin(), base.rend(), 0);  // reversed
  std::iota(extra.begin(), extra.end(), 0);
  auto state = VocabOrder::fixed({base, extra});
  auto never = []() -> std::shared_ptr<const VocabOrderTables> {
    ADD_FAILURE() << "a fixed order ran the pre-pass";
    return nullptr;
  };
  auto tables = state->for_forward(prog, never).tables;
  ASSERT_TRUE(tables);
  EXPECT_EQ(tables->order(0), base);
  EXPECT_EQ(tables->rank(0)[0], 299);
  state->record_survival(*tables, 1.0);
  VocabOrder::Visit again = state->for_forward(prog, never);
  EXPECT_TRUE(again.filter) << "a fixed order is never set aside";
  EXPECT_EQ(again.tables, tables);

  try {
    VocabOrder::fixed({base, {0, 1, 1}});
    ADD_FAILURE() << "a duplicate row was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("segment 1 is not a permutation: row 1 appears"),
              std::string::npos)
        << e.what();
  }
  auto short_order = VocabOrder::fixed({base});
  try {
    short_order->for_forward(prog, never);
    ADD_FAILURE() << "an order for one segment fit a two-segment program";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("program two: the fixed vocabulary order covers 1 "
                                         "segment(s) of sizes [300]"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(VocabOrder::by_average_logit(0), UserError);
}

// ---- options -------------------------------------------------------------------------------

// Ordering options are checked before anything needs a GPU (fake device addresses).
std::string forward_error(const LinearCeOptions& options) {
  LossProgram prog = two_segments();
  auto fake = [](uintptr_t slot, DType dtype, std::vector<int64_t> shape, const char* name) {
    return TensorView::contiguous(reinterpret_cast<void*>(uintptr_t{1} << 40 | slot << 20), dtype,
                                  std::move(shape), TensorView::Where::Device, name);
  };
  Bindings bind{{"W0", fake(3, DType::BF16, {300, 64}, "w0")},
                {"W1", fake(4, DType::BF16, {50, 64}, "w1")}};
  try {
    linear_cross_entropy_forward(prog, fake(1, DType::BF16, {16, 64}, "E"), bind,
                                 fake(2, DType::I32, {16}, "targets"), options, nullptr);
  } catch (const UserError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(VocabOrderOptions, StateNeedsAnOrderAndAnOrderNeedsState) {
  LinearCeOptions o;
  o.vocab_ordering = VocabOrdering::State;
  EXPECT_NE(forward_error(o).find("vocab_ordering State needs a vocab_order"), std::string::npos)
      << forward_error(o);
  o.vocab_ordering = VocabOrdering::AverageLogit;
  o.vocab_order = VocabOrder::by_average_logit(4);
  EXPECT_NE(forward_error(o).find("a vocab_order is given but vocab_ordering is not State"),
            std::string::npos)
      << forward_error(o);
}

}  // namespace
}  // namespace tilejit::testing
