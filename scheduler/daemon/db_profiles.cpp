#include "db_profiles.h"

#include <spdlog/spdlog.h>

#include "profiledb.h"

namespace fikit::scheduler {

std::shared_ptr<const policy::Profile> DbProfileSource::load(std::string_view task_key) {
  auto profile = std::make_shared<policy::Profile>();
  try {
    profiledb::Database db(db_path_, profiledb::Database::Open::ReadOnly);
    for (const profiledb::KernelProfile& k : db.kernels(std::string(task_key))) {
      policy::KernelStats& s = (*profile)[k.kernel_id];
      s.count = k.count;
      s.dur_mean = k.dur_mean;
      s.dur_p50 = k.dur_p50;
      s.dur_p90 = k.dur_p90;
      s.gap_count = k.gap_count;
      s.gap_mean = k.gap_mean;
      s.gap_p10 = k.gap_p10;
      s.gap_p50 = k.gap_p50;
      s.gap_p90 = k.gap_p90;
      s.boundary_count = k.boundary_count;
    }
  } catch (const std::exception& e) {
    spdlog::warn("no profile for task '{}' ({}): its kernels will not fill gaps", task_key, e.what());
  }
  if (profile->empty()) spdlog::warn("task '{}' has no measured kernels in {}", task_key, db_path_);
  else spdlog::info("task '{}': {} measured kernels", task_key, profile->size());
  return profile;
}

}  // namespace fikit::scheduler
