#include "runtime/ProgramKernels.h"

#include "compiler/Error.h"
#include "runtime/Attention.h"
#include "runtime/DenseMask.h"
#include "runtime/LinearCe.h"

namespace tilejit {

namespace {

ProgramKernel make_kernel(std::string variant, CudaSource source, const std::string& name) {
  KernelSpec spec = kernel_spec(source, name);
  spec.variant = variant;
  return {std::move(variant), std::move(source), std::move(spec)};
}

// The dense mask, then the block-sparse attention modules (runtime/Attention.h) for the
// variant's dtype and head dim (a UserError listing what is supported otherwise).
std::vector<ProgramKernel> attention_kernels(const AttentionProgram& p,
                                             const KernelVariantOptions& options) {
  std::vector<ProgramKernel> out;
  out.push_back(make_kernel("dense_mask", dense_mask_source(p), p.name));
  AttentionVariant variant = attention_variant(options.dtype, options.head_dim);
  for (AttentionKernelSource& s : attention_kernel_sources(p, variant)) {
    KernelSpec spec = attention_kernel_spec(s, p.name);
    out.push_back({s.variant, std::move(s.cuda), std::move(spec)});
  }
  return out;
}

// The fused linear cross-entropy modules (runtime/LinearCe.h) for the variant's operand dtype.
std::vector<ProgramKernel> loss_kernels(const LossProgram& p, const KernelVariantOptions& options) {
  std::vector<ProgramKernel> out;
  for (LinearCeModule& m : linear_ce_modules(p, options.dtype))
    out.push_back({m.source.variant, std::move(m.source.cuda), std::move(m.spec)});
  return out;
}

}  // namespace

std::vector<ProgramKernel> program_kernels(const ParsedProgram& program,
                                           const KernelVariantOptions& options) {
  if (auto* a = std::get_if<AttentionProgram>(&program)) return attention_kernels(*a, options);
  return loss_kernels(std::get<LossProgram>(program), options);
}

CompiledKernelReport compile_program_kernel(const ProgramKernel& kernel, const std::string& arch) {
  CompiledKernel::Source how = CompiledKernel::Compiled;
  CompiledKernelReport r{KernelCache::global().get(kernel.spec, arch, &how), "compiled"};
  if (how == CompiledKernel::MemoryHit) r.how = "memory hit";
  if (how == CompiledKernel::DiskHit) r.how = "disk hit";
  return r;
}

}  // namespace tilejit
