#pragma once
// The daemon's stream servers (the control socket, the metrics endpoint) answer one request per
// connection: read up to a delimiter (bounded in size, and in time: a client that says nothing is
// cut off), answer, close. One copy of that, for any stream socket.
#include <boost/asio/read_until.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

namespace fikit::scheduler {

// What a server answers to a request (the bytes before the delimiter).
using Answer = std::function<std::string(const std::string& request)>;

template <class Socket>
class OneRequest : public std::enable_shared_from_this<OneRequest<Socket>> {
 public:
  static constexpr std::chrono::seconds kTimeout{2};   // a status or a scrape takes milliseconds

  // `answer` must outlive the connection (the server's); `slot`: the listener's (AcceptLimiter),
  // freed with the connection.
  OneRequest(Socket socket, std::string delimiter, size_t max_request, const Answer& answer, std::shared_ptr<void> slot)
      : socket_(std::move(socket)), timer_(socket_.get_executor()), delimiter_(std::move(delimiter)),
        answer_(answer), in_(max_request), slot_(std::move(slot)) {}

  void start() {
    auto self = this->shared_from_this();
    timer_.expires_after(kTimeout);
    timer_.async_wait([self](boost::system::error_code ec) {
      if (!ec) self->socket_.close();
    });
    boost::asio::async_read_until(socket_, in_, delimiter_, [self](boost::system::error_code ec, size_t n) {
      if (ec) return self->finish();
      const auto data = self->in_.data();
      const std::string request(boost::asio::buffers_begin(data),
                                boost::asio::buffers_begin(data) + (n - self->delimiter_.size()));
      self->out_ = self->answer_(request);
      boost::asio::async_write(self->socket_, boost::asio::buffer(self->out_),
                               [self](boost::system::error_code, size_t) { self->finish(); });
    });
  }

 private:
  void finish() {
    boost::system::error_code ec;
    timer_.cancel();
    socket_.shutdown(Socket::shutdown_both, ec);
    socket_.close(ec);
  }

  Socket socket_;
  boost::asio::steady_timer timer_;
  const std::string delimiter_;
  const Answer& answer_;
  boost::asio::streambuf in_;
  std::string out_;
  std::shared_ptr<void> slot_;
};

}  // namespace fikit::scheduler
