#include "compiler/codegen/HookSplit.h"

#include <algorithm>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

namespace tilejit {

namespace {

// The variables that tell a hook's parts apart, and the ones each part may read: a subexpression
// belongs to the first part that may read every one of `vars` it reads, to none (the per-element
// rest) otherwise. Variables not in `vars` (b and h of an attention hook) may be read by any part.
struct PartPlan {
  std::vector<std::string_view> vars;
  std::vector<std::vector<std::string_view>> parts;
};

constexpr int kElement = -1;

class Splitter {
 public:
  explicit Splitter(const PartPlan& plan) : vars_(plan.vars), out_(plan.parts.size()) {
    for (const auto& part : plan.parts) {
      unsigned allowed = 0;
      for (std::string_view v : part) allowed |= bit(v);
      allowed_.push_back(allowed);
    }
  }

  std::vector<HookPart> run(const Expr& root) {
    if (!ir::is_leaf(root) && place(root) != kElement)
      add(out_[place(root)].values, root);
    else if (!ir::is_leaf(root))
      walk(root);
    return std::move(out_);
  }

 private:
  unsigned bit(std::string_view var) const {
    auto it = std::find(vars_.begin(), vars_.end(), var);
    return it == vars_.end() ? 0u : 1u << (it - vars_.begin());
  }

  unsigned deps(const Expr& e) {
    auto it = deps_.find(e.get());
    if (it != deps_.end()) return it->second;
    unsigned d = e.op() == Op::Var ? bit(e->name) : 0u;
    for (size_t i = 0; i < e.num_args(); ++i) d |= deps(e.arg(i));
    deps_.emplace(e.get(), d);
    return d;
  }

  int place(const Expr& e) {
    const unsigned d = deps(e);
    for (size_t p = 0; p < allowed_.size(); ++p)
      if (!(d & ~allowed_[p])) return static_cast<int>(p);
    return kElement;
  }

  static void add(std::vector<Expr>& list, const Expr& e) {
    if (std::none_of(list.begin(), list.end(), [&](const Expr& x) { return x.same_as(e); }))
      list.push_back(e);
  }

  // Visits an element node's operands: a part's subexpression becomes a field, a divisor in a
  // part a reciprocal, an element operand is walked in turn.
  void walk(const Expr& e) {
    if (!seen_.insert(e.get()).second) return;
    for (size_t i = 0; i < e.num_args(); ++i) {
      const Expr& a = e.arg(i);
      const int p = place(a);
      if (i == 1 && e.op() == Op::Div && e.type() == Type::F32 && p != kElement) {
        add(out_[p].recips, a);
      } else if (p == kElement) {
        walk(a);
      } else if (!ir::is_leaf(a)) {
        add(out_[p].values, a);
      }
    }
  }

  std::vector<std::string_view> vars_;
  std::vector<unsigned> allowed_;  // per part, the bits of the variables it may read
  std::vector<HookPart> out_;
  std::unordered_map<const Node*, unsigned> deps_;
  std::unordered_set<const Node*> seen_;
};

bool holds(const std::vector<Expr>& list, const Expr& e) {
  return std::any_of(list.begin(), list.end(), [&](const Expr& x) { return x.same_as(e); });
}

bool is_f32_div(const Expr& e) { return e.op() == Op::Div && e.type() == Type::F32; }

}  // namespace

HookSplit split_hook(const Expr& body) {
  std::vector<HookPart> parts =
      Splitter({{var::q, var::kv, var::score}, {{var::q}, {var::kv}}}).run(body);
  return {std::move(parts[0].values), std::move(parts[1].values), std::move(parts[0].recips),
          std::move(parts[1].recips)};
}

LossHookSplit split_loss_hook(const Expr& body) {
  std::vector<HookPart> parts =
      Splitter({{var::logit, var::row, var::id}, {{}, {var::row}}}).run(body);
  return {std::move(parts[0]), std::move(parts[1])};
}

bool divides_by_part_recip(const HookSplit& split, const Expr& div) {
  return is_f32_div(div) &&
         (holds(split.q_recips, div.arg(1)) || holds(split.kv_recips, div.arg(1)));
}

bool divides_by_part_recip(const LossHookSplit& split, const Expr& div) {
  return is_f32_div(div) &&
         (holds(split.constant.recips, div.arg(1)) || holds(split.row.recips, div.arg(1)));
}

}  // namespace tilejit
