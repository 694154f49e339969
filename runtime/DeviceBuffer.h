// DeviceBuffer: an owned device allocation (cuMemAlloc / cuMemFree), for tests, the demo and
// tilejit's own scratch space (block-mask runs). Host applications pass their own memory.
// DeviceBuffer::on_stream: the library's scratch, allocated and freed in a stream's order from
// the device's workspace pool (runtime/WorkspacePool.h): its release waits for nothing on the
// host (cuMemFree synchronises the device first).
#pragma once

#include <cuda.h>

#include <cstddef>
#include <optional>
#include <vector>

namespace tilejit {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);  // requires a driver and a current context
  // Usable by work enqueued on `stream` from now on, and freed on `stream` when destroyed (which
  // must outlive it): every use must be enqueued on `stream`, or on another stream named by
  // used_on, or be ordered before the free by the caller. The copy and
  // fill helpers below are not ordered on `stream`: not for such buffers. On a device without
  // memory pools: an ordinary allocation (its release waits for the device).
  static DeviceBuffer on_stream(size_t bytes, CUstream stream);
  // An on_stream buffer's free (on its allocation stream) also waits for the work enqueued on
  // `stream` so far: call it once another stream's last use of the buffer is enqueued. An event
  // on `stream`, which the allocation stream waits for when the buffer is freed (its later work
  // too). Nothing for an ordinary allocation or for the allocation stream itself.
  void used_on(CUstream stream);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  CUdeviceptr ptr() const { return ptr_; }
  void* data() const { return reinterpret_cast<void*>(ptr_); }
  size_t bytes() const { return bytes_; }

  void copy_from_host(const void* src, size_t bytes);
  void copy_to_host(void* dst, size_t bytes) const;
  void fill_bytes(unsigned char value);  // e.g. 0xFF poisons a float output with NaNs

  template <typename T>
  static DeviceBuffer from_host(const std::vector<T>& values) {
    DeviceBuffer buffer(values.size() * sizeof(T));
    buffer.copy_from_host(values.data(), values.size() * sizeof(T));
    return buffer;
  }
  template <typename T>
  std::vector<T> to_host() const {
    std::vector<T> values(bytes_ / sizeof(T));
    copy_to_host(values.data(), values.size() * sizeof(T));
    return values;
  }

 private:
  void release() noexcept;
  // An on_stream buffer's release: on the stream it was allocated on, in the context it was
  // allocated in (the null stream is the current context's), after which other streams' work.
  struct StreamOrder {
    CUstream stream = nullptr;
    CUcontext context = nullptr;
    std::vector<CUevent> after;
  };
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
  std::optional<StreamOrder> order_;
};

}  // namespace tilejit
