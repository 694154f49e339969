#include "runtime/LinearCeOrder.h"

#include <algorithm>

#include "compiler/codegen/LossKernels.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Launch.h"

namespace tilejit::linear_ce {

namespace {

unsigned blocks(int64_t n, int64_t per) { return static_cast<unsigned>((n + per - 1) / per); }

template <class... A>
void run(CUfunction f, Dim3 grid, Dim3 block, CUstream stream, A... args) {
  void* params[] = {static_cast<void*>(&args)...};
  launch(f, grid, block, 0, stream, params);
}

}  // namespace

std::shared_ptr<const VocabOrderTables> order_by_average_logit(const PrePass& pass, Driver* driver,
                                                               CUstream stream) {
  const CeLayout& L = *pass.layout;
  const int32_t dim = pass.dim, per = 512, parts = (pass.n_kept + per - 1) / per;
  const int32_t is_f16 = pass.is_f16;
  int32_t largest = 1;
  for (int32_t s = 0; s < L.num_segments; ++s) largest = std::max(largest, L.seg[s].size);
  const int32_t max_blocks = static_cast<int32_t>(blocks(largest, kCeRadixItems));
  // partial sums [parts, dim], hidden_sum [dim], scores [live ids]; the sort's keys (two
  // buffers), ids (one; the other is the order) and digit counts; freed in stream order
  const size_t floats = size_t(parts + 1) * dim + std::max(L.live_ids, 1);
  const size_t words = 3 * size_t(largest) + size_t(kCeRadixDigits) * max_blocks;
  DeviceBuffer scratch = DeviceBuffer::on_stream((floats + words) * 4, stream);
  float* partial = static_cast<float*>(scratch.data());
  float* hidden_sum = partial + int64_t(parts) * dim;
  float* scores = hidden_sum + dim;
  uint32_t* keys[2] = {reinterpret_cast<uint32_t*>(partial + floats), nullptr};
  keys[1] = keys[0] + largest;
  int32_t* ids_scratch = reinterpret_cast<int32_t*>(keys[1] + largest);
  int32_t* counts = ids_scratch + largest;
  const unsigned dx = blocks(dim, 256);
  run(pass.colsum_part, {dx, static_cast<unsigned>(parts)}, {256}, stream, pass.hidden,
      pass.hidden_stride, pass.n_kept, pass.kept, static_cast<const float*>(nullptr), dim, per,
      is_f16, partial);
  run(pass.sum_parts, {dx}, {256}, stream, static_cast<const float*>(partial), parts, dim,
      hidden_sum);
  const float scale = 1.f / static_cast<float>(pass.n_kept);
  std::vector<DeviceBuffer> tables;
  std::vector<int64_t> sizes;
  float* seg_scores = scores;  // segment after segment
  for (int32_t s = 0; s < L.num_segments; ++s) {
    const CeSegment& seg = L.seg[s];
    const int32_t n = seg.size;
    run(pass.average_logit, {blocks(n, kCeAverageLogitRows)}, {256}, stream, seg.weight,
        seg.weight_stride, seg.bias, n, static_cast<const float*>(hidden_sum), scale, dim, is_f16,
        seg_scores);
    tables.emplace_back(size_t(n) * 4);  // the order
    tables.emplace_back(size_t(n) * 4);  // its rank
    int32_t* order = static_cast<int32_t*>(tables[2 * s].data());
    int32_t* rank = static_cast<int32_t*>(tables[2 * s + 1].data());
    // Four passes, keys[0]/order -> keys[1]/ids_scratch -> back: the last lands in the order.
    int32_t* ids[2] = {order, ids_scratch};
    run(pass.order_keys, {blocks(n, 256)}, {256}, stream, static_cast<const float*>(seg_scores), n,
        keys[0], ids[0]);
    const unsigned sort_blocks = blocks(n, kCeRadixItems);
    const int32_t total = kCeRadixDigits * static_cast<int32_t>(sort_blocks);
    for (int32_t pass_index = 0; pass_index < 4; ++pass_index) {
      const int32_t shift = 8 * pass_index, from = pass_index & 1, to = from ^ 1;
      run(pass.radix_counts, {sort_blocks}, {kCeRadixThreads}, stream,
          static_cast<const uint32_t*>(keys[from]), n, shift, counts);
      run(pass.radix_offsets, {1}, {1024}, stream, counts, total);
      run(pass.radix_scatter, {sort_blocks}, {kCeRadixThreads}, stream,
          static_cast<const uint32_t*>(keys[from]), static_cast<const int32_t*>(ids[from]), n,
          shift, static_cast<const int32_t*>(counts), keys[to], ids[to]);
    }
    run(pass.rank_of, {blocks(n, 256)}, {256}, stream, static_cast<const int32_t*>(order), n, rank);
    sizes.push_back(n);
    seg_scores += n;
  }
  CUevent ready = driver->event_create(CU_EVENT_DISABLE_TIMING);
  driver->event_record(ready, stream);
  return VocabOrderTables::on_device(std::move(tables), std::move(sizes), ready);
}

ForwardOrder forward_order(const LossProgram& prog, const LinearCeOptions& options, float threshold,
                           const VocabOrder::Build& build) {
  if (threshold <= 0 || options.vocab_ordering == VocabOrdering::Natural) return {};
  ForwardOrder out;
  out.state = options.vocab_ordering == VocabOrdering::State ? options.vocab_order
                                                             : VocabOrder::by_average_logit(1);
  VocabOrder::Visit visit = out.state->for_forward(prog, build);
  out.tables = visit.tables;
  out.filter = visit.filter;
  if (!out.tables) out.state = nullptr;
  return out;
}

std::shared_ptr<const VocabOrderTables> upcoming_order(const LossProgram& prog,
                                                       const LinearCeOptions& options,
                                                       float threshold) {
  if (threshold <= 0 || options.vocab_ordering != VocabOrdering::State || !options.vocab_order)
    return nullptr;
  return options.vocab_order->upcoming(prog);
}

CeLayout with_order(CeLayout layout, const VocabOrderTables* tables) {
  for (int32_t s = 0; s < layout.num_segments; ++s) {
    layout.seg[s].order = tables ? tables->device_order(s) : nullptr;
    layout.seg[s].rank = tables ? tables->device_rank(s) : nullptr;
  }
  return layout;
}

}  // namespace tilejit::linear_ce
