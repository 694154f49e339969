#include "runtime/LinearCeOrder.h"

#include <algorithm>

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

VocabOrder::Scores average_logits(const PrePass& pass, Driver* driver, CUstream stream) {
  const CeLayout& L = *pass.layout;
  const int32_t dim = pass.dim, per = 512, parts = (pass.n_kept + per - 1) / per;
  const int32_t is_f16 = pass.is_f16;
  // partial sums [parts, dim], hidden_sum [dim], scores [live ids]
  DeviceBuffer scratch((size_t(parts + 1) * dim + std::max(L.live_ids, 1)) * sizeof(float));
  float* partial = static_cast<float*>(scratch.data());
  float* hidden_sum = partial + int64_t(parts) * dim;
  float* scores = hidden_sum + dim;
  const unsigned dx = blocks(dim, 256);
  run(pass.colsum_part, {dx, static_cast<unsigned>(parts)}, {256}, stream, pass.hidden,
      pass.hidden_stride, pass.n_kept, pass.kept, static_cast<const float*>(nullptr), dim, per,
      is_f16, partial);
  run(pass.sum_parts, {dx}, {256}, stream, static_cast<const float*>(partial), parts, dim,
      hidden_sum);
  const float scale = 1.f / static_cast<float>(pass.n_kept);
  float* seg_scores = scores;  // segment after segment
  for (int32_t s = 0; s < L.num_segments; ++s) {
    const CeSegment& seg = L.seg[s];
    run(pass.average_logit, {blocks(seg.size, 8)}, {256}, stream, seg.weight, seg.weight_stride,
        seg.bias, seg.size, static_cast<const float*>(hidden_sum), scale, dim, is_f16, seg_scores);
    seg_scores += seg.size;
  }
  driver->stream_synchronize(stream);
  VocabOrder::Scores out;
  seg_scores = scores;
  for (int32_t s = 0; s < L.num_segments; ++s) {
    out.emplace_back(L.seg[s].size);
    driver->memcpy_dtoh(out.back().data(), reinterpret_cast<CUdeviceptr>(seg_scores),
                        out.back().size() * sizeof(float));
    seg_scores += L.seg[s].size;
  }
  return out;
}

ForwardOrder forward_order(const LossProgram& prog, const LinearCeOptions& options, float threshold,
                           const std::function<VocabOrder::Scores()>& scores) {
  if (threshold <= 0 || options.vocab_ordering == VocabOrdering::Natural) return {};
  ForwardOrder out;
  out.state = options.vocab_ordering == VocabOrdering::State ? options.vocab_order
                                                             : VocabOrder::by_average_logit(1);
  VocabOrder::Visit visit = out.state->for_forward(prog, scores);
  out.tables = visit.tables;
  out.filter = visit.filter;
  if (!out.tables) out.state = nullptr;
  return out;
}

CeLayout with_order(CeLayout layout, const VocabOrderTables* tables) {
  for (int32_t s = 0; s < layout.num_segments; ++s) {
    layout.seg[s].order = tables ? tables->device_order(s) : nullptr;
    layout.seg[s].rank = tables ? tables->device_rank(s) : nullptr;
  }
  return layout;
}

}  // namespace tilejit::linear_ce
