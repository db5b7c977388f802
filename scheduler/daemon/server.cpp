#include "server.h"

#include <spdlog/spdlog.h>
#include <sched.h>
#include <time.h>

#include <array>
#include <boost/asio.hpp>
#include <stdexcept>
#include <unordered_map>

namespace fikit::scheduler {

namespace asio = boost::asio;
using asio::ip::udp;

uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

struct Server::Impl {
  Impl(Server& owner, const std::string& host, uint16_t port, policy::Settings settings,
       policy::ProfileSource& profiles)
      : owner(owner), socket(io), timer(io), signals(io), policy(settings, profiles) {
    boost::system::error_code ec;
    auto address = asio::ip::make_address(host, ec);
    if (ec) throw std::runtime_error("cannot listen on '" + host + "': not an IP address");
    udp::endpoint ep(address, port);
    socket.open(ep.protocol(), ec);
    if (!ec) socket.bind(ep, ec);
    if (ec) throw std::runtime_error("cannot listen on " + host + ":" + std::to_string(port) + ": " + ec.message());
    socket.non_blocking(true, ec);   // poll_while_notified() reads without blocking
  }

  void receive() {
    socket.async_receive_from(asio::buffer(in), sender, [this](boost::system::error_code ec, size_t n) {
      if (ec == asio::error::operation_aborted) return;
      if (!ec) handle(n);
      receive();
    });
  }

  void handle(size_t n) {
    protocol::Message msg;
    // One byte more than the largest datagram is read, so an oversized one shows as too long.
    protocol::DecodeError err = protocol::decode(std::span<const uint8_t>(in.data(), n), msg);
    if (err != protocol::DecodeError::None) {
      uint64_t dropped = owner.dropped_.fetch_add(1, std::memory_order_relaxed) + 1;
      spdlog::debug("dropped a datagram of {} bytes from {}: {} ({} dropped so far)", n,
                    sender.address().to_string(), protocol::to_string(err), dropped);
      return;
    }
    const uint64_t now = monotonic_ns();
    if (std::holds_alternative<protocol::StatusQuery>(msg.body)) {
      protocol::StatusReply reply = policy.status(now);
      reply.dropped_datagrams = owner.dropped_datagrams();
      send_to(sender, protocol::Header{protocol::Type::StatusReply, 0, msg.header.seq}, reply);
      return;
    }
    if (!is_client_to_daemon(msg.body)) {
      owner.dropped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    if (msg.header.task_id != 0 && endpoints.count(msg.header.task_id)) endpoints[msg.header.task_id] = sender;
    actions.clear();
    policy.on_message(now, msg, actions);
    for (const policy::Action& a : actions) {
      if (auto* r = std::get_if<protocol::Registered>(&a.message.body)) {
        endpoints[a.task_id] = sender;
        spdlog::info("task {} registered: key '{}', priority {}, pid {}, role {}", a.task_id,
                     std::get<protocol::Register>(msg.body).key_view(),
                     std::get<protocol::Register>(msg.body).priority, std::get<protocol::Register>(msg.body).pid,
                     r->role);
      }
    }
    dispatch(msg.header.task_id);
    forget_departed();
    arm_timer();
    if (std::holds_alternative<protocol::LaunchNotify>(msg.body)) poll_while_notified();
  }

  // While the holder notifies, the next notification is microseconds away: take it by polling
  // rather than from epoll, so the holder's sendto does not pay for waking this thread (the
  // holder's cost; the daemon pays CPU, yielding to anything else runnable). Bounded, so timers
  // run and signals are seen; ends as soon as the holder goes quiet or stops notifying.
  void poll_while_notified() {
    const uint64_t window = policy.settings().notify_poll_ns;
    if (window == 0 || polling) return;
    polling = true;
    const uint64_t started = monotonic_ns();
    uint64_t last = started;
    boost::system::error_code ec;
    while (policy.notifications_expected()) {
      const uint64_t now = monotonic_ns();
      if (now - last > window || now - started > kMaxPollNs) break;
      if (policy.next_wake() <= now) {
        actions.clear();
        policy.on_tick(now, actions);
        dispatch(0);
        forget_departed();
        arm_timer();
      }
      size_t n = socket.receive_from(asio::buffer(in), sender, 0, ec);
      if (!ec) {
        handle(n);   // polling is set: no nested poll
        last = monotonic_ns();
      } else if (ec == asio::error::would_block || ec == asio::error::try_again) {
        sched_yield();
      } else {
        break;
      }
    }
    polling = false;
  }
  static constexpr uint64_t kMaxPollNs = 20'000'000;   // back to the event loop at least this often
  bool polling = false;

  static bool is_client_to_daemon(const protocol::Body& b) {
    return std::holds_alternative<protocol::Register>(b) || std::holds_alternative<protocol::LaunchNotify>(b) ||
           std::holds_alternative<protocol::LaunchRequest>(b) || std::holds_alternative<protocol::Idle>(b) ||
           std::holds_alternative<protocol::Heartbeat>(b) || std::holds_alternative<protocol::Goodbye>(b);
  }

  // Sends the policy's actions; a reply to a task the policy does not know goes back to the sender.
  void dispatch(uint32_t sender_task) {
    for (const policy::Action& a : actions) {
      auto it = endpoints.find(a.task_id);
      if (it != endpoints.end()) {
        send_to(it->second, a.message.header, a.message.body);
      } else if (a.task_id == sender_task || a.task_id == 0) {
        send_to(sender, a.message.header, a.message.body);
      }
    }
  }

  void forget_departed() {
    if (endpoints.size() == policy.task_count()) return;
    auto status = policy.status(monotonic_ns());
    std::unordered_map<uint32_t, udp::endpoint> kept;
    for (const auto& t : status.tasks) {
      auto it = endpoints.find(t.task_id);
      if (it != endpoints.end()) kept.emplace(t.task_id, it->second);
    }
    if (kept.size() < endpoints.size()) spdlog::info("{} task(s) left", endpoints.size() - kept.size());
    endpoints.swap(kept);
  }

  void send_to(const udp::endpoint& to, protocol::Header h, const protocol::Body& body) {
    size_t n = protocol::encode(h, body, out);
    if (n == 0) {
      spdlog::error("could not encode a {} message", int(body.index()));
      return;
    }
    boost::system::error_code ec;
    socket.send_to(asio::buffer(out.data(), n), to, 0, ec);   // UDP: never blocks for long
    if (ec) spdlog::debug("send to {}:{} failed: {}", to.address().to_string(), to.port(), ec.message());
  }

  void arm_timer() {
    const uint64_t wake = policy.next_wake();
    // A later wake than the armed one leaves the timer alone: it fires early, the policy finds
    // nothing due and the timer is armed again. Re-arming costs syscalls on every notification
    // (each one moves the quiet timeout), and the daemon shares the machine with the programs.
    if (wake >= armed_for) return;
    armed_for = wake;
    if (wake == policy::Policy::kNever) {
      timer.cancel();
      return;
    }
    const uint64_t now = monotonic_ns();
    timer.expires_after(std::chrono::nanoseconds(wake > now ? wake - now : 0));
    timer.async_wait([this](boost::system::error_code ec) {
      if (ec) return;
      armed_for = policy::Policy::kNever;
      actions.clear();
      policy.on_tick(monotonic_ns(), actions);
      dispatch(0);
      forget_departed();
      arm_timer();
    });
  }

  Server& owner;
  asio::io_context io;
  udp::socket socket;
  asio::steady_timer timer;
  asio::signal_set signals;
  policy::Policy policy;
  std::array<uint8_t, protocol::kMaxDatagram + 1> in{};
  std::array<uint8_t, protocol::kMaxDatagram> out{};
  udp::endpoint sender;
  std::unordered_map<uint32_t, udp::endpoint> endpoints;
  std::vector<policy::Action> actions;
  uint64_t armed_for = policy::Policy::kNever;
};

Server::Server(const std::string& host, uint16_t port, policy::Settings settings, policy::ProfileSource& profiles)
    : impl_(std::make_unique<Impl>(*this, host, port, settings, profiles)) {}

Server::~Server() = default;

uint16_t Server::port() const { return impl_->socket.local_endpoint().port(); }

void Server::run(bool handle_signals) {
  if (handle_signals) {
    impl_->signals.add(SIGTERM);
    impl_->signals.add(SIGINT);
    impl_->signals.async_wait([this](boost::system::error_code ec, int sig) {
      if (ec) return;
      spdlog::info("signal {}: shutting down", sig);
      stop();
    });
  }
  impl_->receive();
  impl_->io.run();
}

void Server::stop() {
  asio::post(impl_->io, [this] {
    boost::system::error_code ec;
    impl_->socket.close(ec);
    impl_->timer.cancel();
    impl_->signals.cancel();
    impl_->io.stop();
  });
}

}  // namespace fikit::scheduler
