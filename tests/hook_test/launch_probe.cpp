// A plain driver-API program for the hook tests, run on the simulated GPU: it launches one kernel
// from two call sites and with two grids, so the tests can check which launches share an ID.
//   launch_probe          three launches (site A grid 1, site B grid 1, site A grid 2), twice each
//   launch_probe --ptsz   the same kernel through cuLaunchKernel_ptsz on the default stream
#include <cuda.h>

#include <cstdio>
#include <cstring>

namespace {

const char kPtx[] = R"(
.version 8.0
.target sm_90
.address_size 64
.visible .entry probe_kernel(.param .u64 probe_kernel_param_0) { ret; }
)";

#define CHECK(call)                                                    \
  do {                                                                 \
    CUresult r_ = (call);                                              \
    if (r_ != CUDA_SUCCESS) {                                          \
      std::fprintf(stderr, "launch_probe: %s failed: %d\n", #call, r_); \
      return false;                                                    \
    }                                                                  \
  } while (0)

__attribute__((noipa)) bool launch_site_a(CUfunction f, CUstream s, unsigned grid) {
  unsigned long long arg = 0;
  void* params[] = {&arg};
  CHECK(cuLaunchKernel(f, grid, 1, 1, 32, 1, 1, 0, s, params, nullptr));
  return true;
}

__attribute__((noipa)) bool launch_site_b(CUfunction f, CUstream s, unsigned grid) {
  unsigned long long arg = 0;
  void* params[] = {&arg};
  CHECK(cuLaunchKernel(f, grid, 1, 1, 32, 1, 1, 0, s, params, nullptr));
  return true;
}

extern "C" CUresult cuLaunchKernel_ptsz(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                        unsigned, CUstream, void**, void**);

bool run(bool ptsz) {
  CUdevice dev;
  CUcontext ctx;
  CUmodule mod;
  CUfunction f;
  CUstream s;
  CHECK(cuInit(0));
  CHECK(cuDeviceGet(&dev, 0));
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  CHECK(cuModuleLoadData(&mod, kPtx));
  CHECK(cuModuleGetFunction(&f, mod, "probe_kernel"));
  CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  if (ptsz) {
    unsigned long long arg = 0;
    void* params[] = {&arg};
    CHECK(cuLaunchKernel_ptsz(f, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr));
  } else {
    for (int repeat = 0; repeat < 2; ++repeat) {
      if (!launch_site_a(f, s, 1) || !launch_site_b(f, s, 1) || !launch_site_a(f, s, 2)) return false;
    }
  }
  CHECK(cuStreamSynchronize(s));
  CHECK(cuCtxSynchronize());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--help") == 0) {
    std::printf("usage: launch_probe [--ptsz]\n");
    return 0;
  }
  return run(argc > 1 && std::strcmp(argv[1], "--ptsz") == 0) ? 0 : 1;
}
