// measure_probe: a driver-API program with a known GPU rhythm, for measure-mode tests. Each
// iteration launches one spin kernel per position (position k: grid k+1, so each has its own kernel
// ID), waits on the CPU until the position's period has passed since the launch, then synchronises
// and thinks. It prints what the hook should find, as bounds that hold however the host is loaded:
// each kernel reached the GPU somewhere inside its cuLaunchKernel call and started once it was
// there and the kernel before it had finished (a call that took longer than the period, like the
// first one, which sets the hook up, leaves the next kernel queued behind it). So a kernel starts
// in [max(call start, earliest start of the one before + its spin), max(call end, latest start of
// the one before + its spin)]; per position it prints the median duration bounds [spin, spin +
// call time] and the median gap bounds [earliest next start - latest end, latest next start -
// earliest end].
#include <cuda.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "sampling.h"

namespace {

constexpr const char* kPtx = R"(
.version 8.0
.target sm_80
.address_size 64
.visible .entry spin_kernel(.param .u64 spin_kernel_param_0)
{
  ret;
}
)";

constexpr const char* kUsage =
    "usage: measure_probe [--iterations N] [--spin-us A,B,..] [--period-us A,B,..] [--think-us T]\n"
    "                     [--bounds-every N] [--sync-every N] [--uploads N] [--devices N]\n"
    "                     [--devices-for N] [--contexts N] [--reset-at N]\n"
    "  Launches one spin kernel per position per iteration (spin-us long, period-us apart),\n"
    "  synchronises after each iteration, then sleeps think-us. --iterations 0 runs until killed.\n"
    "  Prints 'position K dur_lo D dur_hi D gap_lo G gap_hi G count C' per position (medians, ns)\n"
    "  over the iterations measure mode measures with one in N (--bounds-every, default 1: all; the\n"
    "  hook's own rule, hook/measure/sampling.h, one synchronisation an iteration), C of them, then the upper\n"
    "  bounds' 90th percentiles and the lower bounds' 10th (dur_hi_p90, gap_lo_p10, gap_hi_p90).\n"
    "  --sync-every N: synchronise after every Nth iteration only (and the last); the bounds then\n"
    "  assume nothing (a program that rarely synchronises, as a JAX job's steady state).\n"
    "  --uploads N: first N 4 KiB copies to the device, each waited for (a model's weights uploaded).\n"
    "  --devices N: position K runs on device K mod N (its primary context made current for the\n"
    "  launch, as a program driving several GPUs from one thread does); each is synchronised.\n"
    "  --devices-for N: only the first N iterations use the other devices; then all run on device 0.\n"
    "  --contexts N: as --devices, over N contexts: the devices' primary ones, then contexts the probe\n"
    "  creates, context I on device I mod the devices.\n"
    "  --reset-at N: before iteration N, reset device 0's primary context (as cudaDeviceReset does)\n"
    "  and go on in the new one.\n"
    "  Exit: 0 ok, 1 CUDA error, 2 usage.\n";

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void busy_until(uint64_t t) {
  while (now_ns() < t) {
  }
}

bool parse_list(const char* s, std::vector<uint64_t>& out) {
  out.clear();
  while (*s) {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(s, &end, 10);
    if (end == s) return false;
    out.push_back(v);
    s = *end == ',' ? end + 1 : end;
    if (*end && *end != ',') return false;
  }
  return !out.empty();
}

#define CHECK(call)                                                      \
  do {                                                                   \
    const CUresult r_ = (call);                                          \
    if (r_ != CUDA_SUCCESS) {                                            \
      std::fprintf(stderr, "measure_probe: %s failed: %d\n", #call, r_); \
      return 1;                                                          \
    }                                                                    \
  } while (0)

}  // namespace

int main(int argc, char** argv) {
  uint64_t iterations = 20, think_us = 500, bounds_every = 1, sync_every = 1, uploads = 0, devices = 1,
           devices_for = UINT64_MAX, contexts = 0, reset_at = UINT64_MAX;
  std::vector<uint64_t> spin_us{50, 200, 20}, period_us{300, 600, 250};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    bool ok = v != nullptr;
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--iterations" && ok) {
      iterations = std::strtoull(v, nullptr, 10);
    } else if (a == "--sync-every" && ok) {
      sync_every = std::max<uint64_t>(1, std::strtoull(v, nullptr, 10));
    } else if (a == "--bounds-every" && ok) {
      bounds_every = std::max<uint64_t>(1, std::strtoull(v, nullptr, 10));
    } else if (a == "--devices" && ok) {
      devices = std::max<uint64_t>(1, std::strtoull(v, nullptr, 10));
    } else if (a == "--reset-at" && ok) {
      reset_at = std::strtoull(v, nullptr, 10);
    } else if (a == "--contexts" && ok) {
      contexts = std::strtoull(v, nullptr, 10);
    } else if (a == "--devices-for" && ok) {
      devices_for = std::strtoull(v, nullptr, 10);
    } else if (a == "--uploads" && ok) {
      uploads = std::strtoull(v, nullptr, 10);
    } else if (a == "--think-us" && ok) {
      think_us = std::strtoull(v, nullptr, 10);
    } else if (a == "--spin-us" && ok) {
      ok = parse_list(v, spin_us);
    } else if (a == "--period-us" && ok) {
      ok = parse_list(v, period_us);
    } else {
      ok = false;
    }
    if (!ok) {
      std::fprintf(stderr, "measure_probe: bad argument %s\n%s", a.c_str(), kUsage);
      return 2;
    }
    ++i;
  }
  if (spin_us.size() != period_us.size()) {
    std::fprintf(stderr, "measure_probe: --spin-us and --period-us need as many values\n");
    return 2;
  }
  const size_t positions = spin_us.size();

  contexts = std::max(contexts, devices);
  std::vector<CUcontext> ctx(contexts);
  std::vector<CUfunction> spin(contexts);
  CHECK(cuInit(0));
  for (uint64_t c = contexts; c-- > 0;) {   // device 0's primary context is left current
    CUdevice dev;
    CUmodule mod;
    CHECK(cuDeviceGet(&dev, static_cast<int>(c % devices)));
    if (c < devices) {
      CHECK(cuDevicePrimaryCtxRetain(&ctx[c], dev));
      CHECK(cuCtxSetCurrent(ctx[c]));
    } else {
      CHECK(cuCtxCreate(&ctx[c], nullptr, 0, dev));   // current now
    }
    CHECK(cuModuleLoadData(&mod, kPtx));
    CHECK(cuModuleGetFunction(&spin[c], mod, "spin_kernel"));
  }
  if (uploads > 0) {
    std::vector<char> host(4096, 1);
    CUdeviceptr weights = 0;
    CHECK(cuMemAlloc(&weights, host.size()));
    for (uint64_t u = 0; u < uploads; ++u) {   // as PyTorch's .to("cuda") does: a copy, then a wait
      CHECK(cuMemcpyHtoDAsync(weights, host.data(), host.size(), nullptr));
      CHECK(cuStreamSynchronize(nullptr));
    }
  }

  std::vector<std::vector<uint64_t>> dur_hi(positions), gap_lo(positions), gap_hi(positions);
  for (uint64_t it = 0; iterations == 0 || it < iterations; ++it) {
    if (it == reset_at) {
      CUdevice dev;
      CUmodule mod;
      CHECK(cuDeviceGet(&dev, 0));
      CHECK(cuDevicePrimaryCtxReset(dev));
      CHECK(cuDevicePrimaryCtxRetain(&ctx[0], dev));
      CHECK(cuCtxSetCurrent(ctx[0]));
      CHECK(cuModuleLoadData(&mod, kPtx));
      CHECK(cuModuleGetFunction(&spin[0], mod, "spin_kernel"));
    }
    // Earliest and latest start of the previous kernel of this iteration (the sync before the
    // first one drained the stream).
    uint64_t prev_lo = 0, prev_hi = 0;
    for (size_t k = 0; k < positions; ++k) {
      uint64_t ns = spin_us[k] * 1000;
      void* params[] = {&ns};
      const size_t d = it < devices_for ? k % contexts : 0;
      if (contexts > 1) CHECK(cuCtxSetCurrent(ctx[d]));
      const uint64_t begin = now_ns();
      CHECK(cuLaunchKernel(spin[d], static_cast<unsigned>(k + 1), 1, 1, 128, 1, 1, 0, nullptr, params, nullptr));
      const uint64_t end = now_ns();
      const uint64_t prev_ns = k > 0 ? spin_us[k - 1] * 1000 : 0;
      const uint64_t start_lo = k > 0 ? std::max(begin, prev_lo + prev_ns) : begin;
      const uint64_t start_hi = k > 0 ? std::max(end, prev_hi + prev_ns) : end;
      // The bounds cover the iterations a sampling measurement measures (one in bounds_every).
      const bool counted = fikit::hook::measure::sampled_iteration(it, 1, bounds_every);
      if (counted) dur_hi[k].push_back(ns + (end - begin));
      if (k > 0 && counted) {
        gap_lo[k - 1].push_back(start_lo > prev_hi + prev_ns ? start_lo - prev_hi - prev_ns : 0);
        gap_hi[k - 1].push_back(start_hi > prev_lo + prev_ns ? start_hi - prev_lo - prev_ns : 0);
      }
      prev_lo = start_lo;
      prev_hi = start_hi;
      busy_until(begin + period_us[k] * 1000);
    }
    if ((it + 1) % sync_every != 0 && it + 1 != iterations) continue;
    for (uint64_t c = contexts; c-- > 0;) {
      if (contexts > 1) CHECK(cuCtxSetCurrent(ctx[c]));
      CHECK(cuStreamSynchronize(nullptr));
    }
    busy_until(now_ns() + think_us * 1000);
  }
  // Nearest-rank median, as the profile store computes it.
  const auto median = [](std::vector<uint64_t>& v) -> unsigned long long {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v[(v.size() + 1) / 2 - 1];
  };
  // The same at the 10th (lower bounds) and 90th (upper) percentiles: what the median of a sample of
  // the iterations (windows the hook chose) stays within on a loaded host, where iterations differ.
  const auto quantile = [](std::vector<uint64_t>& v, double q) -> unsigned long long {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
  };
  for (size_t k = 0; k < positions; ++k)
    std::printf("position %zu dur_lo %llu dur_hi %llu gap_lo %llu gap_hi %llu count %llu dur_hi_p90 %llu gap_lo_p10 %llu "
                "gap_hi_p90 %llu\n",
                k, static_cast<unsigned long long>(spin_us[k] * 1000), median(dur_hi[k]), median(gap_lo[k]),
                median(gap_hi[k]), static_cast<unsigned long long>(dur_hi[k].size()), quantile(dur_hi[k], 0.9),
                quantile(gap_lo[k], 0.1), quantile(gap_hi[k], 0.9));
  return 0;
}
