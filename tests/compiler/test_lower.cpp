// The pipeline: validate -> simplify -> differentiate, with its dumps and timings.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "compiler/Error.h"
#include "compiler/Lower.h"
#include "compiler/Printer.h"
#include "dsl/Expr.h"
#include "tests/support/RandomProgram.h"

namespace tilejit {
namespace {

using namespace tilejit::dsl;

AttentionProgram doc_softcap() {
  AttentionProgram p;
  p.name = "doc_softcap";
  Buffer doc("doc", ElemType::I32, {"B", "S"});
  Param cap("cap", Type::F32);
  p.buffers.push_back({doc.name(), doc.elem(), doc.dims()});
  p.params.push_back({cap.name(), cap.type()});
  p.mask = (doc(b, q) == doc(b, kv) && q >= kv) && true;
  p.score = cap * tanh(score / cap) * 1.0;
  return p;
}

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_); }

 private:
  const char* name_;
};

TEST(Lower, AttentionPipeline) {
  AttentionProgram input = doc_softcap();
  LoweredAttention l = lower(input);
  EXPECT_EQ(print_expr(l.program.mask), "doc[b, q] == doc[b, kv] && q >= kv");
  EXPECT_EQ(print_expr(l.program.score), "cap * tanh(score / cap)");
  EXPECT_EQ(print_expr(l.score_grad),
            "cap * ((1.0 - tanh(score / cap) * tanh(score / cap)) * (1.0 / cap))");
  EXPECT_EQ(l.hash, program_hash(l.program));
  EXPECT_EQ(l.hash.size(), 64u);
  EXPECT_TRUE(l.mask_reads_buffers);
  EXPECT_FALSE(l.score_reads_buffers);
  EXPECT_FALSE(l.mask_is_true);
  EXPECT_FALSE(l.score_is_identity);
  EXPECT_FALSE(l.score_grad_is_one);
  // Deterministic, and two spellings that simplify alike share the identity.
  EXPECT_EQ(lower(input).hash, l.hash);
  EXPECT_EQ(lower(l.program).hash, l.hash);
}

TEST(Lower, TrivialProgramFlags) {
  AttentionProgram p;
  p.name = "dense";
  LoweredAttention l = lower(p);
  EXPECT_TRUE(l.mask_is_true);
  EXPECT_TRUE(l.score_is_identity);
  EXPECT_TRUE(l.score_grad_is_one);
  EXPECT_FALSE(l.mask_reads_buffers);
}

TEST(Lower, LossPipeline) {
  LossProgram p;
  p.name = "capped";
  p.params.push_back({"cap", Type::F32});
  p.segments.push_back({"base", 0, 32000, "lm_head", ""});
  Param cap("cap", Type::F32);
  p.logit = cap * tanh(logit / cap) + -0.0;
  LoweredLoss l = lower(p);
  EXPECT_EQ(print_expr(l.program.logit), "cap * tanh(logit / cap)");
  EXPECT_EQ(print_expr(l.logit_grad),
            "cap * ((1.0 - tanh(logit / cap) * tanh(logit / cap)) * (1.0 / cap))");
  EXPECT_EQ(l.hash, program_hash(l.program));
  EXPECT_FALSE(l.logit_is_identity);
  p.logit = logit;
  EXPECT_TRUE(lower(p).logit_grad_is_one);
}

TEST(Lower, InvalidProgramIsAUserError) {
  AttentionProgram p = doc_softcap();
  p.params.clear();
  EXPECT_THROW(lower(p), UserError);
  LossProgram l;
  l.name = "no_segments";
  EXPECT_THROW(lower(l), UserError);
}

TEST(Lower, DumpsTheIrAfterEveryPass) {
  ScopedEnv dump("TILEJIT_DUMP_IR", "all");
  ::testing::internal::CaptureStderr();
  lower(doc_softcap());
  std::string out = ::testing::internal::GetCapturedStderr();
  for (std::string pass : {"validate", "simplify", "differentiate"})
    EXPECT_NE(out.find("// tilejit: program 'doc_softcap' after pass '" + pass + "'"),
              std::string::npos)
        << out;
  EXPECT_NE(out.find("  mask = doc[b, q] == doc[b, kv] && q >= kv && true\n"), std::string::npos)
      << out;  // as validated, before simplification
  EXPECT_NE(out.find("  mask = doc[b, q] == doc[b, kv] && q >= kv\n"), std::string::npos) << out;
  EXPECT_NE(out.find("// score_grad = cap * ((1.0 - tanh"), std::string::npos) << out;
}

TEST(Lower, DumpsOnlyTheNamedPasses) {
  ScopedEnv dump("TILEJIT_DUMP_IR", "simplify,nothing");
  ::testing::internal::CaptureStderr();
  lower(doc_softcap());
  std::string out = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(out.find("after pass 'simplify'"), std::string::npos) << out;
  EXPECT_EQ(out.find("after pass 'validate'"), std::string::npos) << out;
  EXPECT_EQ(out.find("after pass 'differentiate'"), std::string::npos) << out;
}

TEST(Lower, QuietByDefaultAndTimesPassesOnRequest) {
  ::testing::internal::CaptureStderr();
  lower(doc_softcap());
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  ScopedEnv time("TILEJIT_TIME_PASSES", "1");
  ::testing::internal::CaptureStderr();
  lower(doc_softcap());
  std::string out = ::testing::internal::GetCapturedStderr();
  for (std::string pass : {"validate", "simplify", "differentiate"})
    EXPECT_NE(out.find("tilejit: pass " + pass), std::string::npos) << out;
  EXPECT_NE(out.find(" ms  program 'doc_softcap'"), std::string::npos) << out;
}

TEST(Lower, LowersEveryRandomProgram) {
  for (uint64_t seed = 0; seed < 500; ++seed) {
    std::mt19937_64 rng(seed);
    AttentionProgram p = testing::random_attention_program(rng);
    LossProgram l = testing::random_loss_program(rng);
    LoweredAttention la = lower(p);
    LoweredLoss ll = lower(l);
    EXPECT_EQ(la.score_grad.type(), Type::F32);
    EXPECT_EQ(ll.logit_grad.type(), Type::F32);
    EXPECT_EQ(la.hash, lower(p).hash);
  }
}

}  // namespace
}  // namespace tilejit
