#include "runtime/DeviceBuffer.h"

#include <cstdio>
#include <utility>

#include "runtime/Driver.h"
#include "runtime/WorkspacePool.h"

namespace tilejit {

namespace {
Driver& driver() {
  Driver* d = Driver::get();
  TILEJIT_USER_CHECK(d, "device memory needs a CUDA device: {}", Driver::unavailable_reason());
  d->ensure_context();
  return *d;
}

// Makes `context` current for a scope (when it is not already), then the previous one again.
class ContextScope {
 public:
  explicit ContextScope(CUcontext context)
      : previous_(Driver::get()->current_context()), switched_(context && context != previous_) {
    if (switched_) Driver::get()->set_current(context);
  }
  ~ContextScope() {
    if (!switched_) return;
    try {
      Driver::get()->set_current(previous_);
    } catch (const Error& e) {  // a destructor must not throw
      std::fprintf(stderr, "tilejit: warning: %s\n", e.what());
    }
  }
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

 private:
  CUcontext previous_;
  bool switched_;
};
}  // namespace

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes > 0) ptr_ = driver().mem_alloc(bytes);
}

DeviceBuffer DeviceBuffer::on_stream(size_t bytes, CUstream stream) {
  DeviceBuffer b;
  b.bytes_ = bytes;
  b.order_ = StreamOrder{stream, driver().current_context(), {}};
  if (bytes == 0) return b;
  b.ptr_ = workspace_alloc(bytes, stream);
  if (!b.ptr_) {  // no memory pools on this device: an ordinary allocation, freed synchronously
    b.order_.reset();
    b.ptr_ = driver().mem_alloc(bytes);
  }
  return b;
}

void DeviceBuffer::used_on(CUstream stream) {
  if (!order_ || stream == order_->stream) return;
  ContextScope in(order_->context);
  Driver& d = *Driver::get();
  order_->after.push_back(d.event_create(CU_EVENT_DISABLE_TIMING));  // destroyed by release()
  d.event_record(order_->after.back(), stream);
}

DeviceBuffer::~DeviceBuffer() { release(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, 0)),
      bytes_(std::exchange(other.bytes_, 0)),
      order_(std::exchange(other.order_, std::nullopt)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    ptr_ = std::exchange(other.ptr_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
    order_ = std::exchange(other.order_, std::nullopt);
  }
  return *this;
}

void DeviceBuffer::release() noexcept {
  try {
    if (order_) {  // in its context's stream order, after the other streams' uses
      ContextScope in(order_->context);
      Driver& d = *Driver::get();
      for (CUevent e : order_->after) {
        if (ptr_) d.stream_wait_event(order_->stream, e);
        d.event_destroy(e);
      }
      if (ptr_) workspace_free(ptr_, order_->stream);
    } else if (ptr_) {
      driver().mem_free(ptr_);
    }
  } catch (const Error& e) {
    // A destructor must not throw; a failed free means the context is already broken.
    std::fprintf(stderr, "tilejit: warning: %s\n", e.what());
  }
  ptr_ = 0;
  bytes_ = 0;
  order_.reset();
}

void DeviceBuffer::copy_from_host(const void* src, size_t bytes) {
  TILEJIT_USER_CHECK(bytes <= bytes_, "copy of {} bytes into a device buffer of {} bytes", bytes,
                     bytes_);
  if (bytes > 0) driver().memcpy_htod(ptr_, src, bytes);
}

void DeviceBuffer::copy_to_host(void* dst, size_t bytes) const {
  TILEJIT_USER_CHECK(bytes <= bytes_, "copy of {} bytes out of a device buffer of {} bytes", bytes,
                     bytes_);
  if (bytes > 0) driver().memcpy_dtoh(dst, ptr_, bytes);
}

void DeviceBuffer::fill_bytes(unsigned char value) {
  if (bytes_ > 0) driver().memset_d8(ptr_, value, bytes_);
}

}  // namespace tilejit
