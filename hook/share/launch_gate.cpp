#include "launch_gate.h"

#include <algorithm>
#include <atomic>

#include "clock.h"
#include "log.h"

namespace fikit::hook::share {
namespace {
constexpr uint64_t kLookAgainNs = 10'000'000;     // a waiting launch re-checks the daemon's liveness
constexpr uint64_t kWantAgainNs = 100'000'000;    // a want may have been lost: said again this often
constexpr uint64_t kForcedLogEveryNs = 10'000'000'000;
std::atomic<uint64_t> g_last_forced_log{0};
}  // namespace

void LaunchGate::admit(uint64_t kernel_id, uint64_t predicted_ns, bool profiled) noexcept {
  DirectiveCell& cell = client_.directive();
  ShareStats& stats = client_.stats();
  const uint64_t start = monotonic_ns();
  const uint64_t deadline = start + max_wait_ns_;
  uint32_t want_for = UINT32_MAX;   // the directive (changes count) the last want answered
  uint64_t want_at = 0;
  for (;;) {
    if (!client_.connected()) break;   // no daemon: unscheduled
    const DirectiveCell::View v = cell.load();
    if (v.role & protocol::kRoleHolder) break;
    const uint64_t now = monotonic_ns();
    bool wait_gpu = false;
    if (v.state == protocol::State::Run) {
      if (window_.admit(predicted_ns, v.bound_ns)) break;
      wait_gpu = true;
    } else if (v.state == protocol::State::Fill) {
      if (v.overlap_ns != 0 && predicted_ns <= v.overlap_ns) {
        if (window_.admit(predicted_ns, v.bound_ns)) {
          stats.on_overlap();
          break;
        }
        wait_gpu = true;
      } else if (cell.credit_covers(predicted_ns, now)) {
        // On credit too, no more than the bound in flight: an early stop then costs the holder
        // little, and a credit that arrived late cannot pile work into its next kernels.
        if (window_.admit(predicted_ns, v.bound_ns)) {
          if (cell.take_credit(predicted_ns, now)) {
            stats.on_credit();
            break;
          }
          continue;   // another thread spent it
        }
        wait_gpu = true;
      } else if (want_for != v.changes || now - want_at >= kWantAgainNs) {
        client_.send_want(kernel_id, predicted_ns, profiled);
        want_for = v.changes;
        want_at = now;
      }
    }
    if (now >= deadline) {
      stats.forced();
      uint64_t last = g_last_forced_log.load(std::memory_order_relaxed);
      if (now - last >= kForcedLogEveryNs && g_last_forced_log.compare_exchange_strong(last, now))
        log(LogLevel::Warn, "share mode: a launch waited %llu ms (FIKIT_MAX_WAIT_MS) and goes ahead anyway "
            "(%llu so far): the task above is busy without pause, or the scheduler misbehaves",
            static_cast<unsigned long long>(max_wait_ns_ / 1'000'000),
            static_cast<unsigned long long>(stats.forced_count()));
      break;
    }
    if (wait_gpu) window_.wait_progress(std::min(deadline, now + kLookAgainNs));
    else cell.wait_change(v.changes, std::min(deadline - now, kLookAgainNs));
  }
  const uint64_t waited = monotonic_ns() - start;
  if (waited > 1'000) stats.waited(waited);
}

}  // namespace fikit::hook::share
