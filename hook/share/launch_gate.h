#pragma once
// Where a launch of a task below the holder waits until its directive lets it go (docs/scheduling.md):
//   Run:  while its predicted work in flight would exceed the bound (InflightWindow), unless the
//         directive carries a service's predicted return and that work drains before it;
//   Fill: unless gap credit covers the launch, or (MPS) the kernel is short enough to overlap; it
//         tells the daemon what it waits to launch (want) so BestPrioFit can pick it;
//   Hold: until the directive changes.
// Every wait is bounded: by the daemon answering (lost: the launch passes through) and by
// FIKIT_MAX_WAIT_MS (then the launch goes anyway, counted and logged): a program never hangs
// on the hook, whatever the daemon, or a process squatting on its port, says.
#include <cstdint>

#include "client.h"
#include "inflight_window.h"

namespace fikit::hook::share {

class LaunchGate {
 public:
  LaunchGate(Client& client, InflightWindow& window, uint64_t max_wait_ns)
      : client_(client), window_(window), max_wait_ns_(max_wait_ns) {}

  // Returns when the launch may go (always within max_wait_ns).
  void admit(uint64_t kernel_id, uint64_t predicted_ns, bool profiled) noexcept;

 private:
  Client& client_;
  InflightWindow& window_;
  uint64_t max_wait_ns_;
};

}  // namespace fikit::hook::share
