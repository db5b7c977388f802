// Mode life cycle: start on the first launch or sync, shut down at exit, start afresh in a forked
// child. Which mode starts is chosen above this file (mode_choice.cpp).
#include <fcntl.h>
#include <pthread.h>

#include <cstdlib>

#include "config.h"
#include "driver.h"
#include "kernelid.h"
#include "log.h"
#include "memory/guard.h"
#include "mode.h"
#include "mode_state.h"
#include "preempt/own_slice.h"
#include "stats.h"

namespace fikit::hook {
namespace detail {

std::atomic<Mode*> g_mode{reinterpret_cast<Mode*>(kNotStarted)};

}  // namespace detail
namespace {

using KernelGetNameFn = CUresult (*)(const char** name, CUkernel kernel);
kernelid::FuncGetNameFn g_func_get_name = nullptr;
KernelGetNameFn g_kernel_get_name = nullptr;

// libcudart >= 12 launches CUkernel handles (from cuLibraryGetKernel) cast to CUfunction, which
// cuFuncGetName rejects; cuKernelGetName names those. Called once per handle (kernelid caches).
CUresult function_or_kernel_name(const char** name, CUfunction func) {
  if (g_func_get_name != nullptr && g_func_get_name(name, func) == CUDA_SUCCESS) return CUDA_SUCCESS;
  if (g_kernel_get_name != nullptr) return g_kernel_get_name(name, reinterpret_cast<CUkernel>(func));
  return CUDA_ERROR_NOT_FOUND;
}

// Occupancy of a kernel at first sight (kernelid::OccupancyFn): what the driver says of the handle
// (or, for a CUkernel, of its function in the current context), and the current context's SMs (a
// green context's own). Measure mode stores it: with the grid it gives the SM hold time.
bool launch_occupancy(CUfunction func, uint32_t threads, uint32_t shared_mem, uint32_t* blocks_per_sm,
                      uint32_t* sm_count) {
  const auto occupancy = driver_calls().occupancy_max_active_blocks;
  const auto kernel_function = driver_calls().kernel_get_function;
  const auto ctx_current = driver_calls().ctx_get_current;
  const auto ctx_resource = driver_calls().ctx_get_dev_resource;
  const auto ctx_device = driver_calls().ctx_get_device;
  const auto attribute = driver_calls().device_get_attribute;
  if (occupancy == nullptr || threads == 0) return false;
  int blocks = 0;
  if (occupancy(&blocks, func, int(threads), shared_mem) != CUDA_SUCCESS) {
    CUfunction resolved = nullptr;
    if (kernel_function == nullptr || kernel_function(&resolved, reinterpret_cast<CUkernel>(func)) != CUDA_SUCCESS ||
        occupancy(&blocks, resolved, int(threads), shared_mem) != CUDA_SUCCESS)
      return false;
  }
  int sms = 0;
  CUcontext ctx = nullptr;
  CUdevResource resource{};
  CUdevice dev = 0;
  if (ctx_current != nullptr && ctx_resource != nullptr && ctx_current(&ctx) == CUDA_SUCCESS && ctx != nullptr &&
      ctx_resource(ctx, &resource, CU_DEV_RESOURCE_TYPE_SM) == CUDA_SUCCESS)
    sms = int(resource.sm.smCount);
  if (sms <= 0 && ctx_device != nullptr && attribute != nullptr && ctx_device(&dev) == CUDA_SUCCESS)
    (void)attribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
  if (blocks <= 0 || sms <= 0) return false;
  *blocks_per_sm = uint32_t(blocks);
  *sm_count = uint32_t(sms);
  return true;
}

void configure_kernel_ids(const Config& cfg) noexcept {
  kernelid::Settings settings;
  settings.depth = cfg.backtrace_depth;
  g_func_get_name = driver_calls().func_get_name;
  g_kernel_get_name = driver_calls().kernel_get_name;
  settings.func_get_name = function_or_kernel_name;
  settings.occupancy = launch_occupancy;
  if (cfg.trace_ids_path[0] != '\0') {
    settings.trace_fd = open(cfg.trace_ids_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (settings.trace_fd < 0) log(LogLevel::Error, "FIKIT_TRACE_IDS=%s cannot be opened", cfg.trace_ids_path);
  }
  kernelid::configure(settings);
}

void shutdown_at_exit() noexcept {
  // Launches from later exit handlers or other threads pass through from here on.
  Mode* mode = detail::g_mode.exchange(nullptr, std::memory_order_acq_rel);
  if (reinterpret_cast<uintptr_t>(mode) > detail::kStarting) mode->shutdown();
  if (stats::enabled()) stats::print();
}

void reset_in_child() noexcept {
  // The parent's mode (its sockets, threads, events) does not exist here: start afresh on first use.
  detail::g_mode.store(reinterpret_cast<Mode*>(detail::kNotStarted), std::memory_order_release);
  stats::reset();
  kernelid::reset_after_fork();
  memory::reset_after_fork();
  preempt::reset_after_fork();
}

// Runs when the hook is loaded: no CUDA here, a program that never uses CUDA runs unchanged.
// Registered this early, the exit handler runs after the program's own ones and before libraries
// (the driver included) are unloaded.
__attribute__((constructor)) void on_load() noexcept {
  stats::g_enabled.store(config().stats, std::memory_order_relaxed);
  memory::start(config());
  preempt::watch_driver();   // a program linked with libcuda has it loaded already
  std::atexit(shutdown_at_exit);
  pthread_atfork(nullptr, nullptr, reset_in_child);
}

}  // namespace

Mode* detail::start_mode(Mode* seen) noexcept {
  if (reinterpret_cast<uintptr_t>(seen) == kStarting) return nullptr;
  Mode* expected = reinterpret_cast<Mode*>(kNotStarted);
  if (!g_mode.compare_exchange_strong(expected, reinterpret_cast<Mode*>(kStarting), std::memory_order_acq_rel)) {
    return reinterpret_cast<uintptr_t>(expected) > kStarting ? expected : nullptr;
  }
  const Config& cfg = config();
  configure_kernel_ids(cfg);
  Mode* mode = kMakeMode(cfg);
  // A factory that already called set_mode (auto mode switching at once) has the last word.
  expected = reinterpret_cast<Mode*>(kStarting);
  g_mode.compare_exchange_strong(expected, mode, std::memory_order_acq_rel);
  return settled_mode(g_mode.load(std::memory_order_acquire));
}

void set_mode(Mode* mode) noexcept { detail::g_mode.store(mode, std::memory_order_release); }

}  // namespace fikit::hook
