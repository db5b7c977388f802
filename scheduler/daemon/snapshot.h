#pragma once
// What `fikit-scheduler status` and the metrics endpoint show: the daemon's state at one instant,
// per GPU (scheduling domain), as text or JSON (metrics.h renders it for Prometheus).
#include <cstdint>
#include <string>
#include <vector>

#include "policy.h"
#include "sessions.h"

namespace fikit::scheduler {

struct DomainSnapshot {
  std::string device;                 // GPU-... (domains.h: device_name), "none" when not given
  uint32_t holder = 0;
  policy::Counters counters;
  std::vector<policy::TaskStatus> tasks;
};

struct DaemonSnapshot {
  std::string listen;                 // HOST:PORT
  uint64_t uptime_ns = 0;
  uint64_t epoch = 0;
  bool keyed = false;                 // a key file is configured
  int reserved_priorities = 0;        // 0..N-1 need the key
  std::string mps;                    // the MPS control daemon it owns ("": none)
  uint64_t malformed = 0;             // datagrams that did not decode
  uint64_t bad_mac = 0;               // a MAC that did not verify (or no key to verify it)
  uint64_t wrong_direction = 0;       // daemon-to-client messages sent to the daemon
  SessionCounters sessions;
  uint64_t refused_gpus = 0;          // registrations refused: the daemon schedules kMaxDomains GPUs
  std::vector<DomainSnapshot> domains;
  policy::Counters freed;             // the counters of domains freed since (no tasks left)

  policy::Counters totals() const;    // every domain's counters added up, freed ones' too
  size_t task_count() const;
  // The task with this ID, in whichever domain (nullptr: none).
  const policy::TaskStatus* task(uint32_t id) const;
};

// The device memory a task may hold: the lower of its own limit and the daemon's cap (0: no cap).
uint64_t memory_cap(const policy::TaskStatus& t);

// What `status` prints: each service (what its requests get against its objective, what its jobs
// may do) and each job (held, in gaps, beside, on a partition), per GPU; `verbose` adds every
// task's directive and the daemon's counters.
std::string format_summary(const DaemonSnapshot& s);
std::string format_text(const DaemonSnapshot& s, bool verbose = true);
std::string format_json(const DaemonSnapshot& s);

}  // namespace fikit::scheduler
