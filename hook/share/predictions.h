#pragma once
// Predicted durations and following gaps of this task's kernels, read from the profile store into a
// fixed open-addressing table: the launch path looks them up without allocating or locking, and
// load() may run again (kernels learned in share mode, relearner.h) while launches read it. Entries
// are never removed; an entry's fields are updated in place (a reader may see a mix of old and new
// values for one kernel, which is as good a prediction as either).
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

#include "config.h"
#include "kernel_rules.h"
#include "log.h"

namespace fikit::hook::share {

// A kernel with no profile is charged this long against the in-flight bound: about a training
// kernel's median (docs/scheduling.md); the daemon never lets such a kernel fill a gap.
constexpr uint64_t kUnknownKernelNs = 20'000;
// A job's CUDA graph launched whole (not cut into segments: it could not be) whose length no profile
// has yet: charged this long, so that the in-flight bound lets one such
// graph at a time reach the GPU while the service is idle, not one per 20 us of bound (50 of them
// queued were what a returning service waited behind). Once timed it is charged what it takes.
constexpr uint64_t kUnknownWholeGraphNs = 5'000'000;

// How share mode says what a job started without asking for it expects (predictions.cpp).
LogLevel quiet_level(const Config& cfg) noexcept;

class Predictions {
 public:
  struct Kernel {
    uint64_t id = 0;
    uint64_t dur_ns = kUnknownKernelNs;  // mean: charged against the in-flight bound and credit
    uint64_t dur_est_ns = 0;             // as the daemon predicts it (its duration estimator)
    uint64_t gap_ns = 0;                 // as the daemon predicts it (gap estimator); 0: it ends an iteration
    uint64_t hold_ns = kUnknownKernelNs; // how long its blocks hold an SM (kernel_rules.h)
    bool measured = false;
  };
  static constexpr size_t kCapacity = 1u << 15;   // kernels; a full table leaves the rest unknown (logged)
  static constexpr size_t kShapeCapacity = 1u << 13;   // shapes

  Predictions();
  // Reads the task's profile into the table (again: updates and adds), predicting with `estimators`
  // (the daemon's, from its registration answer; the defaults before). A missing database or task
  // is logged once and leaves the table as it was. Returns the kernels read (a graph's kernels timed
  // inside its launches, known by shape only, not counted).
  size_t load(const Config& cfg) noexcept;
  size_t load(const Config& cfg, const policy::Estimators& estimators) noexcept;
  // The first read, on the program's first CUDA call: it waits at most `busy_timeout_ms` for a
  // database another program holds locked; then false, and the caller reads again later (the
  // program runs on without predictions meanwhile).
  bool load_first(const Config& cfg, int busy_timeout_ms) noexcept;
  policy::Estimators estimators() noexcept;
  Kernel of(uint64_t kernel_id) const noexcept;
  // A kernel its ID does not find, by its shape (kernelid::shape_id: the device function's name and
  // the launch dimensions, without the call site): the longest of the profile's kernels of that
  // shape, charged against the bound in its stead. A kernel launched from another call site than it
  // was measured at (a JAX job's, whose call sites differ between processes) is then no 20-us
  // guess. Sets dur_ns and hold_ns of `k` and returns true when the shape is known; never `measured`
  // (the daemon plans gaps and fills by ID only).
  bool by_shape(uint64_t shape_id, Kernel& k) const noexcept;
  size_t size() const noexcept { return size_.load(std::memory_order_relaxed); }

 private:
  struct Entry {
    std::atomic<uint64_t> id{0};   // 0: empty; published last
    std::atomic<uint64_t> dur_ns{0}, dur_est_ns{0}, gap_ns{0}, hold_ns{0};
  };
  void put(const Kernel& k) noexcept;   // under load_mutex_
  void put_shape(uint64_t shape_id, const Kernel& k) noexcept;   // the longest of a shape; under load_mutex_
  // Reads under load_mutex_; *locked: the database stayed locked past the busy timeout.
  size_t read(const Config& cfg, const policy::Estimators& estimators, int busy_timeout_ms, bool* locked) noexcept;

  std::unique_ptr<Entry[]> table_;
  std::unique_ptr<Entry[]> shapes_;     // by shape ID: dur_ns and hold_ns only
  std::atomic<size_t> size_{0};
  std::mutex load_mutex_;               // load() only, never on the launch path
  policy::Estimators estimators_;       // under load_mutex_
  bool warned_missing_ = false, warned_full_ = false, warned_locked_ = false, warned_truncated_ = false;
  // Reads off the launch path (a re-read after re-profiling, new estimators) may wait this long.
  static constexpr int kReadTimeoutMs = 2000;
};

}  // namespace fikit::hook::share
