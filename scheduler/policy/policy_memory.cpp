// Memory shares: the device memory each task below priority 0 may hold beside the reserve
// (docs/memory.md).
#include "policy.h"

#include <algorithm>

namespace fikit::policy {

using protocol::Backend;
using protocol::TaskMode;

uint64_t Policy::memory_cap_for(const Task& t) const {
  if (settings_.reserve_memory.is_zero() || t.priority == 0) return 0;
  // The GPU's size: the smallest any task reports. A task that claims a larger GPU cannot enlarge
  // what the jobs may take (a fake priority-0 task claiming 1 TiB lifted every job's cap to
  // 1021 GiB); one that sees less (an MPS client under a pinned-memory limit, or a liar) only
  // shrinks it: a lie costs the jobs, never the service's reserve.
  uint64_t total = 0, top_used = 0, low_used = 0, low = 0, committed = 0;
  for (const auto& [id, u] : tasks_) {
    if (u.memory_total != 0) total = total == 0 ? u.memory_total : std::min(total, u.memory_total);
    if (u.priority == 0) top_used += u.memory_used;
    else ++low;
  }
  if (total == 0) return 0;   // no client said how large the GPU is
  // What the tasks below priority 0 may hold together: the GPU less the reserve, or less what the
  // priority-0 tasks hold when that is more. Splitting what is free of it equally means that they
  // cannot together eat into the reserve between two heartbeats, however fast each grows.
  const uint64_t kept = std::max(settings_.reserve_memory.on_device(total), top_used);
  const uint64_t budget = total > kept ? total - kept : 0;
    for (const auto& [id, u] : tasks_)
    if (u.priority != 0) low_used += reported_use(u, total), committed += memory_committed(u, total);
  const uint64_t free = budget > low_used ? budget - low_used : 0;
  const uint64_t step = std::max<uint64_t>(settings_.memory_step_bytes, 1);
  const uint64_t held = reported_use(t, total);
  uint64_t cap = (held + free / low) / step * step;   // steps: fewer directives as usage moves
  // Never more than the others leave, counting the caps they hold or were sent as theirs: a job's
  // report lags its allocations, so jobs that started together each got a share of memory another
  // had already taken (4 jobs at once: the service's allocations failed 12 of 12). A newcomer gets
  // its share once the others have confirmed their lower caps, which their hooks do at once (its
  // own hook's allocation waits that long, docs/memory.md).
  const uint64_t others = committed - memory_committed(t, total);   // t is below priority 0: it is in the sum
  cap = std::min(cap, budget > others ? budget - others : 0);
  return std::max<uint64_t>({cap, held, 1});          // 0 would mean "no cap"
}

uint64_t Policy::reported_use(const Task& t, uint64_t total) const {
  // More than the GPU has is no report a hook makes: not believed at all (a task that reported 2^62
  // bytes before anyone said how large the GPU is, so before it had a cap, made every later job's
  // cap a byte).
  if (t.memory_used > total) return 0;
  // A hook holds a job to the caps it was given: a report above the largest is not believed (one
  // task reporting 1 TiB held cut every other job's cap to a byte). Such a task counts as one that
  // holds its whole cap, as an honest one that filled it would.
  return t.cap_ever != 0 ? std::min(t.memory_used, t.cap_ever) : t.memory_used;
}

uint64_t Policy::memory_committed(const Task& t, uint64_t total) const {
  return std::max({reported_use(t, total), t.cap_pending, t.cap_confirmed});
}

}  // namespace fikit::policy
