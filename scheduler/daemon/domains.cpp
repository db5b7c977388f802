#include "domains.h"

#include <algorithm>

#include <fmt/format.h>

namespace fikit::scheduler {

policy::Policy* Domains::for_device(const protocol::DeviceUuid& device) {
  for (Domain& d : domains_)
    if (d.device == device) return d.policy.get();
  if (domains_.size() >= kMaxDomains) return nullptr;
  const uint32_t index = uint32_t(domains_.size()) + 1;
  domains_.push_back({device, std::make_unique<policy::Policy>(settings_, profiles_, index * policy::Policy::kIdSpan,
                                                                &bell_slots_)});
  return domains_.back().policy.get();
}

policy::Policy* Domains::for_task(uint32_t task) {
  const uint32_t index = task / policy::Policy::kIdSpan;
  if (index == 0 || index > domains_.size()) return nullptr;
  return domains_[index - 1].policy.get();
}

uint64_t Domains::next_wake() const {
  uint64_t wake = policy::Policy::kNever;
  for (const Domain& d : domains_) wake = std::min(wake, d.policy->next_wake());
  return wake;
}

bool Domains::notifications_expected() const {
  return std::any_of(domains_.begin(), domains_.end(), [](const Domain& d) { return d.policy->notifications_expected(); });
}

std::vector<uint32_t> Domains::take_dropped() {
  std::vector<uint32_t> all;
  for (Domain& d : domains_) {
    auto dropped = d.policy->take_dropped();
    all.insert(all.end(), dropped.begin(), dropped.end());
  }
  return all;
}

void Domains::on_tick(uint64_t now, std::vector<policy::Action>& out) {
  for (Domain& d : domains_)
    if (d.policy->next_wake() <= now) d.policy->on_tick(now, out);
}

std::string device_name(const protocol::DeviceUuid& u) {
  if (std::all_of(u.begin(), u.end(), [](uint8_t b) { return b == 0; })) return "none";
  return fmt::format("GPU-{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
                     u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
}

}  // namespace fikit::scheduler
