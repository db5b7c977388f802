#pragma once
// The active mode as the wrappers see it (internal to hook/; mode.h is the public seam).
#include <atomic>
#include <cstdint>

// Pointers only: the wrappers that call a mode include mode.h themselves (no circle with mode.cpp).
namespace fikit::hook {
class Mode;
}

namespace fikit::hook::detail {

// nullptr: passthrough. Two sentinels before that: not started yet (the first launch or sync starts
// the mode: the library constructor must not touch CUDA), and starting (another thread, or this one
// re-entering from a mode factory, is starting it: pass through meanwhile).
inline constexpr uintptr_t kNotStarted = 1;
inline constexpr uintptr_t kStarting = 2;

extern std::atomic<Mode*> g_mode;

// Acquire, not relaxed: the Mode object must be seen constructed. On x86-64 both are a plain load.
inline Mode* loaded_mode() noexcept { return g_mode.load(std::memory_order_acquire); }

Mode* start_mode(Mode* seen) noexcept;

// The mode to call for this operation, starting it on first use; nullptr means passthrough.
inline Mode* settled_mode(Mode* seen) noexcept {
  return reinterpret_cast<uintptr_t>(seen) > kStarting ? seen : start_mode(seen);
}

}  // namespace fikit::hook::detail
