// A tiled tensor map (runtime/AttentionTma.h's arguments) encoded through the driver, checked like
// every driver call: the one place the runtime's kernels' maps are made.
#pragma once

#include <cuda.h>

#include "runtime/AttentionTma.h"
#include "runtime/Driver.h"

namespace tilejit {

inline CUtensorMap encode_tensor_map(const TiledTensorMapArgs& args) {
  CUtensorMap map{};
  args.encode_with([](auto... a) { Driver::get()->tensor_map_encode_tiled(a...); }, &map);
  return map;
}

}  // namespace tilejit
