#include "launch_gate.h"

#include <algorithm>
#include <atomic>

#include "clock.h"
#include "log.h"

namespace fikit::hook::share {
namespace {
constexpr uint64_t kLookAgainNs = 10'000'000;     // a waiting launch re-checks the daemon's liveness
constexpr uint64_t kForcedLogEveryNs = 10'000'000'000;
std::atomic<uint64_t> g_last_forced_log{0};

// Why a launch waited its longest, from what it waited for.
const char* forced_reason(protocol::State state, bool waited_for_own_work) {
  if (state == protocol::State::Hold)
    return "a task above is being measured, and holds lower tasks until it is done (at most the daemon's "
           "measure-hold-max, 120 s by default; fikit-scheduler status shows which)";
  if (waited_for_own_work)
    return "this task's own work in flight did not drain below its bound (its kernels are long for the bound: "
           "the daemon's run-bound)";
  return "the task above kept the GPU busy without a gap this long (fikit-scheduler status shows it active)";
}
}  // namespace

GateInput LaunchGate::input_of(const DirectiveCell::View& v, uint64_t now, uint64_t predicted_ns, uint64_t hold_ns,
                               bool partition_ready, Bell* bell) noexcept {
  GateInput in;
  in.state = v.state;
  // The holder's bell rang and the daemon's directive has not caught up: it is Fill already.
  if (v.state == protocol::State::Run && client_.bell_pending(v.watch_slot, v.watch_generation, now, &bell->ring,
                                                              &bell->rung_at)) {
    in.holder_back = true;
    client_.holder_returned(bell->ring, bell->rung_at);
  }
  in.bound_ns = v.bound_ns;
  in.short_hold_ns = v.short_hold_ns;
  in.confine = v.confine;
  in.partition_ready = partition_ready && v.partition_pct != 0;
  in.partition_pct = v.partition_pct;
  in.return_ns = v.return_ns;
  in.run_credit_until_ns = v.state == protocol::State::Run ? v.credit_until_ns : 0;
  in.now = now;
  in.predicted_ns = predicted_ns;
  in.hold_ns = hold_ns;
  return in;
}

LaunchGate::Step LaunchGate::try_go(const DirectiveCell::View& v, const GateInput& in, const Decision& d,
                                    uint64_t kernel_id, bool profiled, Want* want, Admission* admission) noexcept {
  DirectiveCell& cell = client_.directive();
  ShareStats& stats = client_.stats();
  const uint64_t predicted_ns = in.predicted_ns, now = in.now;
  // Gap credit is looked at once per look (another thread may spend it).
  const Plan p = plan(in, d, d.verdict == Verdict::Credit && cell.credit_covers(predicted_ns, now));
  *admission = {p.route == Plan::Route::Partition ? Route::Partition : Route::FullWidth, p.charge_ns, p.partition_pct};
  if (p.check_window && !window_.admit(p.charge_ns, in.bound_ns, p.drain_budget_ns)) return Step::WaitGpu;
  if (p.take_credit) {
    if (!cell.take_credit(predicted_ns, now)) return Step::LookAgain;
    stats.on_credit();
    return Step::Go;
  }
  if (p.go || p.check_window) {
    if (p.overlap) stats.on_overlap();   // beside the holder (flag 8)
    return Step::Go;
  }
  if (p.want && (want->for_changes != v.changes || now - want->at >= kWantAgainNs)) {
    client_.send_want(kernel_id, predicted_ns, profiled);
    want->for_changes = v.changes;
    want->at = now;
  }
  return Step::WaitDirective;
}

void LaunchGate::forced(uint64_t now, protocol::State state, bool waited_for_own_work) noexcept {
  ShareStats& stats = client_.stats();
  stats.forced();
  uint64_t last = g_last_forced_log.load(std::memory_order_relaxed);
  if (now - last >= kForcedLogEveryNs && g_last_forced_log.compare_exchange_strong(last, now))
    log(LogLevel::Warn, "share mode: a launch waited %llu ms (FIKIT_MAX_WAIT_MS) and goes ahead anyway (%llu so "
        "far): %s", static_cast<unsigned long long>(max_wait_ns_ / 1'000'000),
        static_cast<unsigned long long>(stats.forced_count()), forced_reason(state, waited_for_own_work));
}

LaunchGate::Admission LaunchGate::admit(uint64_t kernel_id, uint64_t predicted_ns, uint64_t hold_ns, bool profiled,
                                        bool partition_ready) noexcept {
  DirectiveCell& cell = client_.directive();
  // One clock read for a launch that goes at once (most of them); a waiting one reads it after
  // each wait.
  const uint64_t start = monotonic_ns();
  const uint64_t deadline = start + max_wait_ns_;
  uint64_t now = start;
  Want want;
  uint64_t stopped_ns = 0;          // of the wait, the part spent stopped (not Run) rather than on the GPU
  Admission admission{Route::FullWidth, predicted_ns, 0};
  for (;;) {
    if (!client_.connected()) break;   // no daemon: unscheduled
    const DirectiveCell::View v = cell.load();
    if (v.role & protocol::kRoleHolder) break;
    Bell bell;
    const GateInput in = input_of(v, now, predicted_ns, hold_ns, partition_ready, &bell);
    const Step step = try_go(v, in, decide(in), kernel_id, profiled, &want, &admission);
    if (step == Step::Go) break;
    if (step == Step::LookAgain) {
      now = monotonic_ns();
      continue;
    }
    if (now >= deadline) {
      forced(now, v.state, step == Step::WaitGpu);
      break;
    }
    if (step == Step::WaitGpu) {
      window_.wait_progress(std::min(deadline, now + kLookAgainNs));
      now = monotonic_ns();
    } else {
      // A bell waits for the daemon's directive only so long: past that the ring is ignored.
      const uint64_t until = bell.ring != 0 ? std::min(deadline, bell.rung_at + protocol::kBellConfirmNs + 1) : deadline;
      cell.wait_change(v.changes, std::max<uint64_t>(std::min(until - std::min(until, now), kLookAgainNs), 1000));
      const uint64_t after = monotonic_ns();
      stopped_ns += after - now;
      now = after;
    }
  }
  // `now` is the clock read after the last wait, or `start` for a launch that never waited.
  client_.launch_went(now);
  if (now - start > 1'000) client_.stats().waited(now - start, stopped_ns);
  return admission;
}

}  // namespace fikit::hook::share
