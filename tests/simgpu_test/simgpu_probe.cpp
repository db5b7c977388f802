// simgpu-probe: a small program on the CUDA driver API (linked against the toolkit's stub
// libcuda, run against the simulator) that the simulator's tests start as separate processes.
//   simgpu-probe spin COUNT NS START_AT_NS LEAD_NS
//                                            wait until CLOCK_MONOTONIC START_AT_NS, launch a lead spin
//                                            kernel of LEAD_NS, then COUNT spin kernels of NS with an event
//                                            before the first and after each, synchronise, print
//                                            "intervals <ns> ..." (event to event), "wall <start> <end>",
//                                            "late <ns>" (how late it started) and "queued 0|1" (1: all
//                                            was queued while the lead kernel still ran, so the intervals
//                                            are the device's alone, whatever the host's load)
//   simgpu-probe backlog COUNT NS            launch COUNT spin kernels, print "submitted", then wait forever
//   simgpu-probe info                        print "devices N", "mps 0|1" and "uuid<ordinal> HEX" per device
#include <cuda.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "spin_ptx.h"

namespace {

enum Exit { kOk = 0, kUsage = 2, kCudaError = 3 };

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

#define CHECK(call)                                                            \
  do {                                                                         \
    CUresult r_ = (call);                                                      \
    if (r_ != CUDA_SUCCESS) {                                                  \
      std::fprintf(stderr, "simgpu-probe: %s failed: %d\n", #call, (int)r_);   \
      std::exit(kCudaError);                                                   \
    }                                                                          \
  } while (0)

CUfunction setup() {
  CUdevice dev;
  CUcontext ctx;
  CUmodule mod;
  CUfunction fn;
  CHECK(cuInit(0));
  CHECK(cuDeviceGet(&dev, 0));
  CHECK(cuCtxCreate(&ctx, nullptr, 0, dev));
  CHECK(cuModuleLoadData(&mod, kSpinPtx));
  CHECK(cuModuleGetFunction(&fn, mod, "spin_ns"));
  return fn;
}

void launch_spin(CUfunction fn, uint64_t ns) {
  void* out = nullptr;
  void* params[] = {&ns, &out};
  CHECK(cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr));
}

int spin(int count, uint64_t ns, uint64_t start_at, uint64_t lead_ns) {
  CUfunction fn = setup();
  std::vector<CUevent> events(static_cast<size_t>(count) + 1);
  for (CUevent& e : events) CHECK(cuEventCreate(&e, CU_EVENT_DEFAULT));
  while (now_ns() < start_at) usleep(100);
  const uint64_t start = now_ns();
  if (lead_ns > 0) launch_spin(fn, lead_ns);
  CHECK(cuEventRecord(events[0], nullptr));
  for (int i = 1; i <= count; ++i) {
    launch_spin(fn, ns);
    CHECK(cuEventRecord(events[static_cast<size_t>(i)], nullptr));
  }
  const bool queued = cuEventQuery(events[0]) == CUDA_ERROR_NOT_READY;
  CHECK(cuCtxSynchronize());
  const uint64_t end = now_ns();
  std::printf("intervals");
  for (int i = 1; i <= count; ++i) {
    float ms = 0;
    CHECK(cuEventElapsedTime(&ms, events[static_cast<size_t>(i) - 1], events[static_cast<size_t>(i)]));
    std::printf(" %lld", static_cast<long long>(ms * 1e6 + 0.5));
  }
  std::printf("\nwall %llu %llu\n", static_cast<unsigned long long>(start), static_cast<unsigned long long>(end));
  std::printf("late %llu\nqueued %d\n", static_cast<unsigned long long>(start > start_at ? start - start_at : 0),
              queued ? 1 : 0);
  return kOk;
}

int backlog(int count, uint64_t ns) {
  CUfunction fn = setup();
  for (int i = 0; i < count; ++i) launch_spin(fn, ns);
  std::printf("submitted\n");
  std::fflush(stdout);
  for (;;) pause();
}

int info() {
  CHECK(cuInit(0));
  int count = 0, mps = 0;
  CHECK(cuDeviceGetCount(&count));
  CUdevice first = 0;
  CHECK(cuDeviceGet(&first, 0));
  CHECK(cuDeviceGetAttribute(&mps, CU_DEVICE_ATTRIBUTE_MPS_ENABLED, first));
  std::printf("devices %d\nmps %d\n", count, mps);
  for (int d = 0; d < count; ++d) {
    CUdevice dev = 0;
    CHECK(cuDeviceGet(&dev, d));
    CUuuid uuid;
    CHECK(cuDeviceGetUuid(&uuid, dev));
    std::printf("uuid%d ", d);
    for (char b : uuid.bytes) std::printf("%02x", static_cast<unsigned>(static_cast<unsigned char>(b)));
    std::printf("\n");
  }
  return kOk;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && (!std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h"))) {
    std::printf("usage: simgpu-probe spin COUNT NS START_AT_NS LEAD_NS | backlog COUNT NS\n");
    return kOk;
  }
  if (argc == 6 && !std::strcmp(argv[1], "spin"))
    return spin(std::atoi(argv[2]), std::strtoull(argv[3], nullptr, 10), std::strtoull(argv[4], nullptr, 10),
                std::strtoull(argv[5], nullptr, 10));
  if (argc == 2 && !std::strcmp(argv[1], "info")) return info();
  if (argc == 4 && !std::strcmp(argv[1], "backlog"))
    return backlog(std::atoi(argv[2]), std::strtoull(argv[3], nullptr, 10));
  std::fprintf(stderr, "usage: simgpu-probe spin COUNT NS START_AT_NS LEAD_NS | backlog COUNT NS\n");
  return kUsage;
}
