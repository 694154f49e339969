// A reusable vocabulary order for the fused linear cross-entropy on the GPU (runtime/LinearCe.h
// "Vocabulary order"): per segment, the order in which the kernels visit its weight rows, and
// when to rebuild it. A training loop keeps one across steps (LinearCeOptions::vocab_order) so
// the pre-pass runs every k steps, not every step:
//
//   auto order = VocabOrder::by_average_logit(/*refresh_every=*/50);
//   LinearCeOptions o{.vocab_ordering = VocabOrdering::State, .vocab_order = order};
//   for (...) { auto f = linear_cross_entropy_forward(prog, E, bind, t, o, s); ... }
//
// Thread-safe. An order in use is immutable (VocabOrderTables): a forward keeps the one it used
// alive for its backward, whatever the state does meanwhile.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "compiler/Program.h"
#include "runtime/DeviceBuffer.h"

namespace tilejit {

// One order: per segment, order[p] = the weight row visited at position p, and rank, its
// inverse. Built on the host (a caller's order, or scores sorted by order_by_score) with device
// copies uploaded once a forward first needs them, or built on the device (the average-logit
// pre-pass) with host copies downloaded once someone asks for them.
class VocabOrderTables {
 public:
  using Scores = std::vector<std::vector<float>>;  // per segment, per weight row

  // std::invalid_argument (naming the segment) unless each order is a permutation.
  explicit VocabOrderTables(std::vector<std::vector<int32_t>> order);
  // Each segment's rows by descending score (order_by_score, runtime/VocabOrderPlan.h).
  static std::shared_ptr<const VocabOrderTables> by_score(const Scores& scores);
  // Tables the device holds: per segment an order and its rank (`sizes[s]` int32 each, in
  // `device` as order 0, rank 0, order 1, ...), complete once `ready` (an event recorded after
  // the work writing them; owned from now on) has passed.
  static std::shared_ptr<const VocabOrderTables> on_device(std::vector<DeviceBuffer> device,
                                                           std::vector<int64_t> sizes,
                                                           CUevent ready);
  ~VocabOrderTables();
  VocabOrderTables(const VocabOrderTables&) = delete;
  VocabOrderTables& operator=(const VocabOrderTables&) = delete;

  size_t segments() const { return sizes_.size(); }
  int64_t size(size_t s) const { return sizes_[s]; }
  // Host copies (for tables built on the device, every segment's orders, or ranks, downloaded
  // on the first call for one; needs the context).
  const std::vector<int32_t>& order(size_t s) const;
  const std::vector<int32_t>& rank(size_t s) const;
  // Device copies, uploaded on the first call (needs a current context).
  const int32_t* device_order(size_t s) const;
  const int32_t* device_rank(size_t s) const;
  // Segment s's position_cycles (runtime/VocabOrderPlan.h) in runs of kCycleRun rows, on the
  // device: rows, then first, then next, int32 each; computed and uploaded on the first call for
  // the segment (needs the host copies and a current context).
  static constexpr int32_t kCycleRun = 64;
  struct DeviceCycles {
    const int32_t *rows = nullptr, *first = nullptr, *next = nullptr;
    int32_t runs = 0;
  };
  DeviceCycles device_cycles(size_t s) const;
  // device_cycles of the segments in `segments` (bit s: segment s) made now: a forward whose
  // backward will move dC along them calls it once its kernels are queued, so that the host works
  // while the GPU runs them rather than between the backward's last kernels (the order's download
  // and the cycles' upload run on a stream of their own, which does not wait for that forward).
  void prepare_cycles(uint32_t segments) const;
  // Work enqueued on `stream` from now on runs after the device copies are complete (tables
  // built on the device on another stream: an event wait, no host wait; otherwise nothing).
  void ready_on(CUstream stream) const;

 private:
  VocabOrderTables() = default;
  void upload() const;
  // Table t (0: order, 1: rank) of every segment into `host` (order_ or rank_), once.
  void download(int t, std::vector<std::vector<int32_t>>& host, std::once_flag& once) const;
  std::vector<int64_t> sizes_;
  mutable std::vector<std::vector<int32_t>> order_, rank_;
  mutable std::once_flag uploaded_, order_downloaded_, rank_downloaded_;
  mutable std::vector<DeviceBuffer> device_;  // order 0, rank 0, order 1, ...
  mutable std::mutex cycles_lock_;
  struct CyclesOnDevice {
    bool made = false;  // (an order with no row out of place has an empty buffer)
    DeviceBuffer buffer;
    DeviceCycles view;
  };
  mutable std::vector<CyclesOnDevice> cycles_;  // per segment, once asked
  void make_cycles(size_t s) const;  // segment s's cycles on the device, with cycles_lock_ held
  CUevent ready_ = nullptr;          // device-built: when the device copies are complete
};

class VocabOrder {
 public:
  // Per segment, per weight row: the average raw logit over a batch's rows.
  using Scores = VocabOrderTables::Scores;

  // Built from the average-logit pre-pass on the first forward that uses it and rebuilt on every
  // `refresh_every`-th forward after (1: every forward). When a backward finds too many tiles
  // surviving under it (record_survival; runtime/VocabOrderPlan.h), filtering cannot pay: the
  // forwards until the next rebuild run unfiltered (no pre-pass, no tile maxima: exactly the cost
  // of filtering off), and the rebuild looks again.
  static std::shared_ptr<VocabOrder> by_average_logit(int refresh_every = 1);
  // The caller's order: rows_in_order[s] lists segment s's weight rows in visiting order (a
  // permutation of 0..V_s-1). Never rebuilt nor set aside. UserError on a non-permutation.
  static std::shared_ptr<VocabOrder> fixed(std::vector<std::vector<int32_t>> rows_in_order);

  // What a forward of `prog` does: filter (or not, while set aside) and visit `tables`' order.
  struct Visit {
    std::shared_ptr<const VocabOrderTables> tables;  // nullptr exactly when !filter
    bool filter = true;
  };
  // `build` runs the pre-pass on that forward's rows and returns the order it gives (the GPU
  // path sorts on the device); it is called only when a rebuild is due. UserError when a fixed
  // order does not fit the program's segments.
  using Build = std::function<std::shared_ptr<const VocabOrderTables>()>;
  Visit for_forward(const LossProgram& prog, const Build& build);

  // The order the next forward would visit unless a rebuild is due (nullptr before the first).
  std::shared_ptr<const VocabOrderTables> current() const;
  // The tables the next forward of `prog` will visit if it builds none (no rebuild due, filtering
  // not set aside), else nullptr: a forward can queue work that needs only the order (the weights'
  // copies in position order) before it knows its rows. Another thread's forward may come first:
  // what for_forward then hands out decides (the forward's copies are keyed by the order they
  // follow, so an early copy of another order is not used).
  std::shared_ptr<const VocabOrderTables> upcoming(const LossProgram& prog) const;

  // What a backward measured under `used` (an order this state handed out): the fraction of
  // gradient tiles it would visit (runtime/VocabOrderPlan.h).
  void record_survival(const VocabOrderTables& used, double fraction);

  struct Stats {
    int64_t forwards = 0;          // forwards that asked this state
    int64_t ordered_forwards = 0;  // of which filtered in an order (the others: unfiltered)
    int64_t rebuilds = 0;          // pre-pass runs
    double last_survival = -1;     // the last recorded fraction (-1: none yet)
    bool set_aside = false;        // forwards run unfiltered until the next rebuild
  };
  Stats stats() const;

 private:
  VocabOrder(int refresh_every, std::shared_ptr<const VocabOrderTables> fixed);
  bool fits(const LossProgram& prog) const;

  const int refresh_every_;  // 0: a fixed order
  mutable std::mutex mu_;
  std::shared_ptr<const VocabOrderTables> current_;
  int64_t since_rebuild_ = 0;
  Stats stats_;
};

}  // namespace tilejit
