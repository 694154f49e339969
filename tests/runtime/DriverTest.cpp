// The driver layer: clean absence without a GPU; with one, the whole path from NVRTC through the
// cache to a launched kernel whose output is checked.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "runtime/KernelCache.h"
#include "runtime/Launch.h"
#include "runtime/LaunchTrace.h"
#include "runtime/Module.h"
#include "runtime/WorkspacePool.h"
#include "tests/runtime/RuntimeTestSupport.h"

namespace tilejit {
namespace {

TEST(Driver, AbsentDriverIsReportedNotFatal) {
  if (gpu_available()) GTEST_SKIP() << "this host has a GPU";
  EXPECT_EQ(Driver::get(), nullptr);
  EXPECT_FALSE(Driver::unavailable_reason().empty());
  EXPECT_THROW(device_arch(0), UserError);
  try {
    DeviceBuffer buffer(64);
    FAIL() << "expected UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(Driver::unavailable_reason()), std::string::npos);
  }
}

TEST(Driver, ArchForComputeCapability) {
  EXPECT_EQ(arch_for_compute_capability(8, 0), "sm_80");
  EXPECT_EQ(arch_for_compute_capability(8, 6), "sm_86");
  EXPECT_EQ(arch_for_compute_capability(8, 9), "sm_89");
  EXPECT_EQ(arch_for_compute_capability(9, 0), "sm_90a");
  EXPECT_EQ(arch_for_compute_capability(10, 0), "sm_100");
  EXPECT_THROW(arch_for_compute_capability(7, 5), UserError);
}

TEST(Driver, LaunchEmptyGridIsAUserError) {
  int dummy = 0;
  EXPECT_THROW(
      launch(reinterpret_cast<CUfunction>(&dummy), {0, 1, 1}, {32, 1, 1}, 0, nullptr, nullptr),
      UserError);
}

class DriverGpu : public testing::Test {
 protected:
  void SetUp() override {
    if (!gpu_available()) GTEST_SKIP() << "no GPU: " << Driver::unavailable_reason();
    driver_ = Driver::get();
    driver_->use_device(0);
  }
  Driver* driver_ = nullptr;
};

TEST_F(DriverGpu, DescribesTheDevice) {
  EXPECT_GE(driver_->device_count(), 1);
  EXPECT_FALSE(driver_->device_name(0).empty());
  EXPECT_GE(driver_->driver_version(), 12000);
  auto [major, minor] = driver_->compute_capability(0);
  EXPECT_EQ(device_arch(0), arch_for_compute_capability(major, minor));
  EXPECT_NE(driver_->current_context(), nullptr);
}

TEST_F(DriverGpu, CompilesLoadsAndLaunchesAKernel) {
  test::TempDir tmp;
  KernelCache cache(test::disk_options(tmp.path()));
  auto kernel = cache.get(test::tiny_kernel_spec("gpu launch"), device_arch(0));
  auto module = load_module(*kernel);
  EXPECT_EQ(load_module(*kernel).get(), module.get()) << "loaded once per context";
  CUfunction fn = module->function("tiny_scale");
  EXPECT_THROW(module->function("no_such_kernel"), InternalError);
  module->set_max_dynamic_shared_memory("tiny_scale", 64 * 1024);

  const int n = 1000;
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i) x[i] = 0.5f * i - 17.0f;
  DeviceBuffer dx = DeviceBuffer::from_host(x);
  DeviceBuffer dy(n * sizeof(float));
  dy.fill_bytes(0xFF);  // NaN poison: every output must be written
  EXPECT_TRUE(driver_->is_device_pointer(dx.data()));
  EXPECT_FALSE(driver_->is_device_pointer(x.data()));

  CUdeviceptr y_ptr = dy.ptr(), x_ptr = dx.ptr();
  float a = -3.0f;
  int count = n;
  void* params[] = {&y_ptr, &x_ptr, &a, &count};
  CUevent start = driver_->event_create(), stop = driver_->event_create();
  driver_->event_record(start, nullptr);
  launch(fn, {(n + 127) / 128, 1, 1}, {128, 1, 1}, 0, nullptr, params);
  driver_->event_record(stop, nullptr);
  driver_->stream_synchronize(nullptr);
  driver_->context_synchronize();
  EXPECT_GE(driver_->event_elapsed_ms(start, stop), 0.0f);
  driver_->event_destroy(start);
  driver_->event_destroy(stop);

  std::vector<float> y = dy.to_host<float>();
  for (int i = 0; i < n; ++i) ASSERT_EQ(y[i], x[i] * a) << "element " << i;
}

TEST_F(DriverGpu, FailingCallRaisesCudaErrorWithNameAndText) {
  try {
    driver_->module_load_data("definitely not a cubin");
    FAIL() << "expected CudaError";
  } catch (const CudaError& e) {
    std::string what = e.what();
    EXPECT_EQ(e.function(), "cuModuleLoadData");
    EXPECT_NE(what.find("cuModuleLoadData"), std::string::npos) << what;
    EXPECT_NE(what.find("CUDA_ERROR_"), std::string::npos) << what;
  }
}

// Without TILEJIT_LAUNCH_TRACE nothing is traced, and marking or flushing needs no GPU.
TEST(LaunchTrace, OffByDefaultAndFreeWithoutAGpu) {
  ASSERT_EQ(std::getenv("TILEJIT_LAUNCH_TRACE"), nullptr) << "the test expects it unset";
  EXPECT_FALSE(launch_trace_enabled());
  mark_launch_trace("nothing", nullptr);
  flush_launch_trace();
}

// A traced launch: one line per marker and kernel, the kernel under its entry's name and grid,
// its GPU interval inside the markers'.
TEST_F(DriverGpu, LaunchTraceRecordsKernelsAndMarkers) {
  test::TempDir tmp;
  KernelCache cache(test::disk_options(tmp.path()));
  auto module = load_module(*cache.get(test::tiny_kernel_spec("traced launch"), device_arch(0)));
  CUfunction fn = module->function("tiny_scale");
  const int n = 256;
  DeviceBuffer dx(n * sizeof(float)), dy(n * sizeof(float));
  CUdeviceptr y_ptr = dy.ptr(), x_ptr = dx.ptr();
  float a = 2.0f;
  int count = n;
  void* params[] = {&y_ptr, &x_ptr, &a, &count};
  const std::string path = (tmp.path() / "trace.jsonl").string();
  start_launch_trace(path);
  mark_launch_trace("call 0 begin", nullptr);
  launch(fn, {2, 1, 1}, {128, 1, 1}, 0, nullptr, params);
  mark_launch_trace("call 0 end", nullptr);
  flush_launch_trace();
  start_launch_trace("");
  EXPECT_FALSE(launch_trace_enabled());
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NE(lines[0].find("\"kind\": \"marker\", \"name\": \"call 0 begin\""), std::string::npos)
      << lines[0];
  EXPECT_NE(
      lines[1].find("\"kind\": \"kernel\", \"name\": \"tiny_scale\", \"grid\": \"(2, 1, 1)\""),
      std::string::npos)
      << lines[1];
  auto number = [](const std::string& line, const std::string& key) {
    const size_t at = line.find("\"" + key + "\": ");
    return at == std::string::npos ? -1.0 : std::stod(line.substr(at + key.size() + 4));
  };
  EXPECT_GE(number(lines[1], "start_ms"), number(lines[0], "start_ms"));
  EXPECT_GE(number(lines[1], "end_ms"), number(lines[1], "start_ms"));
  EXPECT_LE(number(lines[1], "end_ms"), number(lines[2], "start_ms"));
  EXPECT_NE(lines[2].find("\"name\": \"call 0 end\""), std::string::npos) << lines[2];
}

TEST(WorkspacePool, HoldsNothingWithoutAGpu) {
  if (gpu_available()) GTEST_SKIP() << "this host has a GPU";
  EXPECT_EQ(workspace_pool_held_bytes(), 0u);
  trim_workspace_pool();  // nothing to hand back, and no error
}

// Scratch from the pool is usable in stream order, kept by the pool once freed (the next
// allocation of that size takes no more from the device), and handed back by a trim.
TEST_F(DriverGpu, WorkspacePoolKeepsFreedScratchUntilTrimmed) {
  if (std::getenv("TILEJIT_WORKSPACE_KEEP_MB")) GTEST_SKIP() << "TILEJIT_WORKSPACE_KEEP_MB is set";
  Driver& d = *Driver::get();
  d.context_synchronize();
  trim_workspace_pool();
  ASSERT_EQ(workspace_pool_held_bytes(), 0u);
  test::TempDir tmp;
  KernelCache cache(test::disk_options(tmp.path()));
  auto module = load_module(*cache.get(test::tiny_kernel_spec("pooled scratch"), device_arch(0)));
  CUfunction fn = module->function("tiny_scale");
  const int n = 1 << 20;  // 4 MiB of floats, in a 64 MiB allocation
  const size_t bytes = size_t(64) << 20;
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i) x[i] = float(i % 1000) - 500.f;
  DeviceBuffer dx = DeviceBuffer::from_host(x);
  std::vector<float> y(n, -1.f);
  {
    DeviceBuffer scratch = DeviceBuffer::on_stream(bytes, nullptr);
    ASSERT_NE(scratch.ptr(), 0u);
    CUdeviceptr y_ptr = scratch.ptr(), x_ptr = dx.ptr();
    float a = -3.0f;
    int count = n;
    void* params[] = {&y_ptr, &x_ptr, &a, &count};
    launch(fn, {n / 128, 1, 1}, {128, 1, 1}, 0, nullptr, params);
    d.stream_synchronize(nullptr);
    d.memcpy_dtoh(y.data(), scratch.ptr(), n * sizeof(float));
  }  // freed in the null stream's order
  for (int i = 0; i < n; i += 4099) ASSERT_EQ(y[i], -3.f * x[i]) << "element " << i;
  d.stream_synchronize(nullptr);
  const uint64_t held = workspace_pool_held_bytes();
  EXPECT_GE(held, bytes);  // kept across the synchronisation
  { DeviceBuffer again = DeviceBuffer::on_stream(bytes, nullptr); }
  d.stream_synchronize(nullptr);
  EXPECT_EQ(workspace_pool_held_bytes(), held);
  trim_workspace_pool();
  EXPECT_EQ(workspace_pool_held_bytes(), 0u);
}

}  // namespace
}  // namespace tilejit
