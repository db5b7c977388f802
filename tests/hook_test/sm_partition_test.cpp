// SmPartition over the simulated GPU: the partition is the primary context's, and launches from a
// context of the program's own are kept out of it without spoiling the primary's streams.
#include <cuda.h>
#include <dlfcn.h>

#include <gtest/gtest.h>

#include "driver.h"
#include "sm_partition.h"

namespace fikit::hook {
// The hook finds the driver through its own dlsym (resolve.cpp); here the simulated one is linked.
void* real_driver_symbol(const char* name) noexcept {
  static void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  return driver == nullptr ? nullptr : dlsym(driver, name);
}
}  // namespace fikit::hook

namespace {

using fikit::hook::share::SmPartition;

class SmPartitionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    ASSERT_EQ(cuDeviceGet(&dev_, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&primary_, dev_), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxSetCurrent(primary_), CUDA_SUCCESS);
  }
  void TearDown() override { cuDevicePrimaryCtxRelease(dev_); }
  CUdevice dev_ = 0;
  CUcontext primary_ = nullptr;
};

// The program's own context launches on its null stream before the primary context's null stream
// ever went to the partition: refused, and the primary's null stream still gets its partition stream
// (an entry made under the other context would carry events the primary's stream cannot record).
TEST_F(SmPartitionTest, AnotherContextsNullStreamDoesNotTakeThePrimarysEntry) {
  SmPartition partition;
  CUstream app = nullptr;
  ASSERT_EQ(cuStreamCreate(&app, 0), CUDA_SUCCESS);
  CUstream shadow = partition.enter(app, 35);
  ASSERT_NE(shadow, nullptr) << "the partition is made from the primary context";
  partition.leave(app, shadow);
  EXPECT_GT(partition.sm_count(), 0u);

  CUcontext own = nullptr;
  ASSERT_EQ(cuCtxCreate(&own, nullptr, 0, dev_), CUDA_SUCCESS);   // current now
  EXPECT_EQ(partition.enter(nullptr, 35), nullptr);
  EXPECT_EQ(partition.enter(CU_STREAM_PER_THREAD, 35), nullptr);

  ASSERT_EQ(cuCtxSetCurrent(primary_), CUDA_SUCCESS);
  for (CUstream s : {CUstream(nullptr), CU_STREAM_PER_THREAD}) {
    shadow = partition.enter(s, 35);
    EXPECT_NE(shadow, nullptr);
    if (shadow != nullptr) partition.leave(s, shadow);
  }
  EXPECT_TRUE(partition.usable());
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxDestroy(own), CUDA_SUCCESS);
}

// The program resets its device (cudaDeviceReset): the partition lets go of what it made in the old
// primary context before it goes (on this simulated device, FIKIT_SIMGPU_STRICT, a handle used after
// that aborts), and is made again in the new one.
TEST_F(SmPartitionTest, AfterItsContextIsResetItIsMadeAgainInTheNewOne) {
  SmPartition partition;
  CUstream app = nullptr;
  ASSERT_EQ(cuStreamCreate(&app, 0), CUDA_SUCCESS);
  CUstream shadow = partition.enter(app, 35);
  ASSERT_NE(shadow, nullptr);
  partition.leave(app, shadow);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);

  partition.forget_context(fikit::hook::context_key(primary_));
  ASSERT_EQ(cuDevicePrimaryCtxReset(dev_), CUDA_SUCCESS);
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&primary_, dev_), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(primary_), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&app, 0), CUDA_SUCCESS);
  shadow = partition.enter(app, 35);
  EXPECT_NE(shadow, nullptr) << "made again in the new primary context";
  if (shadow != nullptr) partition.leave(app, shadow);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
}

// Made first from a context of the program's own: no partition at all (its memory is not the green
// context's), said once, and not tried again.
TEST_F(SmPartitionTest, FirstUsedFromAnotherContextItIsNeverMade) {
  SmPartition partition;
  CUcontext own = nullptr;
  ASSERT_EQ(cuCtxCreate(&own, nullptr, 0, dev_), CUDA_SUCCESS);
  EXPECT_EQ(partition.enter(nullptr, 35), nullptr);
  EXPECT_FALSE(partition.usable());
  ASSERT_EQ(cuCtxSetCurrent(primary_), CUDA_SUCCESS);
  EXPECT_EQ(partition.enter(nullptr, 35), nullptr);
  EXPECT_EQ(cuCtxDestroy(own), CUDA_SUCCESS);
}

}  // namespace
