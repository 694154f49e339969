#include "compiler/IR.h"

#include <bit>
#include <cmath>
#include <limits>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "compiler/Error.h"

namespace tilejit {

std::string_view type_name(Type t) {
  switch (t) {
    case Type::Bool: return "bool";
    case Type::I32: return "i32";
    case Type::F32: return "f32";
  }
  return "?";
}

std::string_view elem_type_name(ElemType t) {
  switch (t) {
    case ElemType::I32: return "i32";
    case ElemType::F32: return "f32";
    case ElemType::BF16: return "bf16";
    case ElemType::F16: return "f16";
  }
  return "?";
}

Type value_type(ElemType t) { return t == ElemType::I32 ? Type::I32 : Type::F32; }

size_t elem_size(ElemType t) {
  return (t == ElemType::BF16 || t == ElemType::F16) ? 2 : 4;
}

namespace {
struct OpInfo {
  std::string_view name;
  int arity;
  std::string_view spelling;
};
constexpr OpInfo kOps[] = {
#define TILEJIT_X(name, arity, spelling) {#name, arity, spelling},
    TILEJIT_IR_NODES(TILEJIT_X)
#undef TILEJIT_X
};
}  // namespace

std::string_view op_name(Op op) { return kOps[static_cast<int>(op)].name; }
std::string_view op_spelling(Op op) { return kOps[static_cast<int>(op)].spelling; }
int op_arity(Op op) { return kOps[static_cast<int>(op)].arity; }
bool is_comparison(Op op) { return op >= Op::Eq && op <= Op::Ge; }
bool is_transcendental(Op op) { return op >= Op::Exp && op <= Op::Rsqrt; }

namespace {

size_t hash_combine(size_t h, size_t v) {
  return h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
}

size_t structural_hash(const Node& n) {
  size_t h = std::hash<int>()(static_cast<int>(n.op));
  h = hash_combine(h, static_cast<size_t>(n.type));
  h = hash_combine(h, std::hash<int64_t>()(n.ival));
  h = hash_combine(h, std::hash<uint64_t>()(std::bit_cast<uint64_t>(n.fval)));
  h = hash_combine(h, std::hash<std::string>()(n.name));
  for (const Expr& a : n.args) h = hash_combine(h, a->hash);
  return h;
}

// Operands compare by identity: they are interned already.
bool shallow_equal(const Node& a, const Node& b) {
  if (a.op != b.op || a.type != b.type || a.ival != b.ival || a.name != b.name ||
      std::bit_cast<uint64_t>(a.fval) != std::bit_cast<uint64_t>(b.fval) ||
      a.args.size() != b.args.size())
    return false;
  for (size_t i = 0; i < a.args.size(); ++i)
    if (!a.args[i].same_as(b.args[i])) return false;
  return true;
}

// The intern table holds weak references: nodes die with their last Expr, and a bucket drops
// its expired entries whenever it is touched.
class InternTable {
 public:
  Expr intern(Node n) {
    n.hash = structural_hash(n);
    std::lock_guard<std::mutex> lock(mu_);
    auto& bucket = table_[n.hash];
    for (size_t i = 0; i < bucket.size();) {
      std::shared_ptr<const Node> live = bucket[i].lock();
      if (!live) {
        bucket[i] = std::move(bucket.back());
        bucket.pop_back();
        continue;
      }
      if (shallow_equal(*live, n)) return Expr(std::move(live));
      ++i;
    }
    auto node = std::make_shared<const Node>(std::move(n));
    bucket.push_back(node);
    if (++inserts_ % 65536 == 0) sweep();
    return Expr(std::move(node));
  }

 private:
  void sweep() {
    for (auto it = table_.begin(); it != table_.end();) {
      auto& bucket = it->second;
      std::erase_if(bucket, [](const std::weak_ptr<const Node>& w) { return w.expired(); });
      it = bucket.empty() ? table_.erase(it) : std::next(it);
    }
  }

  std::mutex mu_;
  std::unordered_map<size_t, std::vector<std::weak_ptr<const Node>>> table_;
  size_t inserts_ = 0;
};

InternTable& table() {
  static InternTable* t = new InternTable();  // never destroyed: Exprs may outlive statics
  return *t;
}

Expr intern(Op op, Type type, std::vector<Expr> args, int64_t ival = 0, double fval = 0,
            std::string name = {}) {
  Node n{op, type, ival, fval, std::move(name), std::move(args), 0};
  return table().intern(std::move(n));
}

}  // namespace

namespace ir {

Expr make_bool(bool v) { return intern(Op::ConstBool, Type::Bool, {}, v ? 1 : 0); }

Expr make_int(int64_t v) {
  TILEJIT_INTERNAL_CHECK(v >= std::numeric_limits<int32_t>::min() &&
                             v <= std::numeric_limits<int32_t>::max(),
                         "integer constant {} does not fit i32", v);
  return intern(Op::ConstInt, Type::I32, {}, v);
}

Expr make_float(double v) {
  double f = static_cast<double>(static_cast<float>(v));
  if (std::isnan(f)) f = std::numeric_limits<double>::quiet_NaN();  // one canonical NaN
  return intern(Op::ConstFloat, Type::F32, {}, 0, f);
}

Expr make_var(std::string_view name) {
  Type t = (name == var::score || name == var::logit) ? Type::F32 : Type::I32;
  return intern(Op::Var, t, {}, 0, 0, std::string(name));
}

Expr make_param(std::string_view name, Type t) {
  return intern(Op::Param, t, {}, 0, 0, std::string(name));
}

Expr make_load(std::string_view buffer, Type value_type, std::vector<Expr> indices) {
  for (const Expr& i : indices) TILEJIT_INTERNAL_CHECK(i.defined(), "undefined load index");
  return intern(Op::Load, value_type, std::move(indices), 0, 0, std::string(buffer));
}

Expr make_cast(Type to, Expr a) {
  TILEJIT_INTERNAL_CHECK(a.defined(), "cast of an undefined expression");
  return intern(Op::Cast, to, {std::move(a)});
}

Expr make(Op op, std::vector<Expr> args) {
  int arity = op_arity(op);
  TILEJIT_INTERNAL_CHECK(arity > 0 && op != Op::Cast, "ir::make cannot build {}", op_name(op));
  TILEJIT_INTERNAL_CHECK(static_cast<int>(args.size()) == arity, "{} takes {} operands, got {}",
                         op_name(op), arity, args.size());
  for (const Expr& a : args) TILEJIT_INTERNAL_CHECK(a.defined(), "undefined operand of {}", op_name(op));
  Type t;
  if (is_comparison(op) || op == Op::And || op == Op::Or || op == Op::Not)
    t = Type::Bool;
  else if (is_transcendental(op))
    t = Type::F32;
  else if (op == Op::Select)
    t = args[1].type();
  else
    t = args[0].type();
  return intern(op, t, std::move(args));
}

void visit_post_order(const Expr& root, const std::function<void(const Expr&)>& f) {
  std::unordered_set<const Node*> seen;
  // Iterative DFS: random programs can be deep.
  std::vector<std::pair<Expr, size_t>> stack{{root, 0}};
  seen.insert(root.get());
  while (!stack.empty()) {
    auto& [e, next] = stack.back();
    if (next < e.num_args()) {
      const Expr& child = e.arg(next++);
      if (seen.insert(child.get()).second) stack.push_back({child, 0});
      continue;
    }
    Expr done = e;
    stack.pop_back();
    f(done);
  }
}

Expr rebuild(const Expr& root, const std::function<Expr(const Expr&, std::vector<Expr>)>& f) {
  std::unordered_map<const Node*, Expr> done;
  visit_post_order(root, [&](const Expr& e) {
    std::vector<Expr> args;
    args.reserve(e.num_args());
    for (size_t i = 0; i < e.num_args(); ++i) args.push_back(done.at(e.arg(i).get()));
    done.emplace(e.get(), f(e, std::move(args)));
  });
  return done.at(root.get());
}

bool uses_var(const Expr& e, std::string_view name) {
  bool found = false;
  visit_post_order(e, [&](const Expr& n) { found |= (n.op() == Op::Var && n->name == name); });
  return found;
}

bool is_leaf(const Expr& e) {
  switch (e.op()) {
    case Op::ConstBool:
    case Op::ConstInt:
    case Op::ConstFloat:
    case Op::Var:
    case Op::Param: return true;
    default: return false;
  }
}

bool reads_buffers(const Expr& e) {
  bool found = false;
  visit_post_order(e, [&](const Expr& n) { found |= n.op() == Op::Load; });
  return found;
}

size_t dag_size(const Expr& e) {
  size_t n = 0;
  visit_post_order(e, [&](const Expr&) { ++n; });
  return n;
}

}  // namespace ir
}  // namespace tilejit
