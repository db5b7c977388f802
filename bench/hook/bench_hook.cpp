// Per-launch CPU cost of the hook (docs/performance-hook.md). The driver is loaded with dlopen:
// the simulated libcuda.so.1 by default, or any other one named by FIKIT_BENCH_LIBCUDA (the tests'
// fake driver, whose launch does nothing, isolates the wrapper's own cost from the simulator's lock).
// The hook is dlopened too and reached through its cuGetProcAddress_v2, as libcudart reaches it.
#include <benchmark/benchmark.h>
#include <cuda.h>
#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernelid.h"
#include "measure/sampling.h"

namespace {

namespace kernelid = fikit::kernelid;

using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void**, void**);
using GetProcFn = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

const char kPtx[] = ".version 8.0\n.target sm_90\n.address_size 64\n"
                    ".visible .entry bench_kernel(.param .u64 p) { ret; }\n";

using AllocFn = CUresult (*)(CUdeviceptr*, size_t);
using FreeFn = CUresult (*)(CUdeviceptr);

struct Driver {
  void* lib = nullptr;
  LaunchFn real_launch = nullptr;
  LaunchFn hooked_launch = nullptr;
  AllocFn real_alloc = nullptr, hooked_alloc = nullptr;
  FreeFn real_free = nullptr, hooked_free = nullptr;
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
    // Allocations are accounted when a limit is set (the mode stays off: launches pass through).
    setenv("FIKIT_MEMORY_LIMIT", "100GiB", 0);
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
    d.real_alloc = sym<AllocFn>(d.lib, "cuMemAlloc_v2");
    d.real_free = sym<FreeFn>(d.lib, "cuMemFree_v2");
    sym<GetProcFn>(hook, "cuGetProcAddress_v2")("cuMemAlloc", &wrapper, 13000, 0, nullptr);
    d.hooked_alloc = reinterpret_cast<AllocFn>(wrapper);
    sym<GetProcFn>(hook, "cuGetProcAddress_v2")("cuMemFree", &wrapper, 13000, 0, nullptr);
    d.hooked_free = reinterpret_cast<FreeFn>(wrapper);
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

// One cuMemAlloc and its cuMemFree of range(0) bytes, straight or through the hook's accounting
// (FIKIT_MEMORY_LIMIT set: claim against the cap, the driver call, the ledger's record and release).
void alloc_loop(benchmark::State& state, AllocFn alloc, FreeFn free_fn) {
  Driver& d = driver();
  if (!d.ok || alloc == nullptr || free_fn == nullptr) return state.SkipWithError("driver or hook not loaded");
  const size_t bytes = size_t(state.range(0));
  for (auto _ : state) {
    CUdeviceptr p = 0;
    if (alloc(&p, bytes) != CUDA_SUCCESS) return state.SkipWithError("cuMemAlloc failed");
    benchmark::DoNotOptimize(free_fn(p));
  }
}
void BM_AllocFreeDirect(benchmark::State& state) { alloc_loop(state, driver().real_alloc, driver().real_free); }
void BM_AllocFreeThroughHookAccounted(benchmark::State& state) {
  alloc_loop(state, driver().hooked_alloc, driver().hooked_free);
}

void BM_LaunchDirect(benchmark::State& state) { launch_loop(state, driver().real_launch); }
void BM_LaunchThroughHookPassthrough(benchmark::State& state) { launch_loop(state, driver().hooked_launch); }

CUresult fake_func_name(const char** name, CUfunction) {
  *name = "_Z12bench_kernelPf";
  return CUDA_SUCCESS;
}

void configure_ids() {
  kernelid::Settings s;
  s.func_get_name = fake_func_name;
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
  configure_ids();
  static int function;   // one CUfunction for every run, as a program's kernel keeps its handle
  const auto f = reinterpret_cast<CUfunction>(&function);
  for (auto _ : state) benchmark::DoNotOptimize(id_at_depth(6, f));
}

// 64 functions with names of their own, as a framework's kernels have.
int g_cold_functions[64];
CUresult cold_func_name(const char** name, CUfunction f) {
  static const auto names = [] {
    std::array<std::array<char, 24>, 64> n{};
    for (size_t i = 0; i < n.size(); ++i) std::snprintf(n[i].data(), n[i].size(), "_Z13cold_kernel%zuv", i);
    return n;
  }();
  const auto i = size_t(reinterpret_cast<int*>(f) - g_cold_functions);
  *name = i < names.size() ? names[i].data() : "?";
  return CUDA_SUCCESS;
}

// Launch shape n % 256 (64 functions x 4 grids) from below a few caller frames, so that every
// launch comes from one call site whichever loop called it; or, for the floor, only the frames.
uint64_t shape_at_depth(int depth, unsigned n);
uint64_t (*volatile g_shape_at_depth)(int, unsigned) = shape_at_depth;
bool g_frames_only = false;
__attribute__((noinline)) uint64_t shape_at_depth(int depth, unsigned n) {
  if (depth > 0) return g_shape_at_depth(depth - 1, n) + 1;
  if (g_frames_only) return n;
  const uint32_t grid[3] = {1 + (n / 64) % 4, 1, 1}, block[3] = {128, 1, 1};
  return kernelid::kernel_id(reinterpret_cast<CUfunction>(&g_cold_functions[n % 64]), grid, block, 0);
}

// The kernel ID as a framework's launching thread meets it: between two launches the framework's
// own work has pushed the hook's tables and code out of the caches. Each launch is timed alone,
// after reading a buffer of range(1) MiB (2: past this VM's L2; 48: past its L3); the 256 shapes
// in turn, each seen before and past the thread's exact first launches. range(0) = 0 times the
// caller frames and the clock alone (the floor). Counters: the median and p90 of single launches
// (most predict their call site; one in verify_interval() walks) and the walks.
void BM_KernelIdColdCaches(benchmark::State& state) {
  kernelid::Settings settings;
  settings.func_get_name = cold_func_name;
  kernelid::configure(settings);
  g_frames_only = state.range(0) == 0;
  unsigned n = 0;
  for (int i = 0; i < 2048; ++i) benchmark::DoNotOptimize(shape_at_depth(6, n++));
  // Read, not written: dirty lines' write-backs would compete with the timed launch's misses.
  std::vector<uint64_t> evict((size_t(state.range(1)) << 20) / sizeof(uint64_t), 1);
  std::vector<double> ns;
  ns.reserve(state.max_iterations);
  const uint64_t walks_before = kernelid::walk_counts().walks;
  uint64_t sum = 0;
  for (auto _ : state) {
    for (size_t i = 0; i < evict.size(); i += 64 / sizeof(uint64_t)) sum += evict[i];
    benchmark::DoNotOptimize(sum);
    const auto start = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(shape_at_depth(6, n++));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    state.SetIterationTime(s);
    ns.push_back(s * 1e9);
  }
  std::sort(ns.begin(), ns.end());
  state.counters["p50_ns"] = ns.empty() ? 0 : ns[ns.size() / 2];
  state.counters["p90_ns"] = ns.empty() ? 0 : ns[ns.size() * 9 / 10];
  state.counters["walks"] = double(kernelid::walk_counts().walks - walks_before);
}

// Measure mode's choice for a launch of a program sampled one iteration in 8 (measure_mode.cpp:
// count the launch in its iteration, and ask whether that iteration is measured or, far longer than
// the others, promoted). Threads > 1: launching threads share the counter's cache line.
fikit::hook::measure::IterationLengths g_lengths;
std::atomic<uint64_t> g_epoch{0};
void BM_MeasureSampledChoice(benchmark::State& state) {
  for (auto _ : state) {
    const uint64_t in_iteration = g_lengths.launched();
    const uint64_t epoch = g_epoch.load(std::memory_order_relaxed);
    bool m = fikit::hook::measure::sampled_iteration(epoch, 1, 8);
    if (!m) m = in_iteration >= g_lengths.long_after(4096);
    benchmark::DoNotOptimize(m);
    if ((in_iteration & 1023) == 0 && state.thread_index() == 0) {   // an iteration ends now and then
      g_lengths.ended(m);
      g_epoch.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

void BM_CallSiteCaptureCached(benchmark::State& state) {
  configure_ids();
  for (auto _ : state) benchmark::DoNotOptimize(site_at_depth(6));
}

BENCHMARK(BM_AllocFreeDirect)->Arg(4096)->Arg(1 << 20);
BENCHMARK(BM_AllocFreeThroughHookAccounted)->Arg(4096)->Arg(1 << 20);
BENCHMARK(BM_LaunchDirect);
BENCHMARK(BM_LaunchThroughHookPassthrough);
BENCHMARK(BM_CallSiteCaptureCached);
BENCHMARK(BM_MeasureSampledChoice)->Threads(1)->Threads(2);
BENCHMARK(BM_KernelIdCached);
BENCHMARK(BM_KernelIdColdCaches)->ArgsProduct({{0, 1}, {2, 48}})->ArgNames({"id", "evict_mib"})->UseManualTime()->Iterations(2000);

}  // namespace

BENCHMARK_MAIN();
