#include "runtime/VocabOrder.h"

#include <cstdio>
#include <stdexcept>

#include "compiler/Error.h"
#include "runtime/Driver.h"
#include "runtime/SideStream.h"
#include "runtime/VocabOrderPlan.h"

namespace tilejit {

// ---- tables --------------------------------------------------------------------------------

VocabOrderTables::VocabOrderTables(std::vector<std::vector<int32_t>> order)
    : order_(std::move(order)) {
  for (size_t s = 0; s < order_.size(); ++s) {
    sizes_.push_back(static_cast<int64_t>(order_[s].size()));
    try {
      rank_.push_back(inverse_order(order_[s]));
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("vocabulary order of segment " + std::to_string(s) +
                                  " is not a permutation: " + e.what());
    }
  }
  std::call_once(order_downloaded_, [] {});
  std::call_once(rank_downloaded_, [] {});
}

std::shared_ptr<const VocabOrderTables> VocabOrderTables::by_score(const Scores& scores) {
  std::vector<std::vector<int32_t>> order;
  for (const std::vector<float>& seg : scores)
    order.push_back(order_by_score(seg.data(), static_cast<int64_t>(seg.size())));
  return std::make_shared<const VocabOrderTables>(std::move(order));
}

std::shared_ptr<const VocabOrderTables> VocabOrderTables::on_device(
    std::vector<DeviceBuffer> device, std::vector<int64_t> sizes, CUevent ready) {
  std::shared_ptr<VocabOrderTables> t(new VocabOrderTables());
  t->device_ = std::move(device);
  t->sizes_ = std::move(sizes);
  t->ready_ = ready;
  std::call_once(t->uploaded_, [] {});
  return t;
}

VocabOrderTables::~VocabOrderTables() {
  if (!ready_) return;
  try {
    Driver::get()->event_destroy(ready_);
  } catch (const Error& e) {
    // A destructor must not throw; a failed destroy means the context is already broken.
    std::fprintf(stderr, "tilejit: warning: %s\n", e.what());
  }
}

void VocabOrderTables::upload() const {
  std::call_once(uploaded_, [this] {
    for (size_t s = 0; s < order_.size(); ++s) {
      device_.push_back(DeviceBuffer::from_host(order_[s]));
      device_.push_back(DeviceBuffer::from_host(rank_[s]));
    }
  });
}

void VocabOrderTables::download(int t, std::vector<std::vector<int32_t>>& host,
                                std::once_flag& once) const {
  std::call_once(once, [&] {
    std::vector<std::vector<int32_t>> copies;
    on_side_stream(ready_, [&](CUstream side) {
      for (size_t s = 0; s < sizes_.size(); ++s) {
        copies.emplace_back(static_cast<size_t>(sizes_[s]));
        Driver::get()->memcpy_dtoh_async(copies.back().data(),
                                         reinterpret_cast<CUdeviceptr>(device_[2 * s + t].data()),
                                         copies.back().size() * sizeof(int32_t), side);
      }
    });
    host = std::move(copies);
  });
}

void VocabOrderTables::ready_on(CUstream stream) const {
  if (ready_) Driver::get()->stream_wait_event(stream, ready_);
}

const std::vector<int32_t>& VocabOrderTables::order(size_t s) const {
  download(0, order_, order_downloaded_);
  return order_[s];
}

const std::vector<int32_t>& VocabOrderTables::rank(size_t s) const {
  download(1, rank_, rank_downloaded_);
  return rank_[s];
}

const int32_t* VocabOrderTables::device_order(size_t s) const {
  upload();
  return static_cast<const int32_t*>(device_[2 * s].data());
}

const int32_t* VocabOrderTables::device_rank(size_t s) const {
  upload();
  return static_cast<const int32_t*>(device_[2 * s + 1].data());
}

void VocabOrderTables::make_cycles(size_t s) const {
  if (cycles_.empty()) cycles_.resize(sizes_.size());
  auto& [made_before, buffer, view] = cycles_[s];
  if (made_before) return;
  const RowCycles c = position_cycles(order(s), kCycleRun);
  std::vector<int32_t> all(c.rows);
  all.insert(all.end(), c.first.begin(), c.first.end());
  all.insert(all.end(), c.next.begin(), c.next.end());
  DeviceBuffer made(all.size() * sizeof(int32_t));
  // Uploaded on a stream of its own: a plain synchronous copy would wait for the caller's queued
  // work (a forward, or the backward's kernels before the moves).
  if (!all.empty())
    on_side_stream(nullptr, [&](CUstream side) {
      Driver::get()->memcpy_htod_async(reinterpret_cast<CUdeviceptr>(made.data()), all.data(),
                                       all.size() * sizeof(int32_t), side);
    });
  buffer = std::move(made);
  const int32_t* base = static_cast<const int32_t*>(buffer.data());
  view = {base, base + c.rows.size(), base + c.rows.size() + c.first.size(), c.runs()};
  made_before = true;
}

void VocabOrderTables::prepare_cycles(uint32_t segments) const {
  std::lock_guard<std::mutex> lock(cycles_lock_);
  for (size_t s = 0; s < sizes_.size(); ++s)
    if (segments >> s & 1) make_cycles(s);
}

VocabOrderTables::DeviceCycles VocabOrderTables::device_cycles(size_t s) const {
  std::lock_guard<std::mutex> lock(cycles_lock_);
  make_cycles(s);
  return cycles_[s].view;
}

// ---- state ---------------------------------------------------------------------------------

VocabOrder::VocabOrder(int refresh_every, std::shared_ptr<const VocabOrderTables> fixed)
    : refresh_every_(refresh_every), current_(std::move(fixed)) {}

std::shared_ptr<VocabOrder> VocabOrder::by_average_logit(int refresh_every) {
  TILEJIT_USER_CHECK(refresh_every >= 1,
                     "VocabOrder::by_average_logit: refresh_every must be at least 1, got {}",
                     refresh_every);
  return std::shared_ptr<VocabOrder>(new VocabOrder(refresh_every, nullptr));
}

std::shared_ptr<VocabOrder> VocabOrder::fixed(std::vector<std::vector<int32_t>> rows_in_order) {
  std::shared_ptr<const VocabOrderTables> tables;
  try {
    tables = std::make_shared<const VocabOrderTables>(std::move(rows_in_order));
  } catch (const std::invalid_argument& e) {
    user_error("VocabOrder::fixed: {}", e.what());
  }
  return std::shared_ptr<VocabOrder>(new VocabOrder(0, std::move(tables)));
}

bool VocabOrder::fits(const LossProgram& prog) const {
  if (!current_ || current_->segments() != prog.segments.size()) return false;
  for (size_t s = 0; s < prog.segments.size(); ++s)
    if (current_->size(s) != prog.segments[s].size()) return false;
  return true;
}

VocabOrder::Visit VocabOrder::for_forward(const LossProgram& prog, const Build& build) {
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.forwards;
  if (refresh_every_ == 0) {
    if (!fits(prog)) {
      std::string sizes;
      for (size_t s = 0; s < current_->segments(); ++s)
        sizes += (s ? ", " : "") + std::to_string(current_->size(s));
      user_error(
          "program {}: the fixed vocabulary order covers {} segment(s) of sizes [{}], "
          "which is not the program's layout",
          prog.name, current_->segments(), sizes);
    }
    ++stats_.ordered_forwards;
    return {current_, true};
  }
  if (!current_ || !fits(prog) || since_rebuild_ >= refresh_every_) {
    // The old tables go first, usually with their last reference: their device buffers' frees
    // synchronise with the device, which is idle now (the forward has read its targets back)
    // but, once build() has queued the pre-pass, would hold the host until that has run.
    current_.reset();
    std::shared_ptr<const VocabOrderTables> built = build();
    TILEJIT_INTERNAL_CHECK(built && built->segments() == prog.segments.size(),
                           "vocabulary order: {} segments built for {}",
                           built ? built->segments() : 0, prog.segments.size());
    for (size_t s = 0; s < prog.segments.size(); ++s)
      TILEJIT_INTERNAL_CHECK(built->size(s) == prog.segments[s].size(),
                             "vocabulary order: {} positions for segment '{}' of {} ids",
                             built->size(s), prog.segments[s].name, prog.segments[s].size());
    current_ = std::move(built);
    since_rebuild_ = 0;
    stats_.set_aside = false;
    ++stats_.rebuilds;
  }
  ++since_rebuild_;
  if (stats_.set_aside) return {nullptr, false};
  ++stats_.ordered_forwards;
  return {current_, true};
}

void VocabOrder::record_survival(const VocabOrderTables& used, double fraction) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.last_survival = fraction;
  // Too many tiles alive even in this order: skipping cannot repay the tile maxima, the pre-pass
  // and the gathered loads; run unfiltered until the next rebuild looks again.
  if (refresh_every_ > 0 && &used == current_.get() && fraction >= kOrderedBackwardSurvival)
    stats_.set_aside = true;
}

std::shared_ptr<const VocabOrderTables> VocabOrder::current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_;
}

std::shared_ptr<const VocabOrderTables> VocabOrder::upcoming(const LossProgram& prog) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!current_ || !fits(prog)) return nullptr;
  if (refresh_every_ > 0 && (since_rebuild_ >= refresh_every_ || stats_.set_aside)) return nullptr;
  return current_;
}

VocabOrder::Stats VocabOrder::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace tilejit
