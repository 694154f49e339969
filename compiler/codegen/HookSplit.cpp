#include "compiler/codegen/HookSplit.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

namespace tilejit {

namespace {

enum Dep : unsigned { kQ = 1, kKv = 2, kScore = 4 };

enum class Place { Q, Kv, Element };

class Splitter {
 public:
  HookSplit run(const Expr& root) {
    if (!ir::is_leaf(root) && place(root) != Place::Element)
      add(place(root) == Place::Q ? out_.q_values : out_.kv_values, root);
    else if (!ir::is_leaf(root))
      walk(root);
    return std::move(out_);
  }

 private:
  unsigned deps(const Expr& e) {
    auto it = deps_.find(e.get());
    if (it != deps_.end()) return it->second;
    unsigned d = 0;
    if (e.op() == Op::Var) {
      if (e->name == var::q) d = kQ;
      if (e->name == var::kv) d = kKv;
      if (e->name == var::score) d = kScore;
    }
    for (size_t i = 0; i < e.num_args(); ++i) d |= deps(e.arg(i));
    deps_.emplace(e.get(), d);
    return d;
  }

  Place place(const Expr& e) {
    unsigned d = deps(e);
    if (!(d & (kKv | kScore))) return Place::Q;
    if (!(d & (kQ | kScore))) return Place::Kv;
    return Place::Element;
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
      Place p = place(a);
      if (i == 1 && e.op() == Op::Div && e.type() == Type::F32 && p != Place::Element) {
        add(p == Place::Q ? out_.q_recips : out_.kv_recips, a);
      } else if (p == Place::Element) {
        walk(a);
      } else if (!ir::is_leaf(a)) {
        add(p == Place::Q ? out_.q_values : out_.kv_values, a);
      }
    }
  }

  HookSplit out_;
  std::unordered_map<const Node*, unsigned> deps_;
  std::unordered_set<const Node*> seen_;
};

bool holds(const std::vector<Expr>& list, const Expr& e) {
  return std::any_of(list.begin(), list.end(), [&](const Expr& x) { return x.same_as(e); });
}

}  // namespace

HookSplit split_hook(const Expr& body) { return Splitter().run(body); }

bool divides_by_part_recip(const HookSplit& split, const Expr& div) {
  if (div.op() != Op::Div || div.type() != Type::F32) return false;
  return holds(split.q_recips, div.arg(1)) || holds(split.kv_recips, div.arg(1));
}

}  // namespace tilejit
