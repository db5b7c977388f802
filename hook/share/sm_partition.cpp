#include "sm_partition.h"

#include <algorithm>

#include "driver.h"
#include "log.h"

namespace fikit::hook::share {
namespace {

// Whether the driver has every call a partition needs (driver_calls.def; green contexts: CUDA 12.4).
bool green_ready(const DriverCalls& d) noexcept {
  return d.ctx_get_current && d.ctx_get_device && d.primary_ctx_retain && d.primary_ctx_release &&
         d.primary_ctx_get_state && d.device_get_dev_resource && d.dev_sm_resource_split &&
         d.dev_resource_generate_desc && d.green_ctx_create && d.green_ctx_stream_create && d.green_ctx_destroy &&
         d.event_create && d.event_record && d.event_destroy && d.stream_wait_event && d.stream_synchronize &&
         d.stream_destroy;
}

size_t slot_of(CUstream s) noexcept {
  const uint64_t v = reinterpret_cast<uint64_t>(s);
  return size_t((v >> 4) ^ (v >> 12)) & 63;
}

}  // namespace

bool SmPartition::make(uint8_t pct) noexcept {
  const DriverCalls& f = driver_calls();
  auto fail = [this](const char* what, CUresult r) {
    failed_.store(true, std::memory_order_relaxed);
    log(LogLevel::Warn, "share mode: no SM partition (%s: error %d): launches that may not run beside the service "
        "wait instead", what, int(r));
    return false;
  };
  if (!green_ready(f)) return fail("the driver has no green contexts", CUDA_ERROR_NOT_SUPPORTED);
  CUcontext current = nullptr;
  CUdevice dev = 0;
  CUresult r = f.ctx_get_current(&current);
  if (r != CUDA_SUCCESS || current == nullptr) return fail("no current context", r);
  if ((r = f.ctx_get_device(&dev)) != CUDA_SUCCESS) return fail("cuCtxGetDevice", r);
  // Only the primary context's memory is the green context's too. Retained only while active (so
  // never created here, and releasing the extra reference cannot destroy it: someone else holds it).
  unsigned flags = 0;
  int active = 0;
  CUcontext primary = nullptr;
  if ((r = f.primary_ctx_get_state(dev, &flags, &active)) != CUDA_SUCCESS) return fail("cuDevicePrimaryCtxGetState", r);
  if (active && (r = f.primary_ctx_retain(&primary, dev)) == CUDA_SUCCESS) f.primary_ctx_release(dev);
  if (!active || primary != current)
    return fail("the program uses a context of its own, not the device's primary context", CUDA_ERROR_INVALID_CONTEXT);
  CUdevResource all{}, part{}, rest{};
  if ((r = f.device_get_dev_resource(dev, &all, CU_DEV_RESOURCE_TYPE_SM)) != CUDA_SUCCESS) return fail("cuDeviceGetDevResource", r);
  const unsigned step = std::max({1u, all.sm.minSmPartitionSize, all.sm.smCoscheduledAlignment});
  unsigned want = unsigned(uint64_t(all.sm.smCount) * pct / 100) / step * step;
  want = std::clamp(want, std::max(1u, all.sm.minSmPartitionSize), all.sm.smCount);
  unsigned groups = 1;
  if ((r = f.dev_sm_resource_split(&part, &groups, &all, &rest, 0, want)) != CUDA_SUCCESS || groups != 1) return fail("cuDevSmResourceSplitByCount", r);
  CUdevResourceDesc desc = nullptr;
  if ((r = f.dev_resource_generate_desc(&desc, &part, 1)) != CUDA_SUCCESS) return fail("cuDevResourceGenerateDesc", r);
  CUgreenCtx green = nullptr;
  if ((r = f.green_ctx_create(&green, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM)) != CUDA_SUCCESS) return fail("cuGreenCtxCreate", r);
  primary_ = context_key(current);
  green_ = green;
  sms_.store(part.sm.smCount, std::memory_order_relaxed);
  made_.store(true, std::memory_order_release);
  log(LogLevel::Info, "share mode: SM partition of %u of %u SMs for launches that may not run beside the service",
      part.sm.smCount, all.sm.smCount);
  return true;
}

SmPartition::Entry* SmPartition::find(CUstream app) noexcept {
  const size_t n = count_.load(std::memory_order_acquire);
  if (n == 0) return nullptr;
  for (size_t i = 0, at = slot_of(app); i < kMaxStreams; ++i, at = (at + 1) % kMaxStreams) {
    Entry& e = entries_[at];
    if (!e.used.load(std::memory_order_acquire)) return nullptr;
    if (e.app == app) return &e;
  }
  return nullptr;
}

SmPartition::Entry* SmPartition::add(CUstream app) noexcept {
  if (Entry* e = find(app)) return e;
  const DriverCalls& f = driver_calls();
  for (size_t i = 0, at = slot_of(app); i < kMaxStreams; ++i, at = (at + 1) % kMaxStreams) {
    Entry& e = entries_[at];
    if (e.used.load(std::memory_order_relaxed)) continue;
    CUstream shadow = nullptr;
    CUevent before = nullptr, after = nullptr;
    if (f.green_ctx_stream_create(&shadow, static_cast<CUgreenCtx>(green_), CU_STREAM_NON_BLOCKING, 0) != CUDA_SUCCESS ||
        f.event_create(&before, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS ||
        f.event_create(&after, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
      return nullptr;   // a few handles may leak on this failure path; it is not retried for this stream
    e.app = app;
    e.shadow = shadow;
    e.before = before;
    e.after = after;
    e.used.store(true, std::memory_order_release);
    count_.fetch_add(1, std::memory_order_release);
    return &e;
  }
  return nullptr;   // more streams than the table holds: those launches go where they were meant to
}

CUstream SmPartition::enter(CUstream app, uint8_t pct) noexcept {
  if (failed_.load(std::memory_order_relaxed) || pct == 0) return nullptr;
  const DriverCalls& f = driver_calls();
  if (!made_.load(std::memory_order_acquire)) {
    std::lock_guard lock(mutex_);
    if (!made_.load(std::memory_order_relaxed) && (failed_.load(std::memory_order_relaxed) || !make(pct))) return nullptr;
  }
  // A launch from another context (the program switched contexts) cannot use this partition, and
  // must not make its stream's entry: a null stream is each context's own, and events made in the
  // other context could never be recorded on the primary's.
  CUcontext current = nullptr;
  if (f.ctx_get_current(&current) != CUDA_SUCCESS || context_key(current) != primary_) return nullptr;
  Entry* e = find(app);
  if (e == nullptr) {
    std::lock_guard lock(mutex_);
    if ((e = add(app)) == nullptr) return nullptr;
  }
  if (f.event_record(e->before, app) != CUDA_SUCCESS || f.stream_wait_event(e->shadow, e->before, 0) != CUDA_SUCCESS)
    return nullptr;
  return e->shadow;
}

void SmPartition::forget_context(uint64_t context_key, bool destroy) noexcept {
  std::lock_guard lock(mutex_);
  if (!made_.load(std::memory_order_relaxed) || primary_ != context_key) return;
  const DriverCalls& f = driver_calls();
  // Launches into it come from that context only, whose teardown this is: nobody else reads these.
  made_.store(false, std::memory_order_release);
  count_.store(0, std::memory_order_release);
  for (Entry& e : entries_) {
    if (!e.used.load(std::memory_order_relaxed)) continue;
    e.used.store(false, std::memory_order_release);
    if (destroy) {
      f.event_destroy(e.before);
      f.event_destroy(e.after);
      f.stream_destroy(e.shadow);
    }
    e.app = e.shadow = nullptr;
    e.before = e.after = nullptr;
  }
  if (destroy) f.green_ctx_destroy(static_cast<CUgreenCtx>(green_));
  green_ = nullptr;
  primary_ = 0;
  sms_.store(0, std::memory_order_relaxed);
}

void SmPartition::leave(CUstream app, CUstream shadow) noexcept {
  Entry* e = find(app);
  if (e == nullptr || e->shadow != shadow) return;
  const DriverCalls& f = driver_calls();
  // Should the hop fail, the application's next work could start before the launch ended: waiting
  // here for it keeps the order, at the cost of this thread's time.
  if (f.event_record(e->after, shadow) != CUDA_SUCCESS || f.stream_wait_event(app, e->after, 0) != CUDA_SUCCESS) {
    log(LogLevel::Warn, "share mode: a launch on the SM partition is waited for on the host (the stream hop failed)");
    (void)f.stream_synchronize(shadow);
  }
}

}  // namespace fikit::hook::share
