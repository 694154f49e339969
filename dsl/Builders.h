// Fluent builders for attention and loss programs. build() validates the program
// (compiler/Validate.h: names, declarations, types, variables, layouts, loss terms) and raises a
// UserError naming the program; the text-form parser builds through them too, so a program is
// valid the same way whichever way it was written.
//
//   auto doc = dsl::Buffer("doc", ElemType::I32, {"B", "S"});
//   AttentionProgram p = AttentionBuilder("doc_causal")
//                            .buffer(doc)
//                            .mask(doc(b, q) == doc(b, kv) && q >= kv)
//                            .build();
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/Program.h"
#include "compiler/Validate.h"
#include "dsl/Expr.h"

namespace tilejit {

class AttentionBuilder {
 public:
  explicit AttentionBuilder(std::string name);

  AttentionBuilder& buffer(const dsl::Buffer& b);
  AttentionBuilder& buffer(BufferDecl b);
  AttentionBuilder& param(const dsl::Param& p);
  AttentionBuilder& param(ParamDecl p);
  AttentionBuilder& mask(Expr m);   // bool over b, h, q, kv; default `true`
  AttentionBuilder& score(Expr s);  // f32 over score, b, h, q, kv; default `score`

  // Checks the whole program and returns it.
  AttentionProgram build() const;

 private:
  AttentionProgram p_;
};

class LossBuilder {
 public:
  explicit LossBuilder(std::string name);

  LossBuilder& buffer(const dsl::Buffer& b);
  LossBuilder& buffer(BufferDecl b);
  LossBuilder& param(const dsl::Param& p);
  LossBuilder& param(ParamDecl p);
  // Global ids [begin, end) are rows of `weight` (and of `bias`, when named). Segments are
  // added in increasing order of `begin`.
  LossBuilder& segment(std::string name, int64_t begin, int64_t end, std::string weight,
                       std::string bias = "");
  LossBuilder& logit(Expr l);  // f32 over logit, row, id; default `logit`
  LossBuilder& label_smoothing(double eps);
  LossBuilder& z_loss(double lambda);
  // (1-alpha)*CE + alpha*KL(teacher || student) at temperature T; an empty teacher layout means
  // the student's.
  LossBuilder& kl(double alpha, double temperature, std::vector<Segment> teacher_segments = {});
  LossBuilder& ignore_index(int64_t i);
  LossBuilder& reduction(Reduction r);

  LossProgram build() const;

 private:
  LossProgram p_;
};

}  // namespace tilejit
