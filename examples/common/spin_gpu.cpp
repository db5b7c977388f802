#include "spin_gpu.h"

#include "cuda_check.h"
#include "spin_kernel.h"

namespace fikit::examples {

SpinGpu::SpinGpu(LaunchShape shape) : shape_(shape) {
  FIKIT_CU(cuInit(0));
  FIKIT_CU(cuDeviceGet(&device_, 0));
  // The primary context is the one PyTorch and the CUDA runtime use, so the examples behave like
  // real framework processes as far as the driver (and FIKIT's hook) can tell.
  FIKIT_CU(cuDevicePrimaryCtxRetain(&context_, device_));
  FIKIT_CU(cuCtxSetCurrent(context_));
  FIKIT_CU(cuModuleLoadData(&module_, kSpinKernelPtx));
  FIKIT_CU(cuModuleGetFunction(&spin_, module_, kSpinKernelName));
  FIKIT_CU(cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING));
}

SpinGpu::~SpinGpu() {
  // Teardown errors are not worth failing an example that already produced its result.
  if (stream_ != nullptr) {
    cuStreamSynchronize(stream_);
    cuStreamDestroy(stream_);
  }
  if (module_ != nullptr) cuModuleUnload(module_);
  if (context_ != nullptr) cuDevicePrimaryCtxRelease(device_);
}

void SpinGpu::launch(uint64_t duration_ns) {
  uint64_t out = 0;   // no device buffer: the examples time requests on the host
  void* params[] = {&duration_ns, &out};
  FIKIT_CU(cuLaunchKernel(spin_, shape_.blocks, 1, 1, shape_.threads, 1, 1, 0, stream_, params, nullptr));
}

void SpinGpu::synchronize() { FIKIT_CU(cuStreamSynchronize(stream_)); }

}  // namespace fikit::examples
