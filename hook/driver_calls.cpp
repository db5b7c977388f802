#include <atomic>
#include <mutex>
#include <string_view>

#include "driver.h"

namespace fikit::hook {

namespace {
DriverCalls g_calls;
std::atomic<bool> g_resolved{false};
std::mutex g_resolving;   // only until the driver is loaded; never taken after that
const DriverCalls kNone{};

void resolve(DriverCalls& d) noexcept {
  const auto lookup = [](const char* symbol, const char* fallback) {
    void* fn = real_driver_symbol(symbol);
    return fn != nullptr || fallback == nullptr ? fn : real_driver_symbol(fallback);
  };
#define FIKIT_DRIVER_CALL(field, symbol, fallback, params) \
  d.field = reinterpret_cast<decltype(d.field)>(lookup(#symbol, std::string_view(#fallback) == "none" ? nullptr : #fallback));
#include "driver_calls.def"
#undef FIKIT_DRIVER_CALL
}
}  // namespace

const DriverCalls& driver_calls() noexcept {
  if (g_resolved.load(std::memory_order_acquire)) return g_calls;
  std::lock_guard lock(g_resolving);
  if (!g_resolved.load(std::memory_order_relaxed)) {
    // A program that has not loaded the driver has no CUDA work for the hook to see: nothing yet.
    if (real_driver_symbol("cuCtxGetCurrent") == nullptr) return kNone;
    resolve(g_calls);
    g_resolved.store(true, std::memory_order_release);
  }
  return g_calls;
}

CUstreamCaptureMode exchange_capture_mode(CUstreamCaptureMode mode) noexcept {
  const auto exchange = driver_calls().thread_exchange_capture_mode;
  if (exchange == nullptr || exchange(&mode) != CUDA_SUCCESS) return CU_STREAM_CAPTURE_MODE_RELAXED;
  return mode;
}

}  // namespace fikit::hook
