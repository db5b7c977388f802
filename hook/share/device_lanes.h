#pragma once
// Share mode takes part in each GPU's scheduling domain separately: one lane per device this
// process launches on, each with its own session with the daemon (registered under the device's
// UUID, which CUDA_VISIBLE_DEVICES does not remap; a MIG instance has its own), its own directive,
// in-flight window and launch gate. A launch finds its lane from the current context: a
// thread-local cache hit costs one cuCtxGetCurrent; a context never seen before takes a mutex once
// (its lane may need a new client, which registers, bounded by the daemon timeout).
#include <cuda.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>

#include "client.h"
#include "config.h"
#include "inflight_window.h"
#include "launch_gate.h"
#include "protocol.h"
#include "sm_partition.h"

namespace fikit::hook::share {

// What share mode keeps per device.
struct Lane {
  Lane(Client& c, uint64_t max_wait_ns) : client(c), gate(c, window, max_wait_ns) {}
  Client& client;
  InflightWindow window;
  LaunchGate gate;
  SmPartitions partition;   // each size made on the first launch sent there
  // Launching threads share these; relaxed is enough: a stale value costs one extra or one missing
  // notification, never the program's correctness.
  std::atomic<bool> idle{true};
  std::atomic<bool> gap_open{false};
  std::atomic<uint64_t> last_notify_ns{0};
  std::atomic<uint64_t> last_launch_ns{0};
  std::atomic<uint64_t> last_kernel{0};
};

// The process's client for `device` (created on first use, never destroyed: launching threads may
// still read it at exit; a forked child makes its own), registered in `mode`; later calls only
// switch its mode. nullptr on failure. `answered`: whether the daemon answered within its timeout
// (when wait_registered). Shared by the measure mode's announcement and share mode's lanes.
Client* client_for(const Config& cfg, protocol::TaskMode mode, const protocol::DeviceUuid& device,
                   bool wait_registered, bool& answered) noexcept;
// The device of the current context, by UUID (zeros: no context).
protocol::DeviceUuid current_device() noexcept;
// At exit: every client of this process says goodbye and stops (those a fork inherited are left).
void stop_clients() noexcept;

class DeviceLanes {
 public:
  static constexpr size_t kMaxLanes = 16;      // devices; launches on more pass through (logged)
  static constexpr size_t kMaxContexts = 64;   // contexts remembered (several may share a device)

  // `on_new_lane(context, lane)`: called once for each lane made, before any launch uses it.
  using NewLaneFn = void (*)(void* context, Lane& lane);
  DeviceLanes(const Config& cfg, NewLaneFn on_new_lane, void* context)
      : cfg_(cfg), on_new_lane_(on_new_lane), context_(context) {}
  // The lane of the current context; nullptr: none (no context, or no lane could be made).
  // `answered`, when a lane was made now: whether its daemon answered.
  Lane* current(bool* created = nullptr, bool* answered = nullptr) noexcept;

  // Before the program destroys (or resets) `ctx`: a context made later may get its handle, and
  // must find its own device's lane.
  void forget_context(CUcontext ctx) noexcept;

  template <class F>
  void each(F&& f) noexcept {
    each_of_first(count(), f);
  }
  // The lanes made so far, and the first n of them (lanes are only ever added).
  size_t count() const noexcept { return lane_count_.load(std::memory_order_acquire); }
  template <class F>
  void each_of_first(size_t n, F&& f) noexcept {
    for (size_t i = 0; i < n; ++i) f(*lanes_[i]);
  }

 private:
  Lane* slow_path(CUcontext ctx, bool* created, bool* answered) noexcept;

  const Config& cfg_;
  NewLaneFn on_new_lane_;
  void* context_;
  std::mutex mutex_;   // slow path only
  std::array<Lane*, kMaxLanes> lanes_{};
  std::array<protocol::DeviceUuid, kMaxLanes> devices_{};
  std::atomic<size_t> lane_count_{0};
  struct Known {
    std::atomic<CUcontext> ctx{nullptr};
    std::atomic<Lane*> lane{nullptr};
  };
  std::array<Known, kMaxContexts> known_{};
  std::atomic<size_t> known_count_{0};
  static inline const CUcontext kForgotten = reinterpret_cast<CUcontext>(uintptr_t{1});   // a destroyed one's place
  std::atomic<uint64_t> forgotten_{0};   // contexts forgotten so far: threads' cached lookups are stale
  bool warned_ = false;
};

}  // namespace fikit::hook::share
