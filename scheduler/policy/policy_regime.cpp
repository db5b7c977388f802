// The services' controllers as the policy feeds and reads them: which regime a task below is
// under, and the periods that go to a service's controller (controller.h; docs/scheduling.md,
// "The controller").
#include "policy.h"

#include <algorithm>

namespace fikit::policy {

using protocol::Backend;
using protocol::TaskMode;

Regime Policy::regime_of(uint64_t now, const Task& u) const {
  const Regime r = u.controller.regime();
  if (r != Regime::Held || u.active || now - std::min(now, u.inactive_since) < settings_.controller.baseline_idle_max_ns)
    return r;
  return u.controller.adopted();
}

Regime Policy::regime_for(uint64_t now, const Task& below) const {
  Regime r = settings_.regime_auto ? Regime::Free : settings_.fixed_regime;
  for (const auto& [id, u] : tasks_) {
    if (u.priority >= below.priority || u.mode != TaskMode::Share) continue;
    if (settings_.regime_auto) r = std::min(r, regime_of(now, u));
    // Below a time-sliced service only Hold, Preempt and Free differ: beside it the jobs would take
    // its time slices (MPS jobs too: the MPS server's context time-slices with it).
    else if (u.backend != Backend::Mps && r != Regime::Free && r != Regime::Preempt) r = std::min(r, Regime::Hold);
  }
  return r;
}

bool Policy::exposed(uint64_t now, const Task& t) const {
  for (const auto& [id, u] : tasks_)
    if (u.priority > t.priority && u.mode == TaskMode::Share && regime_for(now, u) == t.controller.regime())
      return true;
  return false;
}

void Policy::begin_period(Task& t, uint64_t launched) {
  const Regime r = t.controller.regime();
  // A baseline period counts only when the tasks below were held all through the rest before it.
  const bool held_rest = r != Regime::Held || launched - std::min(launched, t.inactive_since) <
                                                  settings_.controller.baseline_idle_max_ns;
  const uint64_t arrival = t.requests.begin(launched, t.controller.alone_work_ns());
  t.period = Period{launched, 0, arrival, controlled(t) && held_rest, r};
}

bool Policy::share_below(const Task& t) const {
  for (const auto& [id, u] : tasks_)
    if (u.priority > t.priority && u.mode == TaskMode::Share) return true;
  return false;
}

void Policy::count_controller(const Controller& before, const Controller& after) {
  counters_.regime_trials += after.trials() - before.trials();
  counters_.regime_climbs += after.climbs() - before.climbs();
  counters_.regime_drops += after.drops() - before.drops();
  counters_.baselines += after.baselines() - before.baselines();
}

void Policy::overrun(uint64_t now, Task& t) {
  t.period.valid = false;
  const Controller before = t.controller;
  t.controller.on_overrun(now);
  count_controller(before, t.controller);
  note_period(t, before, now - std::min(now, t.period.arrival), now - std::min(now, t.period.start), true);
}

void Policy::note_period(const Task& t, const Controller& before, uint64_t response, uint64_t work, bool overrun) {
  const Controller& c = t.controller;
  const bool changed = c.regime() != before.regime() || c.adopted() != before.adopted();
  // Bounded: a daemon drains them after every event (a policy driven without one keeps the first).
  if (service_periods_.size() >= kMaxServicePeriods) return;
  service_periods_.push_back({t.id, t.key, response, work, t.requests.load_permille(), before.regime(), overrun, c.regime(),
                              c.adopted(), changed, c.inflation_permille(), c.within_objective()});
}

// A period ends at its last idle (one that ended by silence says nothing of its length). It counts
// when its regime held throughout and a task below ran under it (another service above may have
// held them tighter: then it tells nothing of this one).
void Policy::end_period(uint64_t now, Task& t) {
  Period& p = t.period;
  // Every period goes to the estimate (the next one's queueing depends on it), a silent one at its
  // silence.
  const uint64_t response = p.last_idle != 0 ? t.requests.end(p.last_idle)
                                             : t.requests.end(std::max(t.inactive_since, p.start), false);
  const bool valid = p.valid && p.last_idle >= p.start && p.last_idle != 0 && controlled(t) &&
                     p.regime == t.controller.regime() && exposed(now, t);
  p.valid = false;
  if (!valid) return;
  // Beside: under a regime that runs its jobs beside it at full width, adopted (a trial counts as far
  // as the regime adopted under it: one from the partition that fails says they could not run
  // beside it). Hold and the partition are not: outside MPS its jobs get its idle time, and under
  // the regime preempt its gaps too (rules::mps_bought_nothing).
  t.judged_ns += p.last_idle - p.start;
  if (std::min(p.regime, t.controller.adopted()) > Regime::Partition) t.beside_ns += p.last_idle - p.start;
  const Controller before = t.controller;
  // Judged as its clients wait: the request's estimated response, queueing behind the one before
  // included, not the period alone; with the load it met, so that a window is judged against the
  // same requests served alone (request_estimate.h), not against how other requests happened to bunch.
  t.controller.on_period(now, response, p.last_idle - p.start, t.requests.load_permille());
  count_controller(before, t.controller);
  note_period(t, before, response, p.last_idle - p.start, false);
}

}  // namespace fikit::policy
