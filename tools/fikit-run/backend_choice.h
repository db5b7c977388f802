#pragma once
// Whether a service starts as an MPS client, where a control daemon runs: by what being one cost it
// in its measured runs (rules/backend_rule.h). fikit-run decides before the program starts, since a
// process is an MPS client or not for its whole life.
#include <optional>
#include <string>
#include <vector>

#include "backend_rule.h"
#include "run_settings.h"

namespace fikit::run {

struct ServiceBackend {
  std::string task_key;
  uint64_t runs_stored = 0;
  uint32_t runs_wanted = 0;        // FIKIT_MEASURE_RUNS
  uint32_t limit_permille = 0;     // FIKIT_MPS_COST_LIMIT
  rules::BackendChoice choice;
};

// The choice for `command`'s task from the profile database (a task it does not hold yet: the
// trial's first run). Nothing when the task key cannot be known from here or the database cannot
// be read within a few milliseconds: the program is then an MPS client, as without a choice.
std::optional<ServiceBackend> service_backend(const RunSettings& settings, const std::vector<std::string>& command);

// What being an MPS client bought the service's jobs in its last run as one, where fikit-scheduler
// --mps recorded it in `mps_dir` (mps/outcomes.h): the line fikit-run says when that sends it
// outside MPS this start (rules::mps_bought_nothing); nothing otherwise.
std::optional<std::string> outcome_says_outside(const RunSettings& settings, const std::vector<std::string>& command,
                                                const std::string& mps_dir);

// Whether a job (`priority` above 0) starts outside MPS: fikit-scheduler --mps publishes in
// `mps_dir` when a job started now would be the only one below time-sliced services, where its own
// short time slice lets them switch it out (the regime preempt; Policy::job_backend), unless it keeps
// a memory reserve (which the MPS server enforces on its clients). The line fikit-run says then;
// nothing otherwise (an MPS client, as before).
std::optional<std::string> jobs_backend_says_outside(int priority, const std::string& key, const std::string& mps_dir);

// What fikit-run says of it: the trial (always: the program is measured this start) or the choice
// (a line for FIKIT_LOG_LEVEL=info).
std::string backend_line(const ServiceBackend& b);

}  // namespace fikit::run
