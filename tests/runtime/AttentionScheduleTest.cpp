// The Hopper attention kernels' host-side schedule (runtime/AttentionSchedule.h): the band, the
// forward's choice of counter or fixed shares, and the persistent backward's grid, with the
// environment overrides that can be set per call.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <string>

#include "compiler/Error.h"
#include "runtime/AttentionSchedule.h"
#include "tests/runtime/ScopedEnv.h"

namespace tilejit::attention_schedule {
namespace {

using test::ScopedEnv;

std::string user_error_of(int64_t items, int64_t sms) {
  try {
    backward_grid(items, sms);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

// Four items of each head among the running CTAs, never past the head's tiles nor below 1
// (TILEJIT_ATTENTION_BAND is not set in this process).
TEST(AttentionSchedule, ForwardBandPutsFourItemsOfEachHeadTogether) {
  ASSERT_EQ(std::getenv("TILEJIT_ATTENTION_BAND"), nullptr);
  for (int64_t ctas : {132, 78})
    for (int64_t heads : {1, 16, 32, 40, 72, 128, 1000})
      for (int64_t tiles : {1, 3, 16, 64, 4096}) {
        int64_t want = 1;  // the smallest band giving every head 4 of `ctas` running items
        while (want * ctas < 4 * heads) ++want;
        want = std::min(want, tiles);
        EXPECT_EQ(forward_band(heads, tiles, ctas), want) << heads << " heads, " << tiles << " tiles";
      }
  EXPECT_EQ(forward_band(0, 0, 132), 1);
  EXPECT_EQ(forward_band(8, 10, 0), 10);  // no CTA count: as many as the tiles allow
}

// Sixteen key blocks of a head together, or all of a shorter head's, never below 1.
TEST(AttentionSchedule, BackwardBandIsSixteenKeyBlocks) {
  ASSERT_EQ(std::getenv("TILEJIT_ATTENTION_BAND"), nullptr);
  for (int64_t blocks : {0, 1, 3, 15, 16, 17, 64, 256, 100000})
    EXPECT_EQ(backward_band(blocks), std::clamp<int64_t>(blocks, 1, 16)) << blocks << " blocks";
}

TEST(AttentionSchedule, ForwardCounterWhereItemsMayGrow) {
  ASSERT_EQ(std::getenv("TILEJIT_ATTENTION_SCHEDULE"), nullptr);
  EXPECT_TRUE(forward_uses_counter(false));
  EXPECT_FALSE(forward_uses_counter(true));
}

TEST(AttentionSchedule, BackwardGridOneCtaPerSmAtMostOnePerItem) {
  EXPECT_EQ(backward_grid(4096, 132), 132);
  EXPECT_EQ(backward_grid(100, 132), 100);
  EXPECT_EQ(backward_grid(0, 132), 0);
  {
    ScopedEnv cap("TILEJIT_ATTENTION_BWD_CTAS", "3");
    EXPECT_EQ(backward_grid(4096, 132), 3);
    EXPECT_EQ(backward_grid(2, 132), 2);
  }
  {
    ScopedEnv cap("TILEJIT_ATTENTION_BWD_CTAS", "500");  // more than the SMs: the SMs
    EXPECT_EQ(backward_grid(4096, 132), 132);
  }
  {
    ScopedEnv cap("TILEJIT_ATTENTION_BWD_CTAS", "0");  // no cap
    EXPECT_EQ(backward_grid(4096, 132), 132);
  }
}

TEST(AttentionSchedule, BackwardGridRejectsBadCapsAndCounterOverflow) {
  for (const char* bad : {"-1", "3x", "abc", "2000000"}) {
    ScopedEnv cap("TILEJIT_ATTENTION_BWD_CTAS", bad);
    const std::string message = user_error_of(4096, 132);
    EXPECT_NE(message.find("TILEJIT_ATTENTION_BWD_CTAS"), std::string::npos) << bad;
    EXPECT_NE(message.find(bad), std::string::npos) << message;
  }
  // Each CTA takes one index past the last item: items + CTAs must stay within an int.
  EXPECT_EQ(user_error_of(INT_MAX - 132, 132), "");
  EXPECT_NE(user_error_of(INT_MAX - 131, 132).find("work items"), std::string::npos);
  EXPECT_NE(user_error_of(int64_t{1} << 40, 132).find("work items"), std::string::npos);
}

}  // namespace
}  // namespace tilejit::attention_schedule
