#pragma once
// What the daemon records of each service for fikit-run's next choice of its backend (mps/outcomes.h):
// from one GPU's status rows, each controlled service's judged time and the part its jobs ran beside
// it, under its backend, and the jobs below it.
#include <cstdint>
#include <string>
#include <vector>

#include "outcomes.h"
#include "policy.h"

namespace fikit::scheduler {

// Records each controlled service of `rows` (one GPU's) in `book` at `now_s` (seconds since the
// epoch). A time-sliced service's jobs are checked against its record as an MPS client: that record
// is forgotten when the jobs differ, and its key goes to `forgotten`.
void record_outcomes(const std::vector<policy::TaskStatus>& rows, uint64_t now_s, mps::OutcomeBook& book,
                     std::vector<std::string>& forgotten);

}  // namespace fikit::scheduler
