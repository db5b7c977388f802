#include "domains.h"

#include <algorithm>

#include <fmt/format.h>

namespace fikit::scheduler {

policy::Policy* Domains::for_device(const protocol::DeviceUuid& device) {
  Domain* free = nullptr;
  for (Domain& d : domains_) {
    if (d.policy && d.device == device) return d.policy.get();
    if (!d.policy && free == nullptr) free = &d;
  }
  if (free == nullptr) {
    if (domains_.size() >= kMaxDomains) return nullptr;
    free = &domains_.emplace_back();
  }
  // Task IDs carry the slot's index; a task of the domain that had it before is unknown to every
  // session now (they were forgotten with it), so an old ID names nobody.
  const uint32_t index = uint32_t(free - domains_.data()) + 1;
  free->device = device;
  free->policy = std::make_unique<policy::Policy>(settings_, profiles_, index * policy::Policy::kIdSpan, &bell_slots_);
  free->policy->continue_ids_from(free->next_id);
  return free->policy.get();
}

void Domains::free_empty() {
  for (Domain& d : domains_) {
    if (!d.policy || d.policy->task_count() != 0) continue;
    freed_ += d.policy->counters();
    d.next_id = d.policy->next_local_id();
    d.policy.reset();
  }
}

policy::Policy* Domains::for_task(uint32_t task) {
  const uint32_t index = task / policy::Policy::kIdSpan;
  if (index == 0 || index > domains_.size()) return nullptr;
  return domains_[index - 1].policy.get();
}

const protocol::DeviceUuid* Domains::device_of(uint32_t task) const {
  const uint32_t index = task / policy::Policy::kIdSpan;
  if (index == 0 || index > domains_.size() || !domains_[index - 1].policy) return nullptr;
  return &domains_[index - 1].device;
}

uint64_t Domains::next_wake() const {
  uint64_t wake = policy::Policy::kNever;
  each([&](const Domain& d) { wake = std::min(wake, d.policy->next_wake()); });
  return wake;
}

bool Domains::notifications_expected() const {
  bool expected = false;
  each([&](const Domain& d) { expected |= d.policy->notifications_expected(); });
  return expected;
}

std::vector<uint32_t> Domains::take_dropped() {
  std::vector<uint32_t> all;
  for (Domain& d : domains_) {
    if (!d.policy) continue;
    auto dropped = d.policy->take_dropped();
    all.insert(all.end(), dropped.begin(), dropped.end());
  }
  return all;
}

std::vector<policy::Policy::ServicePeriod> Domains::take_service_periods() {
  std::vector<policy::Policy::ServicePeriod> all;
  for (Domain& d : domains_) {
    if (!d.policy) continue;
    auto periods = d.policy->take_service_periods();
    all.insert(all.end(), std::make_move_iterator(periods.begin()), std::make_move_iterator(periods.end()));
  }
  return all;
}

void Domains::on_tick(uint64_t now, std::vector<policy::Action>& out) {
  for (Domain& d : domains_)
    if (d.policy && d.policy->next_wake() <= now) d.policy->on_tick(now, out);
}

std::string device_name(const protocol::DeviceUuid& u) {
  if (std::all_of(u.begin(), u.end(), [](uint8_t b) { return b == 0; })) return "none";
  return fmt::format("GPU-{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
                     u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
}

}  // namespace fikit::scheduler
