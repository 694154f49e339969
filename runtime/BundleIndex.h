// The index of an ahead-of-time kernel bundle: DIR/index.json, written by `tilejit aot` next to
// the kernel-cache entries it lists. It says which program (name and identity hash), variant and
// architecture each entry was built for, its entry points and cache key, and which tilejit and
// NVRTC made the bundle, so a deployment can tell up front that a bundle cannot serve it.
//
// The file is JSON with one kernel object per line; the reader here reads back what the writer
// writes (any JSON tool can read it too).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/Error.h"

namespace tilejit {

struct BundleKernel {
  std::string program;       // the program's name
  std::string program_hash;  // program_hash(): its identity
  std::string variant;       // the manifest variant: "bf16 d128", "fp16"
  std::string kernel;        // the kernel's variant: "dense_mask", "attention_fwd bf16 d128", ...
  std::string arch;
  std::string key;  // the kernel-cache key; the entry is DIR/<key>.tjk
  std::vector<std::string> entry_points;
};

struct BundleIndex {
  std::string tilejit_version;
  std::string nvrtc_version;
  int cache_format_version = 0;
  std::vector<BundleKernel> kernels;
};

inline constexpr const char* kBundleIndexFile = "index.json";

std::string format_bundle_index(const BundleIndex& index);
// A UserError naming `file` when the text is not an index this tilejit can read.
BundleIndex parse_bundle_index(std::string_view text, const std::string& file);
// DIR/index.json, or nothing when there is none.
std::optional<BundleIndex> read_bundle_index(const std::filesystem::path& dir);

// Adds `kernels` to DIR/index.json (stamped with this tilejit and NVRTC), keeping the entries of
// earlier runs whose files are still there. Takes a lock on the directory and replaces the file
// atomically, so concurrent runs into one directory leave an index listing both. Returns "" on
// success, else the error.
std::string update_bundle_index(const std::filesystem::path& dir,
                                const std::vector<BundleKernel>& kernels);

// A bundle made by another tilejit or NVRTC: none of its kernels can be used.
class BundleVersionMismatch : public UserError {
 public:
  using UserError::UserError;
};

// Throws BundleVersionMismatch when DIR/index.json names another tilejit, NVRTC or cache format
// than this process's; does nothing when DIR has no index.
void check_bundle_versions(const std::filesystem::path& dir);

}  // namespace tilejit
