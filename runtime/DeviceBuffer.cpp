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
}  // namespace

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes > 0) ptr_ = driver().mem_alloc(bytes);
}

DeviceBuffer DeviceBuffer::on_stream(size_t bytes, CUstream stream) {
  DeviceBuffer b;
  b.bytes_ = bytes;
  b.stream_ordered_ = true;
  b.stream_ = stream;
  if (bytes == 0) return b;
  b.ptr_ = workspace_alloc(bytes, stream);
  if (!b.ptr_) {  // no memory pools on this device: an ordinary allocation, freed synchronously
    b.stream_ordered_ = false;
    b.ptr_ = driver().mem_alloc(bytes);
  }
  return b;
}

void DeviceBuffer::free_on(CUstream stream) {
  if (stream_ordered_) stream_ = stream;
}

DeviceBuffer::~DeviceBuffer() { release(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, 0)),
      bytes_(std::exchange(other.bytes_, 0)),
      stream_ordered_(std::exchange(other.stream_ordered_, false)),
      stream_(std::exchange(other.stream_, nullptr)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    ptr_ = std::exchange(other.ptr_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
    stream_ordered_ = std::exchange(other.stream_ordered_, false);
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

void DeviceBuffer::release() noexcept {
  if (!ptr_) return;
  try {
    if (stream_ordered_)
      workspace_free(ptr_, stream_);
    else
      driver().mem_free(ptr_);
  } catch (const Error& e) {
    // A destructor must not throw; a failed free means the context is already broken.
    std::fprintf(stderr, "tilejit: warning: %s\n", e.what());
  }
  ptr_ = 0;
  bytes_ = 0;
  stream_ordered_ = false;
  stream_ = nullptr;
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
