#include "predictions.h"

#include <algorithm>
#include <exception>

#include "log.h"
#include "profiledb.h"

namespace fikit::hook::share {

void Predictions::load(const Config& cfg) noexcept {
  try {
    profiledb::Database db(cfg.db_path, profiledb::Database::Open::ReadOnly);
    for (const auto& k : db.kernels(cfg.task_key)) {
      Kernel e;
      e.id = k.kernel_id;
      e.dur_ns = uint64_t(std::max(1.0, k.dur_mean));
      e.dur_max_ns = std::max<uint64_t>(e.dur_ns, k.dur_p90);
      // As the daemon decides (docs/scheduling.md): mostly followed by iteration ends, no gap.
      if (k.gap_count > 0 && k.boundary_count * 2 <= k.gap_count + k.boundary_count)
        e.gap_ns = std::max<uint64_t>(uint64_t(k.gap_mean), k.gap_p50);
      e.measured = true;
      table_.push_back(e);
    }
    std::sort(table_.begin(), table_.end());
  } catch (const std::exception& e) {
    log(LogLevel::Warn, "share mode: no profile for task '%s' in %s (%s): its kernels will not fill gaps",
        cfg.task_key, cfg.db_path, e.what());
  } catch (...) {
    log(LogLevel::Warn, "share mode: cannot read profiles from %s", cfg.db_path);
  }
}

Predictions::Kernel Predictions::of(uint64_t kernel_id) const noexcept {
  Kernel key;
  key.id = kernel_id;
  auto it = std::lower_bound(table_.begin(), table_.end(), key);
  if (it != table_.end() && it->id == kernel_id) return *it;
  return key;   // unknown: kUnknownKernelNs, no gap
}

}  // namespace fikit::hook::share
