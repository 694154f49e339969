#include "compiler/codegen/LossKernels.h"

#include <fmt/format.h>

#include <algorithm>
#include <tuple>

#include "compiler/Error.h"
#include "compiler/Printer.h"

namespace tilejit {

namespace {

// Which programs a program module's entry serves: a KL term takes other kernels.
enum class Serves : uint8_t { All, WithoutKl, WithKl };

// One extern "C" entry point: `kernel` names it and is the template's device function
// (namespace tilejit_ce) unless `function` says otherwise; called with the entry's parameters in
// order.
struct CeEntry {
  LossModule module;
  std::string_view kernel;         // "linear_ce_fwd"
  std::string_view template_args;  // "<TjProgram, TjArgs, kF16>", "<kF16>" or ""
  std::string_view launch_bounds;  // "tilejit_ce::CeFwdCta::kThreads, 1" or ""
  std::string_view params;         // the entry's parameter list
  Serves serves = Serves::All;
  std::string_view function = {};  // the device function, when not `kernel`
};

// The templates' kernels. Launch bounds are the ones the templates were tuned with.
const std::vector<CeEntry>& entries() {
  using M = LossModule;
  static const std::vector<CeEntry> table = {
      {M::Forward, "linear_ce_fwd", "<TjProgram, TjArgs, kF16, kSm90Loop>",
       "tilejit_ce::CeFwdCtaOf<kSm90Loop>::type::kThreads, 1",
       "const __grid_constant__ TjArgs a, const __grid_constant__ tilejit_ce::CeFwdParams p, "
       "const __grid_constant__ tilejit_ce::CeFwdMaps maps",
       Serves::WithoutKl},
      {M::Forward, "linear_ce_fwd_kl", "<TjProgram, TjArgs, kF16, kSm90Loop>",
       "tilejit_ce::CeKlFwdCtaOf<kSm90Loop>::type::kThreads, 1",
       "const __grid_constant__ TjArgs a, const __grid_constant__ tilejit_ce::CeFwdParams p, "
       "const __grid_constant__ tilejit_ce::CeKlMaps maps",
       Serves::WithKl},
      {M::Gradient, "linear_ce_grad", "<TjProgram, TjArgs, kF16, kSm90Loop>",
       "tilejit_ce::CeGradLaunch<kSm90Loop>::kThreads, "
       "tilejit_ce::CeGradLaunch<kSm90Loop>::kMinBlocks",
       "const __grid_constant__ TjArgs a, const __grid_constant__ tilejit_ce::CeBwdParams p, "
       "const __grid_constant__ tilejit_ce::CeBwdMaps maps",
       Serves::WithoutKl},
      {M::Gradient, "linear_ce_grad_kl", "<TjProgram, TjArgs, kF16, kSm90Loop>",
       "tilejit_ce::CeGradKlLaunch<kSm90Loop>::kThreads, 1",
       "const __grid_constant__ TjArgs a, const __grid_constant__ tilejit_ce::CeBwdParams p, "
       "const __grid_constant__ tilejit_ce::CeBwdMaps maps, "
       "const __grid_constant__ tilejit_ce::CeKlMaps kl_maps",
       Serves::WithKl},
      {M::Gradient, "linear_ce_target_grad", "<TjProgram, TjArgs>", "256",
       "const __grid_constant__ TjArgs a, const __grid_constant__ tilejit_ce::CeBwdParams p",
       Serves::WithoutKl},
      {M::Gradient, "linear_ce_target_grad_kl", "<TjProgram, TjArgs, true>", "256",
       "const __grid_constant__ TjArgs a, const __grid_constant__ tilejit_ce::CeBwdParams p",
       Serves::WithKl, "linear_ce_target_grad"},
      {M::Products, "linear_ce_dhidden", "<kF16, kSm90Loop>",
       "tilejit_ce::CeProductCtaOf<kSm90Loop>::type::kThreads, 1",
       "const __grid_constant__ tilejit_ce::CeBwdParams p, "
       "const __grid_constant__ tilejit_ce::CeBwdMaps maps"},
      {M::Products, "linear_ce_dweight", "<kF16, kSm90Loop>",
       "tilejit_ce::CeProductCtaOf<kSm90Loop>::type::kThreads, 1",
       "const __grid_constant__ tilejit_ce::CeBwdParams p, "
       "const __grid_constant__ tilejit_ce::CeBwdMaps maps"},
      {M::Products, "linear_ce_dweight_cold", "<kF16>", "tilejit_ce::CeColdCta::kThreads, 3",
       "const __grid_constant__ tilejit_ce::CeBwdParams p"},
      {M::Products, "linear_ce_dbias", "<kF16>", "",
       "const __grid_constant__ tilejit_ce::CeBwdParams p"},
      {M::Rows, "linear_ce_check_targets_i32", "", "1024",
       "const int* targets, long long stride, int n_rows, long long ignore_index, "
       "const __grid_constant__ tilejit_ce::CeLayout layout, int* out, int* bad_row"},
      {M::Rows, "linear_ce_check_targets_i64", "", "1024",
       "const long long* targets, long long stride, int n_rows, long long ignore_index, "
       "const __grid_constant__ tilejit_ce::CeLayout layout, int* out, int* bad_row"},
      {M::Rows, "linear_ce_compact_rows", "", "1024",
       "const int* targets, int n_rows, int ignore_index, int* kept, int* slot, int* count"},
      {M::Rows, "linear_ce_gather_rows", "", "",
       "const unsigned short* hidden, long long stride, const int* kept, int dim, "
       "unsigned short* out"},
      {M::Rows, "linear_ce_merge", "", "", "const __grid_constant__ tilejit_ce::CeMergeParams q"},
      {M::Rows, "linear_ce_reduce", "", "1024",
       "const float* row_loss, int n, int reduction, float* out"},
      {M::Rows, "linear_ce_scatter_rows", "", "",
       "const int* slot, const float* kept_values, int n_rows, float* out"},
      {M::Rows, "linear_ce_fill", "", "",
       "float* out, long long rows, long long cols, long long stride, float value"},
      {M::Rows, "linear_ce_row_grad", "", "",
       "const int* slot, const float* upstream, int reduction, int n_kept, float* row_grad, "
       "float* d_hidden, long long d_hidden_stride, int dim"},
      {M::Rows, "linear_ce_classify", "", "128",
       "const __grid_constant__ tilejit_ce::CeClassifyParams q"},
      {M::Rows, "linear_ce_row_lists", "", "256",
       "const unsigned char* tile_class, int num_tiles, int* row_list, int* row_count"},
      {M::Rows, "linear_ce_col_lists", "", "",
       "const unsigned char* tile_class, int num_tiles, int num_row_tiles, int* col_list, "
       "int* col_count, int* col_steps, int* col_corrections, int* pair_rank"},
      {M::Rows, "linear_ce_pair_offsets", "", "1024",
       "const __grid_constant__ tilejit_ce::CeLayout layout, const int* col_count, int stage, "
       "int* pair_first, int* staged_first"},
      {M::Rows, "linear_ce_pair_list", "", "",
       "const int* col_list, const int* col_count, const int* pair_first, int num_tiles, "
       "int num_row_tiles, int2* pair_list"},
      {M::Rows, "linear_ce_pair_visit", "", "",
       "const int* pair_first, const int2* pair_list, int chunk_first, int chunk_tiles, "
       "int group, int* visit"},
      {M::Rows, "linear_ce_colsum_part", "", "",
       "const unsigned short* base, long long stride, int n, const int* rows, "
       "const float* weights, int dim, int rows_per_part, int is_f16, float* partial"},
      {M::Rows, "linear_ce_sum_parts", "", "",
       "const float* partial, int parts, int dim, float* out"},
      {M::Rows, "linear_ce_stage_weights", "", "256",
       "const __grid_constant__ tilejit_ce::CeLayout layout, const int* col_count, "
       "const int* staged_first, int chunk_first, int dim, unsigned short* staged"},
      {M::Rows, "linear_ce_save_cycle_heads", "", "128",
       "const int* rows, const int* first, const uint4* base, long long stride, int units, "
       "uint4* heads"},
      {M::Rows, "linear_ce_move_cycles", "", "128",
       "const int* rows, const int* first, const int* next, uint4* base, long long stride, "
       "int units, const uint4* heads"},
      {M::Rows, "linear_ce_average_logit", "", "256",
       "const unsigned short* weight, long long stride, const unsigned short* bias, int size, "
       "const float* hidden_sum, float scale, int dim, int is_f16, float* score"},
      {M::Rows, "linear_ce_order_keys", "", "256",
       "const float* score, int n, unsigned* keys, int* ids"},
      {M::Rows, "linear_ce_radix_counts", "", "256",
       "const unsigned* keys, int n, int shift, int* counts"},
      {M::Rows, "linear_ce_radix_offsets", "", "1024", "int* counts, int total"},
      {M::Rows, "linear_ce_radix_scatter", "", "256",
       "const unsigned* keys, const int* ids, int n, int shift, const int* offsets, "
       "unsigned* keys_out, int* ids_out"},
      {M::Rows, "linear_ce_rank_of", "", "256", "const int* order, int n, int* rank"},
  };
  return table;
}

// The headers a module includes (their own includes are found by the runtime).
std::vector<std::string_view> module_headers(LossModule m) {
  switch (m) {
    case LossModule::Forward: return {"common.cuh", "linear_ce_fwd.cuh", "linear_ce_kl.cuh"};
    case LossModule::Gradient: return {"common.cuh", "linear_ce_bwd.cuh"};
    case LossModule::Products: return {"linear_ce_products.cuh"};
    case LossModule::Rows:
      return {"linear_ce_fwd.cuh", "linear_ce_tiles.cuh", "linear_ce_rows.cuh",
              "linear_ce_order.cuh"};
  }
  internal_error("unknown loss module");
}

// The parameter structs a module's entries take, with their asserted sizes.
std::vector<std::pair<std::string_view, size_t>> module_param_structs(LossModule m) {
  switch (m) {
    case LossModule::Forward:
      return {{"CeFwdParams", kCeFwdParamsBytes},
              {"CeFwdMaps", kCeFwdMapsBytes},
              {"CeKlMaps", kCeKlMapsBytes}};
    case LossModule::Gradient:
      return {{"CeBwdParams", kCeBwdParamsBytes},
              {"CeBwdMaps", kCeBwdMapsBytes},
              {"CeKlMaps", kCeKlMapsBytes}};
    case LossModule::Products:
      return {{"CeBwdParams", kCeBwdParamsBytes}, {"CeBwdMaps", kCeBwdMapsBytes}};
    case LossModule::Rows:
      return {{"CeLayout", kCeLayoutBytes},
              {"CeMergeParams", kCeMergeParamsBytes},
              {"CeClassifyParams", kCeClassifyParamsBytes}};
  }
  internal_error("unknown loss module");
}

// The CTA shapes a module's entries launch with: (type, threads, dynamic shared memory).
std::vector<std::tuple<std::string_view, int, int>> module_ctas(LossModule m) {
  switch (m) {
    case LossModule::Forward:
      return {{"CeFwdCta", kCeFwdThreads, kCeFwdSmemBytes},
              {"CeFwdWsCta", kCeFwdSm90Threads, kCeFwdSm90SmemBytes},
              {"CeKlFwdCta", kCeKlFwdThreads, kCeKlFwdSmemBytes},
              {"CeKlWsCta", kCeKlFwdSm90Threads, kCeKlFwdSm90SmemBytes}};
    case LossModule::Gradient:
      return {{"CeGradCta", kCeGradThreads, kCeGradSmemBytes},
              {"CeGradPingpongCta", kCeGradSm90Threads, kCeGradSm90SmemBytes},
              {"CeGradKlWsCta", kCeGradKlSm90Threads, kCeGradKlSm90SmemBytes}};
    case LossModule::Products:
      return {{"CeProductCta", kCeProductThreads, kCeProductSmemBytes},
              {"CeProductWsCta", kCeProductSm90Threads, kCeProductSm90SmemBytes},
              {"CeColdCta", kCeColdThreads, kCeColdSmemBytes}};
    case LossModule::Rows: return {};
  }
  internal_error("unknown loss module");
}

// "const int* targets, long long stride" -> "targets, stride": each parameter's last word.
std::string call_arguments(std::string_view params) {
  std::vector<std::string_view> names;
  while (!params.empty()) {
    size_t comma = params.find(',');
    std::string_view p = params.substr(0, comma);
    size_t end = p.find_last_not_of(' ') + 1;
    size_t begin = p.find_last_of(" *&", end - 1) + 1;
    names.push_back(p.substr(begin, end - begin));
    params = comma == std::string_view::npos ? std::string_view() : params.substr(comma + 1);
  }
  return fmt::format("{}", fmt::join(names, ", "));
}

std::string_view elem_suffix(ElemType elem) {
  TILEJIT_INTERNAL_CHECK(elem == ElemType::BF16 || elem == ElemType::F16,
                         "loss kernels take bf16 or f16 operands, not {}", elem_type_name(elem));
  return elem == ElemType::F16 ? "f16" : "bf16";
}

// Whether `e` belongs in `prog`'s module (non-program modules serve every program).
bool serves(const CeEntry& e, const LossProgram& prog) {
  if (e.serves == Serves::All || !loss_module_uses_program(e.module)) return true;
  return (e.serves == Serves::WithKl) == prog.kl.has_value();
}

std::string entry_name(std::string_view kernel, LossModule m, ElemType elem,
                       const std::string& hash) {
  std::string name = fmt::format("tj_{}", kernel);
  if (loss_module_uses_elem(m)) name += fmt::format("_{}", elem_suffix(elem));
  if (loss_module_uses_program(m)) name += fmt::format("_{}", hash.substr(0, 16));
  return name;
}

// Whether `m` has a tile-loop choice (CeTileLoop): the modules with tensor-core products.
bool has_tile_loop(LossModule m) { return m != LossModule::Rows; }

int count_lines(const std::string& s) {
  return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
}

}  // namespace

const std::vector<LossModule>& loss_modules() {
  static const std::vector<LossModule> all = {LossModule::Rows, LossModule::Forward,
                                              LossModule::Gradient, LossModule::Products};
  return all;
}

std::string_view loss_module_name(LossModule m) {
  switch (m) {
    case LossModule::Forward: return "linear_ce_fwd";
    case LossModule::Gradient: return "linear_ce_grad";
    case LossModule::Products: return "linear_ce_products";
    case LossModule::Rows: return "linear_ce_rows";
  }
  internal_error("unknown loss module");
}

bool loss_module_uses_program(LossModule m) {
  return m == LossModule::Forward || m == LossModule::Gradient;
}

bool loss_module_uses_elem(LossModule m) { return m != LossModule::Rows; }

LossKernelSource generate_loss_module(const LossProgram& prog, const Expr& logit_grad,
                                      LossModule module, ElemType elem, CeTileLoop loop) {
  const bool uses_program = loss_module_uses_program(module);
  const std::string hash = uses_program ? program_hash(prog) : std::string();
  LossKernelSource out;
  out.module = module;
  out.variant = std::string(loss_module_name(module));
  if (loss_module_uses_elem(module)) out.variant += fmt::format(" {}", elem_suffix(elem));
  // The forward and gradient tiles (with a KL term too) and the products have a Hopper loop.
  const bool sm90_loop = has_tile_loop(module) && loop == CeTileLoop::Sm90;
  if (sm90_loop) out.variant += " sm90";

  std::string& s = out.cuda.source;
  if (uses_program)
    s += fmt::format("// Generated by tilejit: {} kernels for loss program \"{}\" (sha256 {}).\n",
                     out.variant, prog.name, hash);
  else
    s += fmt::format("// Generated by tilejit: {} kernels (shared by every loss program).\n",
                     out.variant);
  for (std::string_view h : module_headers(module)) {
    s += fmt::format("#include \"{}\"\n", h);
    out.cuda.headers.emplace_back(h);
  }
  s += '\n';
  if (uses_program) {
    out.cuda.layout = arg_layout(prog);
    s += generate_args_struct(out.cuda.layout);
    s += '\n';
    s += generate_hooks(prog, logit_grad);
  }

  std::string first_entry;
  for (const CeEntry& e : entries())
    if (e.module == module && serves(e, prog)) {
      first_entry = entry_name(e.kernel, module, elem, hash);
      break;
    }
  out.cuda.entry = first_entry;
  out.cuda.file_name = first_entry + ".cu";
  // The hooks' #line directives point into the program; what follows is this file again.
  if (uses_program) s += fmt::format("#line {} \"{}\"\n", count_lines(s) + 2, out.cuda.file_name);
  s += '\n';
  if (loss_module_uses_elem(module))
    s += fmt::format("constexpr bool kF16 = {};  // E and the weights are {}\n",
                     elem == ElemType::F16 ? "true" : "false", elem_suffix(elem));
  if (has_tile_loop(module))
    s += sm90_loop ? "constexpr bool kSm90Loop = true;  // tile loop: wgmma on sm_90a\n"
                   : "constexpr bool kSm90Loop = false;  // tile loop: mma.sync\n";
  if (module == LossModule::Forward)
    s += fmt::format(
        "static_assert(tilejit_ce::kFwdRows == {}, \"the forward's row tile: the TMA box of "
        "runtime/LinearCeTma.h\");\n",
        kCeFwdRows);
  if (module == LossModule::Forward || module == LossModule::Gradient)
    s += fmt::format(
        "static_assert(tilejit_ce::kKlRows == {}, \"a KL pair's row tile: the TMA box of "
        "runtime/LinearCeTma.h\");\n",
        kCeKlRows);
  if (module == LossModule::Rows)
    s += fmt::format(
        "static_assert(tilejit_ce::kMergeRows == {} && tilejit_ce::kMergeRows * "
        "tilejit_ce::kMergeWarps == {}, \"linear_ce_merge: launched as runtime/LinearCe.cpp "
        "says\");\n",
        kCeMergeRows, kCeMergeThreads);
  if (module == LossModule::Rows)
    s += fmt::format(
        "static_assert(tilejit_ce::kRadixThreads == {} && tilejit_ce::kRadixItems == {} && "
        "tilejit_ce::kRadixDigits == {} && tilejit_ce::kAverageLogitRows == {}, \"the order's "
        "pre-pass and sort: launched as runtime/LinearCeOrder.cpp says\");\n",
        kCeRadixThreads, kCeRadixItems, kCeRadixDigits, kCeAverageLogitRows);
  for (auto [cta, threads, smem] : module_ctas(module))
    s += fmt::format(
        "static_assert(tilejit_ce::{0}::kThreads == {1} && tilejit_ce::{0}::kSmemBytes == {2}, "
        "\"{0}: launched as runtime/LinearCe.cpp says\");\n",
        cta, threads, smem);
  for (auto [type, bytes] : module_param_structs(module))
    s += fmt::format(
        "static_assert(sizeof(tilejit_ce::{0}) == {1}, \"{0}: mirrored by "
        "runtime/LinearCe.cpp\");\n",
        type, bytes);

  for (const CeEntry& e : entries()) {
    if (e.module != module || !serves(e, prog)) continue;
    std::string name = entry_name(e.kernel, module, elem, hash);
    std::string bounds = e.launch_bounds.empty()
                             ? std::string()
                             : fmt::format("__launch_bounds__({}) ", e.launch_bounds);
    std::string_view body = e.function.empty() ? e.kernel : e.function;
    // The two target checks are one template over the target's integer type.
    if (body.starts_with("linear_ce_check_targets")) body = "linear_ce_check_targets";
    s += fmt::format(
        "\nextern \"C\" __global__ void {}{}(\n    {}) {{\n  tilejit_ce::{}{}({});\n}}\n", bounds,
        name, e.params, body, e.template_args, call_arguments(e.params));
    out.entries.emplace(std::string(e.kernel), std::move(name));
  }
  return out;
}

}  // namespace tilejit
