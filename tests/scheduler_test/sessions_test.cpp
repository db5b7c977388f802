// The daemon's session table on its own: binding at registration, and every rule a later datagram
// must pass (address, authentication, epoch, task, sequence).
#include <gtest/gtest.h>

#include "sessions.h"

namespace fikit::scheduler {
namespace {

const Endpoint kA(boost::asio::ip::make_address("127.0.0.1"), 40001);
const Endpoint kB(boost::asio::ip::make_address("127.0.0.1"), 40002);
constexpr uint64_t kEpoch = 0x5eed;

protocol::Header header(uint64_t session, uint64_t seq, uint32_t task = 0, uint64_t epoch = kEpoch) {
  protocol::Header h;
  h.session = session;
  h.seq = seq;
  h.task = task;
  h.epoch = epoch;
  return h;
}

protocol::DeviceUuid device(uint8_t n) {
  protocol::DeviceUuid d{};
  d[15] = n;
  return d;
}

TEST(Sessions, ANewSessionBindsAtRegistrationAndKeepsItsTaskPerDevice) {
  Sessions s(kEpoch);
  uint32_t existing = 99;
  EXPECT_EQ(s.check_register(header(1, 1), device(0), kA, false, "", &existing), Refusal::None);
  EXPECT_EQ(existing, 0u);
  s.bind(header(1, 1), device(0), kA, false, "", 7);
  EXPECT_EQ(s.check_register(header(1, 2), device(0), kA, false, "", &existing), Refusal::None);
  EXPECT_EQ(existing, 7u);
  EXPECT_EQ(s.check_register(header(1, 3), device(1), kA, false, "", &existing), Refusal::None);
  EXPECT_EQ(existing, 0u);   // another device: another task
  s.bind(header(1, 3), device(1), kA, false, "", 8);
  EXPECT_EQ(s.check(header(1, 4, 8), kA, false), Refusal::None);
  EXPECT_EQ(s.size(), 1u);
}

TEST(Sessions, EveryRuleIsCheckedAndCounted) {
  Sessions s(kEpoch);
  s.bind(header(1, 1), device(0), kA, false, "", 7);
  s.bind(header(2, 1), device(0), kB, true, "", 8);
  EXPECT_EQ(s.check(header(3, 5, 7), kA, false), Refusal::UnknownSession);
  EXPECT_EQ(s.check(header(1, 5, 7), kB, false), Refusal::WrongAddress);
  EXPECT_EQ(s.check(header(1, 5, 7), kA, true), Refusal::WrongAuth);
  EXPECT_EQ(s.check(header(2, 5, 8), kB, false), Refusal::WrongAuth);
  EXPECT_EQ(s.check(header(1, 5, 7, kEpoch + 1), kA, false), Refusal::StaleEpoch);
  EXPECT_EQ(s.check(header(1, 5, 8), kA, false), Refusal::WrongTask);
  EXPECT_EQ(s.check(header(1, 5, 7), kA, false), Refusal::None);
  EXPECT_EQ(s.check(header(1, 5, 7), kA, false), Refusal::Replayed);
  // A refused datagram does not move the window: sequence 6 is still new.
  EXPECT_EQ(s.check(header(1, 6, 7), kB, false), Refusal::WrongAddress);
  EXPECT_EQ(s.check(header(1, 6, 7), kA, false), Refusal::None);
  const auto& c = s.counters();
  EXPECT_EQ(c.unknown_session, 1u);
  EXPECT_EQ(c.wrong_address, 2u);
  EXPECT_EQ(c.wrong_auth, 2u);
  EXPECT_EQ(c.stale_epoch, 1u);
  EXPECT_EQ(c.wrong_task, 1u);
  EXPECT_EQ(c.replayed, 1u);
}

TEST(Sessions, AddressesCarryTheDaemonsIncreasingSequence) {
  Sessions s(kEpoch);
  s.bind(header(1, 1), device(0), kA, true, "", 7);
  Endpoint to;
  protocol::Header h;
  bool auth = false;
  ASSERT_TRUE(s.address(7, &to, &h, &auth));
  EXPECT_EQ(to, kA);
  EXPECT_TRUE(auth);
  EXPECT_EQ(h.session, 1u);
  EXPECT_EQ(h.epoch, kEpoch);
  EXPECT_EQ(h.task, 7u);
  const uint64_t first = h.seq;
  ASSERT_TRUE(s.address(7, &to, &h, &auth));
  EXPECT_EQ(h.seq, first + 1);
  EXPECT_FALSE(s.address(8, &to, &h, &auth));
}

TEST(Sessions, ForgettingTheLastTaskEndsTheSession) {
  Sessions s(kEpoch);
  s.bind(header(1, 1), device(0), kA, false, "", 7);
  s.bind(header(1, 2), device(1), kA, false, "", 8);
  s.forget({7});
  EXPECT_EQ(s.size(), 1u);
  EXPECT_EQ(s.check(header(1, 3, 7), kA, false), Refusal::WrongTask);
  s.forget({8});
  EXPECT_EQ(s.size(), 0u);
  EXPECT_EQ(s.check(header(1, 4, 8), kA, false), Refusal::UnknownSession);
}

// Trust v3, F1: a lease that ran out while the client (or the daemon) was stopped forgets the
// session; the client registers again under the same ID and must accept the answers. Its replay
// window has seen the daemon's numbers so far: the new ones must lie above them.
TEST(Sessions, ASessionBoundAgainAfterItWasForgottenGoesOnAboveEveryNumberItsClientSaw) {
  Sessions s(kEpoch);
  protocol::ReplayWindow client;   // the client's window on the daemon's numbers
  Endpoint to;
  protocol::Header h;
  bool auth = false;
  s.bind(header(1, 1), device(0), kA, false, "", 7);
  s.bind(header(2, 1), device(0), kB, false, "", 8);   // another session's traffic in between
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(s.address(7, &to, &h, &auth));
    EXPECT_TRUE(client.accept(h.seq));
    ASSERT_TRUE(s.address(8, &to, &h, &auth));
  }
  s.forget({7});
  EXPECT_EQ(s.check(header(1, 500, 7), kA, false), Refusal::UnknownSession);
  s.bind(header(1, 501), device(0), kA, false, "", 9);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(s.address(9, &to, &h, &auth));
    EXPECT_TRUE(client.accept(h.seq)) << "answer " << i << " after the session was bound again";
  }
  // Sessionless answers (errors to an unknown session) come from the same counter.
  const uint64_t next = s.next_sequence();
  ASSERT_TRUE(s.address(9, &to, &h, &auth));
  EXPECT_GT(h.seq, next);
}

// Per-owner limits: a user's sessions together, a remote address's, the GPUs they name, and the
// slots kept for the key's holders. Refusals are counted by limit; a task that leaves frees its count.
TEST(Sessions, AnOwnerCannotTakeMoreThanItsShare) {
  Quotas q;
  q.tasks_per_user = 3;
  q.gpus_per_user = 2;
  Sessions s(kEpoch, q);
  uint32_t existing = 0;
  const std::string user = owner_of(1000u, kA);
  EXPECT_EQ(user, "uid:1000");
  // Three sessions of one user (one socket could open them all): the fourth task is refused.
  for (uint64_t session = 1; session <= 3; ++session) {
    ASSERT_EQ(s.check_register(header(session, 1), device(0), kA, false, user, &existing), Refusal::None);
    s.bind(header(session, 1), device(0), kA, false, user, uint32_t(session));
  }
  EXPECT_EQ(s.check_register(header(4, 1), device(0), kA, false, user, &existing), Refusal::UserQuota);
  EXPECT_EQ(s.tasks_of(user), 3u);
  // Another user is not affected; a registration again of a task held is not a new task.
  EXPECT_EQ(s.check_register(header(5, 1), device(0), kB, false, owner_of(1001u, kB), &existing), Refusal::None);
  EXPECT_EQ(s.check_register(header(1, 2), device(0), kA, false, "", &existing), Refusal::None);
  EXPECT_EQ(existing, 1u);
  s.forget({3});
  EXPECT_EQ(s.check_register(header(4, 2), device(0), kA, false, user, &existing), Refusal::None);
  EXPECT_EQ(s.counters().user_quota, 1u);
}

TEST(Sessions, AnOwnersTasksNameAtMostItsShareOfGpus) {
  Quotas q;
  q.gpus_per_user = 2;
  Sessions s(kEpoch, q);
  uint32_t existing = 0;
  const std::string user = owner_of(1000u, kA);
  for (uint8_t gpu = 0; gpu < 2; ++gpu) {
    ASSERT_EQ(s.check_register(header(1, gpu + 1), device(gpu), kA, false, user, &existing), Refusal::None);
    s.bind(header(1, gpu + 1), device(gpu), kA, false, user, 10u + gpu);
  }
  // A third GPU (a real one, or a UUID made up to take a scheduling domain): refused.
  EXPECT_EQ(s.check_register(header(1, 3), device(7), kA, false, user, &existing), Refusal::GpuQuota);
  EXPECT_EQ(s.check_register(header(2, 1), device(7), kA, false, user, &existing), Refusal::GpuQuota);
  EXPECT_EQ(s.check_register(header(2, 2), device(1), kA, false, user, &existing), Refusal::None);
  EXPECT_EQ(s.counters().gpu_quota, 2u);
}

TEST(Sessions, RemoteAddressesHaveTheirOwnShareAndTheKeysHoldersAReserve) {
  Quotas q;
  q.tasks_per_source = 1;
  q.unauthenticated_tasks = 2;
  Sessions s(kEpoch, q);
  uint32_t existing = 0;
  const Endpoint remote(boost::asio::ip::make_address("10.0.0.7"), 40003);
  const std::string addr = owner_of(std::nullopt, remote);
  EXPECT_EQ(addr, "addr:10.0.0.7");
  EXPECT_EQ(owner_of(std::nullopt, kA), kUnknownOwner) << "a local sender whose socket is not found";
  ASSERT_EQ(s.check_register(header(1, 1), device(0), remote, false, addr, &existing), Refusal::None);
  s.bind(header(1, 1), device(0), remote, false, addr, 1);
  EXPECT_EQ(s.check_register(header(2, 1), device(0), remote, false, addr, &existing), Refusal::SourceQuota);
  s.bind(header(3, 1), device(0), kA, false, "", 2);
  // Two unauthenticated tasks: the rest is for clients with the key.
  EXPECT_EQ(s.check_register(header(4, 1), device(0), kB, false, "", &existing), Refusal::KeyedSlots);
  EXPECT_EQ(s.check_register(header(4, 1), device(0), kB, true, "", &existing), Refusal::None);
  EXPECT_EQ(refusal_reason(Refusal::KeyedSlots), uint16_t(protocol::RefusalReason::KeyRequired));
  EXPECT_EQ(refusal_reason(Refusal::WrongAddress), 0u) << "spoofs are dropped, not answered";
}

}  // namespace
}  // namespace fikit::scheduler

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "peer_uid.h"

namespace fikit::scheduler {
namespace {

// A UDP socket bound to a free loopback port, standing for the daemon's.
struct Bound {
  int fd;
  Endpoint at;
  explicit Bound(const char* address) {
    const auto a = boost::asio::ip::make_address(address);
    fd = socket(a.is_v4() ? AF_INET : AF_INET6, SOCK_DGRAM, 0);
    Endpoint e(a, 0);
    if (bind(fd, e.data(), e.size()) == 0) {
      socklen_t len = e.capacity();
      getsockname(fd, e.data(), &len);
      e.resize(len);
    }
    at = e;
  }
  ~Bound() { close(fd); }
};

// A socket that sends to `daemon` (connected, as the hook's, or not: sendto) and where it sends from.
Endpoint sender(int fd, const Endpoint& daemon, bool connected) {
  if (connected)
    EXPECT_EQ(connect(fd, daemon.data(), daemon.size()), 0);
  else
    EXPECT_EQ(sendto(fd, "x", 1, 0, daemon.data(), daemon.size()), 1);
  Endpoint local;
  socklen_t len = local.capacity();
  getsockname(fd, local.data(), &len);
  local.resize(len);
  return Endpoint(daemon.address(), local.port());
}

// The local sender's user is the owner of the socket it sends from, over IPv4 and IPv6 loopback,
// connected or not; a socket closed already, and a remote sender, have none.
TEST(PeerUid, TheOwnerOfALoopbackSendersSocket) {
  for (const char* address : {"127.0.0.1", "::1"}) {
    Bound daemon(address);
    if (daemon.at.port() == 0) {
      ASSERT_STREQ(address, "::1") << "no IPv4 loopback";
      continue;   // no IPv6 here
    }
    for (bool connected : {true, false}) {
      const int fd = socket(daemon.at.protocol().family(), SOCK_DGRAM, 0);
      const Endpoint from = sender(fd, daemon.at, connected);
      EXPECT_EQ(local_udp_owner(from, daemon.at), getuid()) << address << (connected ? " connected" : " sendto");
      // A daemon listening on every address is reached at the loopback one.
      const Endpoint any(daemon.at.address().is_v4() ? boost::asio::ip::address(boost::asio::ip::address_v4::any())
                                                      : boost::asio::ip::address(boost::asio::ip::address_v6::any()),
                         daemon.at.port());
      EXPECT_EQ(local_udp_owner(from, any), getuid()) << address;
      close(fd);
      EXPECT_FALSE(local_udp_owner(from, daemon.at)) << "a closed socket has no owner";
    }
  }
  Bound daemon("127.0.0.1");
  EXPECT_FALSE(local_udp_owner(Endpoint(boost::asio::ip::make_address("10.1.2.3"), 40000), daemon.at));
}

// Another user's socket is told apart from the daemon's user (root only: it makes a socket as nobody).
TEST(PeerUid, AnotherUsersSocketIsTheirs) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to make a socket as another user";
  Bound daemon("127.0.0.1");
  ASSERT_EQ(seteuid(65534), 0);
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);   // the socket's owner is its creator's
  ASSERT_EQ(seteuid(0), 0);
  const Endpoint from = sender(fd, daemon.at, true);
  EXPECT_EQ(local_udp_owner(from, daemon.at), 65534u);
  close(fd);
}

}  // namespace
}  // namespace fikit::scheduler
