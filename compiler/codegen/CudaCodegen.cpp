#include "compiler/codegen/CudaCodegen.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <unordered_map>
#include <unordered_set>

#include "compiler/Error.h"
#include "compiler/Printer.h"
#include "compiler/codegen/BodyWriter.h"
#include "compiler/codegen/CudaOps.h"
#include "compiler/codegen/HookSplit.h"
#include "compiler/codegen/ScoreFold.h"
#include "compiler/codegen/ScoreLog2Writer.h"

namespace tilejit {

namespace {

// Words a TjArgs member may not be called: C++ keywords and CUDA's own spellings.
const std::unordered_set<std::string_view>& reserved_words() {
  static const std::unordered_set<std::string_view> words = {
      "alignas",     "alignof",      "and",          "asm",       "auto",     "bool",
      "break",       "case",         "catch",        "char",      "class",    "const",
      "constexpr",   "const_cast",   "continue",     "decltype",  "default",  "delete",
      "do",          "double",       "dynamic_cast", "else",      "enum",     "explicit",
      "export",      "extern",       "false",        "float",     "for",      "friend",
      "goto",        "if",           "inline",       "int",       "long",     "mutable",
      "namespace",   "new",          "noexcept",     "not",       "nullptr",  "operator",
      "or",          "private",      "protected",    "public",    "register", "reinterpret_cast",
      "return",      "short",        "signed",       "sizeof",    "static",   "static_assert",
      "static_cast", "struct",       "switch",       "template",  "this",     "throw",
      "true",        "try",          "typedef",      "typeid",    "typename", "union",
      "unsigned",    "using",        "virtual",      "void",      "volatile", "while",
      "xor",         "concept",      "requires",     "char8_t",   "char16_t", "char32_t",
      "wchar_t",     "thread_local", "co_await",     "co_return", "co_yield", "consteval",
      "constinit"};
  return words;
}

bool usable_identifier(std::string_view s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  if (s.starts_with("_") || s.find("__") != std::string_view::npos) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  return !reserved_words().contains(s);
}

// TjArgs member names by declared name: the name itself when C++ allows it, else field<i>_.
std::unordered_map<std::string, std::string> member_names(const ArgLayout& layout) {
  std::unordered_map<std::string, std::string> names;
  for (size_t i = 0; i < layout.fields.size(); ++i) {
    const std::string& n = layout.fields[i].name;
    names[n] = usable_identifier(n) ? n : fmt::format("field{}_", i);
  }
  return names;
}

std::string_view storage_type(ElemType e) {
  switch (e) {
    case ElemType::I32: return "int";
    case ElemType::F32: return "float";
    case ElemType::BF16: return "TjBf16";
    case ElemType::F16: return "TjF16";
  }
  return "?";
}

// The file name `#line` directives give: the program's name, kept to safe characters.
std::string line_file(std::string_view program_name) {
  std::string s = program_name.empty() ? "program" : std::string(program_name);
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') c = '_';
  return s + ".tj";
}

// One-line canonical text of an expression for a comment, shortened when long.
std::string comment_text(const Expr& e) {
  std::string s = print_expr(e);
  std::replace(s.begin(), s.end(), '\n', ' ');
  std::replace(s.begin(), s.end(), '\\', '/');  // never a line continuation inside `//`
  if (s.size() > 160) s = s.substr(0, 157) + "...";
  return s;
}

struct HookSpec {
  std::string_view comment;  // "mask", "score", ...
  std::string_view result;   // "bool", "float"
  std::string_view name;     // "mask_mod"
  std::string_view params;   // after `const TjArgs& a`
  std::string_view call;     // the hook's own arguments after the parts: "b, h, q, kv"
};

// One part of a split hook as generated: `struct <name>`, the function computing it,
// `static <name> <function>(const TjArgs& a<params>)`, and the hook's parameter
// `const <name>& <arg>`.
struct PartSpec {
  std::string name;      // "MaskQ", "LogitConst"
  std::string function;  // "mask_q", "logit_const"
  std::string params;    // after `const TjArgs& a`: ", int b, int h, int q", "" or ", int row"
  std::string call;      // its arguments: "a, b, h, q"
  std::string arg;       // "qp"
  std::string position;  // the variable a part is computed per ("q", "kv"), "" for loss parts
};

// Whether `e` reads a buffer at an index that depends on variable `var` (a document id per
// position, not a per-batch length): a kernel computes such a part once per lane and shares it
// rather than once per position a thread holds; a part that does not depend on its position at
// all (a per-head slope, a reciprocal of a param) once per tile (kernels_templates/hook_parts.cuh).
bool gathers_by(const Expr& e, std::string_view var) {
  bool found = false;  // each node of the DAG once
  ir::visit_post_order(e, [&](const Expr& n) {
    if (!found && n.op() == Op::Load)
      for (size_t i = 0; i < n.num_args() && !found; ++i) found = ir::uses_var(n.arg(i), var);
  });
  return found;
}

void write_part(std::string& out, const PartSpec& spec, const HookPart& part, std::string_view file,
                const std::unordered_map<std::string, std::string>& members,
                bool positions_bounded) {
  out += fmt::format("  struct {} {{\n", spec.name);
  for (size_t i = 0; i < part.values.size(); ++i)
    out += fmt::format("    {} v{};  // {}\n", cuda::type_spelling(part.values[i].type()), i,
                       comment_text(part.values[i]));
  for (size_t i = 0; i < part.recips.size(); ++i)
    out += fmt::format("    TjRecip r{};  // 1 / ({})\n", i, comment_text(part.recips[i]));
  bool gathers = false, position_free = !spec.position.empty();
  for (const auto* list : {&part.values, &part.recips})
    for (const Expr& v : *list) {
      gathers = gathers || (!spec.position.empty() && gathers_by(v, spec.position));
      position_free = position_free && !ir::uses_var(v, spec.position);
    }
  if (gathers)
    out += fmt::format("    static constexpr bool kGathers = true;  // reads buffers per {}\n",
                       spec.position);
  else if (position_free && (!part.values.empty() || !part.recips.empty()))
    out += fmt::format("    static constexpr bool kPositionFree = true;  // the same at every {}\n",
                       spec.position);
  out += "  };\n";
  out += fmt::format("  __device__ __forceinline__ static {} {}(const TjArgs& a{}) {{\n", spec.name,
                     spec.function, spec.params);
  std::vector<std::string> fields;
  if (!part.values.empty() || !part.recips.empty()) {
    out += fmt::format("#line 1 \"{}\"\n", file);
    BodyWriter writer(out, members);
    writer.convert_small_ints(positions_bounded);
    for (const Expr& v : part.values) fields.push_back(writer.scope(v, 4));
    for (const Expr& r : part.recips)
      fields.push_back(fmt::format("tj_recip({})", writer.scope(r, 4)));
  }
  out += fmt::format("    return {{{}}};\n  }}\n", fmt::join(fields, ", "));
}

// A hook split into parts and its per-element rest (HookSplit.h): the part structs and the
// functions computing them, the hook reading them, and the hook of its own arguments alone,
// computing its parts.
void write_split_hook(std::string& out, const HookSpec& hook,
                      const std::vector<std::pair<PartSpec, HookPart>>& parts, const Expr& body,
                      std::string_view file,
                      const std::unordered_map<std::string, std::string>& members,
                      bool positions_bounded) {
  out += fmt::format("  // {} = {}\n", hook.comment, comment_text(body));
  std::vector<std::string> part_params, part_calls;
  for (const auto& [spec, part] : parts) {
    write_part(out, spec, part, file, members, positions_bounded);
    part_params.push_back(fmt::format("const {}& {}", spec.name, spec.arg));
    part_calls.push_back(fmt::format("{}({})", spec.function, spec.call));
  }
  out += fmt::format("  __device__ __forceinline__ static {} {}(const TjArgs& a, {}, {}) {{\n",
                     hook.result, hook.name, fmt::join(part_params, ", "), hook.params);
  out += fmt::format("#line 1 \"{}\"\n", file);
  BodyWriter writer(out, members);
  writer.convert_small_ints(positions_bounded);
  for (const auto& [spec, part] : parts) writer.bind_part(spec.arg, part);
  std::string value = writer.scope(body, 4);
  out += fmt::format("    return {};\n  }}\n", value);
  out += fmt::format(
      "  __device__ __forceinline__ static {} {}(const TjArgs& a, {}) {{\n"
      "    return {}(a, {}, {});\n  }}\n",
      hook.result, hook.name, hook.params, hook.name, fmt::join(part_calls, ", "), hook.call);
}

// An attention hook's parts (`<Part>Q`, `<Part>Kv`, computed by `<part>_q`, `<part>_kv`).
PartSpec attention_q_part(std::string_view part, std::string_view lower) {
  return {fmt::format("{}Q", part), fmt::format("{}_q", lower), ", int b, int h, int q",
          "a, b, h, q", "qp", "q"};
}
PartSpec attention_kv_part(std::string_view part, std::string_view lower) {
  return {fmt::format("{}Kv", part), fmt::format("{}_kv", lower), ", int b, int h, int kv",
          "a, b, h, kv", "kp", "kv"};
}

// Returns the split, which score_log2 binds the same parts from.
HookSplit write_attention_hook(std::string& out, const HookSpec& hook, std::string_view part,
                               std::string_view lower, const Expr& body, std::string_view file,
                               const std::unordered_map<std::string, std::string>& members,
                               bool positions_bounded) {
  HookSplit split = split_hook(body);
  write_split_hook(out, hook,
                   {{attention_q_part(part, lower), {split.q_values, split.q_recips}},
                    {attention_kv_part(part, lower), {split.kv_values, split.kv_recips}}},
                   body, file, members, positions_bounded);
  return split;
}

// A loss hook's parts (`<Part>Const`, `<Part>Row`, computed by `<part>_const`, `<part>_row`).
PartSpec loss_const_part(std::string_view part, std::string_view lower) {
  return {fmt::format("{}Const", part), fmt::format("{}_const", lower), "", "a", "cp", ""};
}
PartSpec loss_row_part(std::string_view part, std::string_view lower) {
  return {fmt::format("{}Row", part), fmt::format("{}_row", lower), ", int row", "a, row", "rp",
          ""};
}

void write_loss_hook(std::string& out, const HookSpec& hook, std::string_view part,
                     std::string_view lower, const Expr& body, std::string_view file,
                     const std::unordered_map<std::string, std::string>& members) {
  LossHookSplit split = split_loss_hook(body);
  write_split_hook(out, hook,
                   {{loss_const_part(part, lower), std::move(split.constant)},
                    {loss_row_part(part, lower), std::move(split.row)}},
                   body, file, members, false);
}

std::string flag(std::string_view name, bool value) {
  return fmt::format("  static constexpr bool {} = {};\n", name, value ? "true" : "false");
}

int count_lines(const std::string& s) {
  return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
}

CudaSource assemble(std::string_view program_name, const std::string& hash, ArgLayout layout,
                    const std::string& hooks, const KernelTemplate& tmpl) {
  CudaSource out;
  out.entry = fmt::format("tj_{}_{}", tmpl.variant, hash.substr(0, 16));
  out.file_name = out.entry + ".cu";
  // The generated TjArgs and hooks need the common layer, whatever the template includes.
  out.headers.emplace_back("common.cuh");
  for (std::string_view h : tmpl.headers)
    if (h != "common.cuh") out.headers.emplace_back(h);
  std::string& s = out.source;
  s += fmt::format("// Generated by tilejit: {} kernel for program \"{}\" (sha256 {}).\n",
                   tmpl.variant, program_name, hash);
  s += "#include \"common.cuh\"\n";
  if (tmpl.header != "common.cuh") s += fmt::format("#include \"{}\"\n", tmpl.header);
  s += '\n';
  s += generate_args_struct(layout);
  s += '\n';
  s += hooks;
  // The hooks' #line directives point into the program; what follows is this file again.
  s += fmt::format("#line {} \"{}\"\n\n", count_lines(s) + 2, out.file_name);
  s += fmt::format(
      "extern \"C\" __global__ void {}(const __grid_constant__ {} p,\n"
      "    const __grid_constant__ TjArgs a) {{\n"
      "  {}<TjProgram>(p, a);\n"
      "}}\n",
      out.entry, tmpl.params_type, tmpl.function);
  out.layout = std::move(layout);
  return out;
}

}  // namespace

bool score_uses_xu(const Expr& score) {
  bool uses = false;
  ir::visit_post_order(score, [&](const Expr& e) {
    switch (e.op()) {
      case Op::Exp: case Op::Exp2: case Op::Log: case Op::Log2: case Op::Tanh: case Op::Sqrt:
      case Op::Rsqrt: break;
      case Op::Div: if (e.type() == Type::F32) break; return;
      default: return;
    }
    uses = uses || ir::uses_var(e, var::score);
  });
  return uses;
}

std::string generate_args_struct(const ArgLayout& layout) {
  auto members = member_names(layout);
  std::string s =
      "// Captured values, packed by the host as compiler/codegen/ArgLayout.h lays them out.\n"
      "struct TjArgs {\n";
  for (const ArgField& f : layout.fields) {
    const std::string& m = members.at(f.name);
    switch (f.kind) {
      case ArgField::Kind::Buffer:
        s += fmt::format("  TjBuffer<{}, {}> {};  // {} : {}[{}]\n", storage_type(f.elem), f.rank,
                         m, f.name, elem_type_name(f.elem), fmt::join(f.dims, ", "));
        break;
      case ArgField::Kind::ParamF32: s += fmt::format("  float {};\n", m); break;
      case ArgField::Kind::ParamI32: s += fmt::format("  int {};\n", m); break;
    }
  }
  s += "};\n";
  s += fmt::format("static_assert(sizeof(TjArgs) == {}, \"TjArgs layout\");\n", layout.size);
  // NVRTC has no offsetof; size and alignment catch a layout that drifted from ArgLayout.
  s += fmt::format("static_assert(alignof(TjArgs) == {}, \"TjArgs layout\");\n", layout.alignment);
  return s;
}

std::string generate_hooks(const AttentionProgram& prog, const Expr& score_grad,
                           bool positions_bounded) {
  auto members = member_names(arg_layout(prog));
  std::string file = line_file(prog.name);
  const std::string_view index_params = "int b, int h, int q, int kv";
  const std::string score_params = fmt::format("float score, {}", index_params);
  std::string s = "struct TjProgram {\n";
  s += flag("kMaskIsTrue", prog.mask.op() == Op::ConstBool && prog.mask->ival == 1);
  const bool score_is_identity = is_score_var(prog.score);
  s += flag("kScoreIsIdentity", score_is_identity);
  s += flag("kMaskReadsBuffers", ir::reads_buffers(prog.mask));
  s += flag("kScoreUsesXu", score_uses_xu(prog.score));
  s += '\n';
  write_attention_hook(s, {"mask", "bool", "mask_mod", index_params, "b, h, q, kv"}, "Mask", "mask",
                       prog.mask, file, members, positions_bounded);
  s += '\n';
  const HookSplit score_split =
      write_attention_hook(s, {"score", "float", "score_mod", score_params, "score, b, h, q, kv"},
                           "Score", "score", prog.score, file, members, positions_bounded);
  if (!score_is_identity)
    write_score_log2(s, prog.score, score_split, {file, members, positions_bounded});
  s += '\n';
  if (score_grad.defined()) {
    s += flag("kGradReadsScore", ir::uses_var(score_grad, var::score));
    write_attention_hook(
        s, {"d score / d score", "float", "score_grad", score_params, "score, b, h, q, kv"}, "Grad",
        "grad", score_grad, file, members, positions_bounded);
    if (ir::uses_var(score_grad, var::score))
      write_score_log2_grad(s, prog.score, score_grad, {file, members, positions_bounded});
  } else {  // kernels name score_grad's part types whether or not they differentiate
    s += "  // no score_grad in this module\n";
    write_part(s, attention_q_part("Grad", "grad"), {}, file, members, false);
    write_part(s, attention_kv_part("Grad", "grad"), {}, file, members, false);
  }
  s += "};\n";
  return s;
}

std::string generate_hooks(const LossProgram& prog, const Expr& logit_grad) {
  auto members = member_names(arg_layout(prog));
  std::string file = line_file(prog.name);
  const std::string_view params = "float logit, int row, int id";
  const std::string_view call = "logit, row, id";
  std::string s = "struct TjProgram {\n";
  s += flag("kLogitIsIdentity", prog.logit.op() == Op::Var && prog.logit->name == var::logit);
  s += flag("kLogitReadsBuffers", ir::reads_buffers(prog.logit));
  // A KL term at temperature 1: z / T is z, and the kernels skip the tempered student's exps.
  s += flag("kKlTempered", prog.kl && prog.kl->temperature != 1);
  s += flag("kLabelSmoothing", prog.label_smoothing != 0);
  // Some segment, the student's or a KL teacher's, names a bias (the kernels read none otherwise).
  const auto has_bias = [](const std::vector<Segment>& segs) {
    return std::any_of(segs.begin(), segs.end(), [](const Segment& g) { return !g.bias.empty(); });
  };
  s += flag("kBias", has_bias(prog.segments) || (prog.kl && has_bias(prog.kl->teacher_segments)));
  s += '\n';
  write_loss_hook(s, {"logit", "float", "logit_mod", params, call}, "Logit", "logit", prog.logit,
                  file, members);
  s += '\n';
  if (logit_grad.defined()) {
    write_loss_hook(s, {"d logit / d logit", "float", "logit_grad", params, call}, "Grad", "grad",
                    logit_grad, file, members);
  } else {  // kernels name logit_grad's part types whether or not they differentiate
    s += "  // no logit_grad in this module\n";
    write_part(s, loss_const_part("Grad", "grad"), {}, file, members, false);
    write_part(s, loss_row_part("Grad", "grad"), {}, file, members, false);
  }
  s += "};\n";
  return s;
}

CudaSource generate_kernel(const AttentionProgram& prog, const Expr& score_grad,
                           const KernelTemplate& tmpl) {
  return assemble(prog.name, program_hash(prog), arg_layout(prog), generate_hooks(prog, score_grad),
                  tmpl);
}

CudaSource generate_kernel(const LossProgram& prog, const Expr& logit_grad,
                           const KernelTemplate& tmpl) {
  return assemble(prog.name, program_hash(prog), arg_layout(prog), generate_hooks(prog, logit_grad),
                  tmpl);
}

const KernelTemplate& dense_mask_template() {
  static const KernelTemplate t{.variant = "dense_mask",
                                .header = "dense_mask.cuh",
                                .params_type = "DenseMaskParams",
                                .function = "dense_mask_kernel",
                                .headers = {"common.cuh", "dense_mask.cuh"}};
  return t;
}

CudaSource generate_dense_mask(const AttentionProgram& prog, const Expr& score_grad) {
  return generate_kernel(prog, score_grad, dense_mask_template());
}

}  // namespace tilejit
