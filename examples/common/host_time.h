#pragma once
// Host-side time for the examples: a monotonic clock, the CPU work between launches (a busy-wait,
// as a framework's Python and dispatch code keeps a core busy), the idle think time between
// requests (a real sleep), and a stop flag set by SIGTERM/SIGINT so a killed example still reports.
#include <chrono>

namespace fikit::examples {

using Clock = std::chrono::steady_clock;

inline double elapsed_us(Clock::time_point since) {
  return std::chrono::duration<double, std::micro>(Clock::now() - since).count();
}

void busy_wait_us(double us);
void sleep_us(double us);

// SIGTERM and SIGINT set a flag instead of killing the process.
void install_stop_signals();
bool stop_requested();

}  // namespace fikit::examples
