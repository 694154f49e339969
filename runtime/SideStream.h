// on_side_stream: copies (or other work) that the host waits for without waiting for what the
// caller has queued on its own stream. The work runs on a stream of its own, created for it, which
// does not wait for the legacy default stream; the host then waits for that stream alone. Used
// where a forward's kernels are queued and the host needs a few words or tables (a read-back, an
// order built on the device, the cycles' upload) while the GPU runs them.
#pragma once

#include <cuda.h>

#include "runtime/Driver.h"

namespace tilejit {

// Runs `work(side)` on a new non-blocking stream after `after` (an event; nullptr: nothing) and
// returns once that stream's work is done. (A device-to-pageable copy there returns when done.)
template <class Work>
void on_side_stream(CUevent after, const Work& work) {
  Driver* driver = Driver::get();
  const CUstream side = driver->stream_create(CU_STREAM_NON_BLOCKING);
  try {
    if (after) driver->stream_wait_event(side, after);
    work(side);
    driver->stream_synchronize(side);
  } catch (...) {
    driver->stream_destroy(side);
    throw;
  }
  driver->stream_destroy(side);
}

// A point in `stream`'s work (an event recorded there): work run after it on a side stream waits
// for what `stream` had queued before it, not for what it queued later.
class StreamMark {
 public:
  explicit StreamMark(CUstream stream)
      : event_(Driver::get()->event_create(CU_EVENT_DISABLE_TIMING)) {
    try {
      Driver::get()->event_record(event_, stream);
    } catch (...) {
      Driver::get()->event_destroy(event_);
      throw;
    }
  }
  ~StreamMark() {
    try {
      Driver::get()->event_destroy(event_);
    } catch (...) {  // a destructor must not throw; a failed destroy means the context is broken
    }
  }
  StreamMark(const StreamMark&) = delete;
  StreamMark& operator=(const StreamMark&) = delete;
  template <class Work>
  void then_on_side_stream(const Work& work) const {
    on_side_stream(event_, work);
  }

 private:
  CUevent event_;
};

}  // namespace tilejit
