#pragma once
// Repeated log lines are rate-limited: a flood of bad datagrams or registrations must not become a
// flood of log lines (or disk writes). Per kind of event, at most `burst` lines per `window_ns`;
// the first line after a quiet window says how many were suppressed.
#include <cstdint>
#include <unordered_map>

namespace fikit::scheduler {

class LogLimiter {
 public:
  LogLimiter(uint32_t burst, uint64_t window_ns) : burst_(burst), window_ns_(window_ns) {}

  // Whether a line of this kind may be logged at `now`; *suppressed is set to the number of lines
  // of this kind held back since the last one logged.
  bool allow(int kind, uint64_t now, uint64_t* suppressed) {
    State& s = state_[kind];
    if (now - s.window_start >= window_ns_) {
      s.window_start = now;
      s.in_window = 0;
    }
    if (s.in_window >= burst_) {
      ++s.suppressed;
      return false;
    }
    ++s.in_window;
    *suppressed = s.suppressed;
    s.suppressed = 0;
    return true;
  }

 private:
  struct State {
    uint64_t window_start = 0;
    uint32_t in_window = 0;
    uint64_t suppressed = 0;
  };
  uint32_t burst_;
  uint64_t window_ns_;
  std::unordered_map<int, State> state_;
};

}  // namespace fikit::scheduler
