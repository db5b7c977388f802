#pragma once
// Fills the policy's profiles from the profile store (profiledb), read when a task registers.
#include <string>

#include "policy.h"

namespace fikit::scheduler {

class DbProfileSource : public policy::ProfileSource {
 public:
  explicit DbProfileSource(std::string db_path) : db_path_(std::move(db_path)) {}
  // An empty profile when the database or the task is missing: the task's kernels then count as
  // unknown, so they are never gap-filled. Warns about that (unless the task comes to be measured)
  // and about a profile whose runs timed under kGoodCoverage of their ops.
  std::shared_ptr<const policy::Profile> load(std::string_view task_key, protocol::TaskMode mode) override;

 private:
  std::string db_path_;
};

}  // namespace fikit::scheduler
