#include "db_profiles.h"

#include <spdlog/spdlog.h>

#include "profiledb.h"

namespace fikit::scheduler {

std::shared_ptr<const policy::Profile> DbProfileSource::load(std::string_view task_key, protocol::TaskMode mode) {
  const bool measuring = mode == protocol::TaskMode::Measure;
  auto profile = std::make_shared<policy::Profile>();
  double covered = -1;
  try {
    profiledb::Database db(db_path_, profiledb::Database::Open::ReadOnly);
    const std::string key(task_key);
    if (measuring && !db.task(key)) {
      spdlog::info("task '{}' registers to be measured; it has no profile yet", task_key);
      return profile;
    }
    for (const profiledb::KernelProfile& k : db.kernels(key)) (*profile)[k.kernel_id] = policy::stats_of(k);
    const std::vector<profiledb::RunSummary> runs = db.runs(key);
    covered = profiledb::coverage(runs);
    profile->request_busy_pct = profiledb::request_busy_percent(runs);
  } catch (const std::exception& e) {
    if (measuring) {
      spdlog::info("task '{}' registers to be measured; no profile yet ({})", task_key, e.what());
      return profile;
    }
    spdlog::warn("no profile for task '{}' ({}): its kernels will not fill gaps", task_key, e.what());
  }
  if (profile->empty()) {
    if (!measuring) spdlog::warn("task '{}' has no measured kernels in {}", task_key, db_path_);
    return profile;
  }
  spdlog::info("task '{}': {} measured kernels{}", task_key, profile->size(),
               covered >= 0 ? fmt::format(", {:.1f} % of its ops timed", 100 * covered) : std::string());
  if (covered >= 0 && covered < profiledb::kGoodCoverage)
    spdlog::warn("the profile of task '{}' timed only {:.1f} % of the ops launched while it was measured: kernels "
                 "missing from it never fill gaps (fikit-profile show {} tells more)",
                 task_key, 100 * covered, task_key);
  return profile;
}

}  // namespace fikit::scheduler
