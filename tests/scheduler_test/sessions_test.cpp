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
  EXPECT_EQ(s.check_register(header(1, 1), device(0), kA, false, &existing), Refusal::None);
  EXPECT_EQ(existing, 0u);
  s.bind(header(1, 1), device(0), kA, false, 7);
  EXPECT_EQ(s.check_register(header(1, 2), device(0), kA, false, &existing), Refusal::None);
  EXPECT_EQ(existing, 7u);
  EXPECT_EQ(s.check_register(header(1, 3), device(1), kA, false, &existing), Refusal::None);
  EXPECT_EQ(existing, 0u);   // another device: another task
  s.bind(header(1, 3), device(1), kA, false, 8);
  EXPECT_EQ(s.check(header(1, 4, 8), kA, false), Refusal::None);
  EXPECT_EQ(s.size(), 1u);
}

TEST(Sessions, EveryRuleIsCheckedAndCounted) {
  Sessions s(kEpoch);
  s.bind(header(1, 1), device(0), kA, false, 7);
  s.bind(header(2, 1), device(0), kB, true, 8);
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
  s.bind(header(1, 1), device(0), kA, true, 7);
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
  s.bind(header(1, 1), device(0), kA, false, 7);
  s.bind(header(1, 2), device(1), kA, false, 8);
  s.forget({7});
  EXPECT_EQ(s.size(), 1u);
  EXPECT_EQ(s.check(header(1, 3, 7), kA, false), Refusal::WrongTask);
  s.forget({8});
  EXPECT_EQ(s.size(), 0u);
  EXPECT_EQ(s.check(header(1, 4, 8), kA, false), Refusal::UnknownSession);
}

}  // namespace
}  // namespace fikit::scheduler
