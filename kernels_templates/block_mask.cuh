// Device view of a block mask (host side: runtime/BlockMask.h, which documents the format).
//
// The kernels tile q by block_q and kv by block_kv. For each (b, h, q tile) the forward lists
// hold runs of kv tiles to visit; the transposed lists hold, for each (b, h, kv tile), runs of
// q tiles. A run is int2 {first tile, (count << 1) | full}: full = 1 means every in-range
// element of those tiles is unmasked (mask_mod is skipped), 0 means mask_mod is evaluated per
// element. Tiles in no run are never visited. batch == 1 or heads == 1 broadcast that axis.
//   runs of (bi, hi, t): runs[offsets[(bi * heads + hi) * tiles + t] .. offsets[... + 1])
#pragma once

namespace tjk {

struct BlockMaskView {
  const int* offsets;    // [batch * heads * q_tiles + 1]
  const int2* runs;      // forward runs: kv tiles per q tile
  const int* t_offsets;  // [batch * heads * kv_tiles + 1]
  const int2* t_runs;    // transposed runs: q tiles per kv tile
  int batch, heads;      // 1 = broadcast over that axis
  int q_tiles, kv_tiles;
  int block_q, block_kv;

  __device__ __forceinline__ int list_index(int b, int h, int t, int tiles) const {
    int bi = batch == 1 ? 0 : b, hi = heads == 1 ? 0 : h;
    return (bi * heads + hi) * tiles + t;
  }
};

// Walks the tiles of one run list in order: tile() and full() describe the current tile.
struct RunCursor {
  const int2* run;
  const int2* end;
  int tile_, left;
  bool full_;

  __device__ __forceinline__ void begin(const int* offsets, const int2* runs, int list) {
    run = runs + __ldg(offsets + list);
    end = runs + __ldg(offsets + list + 1);
    left = 0;
    load_run();
  }
  __device__ __forceinline__ void load_run() {
    while (run < end) {
      int2 r = __ldg(run);
      if ((r.y >> 1) > 0) {
        tile_ = r.x;
        left = r.y >> 1;
        full_ = (r.y & 1) != 0;
        return;
      }
      ++run;
    }
    left = 0;
  }
  __device__ __forceinline__ bool valid() const { return left > 0; }
  __device__ __forceinline__ int tile() const { return tile_; }
  __device__ __forceinline__ bool full() const { return full_; }
  __device__ __forceinline__ void next() {
    if (--left > 0) {
      ++tile_;
    } else {
      ++run;
      load_run();
    }
  }
};

}  // namespace tjk
