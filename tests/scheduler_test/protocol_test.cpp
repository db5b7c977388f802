// Wire protocol: every message survives encode -> decode, and malformed datagrams are rejected.
#include <gtest/gtest.h>

#include <random>

#include "protocol.h"

namespace fikit::protocol {
namespace {

std::vector<uint8_t> encoded(Header h, const Body& body) {
  std::vector<uint8_t> buf(kMaxDatagram);
  size_t n = encode(h, body, buf);
  buf.resize(n);
  return buf;
}

Message decoded(const std::vector<uint8_t>& buf) {
  Message m;
  EXPECT_EQ(decode(buf, m), DecodeError::None);
  return m;
}

TEST(Protocol, RegisterRoundTrip) {
  Register r;
  r.priority = 3;
  r.mode = TaskMode::Measure;
  r.pid = 4242;
  set_key(r, "resnet50-infer");
  auto buf = encoded({Type::Heartbeat, 0, 77}, r);
  ASSERT_EQ(buf.size(), kHeaderSize + 8 + 14);
  Message m = decoded(buf);
  EXPECT_EQ(m.header.type, Type::Register);   // the type comes from the body, not the header argument
  EXPECT_EQ(m.header.seq, 77u);
  const auto& got = std::get<Register>(m.body);
  EXPECT_EQ(got.priority, 3);
  EXPECT_EQ(got.mode, TaskMode::Measure);
  EXPECT_EQ(got.pid, 4242u);
  EXPECT_EQ(got.key_view(), "resnet50-infer");
}

TEST(Protocol, FixedMessagesRoundTrip) {
  Message m = decoded(encoded({Type::Grant, 9, 5}, Grant{12345, 987654321012ull}));
  EXPECT_EQ(m.header.task_id, 9u);
  EXPECT_EQ(std::get<Grant>(m.body).credit_ns, 12345u);
  EXPECT_EQ(std::get<Grant>(m.body).deadline_ns, 987654321012ull);

  m = decoded(encoded({}, LaunchRequest{0xdeadbeefcafef00dull, 30000, kRequestProfiled}));
  EXPECT_EQ(std::get<LaunchRequest>(m.body).kernel_id, 0xdeadbeefcafef00dull);
  EXPECT_EQ(std::get<LaunchRequest>(m.body).predicted_ns, 30000u);
  EXPECT_EQ(std::get<LaunchRequest>(m.body).flags, kRequestProfiled);

  m = decoded(encoded({}, Role{kRoleHolder | kRoleNotify, 17}));
  EXPECT_EQ(std::get<Role>(m.body).flags, kRoleHolder | kRoleNotify);
  EXPECT_EQ(std::get<Role>(m.body).epoch, 17u);

  m = decoded(encoded({}, Registered{1000, kRoleHolder, 5000, 20000}));
  EXPECT_EQ(std::get<Registered>(m.body).lease_ms, 1000u);
  EXPECT_EQ(std::get<Registered>(m.body).fill_min_gap_ns, 5000u);
  EXPECT_EQ(std::get<Registered>(m.body).grant_latency_ns, 20000u);
  EXPECT_EQ(std::get<Queued>(decoded(encoded({}, Queued{4})).body).position, 4u);
  EXPECT_EQ(std::get<Error>(decoded(encoded({}, Error{ErrorCode::UnknownTask})).body).code, ErrorCode::UnknownTask);
  for (Body b : {Body{Idle{}}, Body{Heartbeat{}}, Body{Goodbye{}}, Body{StatusQuery{}}}) {
    auto buf = encoded({Type::Heartbeat, 3, 4}, b);
    EXPECT_EQ(buf.size(), kHeaderSize);
    EXPECT_EQ(decoded(buf).body.index(), b.index());
  }
}

TEST(Protocol, NotifyFastPathMatchesGenericEncoder) {
  uint8_t fast[32];
  size_t n = encode_notify(5, 6, 0x1122334455667788ull, fast);
  auto generic = encoded({Type::Heartbeat, 5, 6}, LaunchNotify{0x1122334455667788ull});
  ASSERT_EQ(n, generic.size());
  EXPECT_EQ(std::vector<uint8_t>(fast, fast + n), generic);
  EXPECT_EQ(generic[0], 'F');   // little-endian magic spells FKIT on the wire
  EXPECT_EQ(generic[3], 'T');
}

TEST(Protocol, NotifyCarriesTheLaunchTime) {
  uint8_t fast[48];
  size_t n = encode_notify(5, 6, 77, fast, 123456789ull);
  auto generic = encoded({Type::Heartbeat, 5, 6}, LaunchNotify{77, 123456789ull});
  ASSERT_EQ(n, generic.size());
  EXPECT_TRUE(std::equal(generic.begin(), generic.end(), fast));
  EXPECT_EQ(std::get<LaunchNotify>(decoded(generic).body).launched_ns, 123456789ull);
}

TEST(Protocol, StatusReplyRoundTrip) {
  StatusReply s;
  s.uptime_ns = 5;
  s.fills = 7;
  s.early_stops = 2;
  s.dropped_datagrams = 3;
  s.holder_task_id = 1;
  for (uint32_t i = 1; i <= 3; ++i) {
    TaskStatus t;
    t.task_id = i;
    t.pid = 100 + i;
    t.priority = uint8_t(i);
    t.role = i == 1 ? kRoleHolder : 0;
    t.queue_length = i * 2;
    t.grants = i * 10;
    set_key(t, "task-" + std::to_string(i));
    s.tasks.push_back(t);
  }
  Message m = decoded(encoded({}, s));
  const auto& got = std::get<StatusReply>(m.body);
  EXPECT_EQ(got.fills, 7u);
  EXPECT_EQ(got.early_stops, 2u);
  EXPECT_EQ(got.dropped_datagrams, 3u);
  ASSERT_EQ(got.tasks.size(), 3u);
  EXPECT_EQ(got.tasks[2].key_view(), "task-3");
  EXPECT_EQ(got.tasks[2].queue_length, 6u);
  EXPECT_EQ(got.tasks[0].role, kRoleHolder);
}

TEST(Protocol, EncodeRefusesWhatCannotBeDecoded) {
  Register r;
  r.priority = 10;   // Q0..Q9 only
  set_key(r, "k");
  std::vector<uint8_t> buf(kMaxDatagram);
  EXPECT_EQ(encode({}, r, buf), 0u);
  r.priority = 1;
  r.key_length = 0;
  EXPECT_EQ(encode({}, r, buf), 0u);
  uint8_t small[10];
  EXPECT_EQ(encode({}, Grant{1, 1}, small), 0u);
}

TEST(Protocol, RejectsEveryTruncation) {
  Register r;
  r.pid = 1;
  set_key(r, "truncate-me");
  auto buf = encoded({}, r);
  Message m;
  for (size_t n = 0; n < buf.size(); ++n) {
    std::vector<uint8_t> cut(buf.begin(), buf.begin() + n);
    EXPECT_NE(decode(cut, m), DecodeError::None) << "length " << n;
  }
  auto grant = encoded({}, Grant{1, 2});
  grant.push_back(0);   // one byte too many
  EXPECT_EQ(decode(grant, m), DecodeError::BadSize);
}

TEST(Protocol, RejectsBadHeaders) {
  Message m;
  auto base = encoded({}, Heartbeat{});
  auto bad = base;
  bad[0] ^= 1;
  EXPECT_EQ(decode(bad, m), DecodeError::BadMagic);
  bad = base;
  bad[4] = uint8_t(kVersion + 1);   // a newer version
  EXPECT_EQ(decode(bad, m), DecodeError::BadVersion);
  bad = base;
  bad[6] = 99;
  EXPECT_EQ(decode(bad, m), DecodeError::BadType);
  bad = base;
  bad[6] = 0;
  EXPECT_EQ(decode(bad, m), DecodeError::BadType);
  std::vector<uint8_t> huge(kMaxDatagram + 1, 0);
  std::copy(base.begin(), base.end(), huge.begin());
  EXPECT_EQ(decode(huge, m), DecodeError::TooLong);
}

TEST(Protocol, RejectsBadFields) {
  Message m;
  Register r;
  r.pid = 1;
  set_key(r, "good");
  auto buf = encoded({}, r);
  auto bad = buf;
  bad[kHeaderSize] = 10;   // priority
  EXPECT_EQ(decode(bad, m), DecodeError::BadField);
  bad = buf;
  bad[kHeaderSize + 1] = 2;   // mode
  EXPECT_EQ(decode(bad, m), DecodeError::BadField);
  bad = buf;
  bad[kHeaderSize + 8] = '\n';   // unprintable key
  EXPECT_EQ(decode(bad, m), DecodeError::BadField);
  bad = buf;
  bad[kHeaderSize + 2] = 200;   // key length disagrees with the datagram
  EXPECT_NE(decode(bad, m), DecodeError::None);

  auto role = encoded({}, Role{kRoleHolder, 1});
  role[kHeaderSize] = 0x80;   // unknown flag
  EXPECT_EQ(decode(role, m), DecodeError::BadField);
  role = encoded({}, Role{kRoleHolder, 1});
  role[kHeaderSize + 1] = 1;   // padding must be zero
  EXPECT_EQ(decode(role, m), DecodeError::BadField);
  EXPECT_EQ(decode(encoded({}, LaunchRequest{1, 0, 0}), m), DecodeError::BadField);   // zero duration
  auto grant = encoded({}, Grant{1, 1});
  for (int i = 0; i < 8; ++i) grant[kHeaderSize + i] = 0xff;   // credit beyond a minute
  EXPECT_EQ(decode(grant, m), DecodeError::BadField);
}

TEST(Protocol, RandomBytesAreRejectedOrDecodedConsistently) {
  std::mt19937_64 rng(12345);
  Message m;
  size_t accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> buf(rng() % 64);
    for (auto& b : buf) b = uint8_t(rng());
    if (buf.size() >= 8 && (i % 2)) {   // half the inputs get a valid magic + version to reach the bodies
      auto hb = encoded({}, Heartbeat{});
      std::copy(hb.begin(), hb.begin() + 6, buf.begin());
      buf[6] = uint8_t(1 + rng() % 13);
      buf[7] = 0;
    }
    if (decode(buf, m) != DecodeError::None) continue;
    ++accepted;
    // Whatever decodes must encode back to the same bytes: nothing is silently reinterpreted.
    std::vector<uint8_t> again(kMaxDatagram);
    again.resize(encode(m.header, m.body, again));
    EXPECT_EQ(again, buf);
  }
  EXPECT_GT(accepted, 0u);
}

}  // namespace
}  // namespace fikit::protocol
