// The vocabulary order on the GPU path (runtime/LinearCe.h "Gradient filtering and the vocabulary
// order"): which order a forward visits, the average-logit pre-pass that builds one
// (kernels_templates/linear_ce_order.cuh), and the kernels' layout under an order. Private to
// runtime/LinearCe.cpp.
#pragma once

#include <cuda.h>

#include <functional>
#include <memory>

#include "runtime/Driver.h"
#include "runtime/LinearCe.h"
#include "runtime/LinearCeParams.h"
#include "runtime/VocabOrder.h"

namespace tilejit::linear_ce {

// The pre-pass kernels (Rows module) and what they read: the kept rows of E.
struct PrePass {
  CUfunction colsum_part = nullptr, sum_parts = nullptr, average_logit = nullptr;
  CUfunction order_keys = nullptr, radix_counts = nullptr, radix_offsets = nullptr,
             radix_scatter = nullptr, rank_of = nullptr;
  const CeLayout* layout = nullptr;
  const void* hidden = nullptr;  // E [N, dim], row stride hidden_stride
  long long hidden_stride = 0;
  const int32_t* kept = nullptr;  // [n_kept] the rows of E that count
  int32_t n_kept = 0, dim = 0;
  bool is_f16 = false;
};

// Per segment, the weight rows by descending average raw logit over the kept rows (fp32,
// deterministic; ties by ascending row, as order_by_score), and the order's inverse: computed,
// sorted and inverted on `stream`, nothing waited for on the host.
std::shared_ptr<const VocabOrderTables> order_by_average_logit(const PrePass& pass, Driver* driver,
                                                               CUstream stream);

// The order a forward visits and the state that handed it out (both null: natural order), and
// whether it filters: a state that found filtering unable to pay pauses it (VocabOrder.h). Only
// a filtering forward (threshold > 0) asks; `build` runs the pre-pass when due.
struct ForwardOrder {
  std::shared_ptr<VocabOrder> state;
  std::shared_ptr<const VocabOrderTables> tables;
  bool filter = true;
};
ForwardOrder forward_order(const LossProgram& prog, const LinearCeOptions& options, float threshold,
                           const VocabOrder::Build& build);
// The tables forward_order will hand this forward if they are known before it runs (the options'
// state, no rebuild due: VocabOrder::upcoming), else nullptr.
std::shared_ptr<const VocabOrderTables> upcoming_order(const LossProgram& prog,
                                                       const LinearCeOptions& options,
                                                       float threshold);

// `layout` visiting `tables`' order (nullptr: the natural order).
CeLayout with_order(CeLayout layout, const VocabOrderTables* tables);

}  // namespace tilejit::linear_ce
