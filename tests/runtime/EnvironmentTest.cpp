// The measuring settings read from the environment (runtime/Environment.h): whole numbers in
// range are taken, anything else is an error naming the variable; and the fused loss's row group
// (runtime/LinearCeState.h), about sqrt(SMs) unless TILEJIT_CE_GROUP sets it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "compiler/Error.h"
#include "runtime/Environment.h"
#include "runtime/LinearCeState.h"
#include "tests/runtime/ScopedEnv.h"

namespace tilejit {
namespace {

using linear_ce::shared_tiles_group;
using test::ScopedEnv;
constexpr const char* kName = "TILEJIT_TEST_SETTING";

std::string error_of(const char* value) {
  ScopedEnv env(kName, value);
  try {
    env_integer(kName, -3, 40, 17);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(Environment, IntegerInRangeIsTakenAndUnsetOrEmptyGivesTheDefault) {
  ASSERT_EQ(std::getenv(kName), nullptr);
  EXPECT_EQ(env_integer(kName, -3, 40, 17), 17);
  {
    ScopedEnv env(kName, "");
    EXPECT_EQ(env_integer(kName, -3, 40, 17), 17);
  }
  for (const auto& [text, value] : {std::pair{"-3", -3}, {"0", 0}, {"40", 40}, {"+12", 12}}) {
    ScopedEnv env(kName, text);
    EXPECT_EQ(env_integer(kName, -3, 40, 17), value) << text;
  }
}

TEST(Environment, AnythingElseIsAnErrorNamingTheVariable) {
  for (const char* bad : {"-4", "41", "7x", "x", "1.5", " 3", "99999999999999999999"}) {
    const std::string message = error_of(bad);
    EXPECT_NE(message.find(kName), std::string::npos) << bad;
    EXPECT_NE(message.find("from -3 to 40"), std::string::npos) << bad << ": " << message;
  }
}

TEST(Environment, LossRowGroupIsAboutSqrtOfTheSmsUnlessSet) {
  ASSERT_EQ(std::getenv("TILEJIT_CE_GROUP"), nullptr);
  EXPECT_EQ(shared_tiles_group(132), 11);
  EXPECT_EQ(shared_tiles_group(144), 12);
  EXPECT_EQ(shared_tiles_group(78), 9);
  EXPECT_EQ(shared_tiles_group(1), 1);
  EXPECT_EQ(shared_tiles_group(0), 1);
  {
    ScopedEnv env("TILEJIT_CE_GROUP", "6");
    EXPECT_EQ(shared_tiles_group(132), 6);
  }
  for (const char* bad : {"0", "1025", "six"}) {
    ScopedEnv env("TILEJIT_CE_GROUP", bad);
    EXPECT_THROW(shared_tiles_group(132), UserError) << bad;
  }
}

}  // namespace
}  // namespace tilejit
