#pragma once
// Predicted durations and following gaps of this task's kernels, read once from the profile store
// into a sorted table, so the launch path looks them up without allocating or locking.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "config.h"

namespace fikit::hook::share {

// A kernel with no profile is charged this long against the in-flight bound: about a training
// kernel's median (docs/scheduling.md); the daemon never lets such a kernel fill a gap.
constexpr uint64_t kUnknownKernelNs = 20'000;

class Predictions {
 public:
  struct Kernel {
    uint64_t id = 0;
    uint64_t dur_ns = kUnknownKernelNs;  // mean: charged against the in-flight bound and credit
    uint64_t dur_max_ns = 0;             // the larger of mean and p90 (the daemon's default estimate)
    uint64_t gap_ns = 0;                 // the larger of mean and p50; 0: it usually ends an iteration
    bool measured = false;
    bool operator<(const Kernel& o) const { return id < o.id; }
  };

  // Reads the task's profile; a missing database or task is logged once and leaves the table empty.
  void load(const Config& cfg) noexcept;
  Kernel of(uint64_t kernel_id) const noexcept;
  size_t size() const noexcept { return table_.size(); }

 private:
  std::vector<Kernel> table_;
};

}  // namespace fikit::hook::share
