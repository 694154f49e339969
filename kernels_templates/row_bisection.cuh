// Classification of one q-tile row by bisection over its kv tiles, shared by the CPU mask
// analysis (runtime/MaskAnalysis.cpp) and the GPU classifier (classify_tiles.cuh), so the host
// tests exercise the GPU's algorithm too.
//
// The mask is evaluated over the box of a whole range of kv tiles: TRUE makes the range one full
// run, FALSE leaves it empty, only MAYBE ranges are split (a MAYBE single tile is partial, or
// whatever `leaf` decides). A row costs O(class changes * log kv_tiles) evaluations and its runs
// come out in increasing tile order, adjacent runs of one kind merged. The recursion is an
// explicit stack: ranges halve at each level, so at most one pending right half per level plus
// the current pair are stacked, 32 entries for any int tile count.
//
// The GPU's two passes over rows (counts, then runs at their compacted offsets) are the two
// functions at the end; runs use runtime/BlockMask.h's TileRun encoding (so a run holds at most
// 2^30 - 1 tiles, as everywhere in a BlockMask).
//
// No includes, plain C++ apart from the qualifiers: NVRTC and the host compiler both read it.
#pragma once

#ifndef TJ_HOST_DEVICE
#if defined(__CUDACC__)
#define TJ_HOST_DEVICE __host__ __device__
#else
#define TJ_HOST_DEVICE
#endif
#endif

namespace tjk {

typedef int TjTri;
enum { kTjFalse = 0, kTjTrue = 1, kTjMaybe = 2 };
// A tile's class, numbered as runtime/BlockMask.h's TileClass.
enum { kTjEmpty = 0, kTjPartial = 1, kTjFull = 2 };

// runtime/BlockMask.h's TileRun: `count` tiles from `first`, count_kind = (count << 1) | full.
struct TjRun {
  int first;
  int count_kind;
};

// Collects one row's runs, merging adjacent runs of one kind; stores the first `capacity` of
// them at `out` and counts them all (count > capacity: the row did not fit).
struct TjRunWriter {
  TjRun* out;
  int capacity;
  int count;
  int first, tiles;  // the run not yet stored (tiles == 0: none)
  bool full;

  TJ_HOST_DEVICE TjRunWriter(TjRun* o, int cap)
      : out(o), capacity(cap), count(0), first(0), tiles(0), full(false) {}

  TJ_HOST_DEVICE void add(int f, int n, bool is_full) {
    if (tiles > 0 && full == is_full && first + tiles == f) {
      tiles += n;
      return;
    }
    finish();
    first = f;
    tiles = n;
    full = is_full;
  }
  // Stores the pending run; call once after the last add.
  TJ_HOST_DEVICE void finish() {
    if (tiles == 0) return;
    if (count < capacity) out[count] = TjRun{first, (tiles << 1) | (full ? 1 : 0)};
    ++count;
    tiles = 0;
  }
};

constexpr int kTjBisectStack = 34;  // >= 32 (see above), with a margin

// Bisects kv tiles [0, kv_tiles) of one row. eval(k0, k1) is the mask over the box of tiles
// k0..k1 (kTjTrue / kTjFalse / kTjMaybe); leaf(k) the class of tile k when eval(k, k) is
// MAYBE; writer.add(first, count, full) receives the runs in order. Returns the evaluations.
template <class Eval, class Leaf, class Writer>
TJ_HOST_DEVICE long long tj_bisect_row(int kv_tiles, const Eval& eval, const Leaf& leaf,
                                       Writer& writer) {
  if (kv_tiles <= 0) return 0;
  int lo[kTjBisectStack], hi[kTjBisectStack];
  int top = 0;
  lo[0] = 0;
  hi[0] = kv_tiles - 1;
  top = 1;
  long long evaluations = 0;
  while (top > 0) {
    --top;
    int k0 = lo[top], k1 = hi[top];
    ++evaluations;
    TjTri t = eval(k0, k1);
    if (t == kTjTrue) {
      writer.add(k0, k1 - k0 + 1, true);
    } else if (t != kTjFalse) {
      if (k0 == k1) {
        int c = leaf(k0);
        if (c != kTjEmpty) writer.add(k0, 1, c == kTjFull);
      } else {
        int mid = k0 + (k1 - k0) / 2;
        lo[top] = mid + 1;  // the right half waits; the left half is classified first
        hi[top] = k1;
        lo[top + 1] = k0;
        hi[top + 1] = mid;
        top += 2;
      }
    }
  }
  return evaluations;
}

// A MAYBE tile is partial: the GPU's leaf.
struct TjPartialLeaf {
  TJ_HOST_DEVICE int operator()(int) const { return kTjPartial; }
};

// Pass 1 of the GPU classifier for one row: its runs into its slot of `capacity` runs; returns
// how many runs the row has (more than `capacity`: pass 2 classifies the row again).
template <class Eval>
TJ_HOST_DEVICE int tj_row_count_pass(int kv_tiles, const Eval& eval, TjRun* slot, int capacity) {
  TjRunWriter w(slot, capacity);
  tj_bisect_row(kv_tiles, eval, TjPartialLeaf{}, w);
  w.finish();
  return w.count;
}

// Pass 2 for one row of `count` runs (from pass 1): the runs at `out`, copied from the slot
// when they fitted there, else from a second bisection (deterministic, so the same runs).
template <class Eval>
TJ_HOST_DEVICE void tj_row_write_pass(int kv_tiles, const Eval& eval, const TjRun* slot,
                                      int capacity, TjRun* out, int count) {
  if (count <= capacity) {
    for (int i = 0; i < count; ++i) out[i] = slot[i];
    return;
  }
  TjRunWriter w(out, count);
  tj_bisect_row(kv_tiles, eval, TjPartialLeaf{}, w);
  w.finish();
}

}  // namespace tjk
