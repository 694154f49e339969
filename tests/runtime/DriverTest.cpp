// The driver layer: clean absence without a GPU; with one, the whole path from NVRTC through the
// cache to a launched kernel whose output is checked.
#include <gtest/gtest.h>

#include <vector>

#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "runtime/KernelCache.h"
#include "runtime/Launch.h"
#include "runtime/Module.h"
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

}  // namespace
}  // namespace tilejit
