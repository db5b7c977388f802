// A plain driver-API program for the hook tests, run on the simulated GPU: it launches one kernel
// from two call sites and with two grids, so the tests can check which launches share an ID.
//   launch_probe          three launches (site A grid 1, site B grid 1, site A grid 2), twice each
//   launch_probe --ptsz   the same kernel through cuLaunchKernel_ptsz on the default stream
//   launch_probe --fork LINGER_MS [DELAY_MS]
//                         the three launches, DELAY_MS later fork a child that calls exit(0); print
//                         "child_exit_ms N" (how long the child took to exit), launch again, stay
//                         LINGER_MS (so a test can look at the scheduler meanwhile), exit
//   launch_probe --all-devices LINGER_MS
//                         a launch on every device (each one's primary context), then on each again,
//                         stay LINGER_MS, exit
//   launch_probe --own-contexts LINGER_MS
//                         on each device in turn, a context of its own: made, a launch, destroyed (the
//                         next may get its handle), then stay LINGER_MS, exit
//   launch_probe --reset ROUNDS LAUNCHES
//                         ROUNDS times: LAUNCHES launches (site A grid 1) on a stream of device 0's
//                         primary context, a synchronisation, then cuDevicePrimaryCtxReset (as
//                         cudaDeviceReset does) but after the last; print "rounds ROUNDS", exit
//   launch_probe --release ROUNDS LAUNCHES
//                         the same with cuDevicePrimaryCtxRelease, the last reference going
#include <cuda.h>

#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
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

double now_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// The probe kernel, in the current context.
bool load_kernel(CUfunction* f) {
  CUmodule mod;
  CHECK(cuModuleLoadData(&mod, kPtx));
  CHECK(cuModuleGetFunction(f, mod, "probe_kernel"));
  return true;
}

// Device `d`'s primary context made current, and the probe kernel in it.
bool primary_with_kernel(int d, CUfunction* f) {
  CUdevice dev;
  CUcontext ctx;
  CHECK(cuDeviceGet(&dev, d));
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  return load_kernel(f);
}

// The reproduction of a forked child that inherits the hook's threads and exit handlers.
bool fork_and_exit(CUfunction f, CUstream s, int linger_ms, int delay_ms) {
  usleep(useconds_t(delay_ms) * 1000);
  const double t0 = now_ms();
  const pid_t child = fork();
  if (child == 0) std::exit(0);   // runs the exit handlers it inherited
  int status = 0;
  waitpid(child, &status, 0);
  std::printf("child_exit_ms %.1f\n", now_ms() - t0);
  std::fflush(stdout);
  if (!launch_site_a(f, s, 1)) return false;
  CHECK(cuStreamSynchronize(s));
  usleep(useconds_t(linger_ms) * 1000);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

bool run(bool ptsz, int fork_linger_ms, int fork_delay_ms) {
  CUfunction f;
  CUstream s;
  CHECK(cuInit(0));
  if (!primary_with_kernel(0, &f)) return false;
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
  if (fork_linger_ms >= 0 && !fork_and_exit(f, s, fork_linger_ms, fork_delay_ms)) return false;
  CHECK(cuCtxSynchronize());
  return true;
}

// One process on several GPUs: share mode takes part in each one's domain.
bool all_devices(int linger_ms) {
  CHECK(cuInit(0));
  int count = 0;
  CHECK(cuDeviceGetCount(&count));
  for (int round = 0; round < 2; ++round) {
    for (int d = 0; d < count; ++d) {
      CUfunction f;
      if (!primary_with_kernel(d, &f)) return false;
      if (!launch_site_a(f, nullptr, 1)) return false;
      CHECK(cuCtxSynchronize());
    }
  }
  std::printf("launched on %d devices\n", count);
  std::fflush(stdout);
  usleep(useconds_t(linger_ms) * 1000);
  return true;
}

// Contexts a program makes and destroys itself, one GPU after another.
bool own_contexts(int linger_ms) {
  CHECK(cuInit(0));
  int count = 0;
  CHECK(cuDeviceGetCount(&count));
  for (int d = 0; d < count; ++d) {
    CUdevice dev;
    CUcontext ctx;
    CUfunction f;
    CHECK(cuDeviceGet(&dev, d));
    CHECK(cuCtxCreate(&ctx, nullptr, 0, dev));
    if (!load_kernel(&f) || !launch_site_a(f, nullptr, 1)) return false;
    CHECK(cuCtxSynchronize());
    CHECK(cuCtxDestroy(ctx));
  }
  std::printf("own contexts on %d devices\n", count);
  std::fflush(stdout);
  usleep(useconds_t(linger_ms) * 1000);
  return true;
}

// A program that resets its device and goes on: every object it made, and any the hook made, in
// the old primary context is gone.
bool reset_rounds(int rounds, int launches, bool release) {
  CHECK(cuInit(0));
  CUdevice dev;
  CHECK(cuDeviceGet(&dev, 0));
  for (int round = 0; round < rounds; ++round) {
    CUfunction f;
    CUstream s;
    if (!primary_with_kernel(0, &f)) return false;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    for (int i = 0; i < launches; ++i)
      if (!launch_site_a(f, s, 1)) return false;
    CHECK(cuStreamSynchronize(s));
    if (round + 1 < rounds && release) CHECK(cuDevicePrimaryCtxRelease(dev));
    if (round + 1 < rounds && !release) CHECK(cuDevicePrimaryCtxReset(dev));
  }
  std::printf("rounds %d\n", rounds);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--help") == 0) {
    std::printf("usage: launch_probe [--ptsz | --fork LINGER_MS [DELAY_MS] | --all-devices LINGER_MS |\n"
                "                     --own-contexts LINGER_MS | --reset|--release ROUNDS LAUNCHES]\n");
    return 0;
  }
  if (argc > 2 && std::strcmp(argv[1], "--own-contexts") == 0) return own_contexts(std::atoi(argv[2])) ? 0 : 1;
  if (argc > 3 && (std::strcmp(argv[1], "--reset") == 0 || std::strcmp(argv[1], "--release") == 0))
    return reset_rounds(std::atoi(argv[2]), std::atoi(argv[3]), std::strcmp(argv[1], "--release") == 0) ? 0 : 1;
  if (argc > 2 && std::strcmp(argv[1], "--all-devices") == 0) return all_devices(std::atoi(argv[2])) ? 0 : 1;
  const bool ptsz = argc > 1 && std::strcmp(argv[1], "--ptsz") == 0;
  const int linger = argc > 2 && std::strcmp(argv[1], "--fork") == 0 ? std::atoi(argv[2]) : -1;
  const int delay = argc > 3 ? std::atoi(argv[3]) : 0;
  return run(ptsz, linger, delay) ? 0 : 1;
}
