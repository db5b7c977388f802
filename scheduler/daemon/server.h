#pragma once
// The daemon's event loop: one Asio thread owns the UDP socket, the timer and the policy.
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "policy.h"

namespace fikit::scheduler {

class Server {
 public:
  // Binds host:port (port 0: any free port). Throws std::runtime_error when it cannot bind.
  Server(const std::string& host, uint16_t port, policy::Settings settings, policy::ProfileSource& profiles);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  uint16_t port() const;
  // Runs the event loop until stop() (from any thread) or SIGTERM/SIGINT when handle_signals.
  void run(bool handle_signals);
  void stop();
  uint64_t dropped_datagrams() const { return dropped_.load(std::memory_order_relaxed); }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::atomic<uint64_t> dropped_{0};
};

// CLOCK_MONOTONIC in ns: the clock grant deadlines are written in (clients share the host).
uint64_t monotonic_ns();

}  // namespace fikit::scheduler
