#include "compiler/codegen/IntervalCodegen.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "compiler/Error.h"
#include "compiler/Printer.h"
#include "compiler/codegen/ArgLayout.h"

namespace tilejit {

namespace {

std::string_view cmp_name(Op op) {
  switch (op) {
    case Op::Eq: return "kTjEq";
    case Op::Ne: return "kTjNe";
    case Op::Lt: return "kTjLt";
    case Op::Le: return "kTjLe";
    case Op::Gt: return "kTjGt";
    case Op::Ge: return "kTjGe";
    default: internal_error("{} is not a comparison", op_name(op));
  }
}

std::string_view int_function(Op op) {
  switch (op) {
    case Op::Add: return "tj_iv_add";
    case Op::Sub: return "tj_iv_sub";
    case Op::Mul: return "tj_iv_mul";
    case Op::Div: return "tj_iv_div";
    case Op::Mod: return "tj_iv_mod";
    case Op::Min: return "tj_iv_min";
    case Op::Max: return "tj_iv_max";
    case Op::Neg: return "tj_iv_neg";
    case Op::Abs: return "tj_iv_abs";
    default: internal_error("{} is not an i32 operation", op_name(op));
  }
}

std::string_view value_type(Type t) {
  switch (t) {
    case Type::Bool: return "TjTri";
    case Type::I32: return "TjIv";
    case Type::F32: return "TjFv";
  }
  return "";
}

int var_slot(const std::string& n) {
  if (n == var::b) return 0;
  if (n == var::h) return 1;
  if (n == var::q) return 2;
  if (n == var::kv) return 3;
  return -1;
}

// The i32 buffers a mask reads, in first-read order: the ones that need summaries.
std::vector<std::string> summarised_buffers(const Expr& mask) {
  std::vector<std::string> out;
  ir::visit_post_order(mask, [&](const Expr& n) {
    if (n.op() == Op::Load && n.type() == Type::I32 &&
        std::find(out.begin(), out.end(), n->name) == out.end())
      out.push_back(n->name);
  });
  return out;
}

// Writes one SSA line per node; f32 nodes are untracked and spelled inline as TjFv{}.
class IntervalWriter {
 public:
  IntervalWriter(const AttentionProgram& prog, const ArgLayout& layout)
      : prog_(prog), layout_(layout), buffers_(summarised_buffers(prog.mask)) {}

  std::string body() {
    mark_needed(prog_.mask);
    ir::visit_post_order(prog_.mask, [&](const Expr& n) {
      if (needed_.count(n.get())) node(n);
    });
    out_ += fmt::format("    return {};\n", names_.at(prog_.mask.get()));
    return out_;
  }

 private:
  const std::string& name(const Expr& e) const { return names_.at(e.get()); }

  // The nodes whose interval values are read: f32 values are not computed, so neither are the
  // operands only they (or comparisons of them) read.
  void mark_needed(const Expr& n) {
    if (!needed_.insert(n.get()).second || n.type() == Type::F32) return;
    if (is_comparison(n.op()) && n.arg(0).type() == Type::F32) return;
    if (n.op() == Op::Cast && n.arg(0).type() == Type::F32) return;
    for (const Expr& a : n->args) mark_needed(a);
  }

  void define(const Expr& n, const std::string& value, std::string_view comment = {}) {
    std::string t = fmt::format("t{}", count_++);
    out_ += fmt::format("    const {} {} = {};", value_type(n.type()), t, value);
    if (!comment.empty()) out_ += fmt::format("  // {}", comment);
    out_ += '\n';
    names_[n.get()] = t;
  }

  int param_offset(const std::string& param) const {
    const ArgField* f = layout_.find(param);
    TILEJIT_INTERNAL_CHECK(f != nullptr, "param '{}' is not in the argument layout", param);
    return static_cast<int>(f->offset);
  }

  void node(const Expr& n) {
    if (n.type() == Type::F32) {  // f32 values carry nothing on the GPU
      names_[n.get()] = "TjFv{}";
      return;
    }
    switch (n.op()) {
      case Op::ConstBool: return define(n, n->ival ? "kTjTrue" : "kTjFalse");
      case Op::ConstInt: return define(n, fmt::format("tj_iv_const({}LL)", n->ival));
      case Op::Param:
        return define(n, fmt::format("tj_iv_const(tj_arg<int>(a, {}))", param_offset(n->name)),
                      fmt::format("param {}", n->name));
      case Op::Var: {
        int slot = var_slot(n->name);
        return define(n, slot < 0 ? "tj_iv_top()" : fmt::format("tj_iv_var(box, {})", slot),
                      n->name);
      }
      case Op::Load: return load(n);
      case Op::Cast: {
        Type from = n.arg(0).type();
        if (from == n.type()) return define(n, name(n.arg(0)));
        return define(n, fmt::format("{}({})", n.type() == Type::Bool ? "tj_tri_of" : "tj_iv_of",
                                     from == Type::F32 ? "TjFv{}" : name(n.arg(0))));
      }
      case Op::Not: return define(n, fmt::format("tj_tri_not({})", name(n.arg(0))));
      case Op::And:
      case Op::Or:
        return define(n, fmt::format("tj_tri_{}({}, {})", n.op() == Op::And ? "and" : "or",
                                     name(n.arg(0)), name(n.arg(1))));
      case Op::Select:
        return define(n, fmt::format("tj_select({}, {}, {})", name(n.arg(0)), name(n.arg(1)),
                                     name(n.arg(2))));
      default: break;
    }
    if (is_comparison(n.op())) return compare(n);
    if (n.num_args() == 1)
      return define(n, fmt::format("{}({}, box)", int_function(n.op()), name(n.arg(0))));
    define(n, fmt::format("{}({}, {}, box)", int_function(n.op()), name(n.arg(0)), name(n.arg(1))));
  }

  void compare(const Expr& n) {
    const Expr& x = n.arg(0);
    const Expr& y = n.arg(1);
    std::string comment = print_expr(n);
    if (comment.size() > 80) comment = comment.substr(0, 77) + "...";
    switch (x.type()) {
      case Type::F32: return define(n, "kTjMaybe", comment);
      case Type::Bool:
        return define(n, fmt::format("tj_tri_cmp<{}>({}, {})", cmp_name(n.op()), name(x), name(y)),
                      comment);
      case Type::I32:
        if (x.same_as(y)) {  // one node on both sides: equal everywhere
          bool eq = n.op() == Op::Eq || n.op() == Op::Le || n.op() == Op::Ge;
          return define(n, eq ? "kTjTrue" : "kTjFalse", comment);
        }
        return define(n,
                      fmt::format("tj_iv_cmp<{}>({}, {}, box)", cmp_name(n.op()), name(x), name(y)),
                      comment);
    }
  }

  void load(const Expr& n) {
    auto it = std::find(buffers_.begin(), buffers_.end(), n->name);
    TILEJIT_INTERNAL_CHECK(it != buffers_.end(), "buffer '{}' has no summary", n->name);
    std::string ix = fmt::format("ix{}", count_);
    std::vector<std::string> args;
    for (const Expr& a : n->args) args.push_back(name(a));
    if (args.empty()) args.push_back("tj_iv_const(0)");
    out_ +=
        fmt::format("    const TjIv {}[{}] = {{{}}};\n", ix, args.size(), fmt::join(args, ", "));
    define(n, fmt::format("tj_iv_load(s.s{}, {})", it - buffers_.begin(), ix),
           fmt::format("{}[...]", n->name));
  }

  const AttentionProgram& prog_;
  const ArgLayout& layout_;
  std::vector<std::string> buffers_;
  std::unordered_map<const Node*, std::string> names_;
  std::unordered_set<const Node*> needed_;
  std::string out_;
  int count_ = 0;
};

int buffer_rank(const AttentionProgram& prog, const std::string& name) {
  const BufferDecl* d = prog.find_buffer(name);
  TILEJIT_INTERNAL_CHECK(d != nullptr, "buffer '{}' is not declared", name);
  return static_cast<int>(d->dims.size());
}

}  // namespace

std::string generate_interval_hooks(const AttentionProgram& prog) {
  ArgLayout layout = arg_layout(prog);
  std::string s =
      "// Summaries of the i32 buffers the mask reads (kernels_templates/classify_tiles.cuh).\n";
  s += "struct TjSummaries {\n";
  std::vector<std::string> buffers = summarised_buffers(prog.mask);
  for (size_t k = 0; k < buffers.size(); ++k)
    s += fmt::format("  tjk::TjSummary<{}> s{};  // {}\n", buffer_rank(prog, buffers[k]), k,
                     buffers[k]);
  s += "};\n\n";
  s += "struct TjIntervalProgram {\n";
  s += "  // The mask over a box: kTjTrue (all kept), kTjFalse (all masked) or kTjMaybe.\n";
  s += "  __device__ static tjk::TjTri mask_box(const TjArgs& a, const TjSummaries& s,\n";
  s += "                                        const tjk::TjBox& box) {\n";
  s += "    using namespace tjk;\n";
  s += "    (void)a;\n    (void)s;\n    (void)box;\n";
  s += IntervalWriter(prog, layout).body();
  s += "  }\n};\n";
  return s;
}

ClassifySource generate_classify_tiles(const AttentionProgram& prog) {
  ClassifySource out;
  std::string hash = program_hash(prog).substr(0, 16);
  ArgLayout layout = arg_layout(prog);
  CudaSource& c = out.cuda;
  c.entry = fmt::format("tj_classify_rows_{}", hash);
  c.file_name = c.entry + ".cu";
  c.headers = {"common.cuh", "range_table.cuh", "row_bisection.cuh", "classify_tiles.cuh"};
  std::string& s = c.source;
  s += fmt::format("// Generated by tilejit: tile classifier for program \"{}\" (sha256 {}).\n",
                   prog.name, program_hash(prog));
  s += "#include \"common.cuh\"\n#include \"classify_tiles.cuh\"\n\n";
  s += generate_args_struct(layout);
  s += '\n';
  s += generate_interval_hooks(prog);
  s += fmt::format(
      "\nextern \"C\" __global__ void {}(const __grid_constant__ tjk::ClassifyRowsParams p,\n"
      "    const __grid_constant__ TjArgs a, const __grid_constant__ TjSummaries s) {{\n"
      "  tjk::classify_rows_kernel<TjIntervalProgram>(p, a, s);\n"
      "}}\n",
      c.entry);
  out.summarised_buffers = summarised_buffers(prog.mask);
  for (size_t k = 0; k < out.summarised_buffers.size(); ++k) {
    const std::string& name = out.summarised_buffers[k];
    std::string entry = fmt::format("tj_summarise_{}_{}", hash, k);
    const ArgField* f = layout.find(name);
    TILEJIT_INTERNAL_CHECK(f != nullptr, "buffer '{}' is not in the argument layout", name);
    s += fmt::format(
        "\n// Summary of buffer {}.\n"
        "extern \"C\" __global__ void {}(const __grid_constant__ tjk::SummariseParams p,\n"
        "    const __grid_constant__ TjArgs a) {{\n"
        "  tjk::summarise_kernel(p, tjk::tj_arg<TjBuffer<int, {}>>(a, {}));\n"
        "}}\n",
        name, entry, f->rank, f->offset);
    out.summarise_entries.push_back(std::move(entry));
  }
  if (!out.summarised_buffers.empty()) {
    out.summary_level_entry = fmt::format("tj_summary_level_{}", hash);
    s += fmt::format(
        "\n// One level of a summary's range table.\n"
        "extern \"C\" __global__ void {}(const __grid_constant__ tjk::SummaryLevelParams p) {{\n"
        "  tjk::summary_level_kernel(p);\n"
        "}}\n",
        out.summary_level_entry);
  }
  c.layout = std::move(layout);
  return out;
}

}  // namespace tilejit
