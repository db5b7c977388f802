#pragma once
// What a kernel's profile predicts, written once for the daemon's policy and the hook's share mode
// (which must agree: the hook decides a launch alone, the daemon plans gaps and credit from the same
// numbers). Header-only and dependency-free so that both can include it. docs/scheduling.md.
#include <algorithm>
#include <cstdint>
#include <unordered_map>

namespace fikit::policy {

// What the profile store knows about one kernel of one task (nanoseconds).
struct KernelStats {
  uint64_t count = 0;
  double dur_mean = 0;
  uint64_t dur_p50 = 0, dur_p90 = 0;
  uint64_t gap_count = 0;           // gaps after this kernel inside an iteration
  double gap_mean = 0;
  uint64_t gap_p10 = 0, gap_p50 = 0, gap_p90 = 0;
  uint64_t boundary_count = 0;      // gaps after this kernel that ended an iteration
  // How long one of its blocks holds an SM: dur_p50 over its waves (grid / (SMs x blocks per SM));
  // a kernel of one wave (a persistent kernel: one block per SM) holds its SMs for its whole length.
  // Its whole length when its occupancy was not measured.
  uint64_t hold_p50 = 0;
};

// A task's kernels by ID, and what its requests do on the GPU.
struct Profile : std::unordered_map<uint64_t, KernelStats> {
  // Of the time from a request's (an iteration's) first op to its last op's end, the share in
  // which the GPU runs its work, percent: the median over its measured iterations. -1: no run says
  // (profiles stored before schema version 3); busy_percent() then estimates it from the kernels.
  int request_busy_pct = -1;
};

enum class GapEstimator : uint8_t { Mean, P50, P10 };
enum class DurationEstimator : uint8_t { Mean, P50, P90 };

struct Estimators {
  GapEstimator gap = GapEstimator::Mean;                 // FIKIT uses the mean
  DurationEstimator duration = DurationEstimator::P90;
  double boundary_fraction = 0.5;   // a kernel followed by more iteration ends than this has no gap
};

// A kernel's predicted length (never 0).
inline uint64_t predicted_duration(const KernelStats& s, DurationEstimator e) {
  double d = 0;
  switch (e) {
    case DurationEstimator::Mean: d = s.dur_mean; break;
    case DurationEstimator::P50: d = double(s.dur_p50); break;
    case DurationEstimator::P90: d = double(s.dur_p90); break;
  }
  return d < 1 ? 1 : uint64_t(d);
}

// The idle gap predicted after a kernel; 0 when it usually ends an iteration (what follows is the
// wait for the next request, not a gap) or was never followed by one.
inline uint64_t predicted_gap(const KernelStats& s, const Estimators& e) {
  const double total = double(s.gap_count + s.boundary_count);
  if (s.gap_count == 0 || double(s.boundary_count) > e.boundary_fraction * total) return 0;
  switch (e.gap) {
    case GapEstimator::Mean: return uint64_t(s.gap_mean);
    case GapEstimator::P50: return s.gap_p50;
    case GapEstimator::P10: return s.gap_p10;
  }
  return 0;
}

// Waves of a launch: how many times over its blocks fill the SMs it may use.
inline uint64_t waves_of(uint64_t blocks, uint32_t blocks_per_sm, uint32_t sms) {
  if (blocks == 0 || blocks_per_sm == 0 || sms == 0) return 1;
  const uint64_t slots = uint64_t(blocks_per_sm) * sms;
  return (blocks + slots - 1) / slots;
}

// Launches whose blocks hold an SM up to this are short holds (fikit-scheduler --short-hold's
// default): under MPS they may run beside an active service; longer ones are long holds.
inline constexpr uint64_t kDefaultShortHoldNs = 1'000'000;

// How long a kernel's blocks hold an SM: its length over its waves (its length when one wave).
inline uint64_t sm_hold_ns(uint64_t duration_ns, uint64_t waves) { return duration_ns / std::max<uint64_t>(waves, 1); }
// A long hold: its blocks keep an SM longer than `short_hold_ns` (the launch gate's rule, and the
// hold class fikit-profile compare checks).
inline bool long_hold(uint64_t sm_hold_ns, uint64_t short_hold_ns) { return sm_hold_ns > short_hold_ns; }

}  // namespace fikit::policy
