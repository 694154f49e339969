// Host side of the GPU harnesses' TMA tensor maps: the runtime's encoding arguments
// (runtime/AttentionTma.h, runtime/LinearCeTma.h) handed to cuTensorMapEncodeTiled through the
// driver entry point the CUDA runtime returns, so a harness encodes its maps as the runtime does.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels_templates/tma.cuh"
#include "runtime/AttentionTma.h"

// Exits with the CUDA error's text when a runtime call fails.
#define TMA_ENCODE_CHECK(call)                                                     \
  do {                                                                             \
    cudaError_t e_ = (call);                                                       \
    if (e_ != cudaSuccess) {                                                       \
      std::fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e_));            \
      std::exit(2);                                                                \
    }                                                                              \
  } while (0)

// A TMA tensor map encoded from the runtime's arguments (runtime/AttentionTma.h) through the
// driver entry point the CUDA runtime hands out; `what` names it in the error.
inline tjk::TmaDescriptor encode_tensor_map(const tilejit::TiledTensorMapArgs& args,
                                            const char* what) {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult status{};
    TMA_ENCODE_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                cudaEnableDefault, &status));
    if (status != cudaDriverEntryPointSuccess || !fn) {
      std::fprintf(stderr, "the driver has no cuTensorMapEncodeTiled\n");
      std::exit(2);
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  static_assert(sizeof(tjk::TmaDescriptor) == sizeof(CUtensorMap), "tensor map size");
  CUtensorMap map;
  CUresult r = args.encode_with(encode, &map);
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "cuTensorMapEncodeTiled failed (%d) for %s\n", static_cast<int>(r), what);
    std::exit(2);
  }
  tjk::TmaDescriptor d;
  std::memcpy(&d, &map, sizeof d);
  return d;
}

