#include "runtime/DenseMask.h"

#include <algorithm>
#include <limits>
#include <mutex>
#include <unordered_map>

#include "compiler/Error.h"
#include "compiler/Lower.h"
#include "compiler/Printer.h"
#include "kernels_templates/Embedded.h"
#include "runtime/Driver.h"
#include "runtime/Launch.h"
#include "runtime/Module.h"

namespace tilejit {

namespace {

// Mirrors DenseMaskParams in kernels_templates/dense_mask.cuh.
struct DenseMaskParams {
  void* out;
  long long out_stride[4];
  int32_t batch;
  int32_t heads;
  int32_t seq_q;
  int32_t seq_kv;
};
static_assert(sizeof(DenseMaskParams) == 56);

constexpr unsigned kBlockKv = 128;
constexpr int64_t kMaxGridYZ = 65535;

int32_t checked_int(const TensorView& out, int axis, std::string_view what) {
  int64_t v = out.shape[axis];
  TILEJIT_USER_CHECK(v <= std::numeric_limits<int32_t>::max(),
                     "dense_mask: {} = {} of '{}' does not fit in 32 bits", what, v, out.name);
  return static_cast<int32_t>(v);
}

// What a launch needs of a compiled program.
struct PreparedKernel {
  std::string entry;
  ArgLayout layout;
  std::shared_ptr<const CompiledKernel> kernel;
};

// Lowering, generating and hashing the source cost more than a launch, so each program's kernel
// is remembered by the program's identity (its canonical text's hash) and arch.
std::shared_ptr<const PreparedKernel> prepare(const AttentionProgram& prog,
                                              const std::string& arch) {
  static std::mutex mu;
  static std::unordered_map<std::string, std::shared_ptr<const PreparedKernel>> memo;
  const std::string key = program_hash(prog) + "/" + arch;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = memo.find(key); it != memo.end()) return it->second;
  }
  CudaSource source = dense_mask_source(prog);
  auto prepared = std::make_shared<const PreparedKernel>(
      PreparedKernel{source.entry, source.layout,
                     KernelCache::global().get(kernel_spec(source, prog.name), arch)});
  std::lock_guard<std::mutex> lock(mu);
  if (memo.size() >= 1024) memo.clear();  // a bound, not an LRU: programs are few in practice
  memo.emplace(key, prepared);
  return prepared;
}

}  // namespace

AttentionProgram prepare_dense_mask(const AttentionProgram& prog) {
  // Only the mask is evaluated: the score hooks are compiled but never called, and the
  // derivative is left out.
  return lower(prog).program;
}

CudaSource dense_mask_source(const AttentionProgram& prog) {
  return generate_dense_mask(prepare_dense_mask(prog), Expr());
}

std::vector<std::string> template_closure(const std::vector<std::string>& names) {
  std::vector<std::string> out;
  std::vector<std::string> work(names.rbegin(), names.rend());
  while (!work.empty()) {
    std::string name = std::move(work.back());
    work.pop_back();
    if (std::find(out.begin(), out.end(), name) != out.end()) continue;
    std::string_view text = embedded_template(name);
    TILEJIT_INTERNAL_CHECK(!text.empty(), "kernel template {} is not embedded", name);
    out.push_back(name);
    // Quoted includes name other embedded templates; the templates include nothing else.
    for (size_t at = text.find("#include \""); at != std::string_view::npos;
         at = text.find("#include \"", at + 1)) {
      size_t begin = at + 10, end = text.find('"', begin);
      if (end != std::string_view::npos) work.emplace_back(text.substr(begin, end - begin));
    }
  }
  return out;
}

KernelSpec kernel_spec(const CudaSource& source, std::string program_name) {
  KernelSpec spec;
  spec.program_name = std::move(program_name);
  spec.source = source.source;
  for (const std::string& h : template_closure(source.headers))
    spec.headers.emplace_back(h, std::string(embedded_template(h)));
  spec.options = {"-std=c++17"};
  spec.entry_points = {source.entry};
  spec.variant = source.entry;
  return spec;
}

std::vector<CompiledKernel> compile_dense_mask(const AttentionProgram& prog,
                                               const std::string& arch, KernelCache& cache) {
  CudaSource source = dense_mask_source(prog);
  return {*cache.get(kernel_spec(source, prog.name), arch)};
}

void dense_mask(const AttentionProgram& prog, const Bindings& bind, const TensorView& out,
                CUstream stream) {
  out.check_well_formed()
      .check_rank(4)
      .check_dtype({DType::U8, DType::Bool})
      .check_where(TensorView::Where::Device);
  const int32_t batch = checked_int(out, 0, "B");
  const int32_t heads = checked_int(out, 1, "H");
  const int32_t seq_q = checked_int(out, 2, "Sq");
  const int32_t seq_kv = checked_int(out, 3, "Skv");
  TILEJIT_USER_CHECK(int64_t{batch} * heads <= std::numeric_limits<int32_t>::max(),
                     "dense_mask: B * H = {} does not fit in 32 bits", int64_t{batch} * heads);
  check_bindings(prog, bind);

  Driver* driver = Driver::get();
  TILEJIT_USER_CHECK(driver, "dense_mask: no GPU: {}", Driver::unavailable_reason());
  driver->ensure_context();

  std::shared_ptr<const PreparedKernel> prepared = prepare(prog, device_arch(0));
  std::shared_ptr<LoadedModule> module = load_module(*prepared->kernel);
  CUfunction function = module->function(prepared->entry);
  if (out.numel() == 0) return;

  DenseMaskParams params{};
  params.out = out.data;
  for (int d = 0; d < 4; ++d) params.out_stride[d] = out.strides[d];
  params.batch = batch;
  params.heads = heads;
  params.seq_q = seq_q;
  params.seq_kv = seq_kv;
  std::vector<unsigned char> args = pack_args(prepared->layout, bind);

  Dim3 grid{static_cast<unsigned>((seq_kv + kBlockKv - 1) / kBlockKv),
            static_cast<unsigned>(std::min<int64_t>(seq_q, kMaxGridYZ)),
            static_cast<unsigned>(std::min<int64_t>(int64_t{batch} * heads, kMaxGridYZ))};
  void* kernel_params[] = {&params, args.data()};
  launch(function, grid, Dim3{kBlockKv, 1, 1}, 0, stream, kernel_params);
}

}  // namespace tilejit
