#pragma once
// Access to the real CUDA driver for the hook's own use (events, CUPTI setup, function names):
// these calls bypass the hook's wrappers, so the hook never observes or schedules itself.
#include <cuda.h>

namespace fikit::hook {

// The real driver's entry point called `name` (an exported libcuda symbol, e.g. "cuEventRecord"),
// or nullptr. Thread-safe; resolve once and cache the result in the caller.
void* real_driver_symbol(const char* name) noexcept;

template <class Fn>
Fn real_driver(const char* name) noexcept {
  return reinterpret_cast<Fn>(real_driver_symbol(name));
}

}  // namespace fikit::hook
