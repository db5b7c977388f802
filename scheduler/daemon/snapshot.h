#pragma once
// What `fikit-scheduler status` shows: the daemon's state at one instant, as text or JSON.
#include <cstdint>
#include <string>
#include <vector>

#include "policy.h"
#include "sessions.h"

namespace fikit::scheduler {

struct DaemonSnapshot {
  std::string listen;                 // HOST:PORT
  uint64_t uptime_ns = 0;
  uint64_t epoch = 0;
  bool keyed = false;                 // a key file is configured
  int reserved_priorities = 0;        // 0..N-1 need the key
  uint32_t holder = 0;
  uint64_t malformed = 0;             // datagrams that did not decode
  uint64_t bad_mac = 0;               // a MAC that did not verify (or no key to verify it)
  uint64_t wrong_direction = 0;       // daemon-to-client messages sent to the daemon
  policy::Counters policy;
  SessionCounters sessions;
  std::vector<policy::TaskStatus> tasks;
};

std::string format_text(const DaemonSnapshot& s);
std::string format_json(const DaemonSnapshot& s);

}  // namespace fikit::scheduler
