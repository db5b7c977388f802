#pragma once
// Access to the real CUDA driver for the hook's own use (events, CUPTI setup, function names):
// these calls bypass the hook's wrappers, so the hook never observes or schedules itself.
#include <cuda.h>

#include <cstdint>

namespace fikit::hook {

// The real driver's entry point called `name` (an exported libcuda symbol, e.g. "cuEventRecord"),
// or nullptr: the seam every lookup goes through (the entry table's real pointers, and the table
// below; tests substitute it). Thread-safe.
void* real_driver_symbol(const char* name) noexcept;

// The real driver's functions the hook calls for its own use, one field per row of driver_calls.def.
struct DriverCalls {
#define FIKIT_DRIVER_CALL(field, symbol, fallback, params) CUresult(*field) params = nullptr;
#include "driver_calls.def"
#undef FIKIT_DRIVER_CALL
};

// The table, resolved once the program has loaded the driver (before that: every field nullptr,
// and the next call tries again). After that a load and a return: fit for the launch path.
const DriverCalls& driver_calls() noexcept;

// Sets the calling thread's stream-capture interaction mode and returns the one it had (the
// driver's cuThreadExchangeStreamCaptureMode; a driver without it: nothing, RELAXED returned).
// While any thread of the program captures a CUDA graph in the global mode (PyTorch's default),
// a "potentially unsafe" call from another thread, cuEventQuery among them, invalidates that
// capture: the hook's own threads make theirs relaxed, as PyTorch's NCCL watchdog does.
CUstreamCaptureMode exchange_capture_mode(CUstreamCaptureMode mode) noexcept;

// What tells a context apart for good (0: none): the driver's context ID (a destroyed context's
// address may be a new one's; its ID never is), else the address (drivers before CUDA 12, which
// have no cuCtxGetId).
inline uint64_t context_key(CUcontext context) noexcept {
  const auto ctx_id = driver_calls().ctx_get_id;
  if (context == nullptr) return 0;
  unsigned long long id = 0;
  if (ctx_id != nullptr && ctx_id(context, &id) == CUDA_SUCCESS && id != 0) return id;
  return reinterpret_cast<uint64_t>(context);
}

// The calling thread's current context, keyed as above (0: none).
inline uint64_t current_context_key() noexcept {
  const auto get_current = driver_calls().ctx_get_current;
  CUcontext context = nullptr;
  if (get_current == nullptr || get_current(&context) != CUDA_SUCCESS) return 0;
  return context_key(context);
}

// Whether the program's contexts on `device` go through MPS (an MPS client): the driver says so
// for each device (CU_DEVICE_ATTRIBUTE_MPS_ENABLED). False when it cannot tell.
inline bool mps_client(CUdevice device) noexcept {
  const auto attribute = driver_calls().device_get_attribute;
  int mps = 0;
  return attribute != nullptr && attribute(&mps, CU_DEVICE_ATTRIBUTE_MPS_ENABLED, device) == CUDA_SUCCESS && mps == 1;
}

// The real driver's event functions, which the hook's own timing and bookkeeping use: a view of
// driver_calls() that says whether all of them are there (tests hand in fakes of their own).
struct EventFns {
  CUresult (*create)(CUevent*, unsigned int) = nullptr;
  CUresult (*record)(CUevent, CUstream) = nullptr;
  CUresult (*query)(CUevent) = nullptr;
  CUresult (*elapsed)(float*, CUevent, CUevent) = nullptr;
  CUresult (*destroy)(CUevent) = nullptr;
  CUresult (*ctx_current)(CUcontext*) = nullptr;
  // Resolves them all; false when one is missing (a driver too old or not loaded).
  bool resolve() noexcept {
    const DriverCalls& d = driver_calls();
    create = d.event_create;
    record = d.event_record;
    query = d.event_query;
    elapsed = d.event_elapsed_time;
    destroy = d.event_destroy;
    ctx_current = d.ctx_get_current;
    return create && record && query && elapsed && destroy && ctx_current;
  }
  // The calling thread's context_key (an event belongs to its context: made, recorded and compared
  // there).
  uint64_t current_context_key() const noexcept {
    CUcontext context = nullptr;
    if (ctx_current(&context) != CUDA_SUCCESS) return 0;
    return context_key(context);
  }
};

}  // namespace fikit::hook
