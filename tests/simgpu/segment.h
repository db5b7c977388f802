#pragma once
// The shared-memory segment that holds the one simulated device of this machine (per
// FIKIT_SIMGPU_NAME), its robust process-shared lock, and the reaping of dead processes' contexts.
#include <cstddef>
#include <cstdint>

#include "timeline.h"

namespace fikit::simgpu {

uint64_t now_ns() noexcept;  // CLOCK_MONOTONIC

// FIKIT_SIMGPU_NAME, else "fikit-simgpu-<uid>"; written into `out` (a file name under /dev/shm).
void segment_name(char* out, size_t size) noexcept;

enum class OpenResult { Ok, SystemError, LayoutMismatch };

// What a new segment is created with (FIKIT_SIMGPU_SWITCH_NS, _DEVICES, _MPS, _MEMORY_MIB); fixed
// for its life.
struct SegmentConfig {
  uint64_t switch_ns = 2000;
  uint32_t devices = 1;
  Sharing sharing = Sharing::TimeSlice;
  uint64_t memory_bytes = kDefaultMemory;
};

// Maps the segment, creating it race-free (built under a temporary name, then linked into place)
// when it does not exist. `config` applies only when this call creates it.
OpenResult open_segment(const char* name, const SegmentConfig& config, DeviceState** out) noexcept;
// Maps an existing segment; nullptr when there is none (or it is not a simulator segment).
DeviceState* attach_segment(const char* name) noexcept;
// Unlinks the segment; processes that still map it keep their (now private) device.
bool remove_segment(const char* name) noexcept;

// Holds the device lock. On construction: repairs the state if the previous holder died, drops the
// contexts of dead processes (at most every ~1 ms) and advances the simulation to now.
class DeviceLock {
 public:
  explicit DeviceLock(DeviceState& dev) noexcept;
  ~DeviceLock();
  DeviceLock(const DeviceLock&) = delete;
  DeviceLock& operator=(const DeviceLock&) = delete;
  bool ok() const noexcept { return ok_; }
  uint64_t now() const noexcept { return now_; }

 private:
  DeviceState& dev_;
  bool ok_ = false;
  uint64_t now_ = 0;
};

// Sleeps until `deadline_ns`, at most `cap_ns`; yields instead of sleeping for the last few us so
// that waiters return within a few microseconds of the simulated completion.
void wait_until(uint64_t deadline_ns, uint64_t cap_ns) noexcept;

}  // namespace fikit::simgpu
