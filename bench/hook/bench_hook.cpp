// Per-launch CPU cost of the hook (docs/performance-hook.md). The driver is loaded with dlopen:
// the simulated libcuda.so.1 by default, or any other one named by FIKIT_BENCH_LIBCUDA (the tests'
// fake driver, whose launch does nothing, isolates the wrapper's own cost from the simulator's lock).
// The hook is dlopened too and reached through its cuGetProcAddress_v2, as libcudart reaches it.
#include <benchmark/benchmark.h>
#include <cuda.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

#include "kernelid.h"

namespace {

namespace kernelid = fikit::kernelid;

using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void**, void**);
using GetProcFn = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

const char kPtx[] = ".version 8.0\n.target sm_90\n.address_size 64\n"
                    ".visible .entry bench_kernel(.param .u64 p) { ret; }\n";

struct Driver {
  void* lib = nullptr;
  LaunchFn real_launch = nullptr;
  LaunchFn hooked_launch = nullptr;
  CUfunction func = nullptr;
  CUstream stream = nullptr;
  bool ok = false;
};

template <class Fn>
Fn sym(void* lib, const char* name) { return reinterpret_cast<Fn>(dlsym(lib, name)); }

Driver& driver() {
  static Driver d = [] {
    Driver d;
    const char* path = std::getenv("FIKIT_BENCH_LIBCUDA");
    d.lib = dlopen(path ? path : FIKIT_SIM_LIBCUDA, RTLD_NOW | RTLD_GLOBAL);
    void* hook = dlopen(FIKIT_HOOK_LIB, RTLD_NOW | RTLD_LOCAL);
    if (d.lib == nullptr || hook == nullptr) {
      std::fprintf(stderr, "bench: cannot load the driver or the hook: %s\n", dlerror());
      return d;
    }
    d.real_launch = sym<LaunchFn>(d.lib, "cuLaunchKernel");
    void* wrapper = nullptr;
    sym<GetProcFn>(hook, "cuGetProcAddress_v2")("cuLaunchKernel", &wrapper, 13000, 0, nullptr);
    d.hooked_launch = reinterpret_cast<LaunchFn>(wrapper);
    if (auto init = sym<CUresult (*)(unsigned)>(d.lib, "cuInit"); init != nullptr && init(0) == CUDA_SUCCESS) {
      CUcontext ctx;
      CUmodule mod;
      sym<CUresult (*)(CUcontext*, CUdevice)>(d.lib, "cuDevicePrimaryCtxRetain")(&ctx, 0);
      sym<CUresult (*)(CUcontext)>(d.lib, "cuCtxSetCurrent")(ctx);
      sym<CUresult (*)(CUmodule*, const void*)>(d.lib, "cuModuleLoadData")(&mod, kPtx);
      sym<CUresult (*)(CUfunction*, CUmodule, const char*)>(d.lib, "cuModuleGetFunction")(&d.func, mod,
                                                                                          "bench_kernel");
      sym<CUresult (*)(CUstream*, unsigned)>(d.lib, "cuStreamCreate")(&d.stream, 0);
    }
    d.ok = d.real_launch != nullptr && d.hooked_launch != nullptr && d.hooked_launch != d.real_launch;
    return d;
  }();
  return d;
}

void launch_loop(benchmark::State& state, LaunchFn launch) {
  Driver& d = driver();
  if (!d.ok) return state.SkipWithError("driver or hook not loaded");
  unsigned long long arg = 0;
  void* params[] = {&arg};
  for (auto _ : state) {
    benchmark::DoNotOptimize(launch(d.func, 1, 1, 1, 32, 1, 1, 0, d.stream, params, nullptr));
  }
}

void BM_LaunchDirect(benchmark::State& state) { launch_loop(state, driver().real_launch); }
void BM_LaunchThroughHookPassthrough(benchmark::State& state) { launch_loop(state, driver().hooked_launch); }

CUresult fake_func_name(const char** name, CUfunction) {
  *name = "_Z12bench_kernelPf";
  return CUDA_SUCCESS;
}

void configure_ids(kernelid::Unwinder unwinder) {
  kernelid::Settings s;
  s.func_get_name = fake_func_name;
  s.unwinder = unwinder;
  kernelid::configure(s);
}

// Some depth of ordinary caller frames, as under a framework's operator dispatch. The recursion goes
// through a volatile pointer so the compiler cannot fold it into a loop: the kept frames must be
// these, not Google Benchmark's, whose return addresses differ between its warm-up and timed runs.
uint64_t id_at_depth(int depth, CUfunction f);
uint64_t (*volatile g_id_at_depth)(int, CUfunction) = id_at_depth;
__attribute__((noinline)) uint64_t id_at_depth(int depth, CUfunction f) {
  static const uint32_t grid[3] = {1, 1, 1}, block[3] = {128, 1, 1};
  if (depth > 0) return g_id_at_depth(depth - 1, f) + 1;
  return kernelid::kernel_id(f, grid, block, 0);
}

uint64_t site_at_depth(int depth);
uint64_t (*volatile g_site_at_depth)(int) = site_at_depth;
__attribute__((noinline)) uint64_t site_at_depth(int depth) {
  if (depth > 0) return g_site_at_depth(depth - 1) + 1;
  return kernelid::call_site();
}

void BM_KernelIdCached(benchmark::State& state) {
  configure_ids(static_cast<kernelid::Unwinder>(state.range(0)));
  static int function;   // one CUfunction for every run, as a program's kernel keeps its handle
  const auto f = reinterpret_cast<CUfunction>(&function);
  for (auto _ : state) benchmark::DoNotOptimize(id_at_depth(6, f));
}

void BM_CallSiteCaptureCached(benchmark::State& state) {
  configure_ids(static_cast<kernelid::Unwinder>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(site_at_depth(6));
}

// Argument: 0 = LLVM libunwind, 1 = libgcc's _Unwind_Backtrace.
BENCHMARK(BM_LaunchDirect);
BENCHMARK(BM_LaunchThroughHookPassthrough);
BENCHMARK(BM_CallSiteCaptureCached)->Arg(0)->Arg(1)->ArgName("gcc");
BENCHMARK(BM_KernelIdCached)->Arg(0)->Arg(1)->ArgName("gcc");

}  // namespace

BENCHMARK_MAIN();
