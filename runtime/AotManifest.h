// The manifest of an ahead-of-time build: which programs to compile, in which variants.
//
//   # one program per line; paths are relative to the manifest
//   attention/causal.tj   dtype=bf16,fp16 head_dim=64,128
//   losses/llama3.tj      dtype=bf16
//
// A line lists a .tj file and optional `dtype=` (bf16, fp16) and `head_dim=` lists; every
// combination is a variant (defaults: bf16, head dim 128). Loss programs have no head dim: their
// variants are their dtypes. `#` starts a comment.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/ProgramKernels.h"

namespace tilejit {

struct AotManifestEntry {
  std::filesystem::path program_file;  // resolved against the manifest's directory
  std::vector<DType> dtypes;
  std::vector<int> head_dims;
  int line = 0;  // in the manifest, for messages
};

// A UserError naming `file` and the line when a line is malformed.
std::vector<AotManifestEntry> parse_aot_manifest(std::string_view text,
                                                 const std::filesystem::path& base_dir,
                                                 const std::string& file = "<manifest>");
std::vector<AotManifestEntry> load_aot_manifest(const std::filesystem::path& path);

// How a variant is named in messages and the bundle index: "bf16 d128" (attention), "bf16" (loss).
std::string variant_label(const ParsedProgram& program, const KernelVariantOptions& variant);

}  // namespace tilejit
