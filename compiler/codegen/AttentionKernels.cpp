#include "compiler/codegen/AttentionKernels.h"

#include <fmt/format.h>

#include <algorithm>

#include "compiler/Error.h"
#include "compiler/Printer.h"

namespace tilejit {

namespace {

// One extern "C" entry point: the template's device body, its template arguments after the
// hooks (`{T}` and `{D}` stand for the element type and head dim), launch bounds, and the
// expression of its dynamic shared memory in the template's own terms.
struct AttnEntry {
  AttentionModule module;
  std::string_view kernel;  // "attention_bwd_dq": the entry's kernel name
  std::string_view body;    // "attention_bwd_dq_cta"
  bool uses_program;        // takes TjArgs and instantiates with TjProgram
  std::string_view template_args;
  std::string_view launch_bounds;
  std::string_view smem;        // empty: no dynamic shared memory
  std::string_view min_blocks;  // second launch bound (CTAs per SM); empty: none
  std::string_view tma_maps;    // the tensor-map struct it takes after TjArgs; empty: none
};

const std::vector<AttnEntry>& entries() {
  using M = AttentionModule;
  static const std::vector<AttnEntry> table = {
      {M::Forward, "attention_fwd", "attention_fwd_cta", true, "{T}, {D}",
       "tjk::AttnFwdConfig<{D}>::kWarps * 32",
       "tjk::AttnFwdSmem<{D}, tjk::AttnFwdConfig<{D}>::kWarps, "
       "tjk::AttnFwdConfig<{D}>::kMTiles>::kBytes",
       "", ""},
      {M::Backward, "attention_bwd", "attention_bwd_cta", true, "{T}, {D}, true", "128",
       "tjk::AttnBwdSmem<{D}, tjk::attn_bwd_q_step<{D}, true>()>::kBytes", "", ""},
      {M::BackwardDeterministic, "attention_bwd_det", "attention_bwd_cta", true, "{T}, {D}, false",
       "128", "tjk::AttnBwdSmem<{D}, tjk::attn_bwd_q_step<{D}, false>()>::kBytes", "", ""},
      {M::BackwardDeterministic, "attention_bwd_dq", "attention_bwd_dq_cta", true, "{T}, {D}",
       "256", "tjk::AttnBwdDqSmem<{D}>::kBytes", "", ""},
      {M::BackwardRows, "attention_bwd_preprocess", "attention_bwd_preprocess_cta", false,
       "{T}, {D}", "256", "", "", ""},
      {M::BackwardRows, "attention_bwd_dq_convert", "attention_bwd_dq_convert_cta", false,
       "{T}, {D}", "256", "", "", ""},
      // One CTA per SM: the warpgroups share the register file through setmaxnreg.
      {M::ForwardSm90, "attention_fwd_sm90", "attention_fwd_sm90_cta", true, "{T}, {D}",
       "tjk::kAttnFwdSm90Threads", "tjk::AttnFwdSm90Layout<{D}>::kBytes", "1", "AttnFwdTmaMaps"},
      {M::BackwardSm90, "attention_bwd_sm90", "attention_bwd_sm90_cta", true, "{T}, {D}, true",
       "tjk::kAttnBwdSm90Threads", "tjk::AttnBwdSm90Layout<{D}>::kBytes", "1", "AttnBwdTmaMaps"},
      // Deterministic mode: dK and dV on wgmma, dQ by the portable kernel without atomics.
      {M::BackwardSm90Deterministic, "attention_bwd_sm90_det", "attention_bwd_sm90_cta", true,
       "{T}, {D}, false", "tjk::kAttnBwdSm90Threads", "tjk::AttnBwdSm90Layout<{D}>::kBytes", "1",
       "AttnBwdTmaMaps"},
      {M::BackwardSm90Deterministic, "attention_bwd_dq", "attention_bwd_dq_cta", true, "{T}, {D}",
       "256", "tjk::AttnBwdDqSmem<{D}>::kBytes", "", ""},
  };
  return table;
}

std::string_view elem_name(ElemType e) { return e == ElemType::F16 ? "f16" : "bf16"; }

std::string substitute(std::string_view text, const AttentionVariant& v) {
  std::string s(text);
  auto replace_all = [&](std::string_view from, const std::string& to) {
    for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
      s.replace(at, from.size(), to);
  };
  replace_all("{T}", fmt::format("tjk::{}", elem_name(v.elem)));
  replace_all("{D}", std::to_string(v.head_dim));
  return s;
}

std::string entry_name(const AttnEntry& e, AttentionVariant v, const std::string& hash) {
  if (!e.uses_program) v.long_positions = false;  // no hooks: one kernel for every size
  std::string name = fmt::format("tj_{}_{}", e.kernel, variant_suffix(v));
  if (e.uses_program) name += fmt::format("_{}", hash.substr(0, 16));
  return name;
}

int count_lines(const std::string& s) {
  return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
}

bool is_forward(AttentionModule m) {
  return m == AttentionModule::Forward || m == AttentionModule::ForwardSm90;
}

std::string_view module_header(AttentionModule m) {
  switch (m) {
    case AttentionModule::Forward: return "attention_fwd.cuh";
    case AttentionModule::ForwardSm90: return "attention_fwd_sm90.cuh";
    case AttentionModule::BackwardSm90:
    case AttentionModule::BackwardSm90Deterministic: return "attention_bwd_sm90.cuh";
    case AttentionModule::Backward:
    case AttentionModule::BackwardDeterministic:
    case AttentionModule::BackwardRows: return "attention_bwd.cuh";
  }
  internal_error("unknown attention module");
}

// Assertions that tie the host's launch constants to the templates'.
std::string launch_asserts(AttentionModule module, const AttentionVariant& v) {
  const bool fwd = is_forward(module);
  std::string s = fmt::format(
      "static_assert(sizeof(tjk::{}) == {}, \"attention params: mirrored by "
      "runtime/Attention.cpp\");\n",
      fwd ? "AttentionFwdParams" : "AttentionBwdParams",
      fwd ? kAttnFwdParamsBytes : kAttnBwdParamsBytes);
  s += substitute(fmt::format("static_assert(tjk::attn_block_q<tjk::AttnFwdConfig<{{D}}>::kWarps, "
                              "tjk::AttnFwdConfig<{{D}}>::kMTiles>() == {} && "
                              "tjk::attn_block_q<8, 1>() == {} && tjk::kAttnBlockKV == {}, "
                              "\"attention tile sizes\");\n",
                              kAttentionBlockQ, kAttentionBlockQ, kAttentionBlockKV),
                  v);
  if (module == AttentionModule::ForwardSm90)
    s += fmt::format(
        "static_assert(sizeof(tjk::AttnFwdTmaMaps) == {} && tjk::kAttnSm90BlockQ == {}, "
        "\"attention_fwd_sm90: tensor maps and tiles as runtime/Attention.cpp says\");\n",
        kAttnFwdTmaMapsBytes, kAttentionBlockQ);
  if (module == AttentionModule::BackwardSm90 ||
      module == AttentionModule::BackwardSm90Deterministic)
    s += fmt::format(
        "static_assert(sizeof(tjk::AttnBwdTmaMaps) == {} && tjk::kAttnBwdSm90BlockKV == {}, "
        "\"attention_bwd_sm90: tensor maps and tiles as runtime/Attention.cpp says\");\n",
        kAttnBwdTmaMapsBytes, kAttentionBwdSm90BlockKV);
  for (const AttnEntry& e : entries()) {
    if (e.module != module) continue;
    AttentionLaunchShape shape = attention_launch_shape(e.kernel, v.head_dim);
    s += substitute(fmt::format("static_assert(({}) == {}", e.launch_bounds, shape.threads), v);
    if (!e.smem.empty())
      s += substitute(fmt::format(" && ({}) == {}", e.smem, shape.smem_bytes), v);
    s += fmt::format(", \"{}: launched as runtime/Attention.cpp says\");\n", e.kernel);
  }
  return s;
}

}  // namespace

void check_attention_variant(const AttentionVariant& v) {
  bool elem_ok = v.elem == ElemType::BF16 || v.elem == ElemType::F16;
  TILEJIT_USER_CHECK(elem_ok && (v.head_dim == 64 || v.head_dim == 128),
                     "attention kernels support element types bf16 and f16 with head dims 64 and "
                     "128, not {} with head dim {}",
                     elem_type_name(v.elem), v.head_dim);
}

std::string variant_suffix(const AttentionVariant& v) {
  return fmt::format("{}_d{}{}", elem_name(v.elem), v.head_dim, v.long_positions ? "_long" : "");
}

const std::vector<AttentionModule>& attention_modules() {
  static const std::vector<AttentionModule> all = {AttentionModule::Forward,
                                                   AttentionModule::BackwardRows,
                                                   AttentionModule::Backward,
                                                   AttentionModule::BackwardDeterministic,
                                                   AttentionModule::ForwardSm90,
                                                   AttentionModule::BackwardSm90,
                                                   AttentionModule::BackwardSm90Deterministic};
  return all;
}

std::string_view attention_module_name(AttentionModule m) {
  switch (m) {
    case AttentionModule::Forward: return "attention_fwd";
    case AttentionModule::Backward: return "attention_bwd";
    case AttentionModule::BackwardDeterministic: return "attention_bwd_det";
    case AttentionModule::BackwardRows: return "attention_bwd_rows";
    case AttentionModule::ForwardSm90: return "attention_fwd_sm90";
    case AttentionModule::BackwardSm90: return "attention_bwd_sm90";
    case AttentionModule::BackwardSm90Deterministic: return "attention_bwd_sm90_det";
  }
  internal_error("unknown attention module");
}

bool attention_module_uses_program(AttentionModule m) { return m != AttentionModule::BackwardRows; }

AttentionLaunchShape attention_launch_shape(std::string_view kernel, int head_dim) {
  const bool d128 = head_dim == 128;
  TILEJIT_INTERNAL_CHECK(d128 || head_dim == 64, "attention head dim {}", head_dim);
  if (kernel == "attention_fwd") return {128, d128 ? 98304 : 49152};
  if (kernel == "attention_fwd_sm90") return {384, d128 ? 231424 : 149504};
  if (kernel == "attention_bwd") return {128, d128 ? 70144 : 58368};
  if (kernel == "attention_bwd_det") return {128, d128 ? 107520 : 58368};
  if (kernel == "attention_bwd_dq") return {256, d128 ? 131072 : 65536};
  if (kernel == "attention_bwd_sm90" || kernel == "attention_bwd_sm90_det")
    return {384, d128 ? 232448 : 167936};
  if (kernel == "attention_bwd_preprocess" || kernel == "attention_bwd_dq_convert") return {256, 0};
  internal_error("unknown attention kernel {}", kernel);
}

AttentionKernelSource generate_attention_module(const AttentionProgram& prog,
                                                const Expr& score_grad, AttentionModule module,
                                                const AttentionVariant& variant) {
  check_attention_variant(variant);
  const bool uses_program = attention_module_uses_program(module);
  const std::string hash = uses_program ? program_hash(prog) : std::string();
  AttentionKernelSource out;
  out.module = module;
  out.variant = fmt::format("{} {} d{}{}", attention_module_name(module), elem_name(variant.elem),
                            variant.head_dim,
                            uses_program && variant.long_positions ? " long" : "");

  std::string& s = out.cuda.source;
  if (uses_program)
    s += fmt::format(
        "// Generated by tilejit: {} kernels for attention program \"{}\" (sha256 {}).\n",
        out.variant, prog.name, hash);
  else
    s += fmt::format("// Generated by tilejit: {} kernels (shared by every attention program).\n",
                     out.variant);
  std::string_view header = module_header(module);
  if (uses_program) {
    s += "#include \"common.cuh\"\n";
    out.cuda.headers.emplace_back("common.cuh");
  }
  s += fmt::format("#include \"{}\"\n\n", header);
  out.cuda.headers.emplace_back(header);
  if (uses_program) {
    out.cuda.layout = arg_layout(prog);
    s += generate_args_struct(out.cuda.layout);
    s += '\n';
    s += generate_hooks(prog, score_grad, !variant.long_positions);
  }

  for (const AttnEntry& e : entries())
    if (e.module == module) {
      out.cuda.entry = entry_name(e, variant, hash);
      break;
    }
  out.cuda.file_name = out.cuda.entry + ".cu";
  // The hooks' #line directives point into the program; what follows is this file again.
  if (uses_program) s += fmt::format("#line {} \"{}\"\n", count_lines(s) + 2, out.cuda.file_name);
  s += '\n';
  s += launch_asserts(module, variant);

  for (const AttnEntry& e : entries()) {
    if (e.module != module) continue;
    std::string name = entry_name(e, variant, hash);
    std::string params =
        "const __grid_constant__ tjk::" +
        std::string(is_forward(module) ? "AttentionFwdParams" : "AttentionBwdParams") + " p";
    std::string targs = substitute(e.template_args, variant);
    std::string args = "p";
    if (e.uses_program) {
      params += ",\n    const __grid_constant__ TjArgs a";
      targs = "TjProgram, TjArgs, " + targs;
      args += ", a";
    }
    if (!e.tma_maps.empty()) {
      params += fmt::format(",\n    const __grid_constant__ tjk::{} maps", e.tma_maps);
      args += ", maps";
    }
    std::string bounds = substitute(e.launch_bounds, variant);
    if (!e.min_blocks.empty()) bounds += fmt::format(", {}", e.min_blocks);
    s += fmt::format(
        "\nextern \"C\" __global__ void __launch_bounds__({}) {}(\n    {}) {{\n  "
        "tjk::{}<{}>({});\n}}\n",
        bounds, name, params, e.body, targs, args);
    out.entries.emplace(std::string(e.kernel), std::move(name));
  }
  return out;
}

}  // namespace tilejit
