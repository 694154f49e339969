#include "compiler/codegen/BodyWriter.h"

#include <fmt/format.h>

#include "compiler/Error.h"
#include "compiler/codegen/CudaOps.h"
#include "compiler/codegen/PositionRange.h"

namespace tilejit {

void BodyWriter::bind_part(std::string_view arg, const HookPart& part) {
  for (size_t i = 0; i < part.values.size(); ++i)
    bind(part.values[i], fmt::format("{}.v{}", arg, i));
  for (size_t i = 0; i < part.recips.size(); ++i)
    bind_recip(part.recips[i], fmt::format("{}.r{}", arg, i));
}

std::string BodyWriter::scope(const Expr& root, int indent) {
  if (available(root)) return operand(root);
  // The nodes this scope needs whatever happens: reachable from root without entering a
  // Select arm. Computing them in post-order over *all* edges puts each before every Select
  // whose arms read it, so the arms find them already available.
  std::unordered_set<const Node*> need{root.get()};
  std::vector<Expr> stack{root};
  while (!stack.empty()) {
    Expr e = stack.back();
    stack.pop_back();
    size_t unconditional = e.op() == Op::Select ? 1 : by_recip(e) ? 1 : e.num_args();
    for (size_t i = 0; i < unconditional; ++i) {
      const Expr& c = e.arg(i);
      if (!available(c) && need.insert(c.get()).second) stack.push_back(c);
    }
  }
  ir::visit_post_order(root, [&](const Expr& e) {
    if (need.contains(e.get())) emit(e, indent);
  });
  return operand(root);
}

std::string BodyWriter::member(const Expr& e) const {
  if (e.op() != Op::Param && e.op() != Op::Load) return {};
  auto it = members_.find(e->name);
  TILEJIT_INTERNAL_CHECK(it != members_.end(), "{} is not declared by the program", e->name);
  return it->second;
}

std::string BodyWriter::operand(const Expr& e) const {
  if (ir::is_leaf(e)) return cuda::render(e, {}, member(e));
  return temps_.at(e.get());
}

void BodyWriter::line(int indent, std::string_view text) {
  out_.append(static_cast<size_t>(indent), ' ');
  out_ += text;
  out_ += '\n';
}

void BodyWriter::define(const Expr& e, std::string name) {
  temps_.emplace(e.get(), std::move(name));
  defined_.push_back(e.get());
}

void BodyWriter::emit(const Expr& e, int indent) {
  std::string t = fmt::format("t{}", next_temp_++);
  std::string_view type = cuda::type_spelling(e.type());
  if (e.op() == Op::Select && !(available(e.arg(1)) && available(e.arg(2)))) {
    line(indent, fmt::format("{} {};", type, t));
    line(indent, fmt::format("if ({}) {{", operand(e.arg(0))));
    arm(e.arg(1), t, indent + 2);
    line(indent, "} else {");
    arm(e.arg(2), t, indent + 2);
    line(indent, "}");
  } else if (small_ints_ && small_int_to_float(e)) {
    line(indent, fmt::format("const float {} = tj_i2f_small({});", t, operand(e.arg(0))));
  } else if (by_recip(e)) {
    line(indent, fmt::format("const {} {} = tj_fdiv_recip({}, {});", type, t, operand(e.arg(0)),
                             recips_.at(e.arg(1).get())));
  } else {
    std::vector<std::string> args;
    for (const Expr& a : e->args) args.push_back(operand(a));
    line(indent, fmt::format("const {} {} = {};", type, t, cuda::render(e, args, member(e))));
  }
  define(e, std::move(t));
}

void BodyWriter::arm(const Expr& e, const std::string& result, int indent) {
  size_t mark = defined_.size();
  std::string value = scope(e, indent);
  line(indent, fmt::format("{} = {};", result, value));
  while (defined_.size() > mark) {
    temps_.erase(defined_.back());
    defined_.pop_back();
  }
}

}  // namespace tilejit
