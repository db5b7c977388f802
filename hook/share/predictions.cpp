#include "predictions.h"

#include <algorithm>
#include <exception>
#include <new>

#include "kernelid.h"
#include "log.h"
#include "profiledb.h"

namespace fikit::hook::share {
namespace {
// Kernel IDs are hashes already: their low bits spread well.
size_t home(uint64_t id) { return size_t(id ^ (id >> 32)) & (Predictions::kCapacity - 1); }
constexpr size_t kMaxProbe = 64;
}  // namespace

Predictions::Predictions() : table_(new (std::nothrow) Entry[kCapacity]), shapes_(new (std::nothrow) Entry[kShapeCapacity]) {}

void Predictions::put_shape(uint64_t shape_id, const Kernel& k) noexcept {
  if (!shapes_ || shape_id == 0) return;
  for (size_t i = 0, at = home(shape_id) & (kShapeCapacity - 1); i < kMaxProbe; ++i, at = (at + 1) & (kShapeCapacity - 1)) {
    Entry& e = shapes_[at];
    const uint64_t id = e.id.load(std::memory_order_relaxed);
    if (id != 0 && id != shape_id) continue;
    // Kernels of one shape from several call sites: the longest stands for all (charged against the
    // bound, a longer guess errs on the service's side). Once learned, a shape's figures are the
    // profile's as read the last time: a read starts them afresh only for shapes new to the table.
    e.dur_ns.store(std::max(k.dur_ns, id == 0 ? 0 : e.dur_ns.load(std::memory_order_relaxed)), std::memory_order_relaxed);
    e.hold_ns.store(std::max(k.hold_ns, id == 0 ? 0 : e.hold_ns.load(std::memory_order_relaxed)), std::memory_order_relaxed);
    if (id == 0) e.id.store(shape_id, std::memory_order_release);
    return;
  }
}

bool Predictions::by_shape(uint64_t shape_id, Kernel& k) const noexcept {
  if (!shapes_ || shape_id == 0) return false;
  for (size_t i = 0, at = home(shape_id) & (kShapeCapacity - 1); i < kMaxProbe; ++i, at = (at + 1) & (kShapeCapacity - 1)) {
    const Entry& e = shapes_[at];
    const uint64_t id = e.id.load(std::memory_order_acquire);
    if (id == 0) return false;
    if (id != shape_id) continue;
    k.dur_ns = e.dur_ns.load(std::memory_order_relaxed);
    k.hold_ns = e.hold_ns.load(std::memory_order_relaxed);
    return true;
  }
  return false;
}

void Predictions::put(const Kernel& k) noexcept {
  if (!table_ || k.id == 0) return;
  for (size_t i = 0, at = home(k.id); i < kMaxProbe; ++i, at = (at + 1) & (kCapacity - 1)) {
    Entry& e = table_[at];
    const uint64_t id = e.id.load(std::memory_order_relaxed);
    if (id != 0 && id != k.id) continue;
    e.dur_ns.store(k.dur_ns, std::memory_order_relaxed);
    e.dur_est_ns.store(k.dur_est_ns, std::memory_order_relaxed);
    e.gap_ns.store(k.gap_ns, std::memory_order_relaxed);
    e.hold_ns.store(k.hold_ns, std::memory_order_relaxed);
    if (id == 0) {
      e.id.store(k.id, std::memory_order_release);   // the values above are visible with it
      size_.fetch_add(1, std::memory_order_relaxed);
    }
    return;
  }
  if (!warned_full_) {
    warned_full_ = true;
    log(LogLevel::Warn, "share mode: more kernels than the prediction table holds: the rest count as unknown");
  }
}

policy::Estimators Predictions::estimators() noexcept {
  std::lock_guard guard(load_mutex_);
  return estimators_;
}

size_t Predictions::load(const Config& cfg) noexcept { return load(cfg, estimators()); }

size_t Predictions::load(const Config& cfg, const policy::Estimators& estimators) noexcept {
  std::lock_guard guard(load_mutex_);
  bool locked = false;
  return read(cfg, estimators, kReadTimeoutMs, &locked);
}

// A job that share mode starts on its own (auto mode's, or the gate of a job being measured) has no
// profile and may have no daemon as a matter of course: said at info. Asked for (FIKIT_MODE=share),
// both are worth a warning.
LogLevel quiet_level(const Config& cfg) noexcept { return cfg.mode == ModeKind::Share ? LogLevel::Warn : LogLevel::Info; }

bool Predictions::load_first(const Config& cfg, int busy_timeout_ms) noexcept {
  std::lock_guard guard(load_mutex_);
  bool locked = false;
  read(cfg, estimators_, busy_timeout_ms, &locked);
  return !locked;
}

size_t Predictions::read(const Config& cfg, const policy::Estimators& estimators, int busy_timeout_ms,
                         bool* locked) noexcept {
  estimators_ = estimators;
  *locked = false;
  size_t n = 0;
  try {
    profiledb::Database db(cfg.db_path, profiledb::Database::Open::ReadOnly, busy_timeout_ms);
    const std::vector<profiledb::KernelProfile> kernels = db.kernels(cfg.task_key);
    if (db.truncated() && !warned_truncated_) {
      warned_truncated_ = true;
      log(LogLevel::Warn, "share mode: the profile of task '%s' in %s has more than %zu kernels: the rest are not "
          "read (they count as unknown). A profile this large was not written by FIKIT's measurement: check who "
          "writes that database (fikit-profile show)", cfg.task_key, cfg.db_path, profiledb::Database::kMaxKernelsRead);
    }
    for (const auto& k : kernels) {
      // The daemon's rules (kernel_rules.h), with its estimators: both predict the same.
      const policy::KernelStats& stats = k;
      Kernel e;
      e.id = k.kernel_id;
      e.dur_ns = uint64_t(std::max(1.0, k.dur_mean));
      e.dur_est_ns = policy::predicted_duration(stats, estimators.duration);
      e.gap_ns = policy::predicted_gap(stats, estimators);
      e.hold_ns = std::max<uint64_t>(1, stats.hold_p50);
      if (!k.name.empty()) put_shape(kernelid::shape_id_of(k.name, k.grid.data(), k.block.data(), k.shared_mem), e);
      // A kernel timed inside a graph launch (graph_op) is known by its shape only: no launch carries its ID.
      if (k.graph_op != 0) continue;
      put(e);
      ++n;
    }
  } catch (const profiledb::DbError& e) {
    if (e.kind() == profiledb::DbError::Kind::Locked) {
      *locked = true;
      if (!warned_locked_)
        log(LogLevel::Warn, "share mode: the profiles in %s are locked by another program (%s): running without "
            "predictions until they can be read", cfg.db_path, e.what());
      warned_locked_ = true;
      return n;
    }
    if (!warned_missing_)
      log(quiet_level(cfg), "share mode: no profile for task '%s' in %s (%s): its kernels will not fill gaps "
          "until share mode has timed them", cfg.task_key, cfg.db_path, e.what());
    warned_missing_ = true;
  } catch (const std::exception& e) {
    if (!warned_missing_)
      log(quiet_level(cfg), "share mode: no profile for task '%s' in %s (%s): its kernels will not fill gaps "
          "until share mode has timed them", cfg.task_key, cfg.db_path, e.what());
    warned_missing_ = true;
  } catch (...) {
    log(LogLevel::Warn, "share mode: cannot read profiles from %s", cfg.db_path);
  }
  return n;
}

Predictions::Kernel Predictions::of(uint64_t kernel_id) const noexcept {
  Kernel k;
  k.id = kernel_id;
  if (!table_ || kernel_id == 0) return k;   // unknown: kUnknownKernelNs, no gap
  for (size_t i = 0, at = home(kernel_id); i < kMaxProbe; ++i, at = (at + 1) & (kCapacity - 1)) {
    const Entry& e = table_[at];
    const uint64_t id = e.id.load(std::memory_order_acquire);
    if (id == 0) break;
    if (id != kernel_id) continue;
    k.dur_ns = e.dur_ns.load(std::memory_order_relaxed);
    k.dur_est_ns = e.dur_est_ns.load(std::memory_order_relaxed);
    k.gap_ns = e.gap_ns.load(std::memory_order_relaxed);
    k.hold_ns = e.hold_ns.load(std::memory_order_relaxed);
    k.measured = true;
    return k;
  }
  return k;
}

}  // namespace fikit::hook::share
