#pragma once
// Where a launch of a task below the holder waits until its directive lets it go, or is sent to the
// task's SM partition instead (docs/scheduling.md). What is allowed is gate_rules.h's decide();
// this loop applies it:
//   Run:  waits while its predicted work in flight would exceed the bound (InflightWindow), unless
//         the directive carries a service's predicted return and that work drains before it;
//   Fill: goes on gap credit that covers the launch; else it tells the daemon what it waits to launch
//         (want) so BestPrioFit can pick it, or (MPS) goes to the partition, within the bound too
//         (counted at the partition's width: partition_charge_ns);
//   Hold: waits until the directive changes.
// Every wait is bounded: by the daemon answering (lost: the launch passes through) and by
// FIKIT_MAX_WAIT_MS (then the launch goes anyway, counted and logged): a program never hangs
// on the hook, whatever the daemon, or a process squatting on its port, says.
#include <cstdint>

#include "client.h"
#include "gate_rules.h"
#include "inflight_window.h"

namespace fikit::hook::share {

class LaunchGate {
 public:
  LaunchGate(Client& client, InflightWindow& window, uint64_t max_wait_ns)
      : client_(client), window_(window), max_wait_ns_(max_wait_ns) {}

  enum class Route : uint8_t { FullWidth, Partition };
  struct Admission {
    Route route = Route::FullWidth;
    uint64_t charge_ns = 0;      // what it counts against the in-flight bound (InflightWindow::launched)
    uint8_t partition_pct = 0;   // Partition: the size it was charged at, the one to send it to
  };
  // Returns when the launch may go (always within max_wait_ns), and where. `hold_ns`: how long its
  // blocks hold an SM; `partition_ready`: it can run on the task's partition (the lane has one, or
  // can make it, and the launch may be sent to another stream).
  Admission admit(uint64_t kernel_id, uint64_t predicted_ns, uint64_t hold_ns, bool profiled,
                  bool partition_ready) noexcept;

 private:
  static constexpr uint64_t kWantAgainNs = 100'000'000;   // a want may have been lost: said again this often
  // What one look at the directive allows: go; look again at once (credit another thread spent);
  // wait for the GPU (this task's work in flight to drain) or for the directive to change.
  enum class Step : uint8_t { Go, LookAgain, WaitGpu, WaitDirective };
  struct Bell {
    uint32_t ring = 0;      // the holder's bell, when it rang and the directive has not caught up
    uint64_t rung_at = 0;
  };
  struct Want {
    uint32_t for_changes = UINT32_MAX;   // the directive (changes count) the last want answered
    uint64_t at = 0;
  };
  // The rules' input from the directive as this look sees it (and the bell, which may have rung).
  GateInput input_of(const DirectiveCell::View& v, uint64_t now, uint64_t predicted_ns, uint64_t hold_ns,
                     bool partition_ready, Bell* bell) noexcept;
  // Applies the rules' decision: where the launch would go (*admission) and whether it goes now.
  Step try_go(const DirectiveCell::View& v, const GateInput& in, const Decision& d, uint64_t kernel_id, bool profiled,
              Want* want, Admission* admission) noexcept;
  // FIKIT_MAX_WAIT_MS ran out: counted, and said at most every 10 s.
  void forced(uint64_t now, protocol::State state, bool waited_for_own_work) noexcept;

  Client& client_;
  InflightWindow& window_;
  uint64_t max_wait_ns_;
};

}  // namespace fikit::hook::share
