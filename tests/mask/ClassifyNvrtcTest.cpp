// The GPU tile classifier must compile: the interval lowering of every standard program, of
// mask-shaped random programs and of general random programs, with the classify_tiles.cuh
// template, compiled by NVRTC for sm_80 and sm_90a without warnings. Needs NVRTC, no GPU.
#include <gtest/gtest.h>

#include <random>

#include "compiler/Error.h"
#include "compiler/Lower.h"
#include "compiler/Printer.h"
#include "compiler/codegen/IntervalCodegen.h"
#include "dsl/Expr.h"
#include "dsl/Stdlib.h"
#include "kernels_templates/Embedded.h"
#include "runtime/Nvrtc.h"
#include "tests/mask/MaskPrograms.h"
#include "tests/support/RandomProgram.h"

namespace tilejit::testing {
namespace {

CompileRequest request(const ClassifySource& src, const std::string& arch) {
  CompileRequest r;
  r.program_name = src.cuda.file_name;
  r.source = src.cuda.source;
  for (const std::string& h : src.cuda.headers) {
    std::string_view text = embedded_template(h);
    EXPECT_FALSE(text.empty()) << "no embedded template " << h;
    r.headers.emplace_back(h, std::string(text));
  }
  r.options = {"-std=c++17"};
  r.arch = arch;
  return r;
}

void compile(const AttentionProgram& p, const std::string& what) {
  ClassifySource src;
  try {
    src = generate_classify_tiles(lower(p).program);
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": " << e.what() << " generating for `" << print_expr(p.mask) << "`";
    return;
  }
  for (const char* arch : {"sm_80", "sm_90a"}) {
    try {
      CompileResult r = nvrtc_compile(request(src, arch));
      EXPECT_FALSE(r.cubin.empty()) << what;
      EXPECT_EQ(r.log.find("warning"), std::string::npos) << what << " (" << arch << "):\n"
                                                          << r.log << "\n"
                                                          << src.cuda.source;
    } catch (const std::exception& e) {
      ADD_FAILURE() << what << " (" << arch << "):\n" << e.what();
      return;
    }
  }
}

TEST(ClassifyNvrtc, StandardProgramsCompile) {
  for (const AttentionProgram& p : stdlib::standard_attention_programs()) compile(p, p.name);
}

TEST(ClassifyNvrtc, GeneratedCodeReads) {
  AttentionProgram p;
  p.name = "causal";
  p.mask = stdlib::causal();
  ClassifySource src = generate_classify_tiles(lower(p).program);
  EXPECT_NE(src.cuda.source.find("tj_iv_cmp<kTjGe>"), std::string::npos) << src.cuda.source;
  EXPECT_NE(src.cuda.source.find("classify_rows_kernel<TjIntervalProgram>"), std::string::npos);
  EXPECT_TRUE(src.summarise_entries.empty());
  EXPECT_TRUE(src.summary_level_entry.empty());

  // A buffer read: a summary entry for it and the range-table level entry, both in the source.
  dsl::Buffer doc("doc", ElemType::I32, {"B", "S"});
  p.mask = stdlib::document(doc) && stdlib::causal();
  p.buffers.push_back({"doc", ElemType::I32, {"B", "S"}});
  src = generate_classify_tiles(lower(p).program);
  ASSERT_EQ(src.summarise_entries.size(), 1u);
  EXPECT_NE(src.cuda.source.find(src.summarise_entries[0]), std::string::npos);
  ASSERT_FALSE(src.summary_level_entry.empty());
  EXPECT_NE(src.cuda.source.find(src.summary_level_entry), std::string::npos);
  compile(p, "document_causal");
}

TEST(ClassifyNvrtc, RandomProgramsCompile) {
  std::mt19937_64 rng(99);
  for (int i = 0; i < 8; ++i) {
    AttentionProgram p = random_mask_program(rng, 3);
    compile(p, "mask-shaped #" + std::to_string(i));
  }
  for (int i = 0; i < 6;) {
    AttentionProgram p = random_attention_program(rng);
    try {
      lower(p);
    } catch (const UserError&) {
      continue;
    }
    compile(p, "random #" + std::to_string(i++));
  }
}

}  // namespace
}  // namespace tilejit::testing
