#pragma once
// The daemon's control socket: a Unix-domain stream socket in a folder only its user can enter
// (default: root's /run/fikit/, a user's $XDG_RUNTIME_DIR/fikit/, else /tmp/fikit-<uid>/), so that only that user (and root) can
// read the daemon's state. One request per connection: a command line in ("status", "status-json"),
// the answer out, then the daemon closes. Nothing here is reachable from the network.
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "accept_limiter.h"
#include "one_request.h"

namespace fikit::scheduler {

// The default control socket of the daemon serving UDP `port`.
std::string default_control_path(uint16_t port);

class ControlServer {
 public:
  using Handler = Answer;   // a command line in, its answer out
  // Creates the folder (0700) if needed, replaces a stale socket file, listens. Throws
  // std::runtime_error (naming the path) when it cannot.
  ControlServer(boost::asio::io_context& io, const std::string& path, Handler handler);
  ~ControlServer();
  const std::string& path() const { return path_; }
  static constexpr size_t kMaxConnections = 8;   // status requests at once; more wait in the backlog

 private:
  void accept();
  std::string path_;
  Handler handler_;
  boost::asio::local::stream_protocol::acceptor acceptor_;
  AcceptLimiter limiter_;
};

// Client side: sends `command`, returns the answer; nullopt with `error` set when no daemon answers.
std::optional<std::string> control_request(const std::string& path, const std::string& command, int timeout_ms,
                                           std::string& error);

}  // namespace fikit::scheduler
