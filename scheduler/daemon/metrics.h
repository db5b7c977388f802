#pragma once
// Prometheus metrics: the daemon's counters and per-task wait histograms, per GPU, in the text
// exposition format (version 0.0.4), served over HTTP on a loopback TCP port when asked for
// (--metrics HOST:PORT; off by default). One GET per connection; anything else gets 404 or 405.
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <functional>
#include <string>

#include "accept_limiter.h"
#include "snapshot.h"

namespace fikit::scheduler {

// The exposition text of one snapshot (pure: tests parse it).
std::string format_prometheus(const DaemonSnapshot& s);

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
  boost::asio::ip::tcp::acceptor acceptor_;
  AcceptLimiter limiter_;
  uint16_t port_ = 0;
};

}  // namespace fikit::scheduler
