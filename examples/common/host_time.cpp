#include "host_time.h"

#include <csignal>
#include <thread>

namespace fikit::examples {
namespace {
volatile std::sig_atomic_t g_stop = 0;
extern "C" void on_stop_signal(int) { g_stop = 1; }
}  // namespace

void busy_wait_us(double us) {
  if (us <= 0) return;
  const auto until = Clock::now() + std::chrono::duration<double, std::micro>(us);
  while (Clock::now() < until) {
  }
}

void sleep_us(double us) {
  if (us <= 0) return;
  std::this_thread::sleep_for(std::chrono::duration<double, std::micro>(us));
}

void install_stop_signals() {
  struct sigaction action = {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
}

bool stop_requested() { return g_stop != 0; }

}  // namespace fikit::examples
