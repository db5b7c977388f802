// The daemon over real loopback UDP (in-process event loop on a thread), and the hook's share
// client against it: registration, status, grants, malformed datagrams, daemon loss.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "client.h"
#include "log.h"
#include "server.h"
#include "status_client.h"

namespace fikit {
namespace {

class NoProfiles : public policy::ProfileSource {
 public:
  std::shared_ptr<const policy::Profile> load(std::string_view) override { return std::make_shared<policy::Profile>(); }
};

class Daemon {
 public:
  Daemon() : server_("127.0.0.1", 0, settings(), profiles_), thread_([this] { server_.run(false); }) {}
  ~Daemon() { stop(); }
  void stop() {
    if (!thread_.joinable()) return;
    server_.stop();
    thread_.join();
  }
  uint16_t port() const { return server_.port(); }
  static policy::Settings settings() {
    policy::Settings s;
    s.lease_ns = 300'000'000;
    s.holder_quiet_ns = 10'000'000'000;   // only the lease releases a silent holder here
    return s;
  }

 private:
  NoProfiles profiles_;
  scheduler::Server server_;
  std::thread thread_;
};

// A raw protocol client: what the hook sends, byte for byte.
class Peer {
 public:
  explicit Peer(uint16_t port) {
    fd_ = socket(AF_INET, SOCK_DGRAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
  }
  ~Peer() { close(fd_); }
  void send(uint32_t task, uint32_t seq, const protocol::Body& body) {
    uint8_t buf[protocol::kMaxDatagram];
    size_t n = protocol::encode({protocol::Type::Heartbeat, task, seq}, body, buf);
    ASSERT_GT(n, 0u);
    ::send(fd_, buf, n, 0);
  }
  void send_raw(const void* p, size_t n) { ::send(fd_, p, n, 0); }
  // The next message of type T within timeout_ms (others are skipped).
  template <class T>
  std::optional<protocol::Message> expect(int timeout_ms = 1000) {
    uint8_t buf[protocol::kMaxDatagram + 1];
    for (;;) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, timeout_ms) <= 0) return std::nullopt;
      ssize_t n = recv(fd_, buf, sizeof buf, 0);
      protocol::Message m;
      if (n > 0 && protocol::decode(std::span<const uint8_t>(buf, size_t(n)), m) == protocol::DecodeError::None &&
          std::holds_alternative<T>(m.body))
        return m;
    }
  }
  uint32_t register_as(const char* key, int prio, uint32_t pid) {
    protocol::Register r;
    r.priority = uint8_t(prio);
    r.pid = pid;
    protocol::set_key(r, key);
    send(0, 1, r);
    auto m = expect<protocol::Registered>();
    return m ? m->header.task_id : 0;
  }

 private:
  int fd_ = -1;
};

protocol::StatusReply status_of(uint16_t port) {
  std::string error;
  auto s = scheduler::query_status("127.0.0.1", port, 1000, error);
  EXPECT_TRUE(s.has_value()) << error;
  return s.value_or(protocol::StatusReply{});
}

TEST(Daemon, RegistersAndReportsStatus) {
  Daemon d;
  Peer hp(d.port()), lp(d.port());
  uint32_t h = hp.register_as("infer", 0, 11);
  uint32_t l = lp.register_as("train", 5, 12);
  ASSERT_NE(h, 0u);
  ASSERT_NE(l, h);
  auto s = status_of(d.port());
  ASSERT_EQ(s.tasks.size(), 2u);
  EXPECT_EQ(s.holder_task_id, h);
  EXPECT_EQ(s.tasks[0].key_view(), "infer");
  EXPECT_EQ(s.tasks[1].priority, 5);
  std::string table = scheduler::format_status(s);
  EXPECT_NE(table.find("train"), std::string::npos);
  EXPECT_NE(table.find("holder"), std::string::npos);
}

TEST(Daemon, QueuesThenGrantsWhenTheHolderLeaves) {
  Daemon d;
  Peer hp(d.port()), lp(d.port());
  uint32_t h = hp.register_as("infer", 0, 21);
  uint32_t l = lp.register_as("train", 5, 22);
  hp.send(h, 2, protocol::LaunchNotify{42});   // holder active, unknown kernel: no gap to fill
  lp.send(l, 7, protocol::LaunchRequest{99, 10'000, 0});
  auto q = lp.expect<protocol::Queued>();
  ASSERT_TRUE(q);
  EXPECT_EQ(q->header.seq, 7u);
  EXPECT_EQ(status_of(d.port()).tasks[1].queue_length, 1u);
  hp.send(h, 3, protocol::Goodbye{});
  auto g = lp.expect<protocol::Grant>();
  ASSERT_TRUE(g);
  EXPECT_EQ(g->header.seq, 7u);
  EXPECT_GT(std::get<protocol::Grant>(g->body).deadline_ns, scheduler::monotonic_ns());
}

TEST(Daemon, MalformedDatagramsAreCountedAndDropped) {
  Daemon d;
  Peer p(d.port());
  uint8_t header_only[protocol::kHeaderSize];
  size_t n = protocol::encode({}, protocol::Heartbeat{}, header_only);
  p.send_raw("junk", 4);                                   // truncated
  uint8_t wrong_version[protocol::kHeaderSize];
  std::memcpy(wrong_version, header_only, n);
  wrong_version[4] = 9;
  p.send_raw(wrong_version, n);
  std::vector<uint8_t> oversized(protocol::kMaxDatagram + 1, 0);
  std::memcpy(oversized.data(), header_only, n);
  p.send_raw(oversized.data(), oversized.size());
  p.send(0, 1, protocol::Grant{1, 1});                     // a daemon-to-client message
  EXPECT_EQ(status_of(d.port()).dropped_datagrams, 4u);
  // Still serving.
  EXPECT_NE(p.register_as("after", 3, 31), 0u);
}

TEST(Daemon, UnknownTaskIsToldToRegisterAgain) {
  Daemon d;
  Peer p(d.port());
  p.send(1234, 1, protocol::Heartbeat{});
  auto e = p.expect<protocol::Error>();
  ASSERT_TRUE(e);
  EXPECT_EQ(std::get<protocol::Error>(e->body).code, protocol::ErrorCode::UnknownTask);
}

TEST(Daemon, SilentClientIsReleasedWithinItsLease) {
  Daemon d;   // lease 300 ms
  Peer hp(d.port()), lp(d.port());
  uint32_t h = hp.register_as("infer", 0, 41);
  uint32_t l = lp.register_as("train", 5, 42);
  hp.send(h, 2, protocol::LaunchNotify{1});
  lp.send(l, 3, protocol::LaunchRequest{2, 10'000, 0});
  ASSERT_TRUE(lp.expect<protocol::Queued>());
  // The holder goes silent (as if SIGKILLed); lp keeps its lease with heartbeats.
  std::optional<protocol::Message> g;
  for (int i = 0; i < 20 && !g; ++i) {
    lp.send(l, 10 + i, protocol::Heartbeat{});
    g = lp.expect<protocol::Grant>(50);
  }
  ASSERT_TRUE(g);
  auto s = status_of(d.port());
  EXPECT_EQ(s.lease_expiries, 1u);
  EXPECT_EQ(s.holder_task_id, l);
}

hook::share::ClientOptions options(uint16_t port, const char* key, int prio) {
  hook::share::ClientOptions o;
  o.port = port;
  std::snprintf(o.task_key, sizeof o.task_key, "%s", key);
  o.priority = prio;
  o.daemon_timeout_ms = 100;
  return o;
}

TEST(ShareClient, HolderAndWaiterAgainstTheDaemon) {
  Daemon d;
  hook::share::Client hp, lp;
  ASSERT_TRUE(hp.start(options(d.port(), "infer", 0), true));
  EXPECT_TRUE(hp.role() & protocol::kRoleHolder);
  ASSERT_TRUE(lp.start(options(d.port(), "train", 5), true));
  EXPECT_FALSE(lp.role() & protocol::kRoleHolder);
  // HP idle: LP runs free in bounded chunks; the grant's extra credit covers the next launches.
  EXPECT_EQ(lp.request(7, 10'000, false), hook::share::Client::Wait::Granted);
  EXPECT_TRUE(lp.take_credit(10'000));
  hp.notify_launch(1);   // HP active: LP's credit is revoked, its next request waits
  for (int i = 0; i < 100 && lp.take_credit(1); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_FALSE(lp.take_credit(1));
  hp.stop();             // goodbye: LP becomes holder
  for (int i = 0; i < 100 && !(lp.role() & protocol::kRoleHolder); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_TRUE(lp.role() & protocol::kRoleHolder);
}

TEST(ShareClient, FallsBackToPassthroughWhenTheDaemonDies) {
  auto d = std::make_unique<Daemon>();
  uint16_t port = d->port();
  hook::share::Client hp, lp;
  ASSERT_TRUE(hp.start(options(port, "infer", 0), true));
  ASSERT_TRUE(lp.start(options(port, "train", 5), true));
  hp.notify_launch(1);
  d.reset();   // the daemon is gone
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(lp.request(7, 10'000, false), hook::share::Client::Wait::Passthrough);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(1000));
  EXPECT_FALSE(lp.connected());
}

TEST(ShareClient, NoDaemonMeansPassthroughWithinTheTimeout) {
  int fd = socket(AF_INET, SOCK_DGRAM, 0);   // a port nobody serves
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  hook::share::Client c;
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(c.start(options(ntohs(a.sin_port), "lonely", 3), true));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(500));
  EXPECT_FALSE(c.connected());
  close(fd);
}

}  // namespace
}  // namespace fikit

// The share client logs through the hook's logger; here it goes nowhere.
namespace fikit::hook {
bool log_enabled(LogLevel) noexcept { return false; }
void log(LogLevel, const char*, ...) noexcept {}
}  // namespace fikit::hook
