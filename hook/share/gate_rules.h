#pragma once
// The launch gate's decision as a pure function (docs/scheduling.md, "What a launch below the holder
// may do"): what the directive, the holder's bell and the kernel's prediction allow for one launch.
// LaunchGate (launch_gate.h) acts on it: it checks the in-flight window and gap credit, waits, and
// tells the daemon what it wants. Unit-tested on its own (tests/hook_test/gate_rules_test.cpp).
#include <algorithm>
#include <cstdint>

#include "kernel_rules.h"
#include "protocol.h"

namespace fikit::hook::share {

struct GateInput {
  protocol::State state = protocol::State::Run;   // the directive's
  bool holder_back = false;      // the holder's bell rang and the daemon's directive has not caught up
  uint32_t bound_ns = 0, short_hold_ns = 0;
  uint8_t confine = 0;           // protocol::kConfine*
  bool partition_ready = false;  // the directive names a partition and this launch can run on it
  uint8_t partition_pct = 0;     // the partition the directive names (its width)
  uint64_t return_ns = 0;        // Run: when the task above is predicted back (0: not predicted)
  uint64_t run_credit_until_ns = 0;   // Run: run credit (the predicted return) until then (0: none)
  uint64_t now = 0;
  uint64_t predicted_ns = 0;     // the launch's predicted length
  uint64_t hold_ns = 0;          // how long its blocks hold an SM (its length when not known)
};

enum class Verdict : uint8_t {
  Go,            // now, at full width
  GoPartition,   // on the task's SM partition, once the in-flight window admits it at the partition's width
  Bounded,       // goes at full width once the in-flight window admits it (the bound; in Run also run credit)
  Credit,        // Fill: goes at full width on gap credit that covers it, else `fallback`
  Wait,          // until the directive changes (Hold)
};

struct Decision {
  Verdict verdict = Verdict::Go;
  // With Credit: what to do when no credit covers the launch: GoPartition, or Wait after telling the
  // daemon what it waits to launch (a want).
  Verdict fallback = Verdict::Wait;
};

// What a launch sent to the partition counts against the bound: the time it takes there, about
// 100/pct times its length at full width. Counted, the partition's queue stays as short as the
// bound says: the job's later full-width launches wait (stream order) for what it queued there, so an
// unbounded queue could keep it on a third of the SMs long after the service went idle.
inline uint64_t partition_charge_ns(uint64_t predicted_ns, uint8_t partition_pct) {
  if (partition_pct == 0) return predicted_ns;
  return std::min<uint64_t>(predicted_ns, UINT64_MAX / 100) * 100 / partition_pct;   // no wrap to a small charge
}

inline Decision decide(const GateInput& in) {
  using protocol::State;
  const bool longer_hold = policy::long_hold(in.hold_ns, in.short_hold_ns);
  const bool may_partition = in.partition_ready;
  State state = in.state;
  // The service's controller found that nothing of this job hurts it: as without FIKIT.
  if (state != State::Hold && (in.confine & protocol::kConfineFree)) return {Verdict::Go};
  if (state == State::Run && in.holder_back) state = State::Fill;
  switch (state) {
    case State::Hold:
      return {Verdict::Wait};
    case State::Run:
      // Below a task whose return cannot be foreseen, a long hold would hold its SMs when it comes.
      if (may_partition && (in.confine & protocol::kConfineLong) && longer_hold) return {Verdict::GoPartition};
      // A launch longer than the bound that would still run when the task above is due back.
      if (may_partition && (in.confine & protocol::kConfineActive) && in.return_ns != 0 &&
          in.predicted_ns > in.bound_ns && in.now + in.predicted_ns > in.return_ns)
        return {Verdict::GoPartition};
      // What may run beside the holder when it is active need not be kept small while it is idle.
      if ((in.confine & protocol::kConfineShortBeside) && !longer_hold) return {Verdict::Go};
      return {Verdict::Bounded};
    case State::Fill:
      // MPS client priority dispatches the holder's blocks first; blocks that hold SMs briefly cost
      // it little, unless it keeps the GPU busy back to back (the daemon then leaves the flag off).
      if ((in.confine & protocol::kConfineShortBeside) && !longer_hold) return {Verdict::Go};
      // The daemon found the holder does not mind long holds beside it (or is trying whether it
      // does): at full width, but within the bound, so that a refusal finds little of it queued.
      if (in.confine & protocol::kConfineBoundBeside) return {Verdict::Bounded};
      return {Verdict::Credit,
              may_partition && (in.confine & protocol::kConfineActive) ? Verdict::GoPartition : Verdict::Wait};
  }
  return {Verdict::Go};
}

// How one look carries a decision out (LaunchGate::try_go, in this order): what the rule cannot
// see itself (the in-flight window's work, the gap credit another thread may spend) it names as a
// check. Pure: unit-tested with the decisions (tests/hook_test/gate_rules_test.cpp).
struct Plan {
  enum class Route : uint8_t { FullWidth, Partition };
  Route route = Route::FullWidth;
  uint64_t charge_ns = 0;        // what the launch counts against the in-flight bound
  uint8_t partition_pct = 0;     // Partition: the width it is charged at and sent to
  bool go = false;               // goes now, nothing to check
  bool check_window = false;     // goes if the window admits charge_ns within the bound...
  uint64_t drain_budget_ns = 0;  // ...or drains, with it, within this (run credit; 0: none)
  bool take_credit = false;      // then spends gap credit for it (another thread may have: look again)
  bool overlap = false;          // it goes beside the holder (counted)
  bool want = false;             // it waits for the directive: tell the daemon what it waits to launch
};

// `credit_covers`: the gap credit in hand covers the launch now (read once per look).
inline Plan plan(const GateInput& in, const Decision& d, bool credit_covers) {
  Plan p;
  const bool beside = in.holder_back || in.state == protocol::State::Fill;
  if (d.verdict == Verdict::Go) {
    p.go = true;
    p.overlap = beside;
    p.charge_ns = in.predicted_ns;
    return p;
  }
  const bool credit = d.verdict == Verdict::Credit && credit_covers;
  // Where it goes should it wait out FIKIT_MAX_WAIT_MS: a launch meant for the partition stays off
  // the service's SMs even then.
  const bool to_partition =
      d.verdict == Verdict::GoPartition || (d.verdict == Verdict::Credit && d.fallback == Verdict::GoPartition && !credit);
  if (to_partition) {
    p.route = Plan::Route::Partition;
    p.partition_pct = in.partition_pct;
    p.charge_ns = partition_charge_ns(in.predicted_ns, in.partition_pct);
    p.check_window = true;
    return p;
  }
  p.charge_ns = in.predicted_ns;
  if (d.verdict == Verdict::Bounded) {
    // Before a service's predicted return, a launch goes whatever the bound if the work in flight,
    // it included, drains by then. (Not once the holder's bell rang: it is back. In Fill the credit
    // end is a gap's, spent by credit.)
    const bool run_credit = in.state == protocol::State::Run && !in.holder_back && in.run_credit_until_ns > in.now;
    p.drain_budget_ns = run_credit ? in.run_credit_until_ns - in.now : 0;
    p.check_window = true;
    p.overlap = beside;
    return p;
  }
  if (credit) {
    // On credit too, no more than the bound in flight: an early stop then costs the holder little,
    // and a credit that arrived late cannot pile work into its next kernels.
    p.check_window = true;
    p.take_credit = true;
    return p;
  }
  p.want = d.verdict == Verdict::Credit;
  return p;
}

}  // namespace fikit::hook::share
