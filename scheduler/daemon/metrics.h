#pragma once
// Prometheus metrics: the daemon's counters and per-task wait histograms, per GPU, in the text
// exposition format (version 0.0.4, written by prometheus-cpp's TextSerializer), served over HTTP on
// a loopback TCP port when asked for (--metrics HOST:PORT; off by default) by the daemon's own
// one-request server (one_request.h): prometheus-cpp's Exposer would bring a second HTTP server
// (civetweb) and threads of its own. One GET per connection; anything else gets 404 or 405.
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <functional>
#include <map>
#include <utility>
#include <string>

#include "accept_limiter.h"
#include "one_request.h"
#include "snapshot.h"

namespace fikit::scheduler {

// Per task key, a counter must never go down though the key's processes come and go: what the
// processes that left had counted (at the last scrape that saw them) is kept and added in, for as
// long as the key has a process (after that its series end, and a new one starts from 0).
class DepartedTasks {
 public:
  struct Counts {
    uint64_t memory_refusals = 0;
    policy::WaitHistogram waits;
  };
  // Remembers each live task's counts; those of tasks gone since the last call become departed.
  void update(const DaemonSnapshot& s);
  const Counts* of(const std::string& device, const std::string& key) const;

 private:
  using KeyId = std::pair<std::string, std::string>;   // device, task key
  std::map<std::pair<std::string, uint32_t>, std::pair<std::string, Counts>> live_;   // (device, task id)
  std::map<KeyId, Counts> departed_;
};

// The exposition text of one snapshot (tests parse it); with `departed` (the server's), the key
// counters include the processes that left.
std::string format_prometheus(const DaemonSnapshot& s, DepartedTasks* departed = nullptr);

class MetricsServer {
 public:
  using Source = std::function<std::string()>;   // the body, on the daemon's thread
  // Listens on host:port (port 0: any; port() tells). Throws std::runtime_error when it cannot.
  MetricsServer(boost::asio::io_context& io, const std::string& host, uint16_t port, Source source);
  uint16_t port() const { return port_; }
  static constexpr size_t kMaxConnections = 16;   // scrapers at once; more wait in the listen backlog

 private:
  void accept();
  Source source_;
  Answer answer_;   // HTTP around source_ (one_request.h)
  boost::asio::ip::tcp::acceptor acceptor_;
  AcceptLimiter limiter_;
  uint16_t port_ = 0;
};

}  // namespace fikit::scheduler
