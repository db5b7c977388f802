#include "backend_outcomes.h"

namespace fikit::scheduler {

void record_outcomes(const std::vector<policy::TaskStatus>& rows, uint64_t now_s, mps::OutcomeBook& book,
                     std::vector<std::string>& forgotten) {
  for (const policy::TaskStatus& s : rows) {
    if (!s.controlled || s.mode != protocol::TaskMode::Share) continue;
    std::vector<std::string> jobs;
    for (const policy::TaskStatus& j : rows)
      if (j.priority > s.priority && j.mode == protocol::TaskMode::Share) jobs.push_back(j.key);
    const uint64_t signature = mps::jobs_signature(std::move(jobs));
    const bool mps = s.backend == protocol::Backend::Mps;
    book.record({s.key, mps, s.judged_ns / 1'000'000, s.beside_ns / 1'000'000, signature, now_s});
    if (!mps && book.jobs_seen(s.key, signature)) forgotten.push_back(s.key);
  }
}

}  // namespace fikit::scheduler
