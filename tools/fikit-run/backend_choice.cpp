#include "backend_choice.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "measure_progress.h"
#include "mps.h"
#include "outcomes.h"
#include "profiledb.h"

namespace fikit::run {
namespace {

std::string factor(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3gx", x);
  return text;
}

}  // namespace

std::optional<ServiceBackend> service_backend(const RunSettings& settings, const std::vector<std::string>& command) {
  const auto key = expected_task_key(settings, command);
  if (!key) return std::nullopt;
  ServiceBackend b;
  b.task_key = *key;
  b.runs_wanted = settings.number("FIKIT_MEASURE_RUNS");
  b.limit_permille = settings.number("FIKIT_MPS_COST_LIMIT");
  std::vector<rules::BackendRun> runs;
  const std::string path = profile_db_path(settings);
  if (access(path.c_str(), F_OK) == 0) {
    try {
      profiledb::Database db(path, profiledb::Database::Open::ReadOnly, /*busy_timeout_ms=*/20);
      if (const auto task = db.task(*key)) {
        b.runs_stored = task->runs_measured;
        for (const profiledb::RunSummary& r : db.runs(*key))
          if (r.backend == "mps" || r.backend == "plain") runs.push_back({r.backend == "mps", r.request_p50_ns});
      }
    } catch (const std::exception&) {
      return std::nullopt;   // locked, corrupt or unreadable: the hook says what it finds
    }
  }
  b.choice = rules::choose_backend(runs, b.runs_stored, b.runs_wanted, b.limit_permille);
  return b;
}

std::optional<std::string> jobs_backend_says_outside(int priority, const std::string& key, const std::string& mps_dir) {
  const auto text = mps::published(mps_dir, mps::kJobsBackendFile);
  // A reserve the daemon keeps for its services is enforced on a job by the MPS server too (its
  // pinned-memory limit), whether or not the job's program goes through the hook: that guarantee
  // outweighs what preempting the job would give it.
  if (!text || mps::published(mps_dir, mps::kReserveFile)) return std::nullopt;
  unsigned above = 0;
  char word[16] = "";
  char extra = 0;
  // "timeslice P" and nothing else; anything else is ignored (an MPS client, as without the file).
  if (std::sscanf(text->c_str(), "%15s %u %c", word, &above, &extra) != 2 || std::strcmp(word, "timeslice") != 0 ||
      priority <= 0 || unsigned(priority) <= above)
    return std::nullopt;
  return "fikit-run: " + (key.empty() ? std::string("the job") : "job '" + key + "'") +
         " starts outside MPS: the service above it runs time-sliced with no other job below it, and outside MPS "
         "the service can switch this job out within the job's short time slice (regime preempt) rather than "
         "waiting for it (--backend mps to keep it an MPS client)";
}

std::optional<std::string> outcome_says_outside(const RunSettings& settings, const std::vector<std::string>& command,
                                                const std::string& mps_dir) {
  const auto key = expected_task_key(settings, command);
  if (!key) return std::nullopt;
  const auto book = mps::OutcomeBook::read(mps_dir);
  const mps::Outcome* o = book ? book->find(*key, /*mps=*/true) : nullptr;
  if (o == nullptr || !rules::mps_bought_nothing(o->judged_ms * 1'000'000, o->beside_ms * 1'000'000))
    return std::nullopt;
  char text[96];
  std::snprintf(text, sizeof text, "%.0f%% of %.0f s", o->judged_ms ? 100.0 * double(o->beside_ms) / double(o->judged_ms) : 0.0,
                double(o->judged_ms) / 1000.0);
  return "fikit-run: task '" + *key + "' runs outside MPS: in its last run as an MPS client its jobs ran beside it " +
         text + " of its active time (its controller held them or kept them on an SM partition); outside MPS they "
         "get its idle time, a sole job its gaps too, without its MPS cost; it tries MPS again once its jobs "
         "change (--backend mps to choose it)";
}

std::string backend_line(const ServiceBackend& b) {
  const rules::BackendChoice& c = b.choice;
  const std::string task = "fikit-run: task '" + b.task_key + "' ";
  const std::string limit = factor(b.limit_permille / 1000.0);
  if (c.trial) {
    const uint32_t need = rules::backend_trial_runs(b.runs_wanted);
    return task + "is measured " + (c.mps ? "as an MPS client" : "outside MPS") + " this start (runs so far: " +
           std::to_string(c.runs_mps) + " as an MPS client, " + std::to_string(c.runs_plain) + " outside, " +
           std::to_string(need) + " each needed), to learn what being an MPS client costs it" +
           (c.measure_more ? " (" + std::to_string(c.measure_more) + " runs more than --measure-runs)" : std::string());
  }
  if (c.cost == 0)
    return task + "is an MPS client (its runs do not show what that costs it: no requests the host could tell)";
  char p[32];
  std::snprintf(p, sizeof p, "%.2g", c.p_value);
  return task + (c.mps ? "is an MPS client" : "runs outside MPS") + ": its requests took " + factor(c.cost) +
         " as an MPS client of what they took outside (" + std::to_string(c.runs_mps) + " and " +
         std::to_string(c.runs_plain) + " runs, p " + p + "; limit " + limit + ", --mps-cost-limit)" +
         (c.by_chance ? "; a difference its runs do not tell from chance"
                 : c.mps ? std::string() : "; the jobs below it wait while it is active");
}

}  // namespace fikit::run
