// Shared by the runtime tests: a tiny kernel (one NVRTC compile is ~0.3 s, so every test reuses
// it, made distinct where needed by a salt comment) and a temporary directory.
#pragma once

#include <fmt/format.h>
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

#include "runtime/KernelCache.h"

namespace tilejit::test {

// y[i] = op(x[i], a); op comes from an in-memory header so header handling is exercised too.
inline KernelSpec tiny_kernel_spec(const std::string& salt = "") {
  KernelSpec spec;
  spec.program_name = "tiny_scale.cu";
  spec.variant = "tiny_scale f32";
  spec.source = fmt::format(R"(// {}
#include "tiny_op.h"
extern "C" __global__ void tiny_scale(float* y, const float* x, float a, int n) {{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = tiny_op(x[i], a);
}}
)",
                            salt);
  spec.headers = {
      {"tiny_op.h", "__device__ inline float tiny_op(float x, float a) { return x * a; }\n"}};
  spec.options = {"-std=c++17"};
  spec.entry_points = {"tiny_scale"};
  return spec;
}

// A fresh directory under the system temp dir, removed (with its contents) at scope exit.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "tilejit-test-XXXXXX").string();
    char* made = ::mkdtemp(pattern.data());
    if (made) path_ = made;
  }
  ~TempDir() {
    std::error_code ignore;
    // Undo permission changes made by a test so the directory can be removed.
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::add, ignore);
    std::filesystem::remove_all(path_, ignore);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline KernelCacheOptions disk_options(const std::filesystem::path& dir, bool offline = false) {
  KernelCacheOptions options;
  options.dir = dir;
  options.use_disk = true;
  options.memory_capacity = 16;
  options.offline = offline;
  return options;
}

}  // namespace tilejit::test
