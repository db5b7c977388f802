#pragma once
// The daemon's event loop: one Asio thread owns the UDP socket, the timer, the control socket, the
// session table and the policy. Datagrams are decoded, authenticated and checked against their
// session (sessions.h) before the policy sees them; the policy's messages go back the same way.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "auth.h"
#include "monotonic.h"
#include "policy.h"
#include "sessions.h"
#include "snapshot.h"

namespace fikit::scheduler {

struct ServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = protocol::kDefaultPort;   // 0: any free port (tests)
  std::string control_path;           // "": none (tests)
  std::string bell_path;              // "": no bell board (clients then hear of the holder by datagram only)
  std::optional<protocol::Key> key;   // datagrams with a valid MAC count as authenticated
  std::string metrics_host;           // "": no metrics endpoint (metrics.h)
  uint16_t metrics_port = 0;          // 0 with a host: any free port (tests)
  policy::Settings settings;
  std::string mps;                    // for status: the MPS control daemon fikit-scheduler runs ("": none)
  // Where what each service's jobs did beside it is recorded for fikit-run (mps/outcomes.h: the MPS
  // folder; "": nowhere), read back at start and written every outcome_every_ms and at stop; and
  // where the backend a job started now should take is published (mps.h, kJobsBackendFile).
  std::string outcomes_dir;
  uint32_t outcome_every_ms = 5'000;
  Quotas quotas;                      // per-user limits (sessions.h); unauthenticated_tasks set from the key
  // Who owns a local sender's socket (peer_uid.h; tests give their own): the sender, the daemon's
  // bound endpoint.
  std::function<std::optional<uint32_t>(const Endpoint&, const Endpoint&)> owner_lookup;
  // What the driver says a task's process holds on its GPU (NVML by default; tests give their own):
  // a heartbeat reporting more is believed only that far (docs/memory.md).
  std::function<std::optional<uint64_t>(const protocol::DeviceUuid&, uint32_t pid)> driver_memory;
};

class Server {
 public:
  // Binds the UDP port and the control socket. Throws std::runtime_error when it cannot.
  Server(const ServerOptions& options, policy::ProfileSource& profiles);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  uint16_t port() const;
  uint16_t metrics_port() const;   // 0: no metrics endpoint
  // Runs the event loop until stop() (from any thread) or SIGTERM/SIGINT when handle_signals.
  void run(bool handle_signals);
  void stop();
  // A task's profile was read (any thread): the policy gets it on the event loop.
  void profile_ready(const std::string& key, std::shared_ptr<const policy::Profile> profile);
  // The state as `fikit-scheduler status` shows it; thread-safe (runs on the loop, or directly
  // when the loop is not running).
  DaemonSnapshot snapshot();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The clock directives' credit ends are written in (clients share the host).
using protocol::monotonic_ns;

}  // namespace fikit::scheduler
