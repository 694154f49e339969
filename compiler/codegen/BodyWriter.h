// Writes one generated hook body (compiler/codegen/CudaCodegen.h): SSA temporaries for the
// expression DAG's nodes in post-order, one line each, Select arms inside if/else scopes, reads
// of a hook part's fields where a node is bound to one.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "compiler/IR.h"
#include "compiler/codegen/HookSplit.h"

namespace tilejit {

class BodyWriter {
 public:
  // `members`: TjArgs member names by declared name.
  BodyWriter(std::string& out, const std::unordered_map<std::string, std::string>& members)
      : out_(out), members_(members) {}

  // i32 -> f32 casts of values proven within +-2^22 for positions below kPositionLimit use
  // tj_i2f_small (PositionRange.h); only for kernels launched under that bound.
  void convert_small_ints(bool on) { small_ints_ = on; }
  // `e` is available as `spelling` (a field of a hook part).
  void bind(const Expr& e, std::string spelling) { temps_.emplace(e.get(), std::move(spelling)); }
  // An f32 division by `divisor` multiplies by the reciprocal `recip` (a TjRecip).
  void bind_recip(const Expr& divisor, std::string recip) {
    recips_.emplace(divisor.get(), std::move(recip));
  }
  // A hook part's fields, read through the hook's argument `arg`: values as `<arg>.v<i>`,
  // reciprocals as `<arg>.r<i>`.
  void bind_part(std::string_view arg, const HookPart& part);

  // The spelling of the TjRecip bound to `divisor` (bind_recip).
  const std::string& recip_of(const Expr& divisor) const { return recips_.at(divisor.get()); }

  // Emits the statements computing `root` at `indent` and returns its operand spelling.
  std::string scope(const Expr& root, int indent);

 private:
  bool available(const Expr& e) const { return ir::is_leaf(e) || temps_.contains(e.get()); }
  bool by_recip(const Expr& e) const {
    return e.op() == Op::Div && e.type() == Type::F32 && recips_.contains(e.arg(1).get());
  }
  std::string member(const Expr& e) const;
  std::string operand(const Expr& e) const;
  void line(int indent, std::string_view text);
  void define(const Expr& e, std::string name);
  void emit(const Expr& e, int indent);
  // A Select arm: its own scope, whose temporaries are forgotten when it closes.
  void arm(const Expr& e, const std::string& result, int indent);

  std::string& out_;
  const std::unordered_map<std::string, std::string>& members_;
  std::unordered_map<const Node*, std::string> temps_;
  std::unordered_map<const Node*, std::string> recips_;  // divisor -> its TjRecip
  bool small_ints_ = false;
  std::vector<const Node*> defined_;
  int next_temp_ = 0;
};

}  // namespace tilejit
