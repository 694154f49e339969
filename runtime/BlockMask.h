// BlockMask: which (q tile, kv tile) pairs an attention kernel visits, and whether each visited
// tile is full (mask skipped) or partial (mask evaluated per element). A plain value, free of
// expressions: built from a per-tile classification (by the mask analysis, a brute-force
// classifier in tests, or a dense boolean tensor), reusable across layers and launches.
//
// Format (the device view is kernels_templates/block_mask.cuh):
//   - q is tiled by block_q, kv by block_kv; q_tiles = ceil(seq_q / block_q), same for kv.
//   - batch and heads are the mask's own extents: 1 means broadcast over that axis (heads are
//     query heads).
//   - Forward lists, one per (bi, hi, qt) at index (bi * heads + hi) * q_tiles + qt: runs
//     [offsets[i], offsets[i + 1]) of `runs`, sorted by tile, non-overlapping, never empty.
//   - A run is {first tile, (count << 1) | full}: `count` consecutive tiles from `first`, all
//     full (1) or all partial (0). Tiles in no run are empty and never visited.
//   - Transposed lists (backward), one per (bi, hi, kt) at (bi * heads + hi) * kv_tiles + kt:
//     runs of q tiles in the same encoding, in t_offsets / t_runs.
// Soundness is the builder's promise: full only if every in-range element is unmasked, empty
// only if every in-range element is masked; partial is always safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace tilejit {

enum class TileClass : uint8_t { Empty, Partial, Full };

struct TileRun {
  int32_t first;
  int32_t count_kind;  // (count << 1) | full

  static TileRun make(int32_t first, int32_t count, bool full) {
    return {first, (count << 1) | (full ? 1 : 0)};
  }
  int32_t count() const { return count_kind >> 1; }
  bool full() const { return (count_kind & 1) != 0; }
};

struct BlockMaskShape {
  int batch = 1;  // 1 = the same mask for every batch entry
  int heads = 1;  // 1 = the same mask for every query head
  int seq_q = 0;
  int seq_kv = 0;
  int block_q = 128;  // the portable attention kernels' tile sizes
  int block_kv = 64;
};

class BlockMask {
 public:
  // classify(b, h, qt, kt) for b < batch, h < heads (the mask's extents, not the tensors').
  using Classifier = std::function<TileClass(int b, int h, int qt, int kt)>;

  BlockMask() = default;
  static BlockMask from_classifier(const BlockMaskShape& shape, const Classifier& classify);
  // classes[((b * heads + h) * q_tiles + qt) * kv_tiles + kt].
  static BlockMask from_tile_classes(const BlockMaskShape& shape,
                                     const std::vector<TileClass>& classes);
  // A dense boolean mask [batch, heads, seq_q, seq_kv] in host memory (nonzero byte = keep),
  // with element strides; O(seq_q * seq_kv) per (b, h), the interop path.
  static BlockMask from_dense(const BlockMaskShape& shape, const uint8_t* mask,
                              const int64_t strides[4]);
  // Run lists already built, one per (b, h, qt) at (b * heads + h) * q_tiles + qt, each sorted
  // and non-overlapping (adjacent runs of one kind are merged here). O(runs) work: the way
  // to build masks of millions of tokens, where a call per tile would dominate.
  static BlockMask from_rows(const BlockMaskShape& shape,
                             const std::vector<std::vector<TileRun>>& rows);

  const BlockMaskShape& shape() const { return shape_; }
  int q_tiles() const { return q_tiles_; }
  int kv_tiles() const { return kv_tiles_; }
  int lists() const { return shape_.batch * shape_.heads; }

  const std::vector<int32_t>& offsets() const { return offsets_; }
  const std::vector<TileRun>& runs() const { return runs_; }
  const std::vector<int32_t>& t_offsets() const { return t_offsets_; }
  const std::vector<TileRun>& t_runs() const { return t_runs_; }

  // The class of one tile, looked up in the forward runs (b, h within the mask's extents).
  TileClass tile_class(int b, int h, int qt, int kt) const;

  struct Counts {
    int64_t full = 0, partial = 0, empty = 0;
  };
  Counts counts() const;
  // Whether the attended (full or partial) tiles per q tile never fall as q grows: every list's
  // count at q tile t is at least every list's at t - 1. True for causal, sliding-window and
  // prefix masks, not for documents; the Hopper forward's schedule depends on it
  // (runtime/Attention.cpp).
  bool tiles_rise_with_q() const;
  // Bytes of the four arrays (what a device copy occupies).
  size_t bytes() const;

 private:
  void init_shape(const BlockMaskShape& shape);
  void build_transposed();

  BlockMaskShape shape_;
  int q_tiles_ = 0, kv_tiles_ = 0;
  std::vector<int32_t> offsets_, t_offsets_;
  std::vector<TileRun> runs_, t_runs_;
};

// Appends tile `t` of class `c` to a run list being built in increasing tile order.
void append_tile(std::vector<TileRun>& runs, int32_t list_begin, int32_t t, TileClass c);

}  // namespace tilejit
