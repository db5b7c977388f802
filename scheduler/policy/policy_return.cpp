// The holder's return: how long a service rests, when it is predicted back, and the bound and
// run credit of the tasks below meanwhile (docs/scheduling.md, "The in-flight bound").
#include "policy.h"

#include <algorithm>

namespace fikit::policy {

using protocol::Backend;
using protocol::TaskMode;

uint64_t Policy::IdleHistory::steady_shortest() const {
  if (count < kIdleHistory) return 0;
  const auto [lo, hi] = std::minmax_element(ns.begin(), ns.end());
  return *hi <= 2 * *lo ? *lo : 0;
}

uint64_t Policy::predicted_pause(const Task& u) const {
  const uint64_t shortest = settings_.return_margin_ns != 0 ? u.idle_history.steady_shortest() : 0;
  return shortest > settings_.return_margin_ns ? shortest : 0;
}

Policy::TightSpan Policy::tight_span(const Task& u) const {
  const uint64_t back = u.inactive_since + predicted_pause(u);
  TightSpan span;
  span.from = back > u.inactive_since ? back - settings_.return_margin_ns : u.inactive_since;
  span.until = settings_.idle_grace_ns != 0 ? back + settings_.idle_grace_ns : kNever;
  return span;
}

bool Policy::relaxed_bound(uint64_t now, const Task& t) const {
  for (const auto& [id, u] : tasks_) {
    if (id == t.id || u.priority >= t.priority) continue;
    if (blocks(now, u, t)) return false;
    const TightSpan span = tight_span(u);
    if (now >= span.from && now < span.until) return false;
  }
  return settings_.idle_grace_ns != 0 || settings_.return_margin_ns != 0;
}

uint64_t Policy::return_credit_until(uint64_t now, const Task& t) const {
  uint64_t until = kNever;
  for (const auto& [id, u] : tasks_) {
    if (id == t.id || u.priority >= t.priority) continue;
    if (blocks(now, u, t) || predicted_pause(u) == 0) return 0;
    until = std::min(until, tight_span(u).from);
  }
  return until != kNever && until > now ? until : 0;
}

uint64_t Policy::predicted_return(uint64_t now, const Task& t) const {
  uint64_t back = kNever;
  for (const auto& [id, u] : tasks_) {
    if (id == t.id || u.priority >= t.priority) continue;
    const uint64_t pause = predicted_pause(u);
    if (blocks(now, u, t) || pause == 0) return 0;
    back = std::min(back, u.inactive_since + pause);
  }
  return back != kNever && back > now ? back : 0;
}

}  // namespace fikit::policy
