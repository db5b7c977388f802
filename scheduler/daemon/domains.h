#pragma once
// One scheduling domain per GPU: the daemon keeps a Policy for each device UUID its clients name
// (a MIG instance has a UUID of its own, so it is a device here too), created when the first task
// registers for it. Tasks on different GPUs share nothing: an HP on one never throttles an LP on
// another. Task IDs carry their domain (the top 8 bits), so any message finds its policy; the bell
// board's slots are shared by all domains.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "policy.h"
#include "protocol.h"

namespace fikit::scheduler {

class Domains {
 public:
  static constexpr size_t kMaxDomains = 255;   // domain index 1..255 in a task ID's top 8 bits

  Domains(const policy::Settings& settings, policy::ProfileSource& profiles)
      : settings_(settings), profiles_(profiles) {}

  // The domain of `device`, created on first use; nullptr when kMaxDomains exist already.
  policy::Policy* for_device(const protocol::DeviceUuid& device);
  // Frees the domains left without tasks (a GPU no client uses any more, or one a client made up):
  // their slots serve other GPUs. Their counters are kept in freed_counters().
  void free_empty();
  const policy::Counters& freed_counters() const { return freed_; }
  // The domain a task ID belongs to (nullptr: none).
  policy::Policy* for_task(uint32_t task);
  // The GPU of `task`'s domain (nullptr: no such domain).
  const protocol::DeviceUuid* device_of(uint32_t task) const;

  struct Domain {
    protocol::DeviceUuid device;
    std::unique_ptr<policy::Policy> policy;
    // Where a freed slot's task IDs went on: a policy made in it again goes on from there, so that
    // a client whose lease ran out (and emptied the domain) can resume as the task it was.
    uint32_t next_id = 1;
  };
  // The domains in use (freed slots are skipped).
  template <class F>
  void each(F&& f) const {
    for (const Domain& d : domains_)
      if (d.policy) f(d);
  }
  template <class F>
  void each_policy(F&& f) {
    for (Domain& d : domains_)
      if (d.policy) f(*d.policy);
  }

  // Across domains.
  uint64_t next_wake() const;
  bool notifications_expected() const;
  std::vector<uint32_t> take_dropped();
  std::vector<policy::Policy::ServicePeriod> take_service_periods();   // of every domain
  void on_tick(uint64_t now, std::vector<policy::Action>& out);

 private:
  policy::Settings settings_;
  policy::ProfileSource& profiles_;
  policy::BellSlots bell_slots_{};
  std::vector<Domain> domains_;   // index i: domain i + 1; a null policy is a free slot
  policy::Counters freed_;
};

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (nvidia-smi's spelling); "none" for all zeros.
std::string device_name(const protocol::DeviceUuid& device);

}  // namespace fikit::scheduler
