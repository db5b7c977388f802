// Wire protocol: every message survives encode -> decode, malformed datagrams are rejected, MACs
// authenticate (and a changed byte or another key does not), replays are refused, key files are
// read only when private.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "auth.h"
#include "bell.h"
#include "memory_size.h"
#include "protocol.h"

namespace fikit::protocol {
namespace {

Header header(uint64_t seq = 7, uint32_t task = 3) {
  Header h;
  h.session = 0x1122334455667788ull;
  h.epoch = 0xabcdef;
  h.seq = seq;
  h.task = task;
  return h;
}

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
  r.backend = Backend::Mps;
  r.pid = 4242;
  r.flags = kRegisterProfileGrew;
  r.device[0] = 0xab;
  r.device[15] = 0xcd;
  r.sm_count = 132;
  r.memory_total = 80ull << 30;
  r.memory_limit = 20ull << 30;
  r.objective_permille = 1250;
  set_key(r, "resnet50-infer");
  auto buf = encoded(header(77, 0), r);
  ASSERT_EQ(buf.size(), kHeaderSize + 48 + 14);
  Message m = decoded(buf);
  EXPECT_EQ(m.header.type, Type::Register);   // the type comes from the body
  EXPECT_EQ(m.header.seq, 77u);
  EXPECT_EQ(m.header.session, 0x1122334455667788ull);
  EXPECT_EQ(m.header.epoch, 0xabcdefu);
  const auto& got = std::get<Register>(m.body);
  EXPECT_EQ(got.priority, 3);
  EXPECT_EQ(got.mode, TaskMode::Measure);
  EXPECT_EQ(got.backend, Backend::Mps);
  EXPECT_EQ(got.pid, 4242u);
  EXPECT_EQ(got.flags, kRegisterProfileGrew);
  EXPECT_EQ(got.device, r.device);
  EXPECT_EQ(got.sm_count, 132);
  EXPECT_EQ(got.memory_total, 80ull << 30);
  EXPECT_EQ(got.memory_limit, 20ull << 30);
  EXPECT_EQ(got.objective_permille, 1250u);
  Message bad;
  auto below_one = buf;
  below_one[kHeaderSize + 44] = 0xe7, below_one[kHeaderSize + 45] = 0x03;   // 999: faster than alone
  EXPECT_EQ(decode(below_one, bad), DecodeError::BadField);
  buf[kHeaderSize + 3] = 0x02;   // an unknown register flag
  EXPECT_EQ(decode(buf, bad), DecodeError::BadField);
  EXPECT_EQ(got.key_view(), "resnet50-infer");
}

TEST(Protocol, DirectiveAndTheOtherMessagesRoundTrip) {
  Directive d;
  d.role = kRoleHolder | kRoleGaps;
  d.state = State::Fill;
  d.generation = 9;
  d.bound_ns = 200'000;
  d.short_hold_ns = 50'000;
  d.partition_pct = 35;
  d.confine = kConfineActive | kConfineLong;
  d.return_ns = 555'000'000;
  d.memory_cap = 20ull << 30;
  d.credit_ns = 80'000;
  d.credit_until_ns = 987654321012ull;
  d.cause_ns = 123456789ull;
  d.slice_us = 100;
  Message m = decoded(encoded(header(), d));
  const auto& got = std::get<Directive>(m.body);
  EXPECT_EQ(got.role, d.role);
  EXPECT_EQ(got.state, State::Fill);
  EXPECT_EQ(got.generation, 9u);
  EXPECT_EQ(got.bound_ns, 200'000u);
  EXPECT_EQ(got.short_hold_ns, 50'000u);
  EXPECT_EQ(got.partition_pct, 35);
  EXPECT_EQ(got.confine, kConfineActive | kConfineLong);
  EXPECT_EQ(got.return_ns, 555'000'000u);
  EXPECT_EQ(got.memory_cap, 20ull << 30);
  EXPECT_EQ(got.credit_ns, 80'000u);
  EXPECT_EQ(got.credit_until_ns, 987654321012ull);
  EXPECT_EQ(got.cause_ns, 123456789ull);
  EXPECT_EQ(got.slice_us, 100u);

  Registered r;
  r.lease_ms = 1000;
  r.priority = 2;
  r.min_gap_ns = 5000;
  r.grant_latency_ns = 20000;
  r.gap_estimator = kGapP50;
  r.duration_estimator = kDurationMean;
  r.boundary_permille = 250;
  r.directive = d;
  m = decoded(encoded(header(), r));
  EXPECT_EQ(std::get<Registered>(m.body).lease_ms, 1000u);
  EXPECT_EQ(std::get<Registered>(m.body).gap_estimator, kGapP50);
  EXPECT_EQ(std::get<Registered>(m.body).duration_estimator, kDurationMean);
  EXPECT_EQ(std::get<Registered>(m.body).boundary_permille, 250);
  EXPECT_EQ(std::get<Registered>(m.body).priority, 2);
  EXPECT_EQ(std::get<Registered>(m.body).directive.credit_ns, 80'000u);

  m = decoded(encoded(header(), Notify{0xdeadbeefcafef00dull, 42, kNotifyActivityStart}));
  EXPECT_EQ(std::get<Notify>(m.body).kernel_id, 0xdeadbeefcafef00dull);
  EXPECT_EQ(std::get<Notify>(m.body).flags, kNotifyActivityStart);
  m = decoded(encoded(header(), Want{5, 30000, kWantProfiled}));
  EXPECT_EQ(std::get<Want>(m.body).predicted_ns, 30000u);
  m = decoded(encoded(header(), Idle{77}));
  EXPECT_EQ(std::get<Idle>(m.body).last_kernel_id, 77u);
  m = decoded(encoded(header(), Error{ErrorCode::TooManyTasks, 1500, RefusalReason::UserQuota}));
  EXPECT_EQ(std::get<Error>(m.body).retry_after_ms, 1500u);
  EXPECT_EQ(std::get<Error>(m.body).reason, RefusalReason::UserQuota);
  m = decoded(encoded(header(), Heartbeat{3ull << 30, 7, 5120, kSliceRefused}));
  EXPECT_EQ(std::get<Heartbeat>(m.body).slice_us, kSliceRefused);
  EXPECT_EQ(std::get<Heartbeat>(m.body).memory_used, 3ull << 30);
  EXPECT_EQ(std::get<Heartbeat>(m.body).memory_refusals, 7u);
  EXPECT_EQ(std::get<Heartbeat>(m.body).memory_cap_mib, 5120u);
  auto buf = encoded(header(), Goodbye{});
  EXPECT_EQ(buf.size(), kHeaderSize);
  decoded(buf);
}

TEST(Protocol, DirectiveFieldsThatContradictEachOtherAreRejected) {
  std::vector<uint8_t> out(kMaxDatagram);
  Directive d;
  d.confine = kConfineLong;   // a partition rule without a partition
  EXPECT_EQ(encode(header(), d, out), 0u);
  d.partition_pct = 101;
  EXPECT_EQ(encode(header(), d, out), 0u);
  d.partition_pct = 30;
  d.slice_us = kSliceRefused;   // a heartbeat's answer, never a slice to run at
  EXPECT_EQ(encode(header(), d, out), 0u);
  d.slice_us = 0;
  ASSERT_GT(encode(header(), d, out), 0u);
  d.confine = kConfineShortBeside;   // needs no partition
  d.partition_pct = 0;
  ASSERT_GT(encode(header(), d, out), 0u);
  // A refusal reason belongs to TooManyTasks only.
  EXPECT_EQ(encode(header(), Error{ErrorCode::UnknownTask, 0, RefusalReason::GpuLimit}, out), 0u);
  // On the wire: a partition percentage over 100 is refused by the decoder too.
  d.partition_pct = 40;
  d.confine = kConfineActive;
  const size_t n = encode(header(), d, out);
  ASSERT_GT(n, 0u);
  std::vector<uint8_t> wire(out.begin(), out.begin() + n);
  Message m;
  ASSERT_EQ(decode(wire, m), DecodeError::None);
  wire[kHeaderSize + 44] = 120;   // partition_pct
  EXPECT_EQ(decode(wire, m), DecodeError::BadField);
  wire[kHeaderSize + 44] = 40;
  wire[kHeaderSize + 45] = 0x80;   // an unknown confine flag
  EXPECT_EQ(decode(wire, m), DecodeError::BadField);
}

TEST(Protocol, DirectionOfEachType) {
  for (Type t : {Type::Register, Type::Notify, Type::Idle, Type::Want, Type::Heartbeat, Type::Goodbye})
    EXPECT_TRUE(client_to_daemon(t)) << to_string(t);
  for (Type t : {Type::Registered, Type::Directive, Type::Error}) EXPECT_FALSE(client_to_daemon(t)) << to_string(t);
}

TEST(Protocol, MalformedDatagramsAreRejected) {
  Message m;
  auto good = encoded(header(), Want{5, 30000, 0});
  ASSERT_EQ(decode(good, m), DecodeError::None);
  EXPECT_EQ(decode(std::vector<uint8_t>(good.begin(), good.begin() + 10), m), DecodeError::TooShort);
  EXPECT_EQ(decode(std::vector<uint8_t>(kMaxDatagram + 1, 0), m), DecodeError::TooLong);
  auto bad = good;
  bad[0] ^= 1;
  EXPECT_EQ(decode(bad, m), DecodeError::BadMagic);
  bad = good;
  bad[4] = 3;   // version 3: the previous protocol
  EXPECT_EQ(decode(bad, m), DecodeError::BadVersion);
  bad = good;
  bad[6] = 99;
  EXPECT_EQ(decode(bad, m), DecodeError::BadType);
  bad = good;
  bad[7] = 0x80;   // an unknown flag
  EXPECT_EQ(decode(bad, m), DecodeError::BadField);
  bad = good;
  std::fill(bad.begin() + 8, bad.begin() + 16, 0);   // session 0
  EXPECT_EQ(decode(bad, m), DecodeError::BadField);
  bad = good;
  std::fill(bad.begin() + 24, bad.begin() + 32, 0);  // sequence 0
  EXPECT_EQ(decode(bad, m), DecodeError::BadField);
  bad = good;
  bad.pop_back();
  EXPECT_EQ(decode(bad, m), DecodeError::BadSize);
  bad = good;
  bad.back() = 1;   // padding must be zero
  EXPECT_EQ(decode(bad, m), DecodeError::BadField);
  bad = encoded(header(), Want{5, 30000, 0});
  for (size_t i = kHeaderSize + 8; i < kHeaderSize + 16; ++i) bad[i] = 0;   // predicted 0 ns
  EXPECT_EQ(decode(bad, m), DecodeError::BadField);
  // A directive with credit must be a Fill with an end.
  Directive d;
  d.credit_ns = 10;
  auto run_with_credit = encoded(header(), d);
  EXPECT_EQ(decode(run_with_credit, m), DecodeError::BadField);
  // Keys: printable ASCII only, never empty.
  std::vector<uint8_t> scratch(kMaxDatagram);
  Register r;
  set_key(r, "bad\nkey");
  EXPECT_EQ(encode(header(), r, scratch), 0u);
  r.key_length = 0;
  EXPECT_EQ(encode(header(), r, scratch), 0u);
}

// Valid datagrams of every type with a few payload bytes changed at random: the decoder never
// crashes, refuses what it must (a field out of range, a pad that is not zero), and whatever it
// accepts is canonical: encoding what it decoded gives back the very bytes. Plain random bytes too.
TEST(Protocol, MutatedDatagramsAreRefusedOrDecodedExactly) {
  Register reg;
  set_key(reg, "svc");
  Directive d;
  d.memory_cap = 1 << 30;
  Registered registered;
  registered.lease_ms = 1000;
  const Body samples[] = {reg, registered, Notify{1, 2, 0}, Idle{3}, Want{4, 5, 0}, d, Heartbeat{6, 7},
                          Goodbye{}, Error{}};
  std::mt19937 rng(1);
  std::map<DecodeError, int> outcomes;
  Message m;
  for (const Body& sample : samples) {
    const std::vector<uint8_t> valid = encoded(header(), sample);
    ASSERT_FALSE(valid.empty()) << "sample of type " << sample.index();
    for (int i = 0; i < 3000; ++i) {
      std::vector<uint8_t> buf = valid;
      for (int flips = 1 + int(rng() % 3); flips > 0 && buf.size() > kHeaderSize; --flips)
        buf[kHeaderSize + rng() % (buf.size() - kHeaderSize)] = uint8_t(rng());
      const DecodeError e = decode(buf, m);
      ++outcomes[e];
      if (e != DecodeError::None) continue;
      std::vector<uint8_t> again(kMaxDatagram);
      again.resize(encode(m.header, m.body, again));
      ASSERT_EQ(again, buf) << "accepted but not canonical, type " << int(buf[6]);
    }
  }
  EXPECT_GT(outcomes[DecodeError::None], 0);       // most single changes are other valid values...
  EXPECT_GT(outcomes[DecodeError::BadField], 0);   // ...some break a field's range or a pad
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> buf(rng() % 300);
    for (auto& b : buf) b = uint8_t(rng());
    EXPECT_NE(decode(buf, m), DecodeError::None) << "random bytes without the magic decoded";
  }
}

Key test_key(uint8_t fill) {
  Key k;
  std::fill(std::begin(k.bytes), std::end(k.bytes), fill);
  return k;
}

TEST(Auth, SealedDatagramsVerifyOnlyWithTheirKeyAndUnchanged) {
  auto buf = encoded(header(), Want{5, 30000, 0});
  const size_t n = buf.size();
  buf.resize(kMaxDatagram);
  const size_t sealed = seal(test_key(1), buf.data(), n, buf.size());
  ASSERT_EQ(sealed, n + kMacSize);
  buf.resize(sealed);
  Message m;
  ASSERT_EQ(decode(buf, m), DecodeError::None);
  EXPECT_TRUE(m.header.flags & kFlagMac);
  EXPECT_EQ(std::get<Want>(m.body).predicted_ns, 30000u);   // the MAC is not taken for payload
  EXPECT_TRUE(verify(test_key(1), buf));
  EXPECT_FALSE(verify(test_key(2), buf));
  for (size_t i : {size_t(0), size_t(8), size_t(30), n - 1, sealed - 1}) {
    auto changed = buf;
    changed[i] ^= 0x10;
    EXPECT_FALSE(verify(test_key(1), changed)) << "byte " << i;
  }
  // Taking the MAC off (and the flag) does not make an authenticated datagram.
  EXPECT_FALSE(verify(test_key(1), std::vector<uint8_t>(buf.begin(), buf.begin() + n)));
  EXPECT_EQ(seal(test_key(1), buf.data(), n, n + 10), 0u);   // no room
}

TEST(Auth, ReplayWindowRefusesRepeatsAndTheVeryOld) {
  ReplayWindow w;
  EXPECT_FALSE(w.accept(0));
  EXPECT_TRUE(w.accept(10));
  EXPECT_FALSE(w.accept(10));
  EXPECT_TRUE(w.accept(8));    // a little reordering is fine
  EXPECT_FALSE(w.accept(8));
  EXPECT_TRUE(w.accept(200));
  EXPECT_TRUE(w.accept(137));  // 63 behind
  EXPECT_FALSE(w.accept(136)); // 64 behind: too old
  EXPECT_TRUE(w.accept(201));
  EXPECT_FALSE(w.accept(200));
  EXPECT_TRUE(w.accept(uint64_t{1} << 40));   // no wrap-around in 64 bits
  EXPECT_FALSE(w.accept(201));
}

class KeyFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("fikit-key-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const char* name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

TEST_F(KeyFile, CreatedKeysLoadAndDiffer) {
  std::string error;
  ASSERT_TRUE(create_key_file(path("a"), error)) << error;
  ASSERT_TRUE(create_key_file(path("b"), error)) << error;
  EXPECT_FALSE(create_key_file(path("a"), error));   // never overwrites
  struct stat st;
  ASSERT_EQ(stat(path("a").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  Key a, b;
  ASSERT_TRUE(load_key_file(path("a"), a, error)) << error;
  ASSERT_TRUE(load_key_file(path("b"), b, error)) << error;
  EXPECT_NE(std::memcmp(a.bytes, b.bytes, sizeof a.bytes), 0);
}

// `keygen ~/.config/fikit/key` on a fresh account: the folders are made, private.
TEST_F(KeyFile, MissingFoldersAreMadePrivate) {
  std::string error;
  const std::string nested = path("config/fikit/key");
  ASSERT_TRUE(create_key_file(nested, error)) << error;
  struct stat st;
  ASSERT_EQ(stat(path("config/fikit").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  Key k;
  EXPECT_TRUE(load_key_file(nested, k, error)) << error;
  std::ofstream(path("file")) << "x";
  EXPECT_FALSE(create_key_file(path("file/key"), error));
  EXPECT_NE(error.find("Not a directory"), std::string::npos) << error;
}

TEST_F(KeyFile, ReadableByOthersOrMalformedIsRefusedWithTheReason) {
  std::string error;
  ASSERT_TRUE(create_key_file(path("k"), error));
  chmod(path("k").c_str(), 0644);
  Key k;
  EXPECT_FALSE(load_key_file(path("k"), k, error));
  EXPECT_NE(error.find("group or others"), std::string::npos) << error;
  std::ofstream(path("short")) << "abcd\n";
  chmod(path("short").c_str(), 0600);
  EXPECT_FALSE(load_key_file(path("short"), k, error));
  EXPECT_NE(error.find("64 hexadecimal"), std::string::npos) << error;
  std::ofstream(path("nothex")) << std::string(64, 'z') << "\n";
  chmod(path("nothex").c_str(), 0600);
  EXPECT_FALSE(load_key_file(path("nothex"), k, error));
  EXPECT_FALSE(load_key_file(path("missing"), k, error));
  EXPECT_NE(error.find("missing"), std::string::npos) << error;
}

// Trust v3, F14: another user planted the bell board (a valid one, with the daemon's epoch: any
// registered client hears it) and truncated it once root's service and job had mapped it: both died
// of SIGBUS. A client now maps only a board of its own user or root that nobody else may write, and
// a daemon run as root replaces a planted one.
using SharedFile = KeyFile;
TEST_F(SharedFile, ABellBoardOfAnotherUserOrWritableByOthersIsNeverMapped) {
  constexpr uint64_t kEpoch = 0xabc;
  std::string error;
  BellBoard* own = create_bell(path("bell"), kEpoch, error);
  ASSERT_NE(own, nullptr) << error;
  bool writable = false;
  BellBoard* mapped = map_bell(path("bell"), kEpoch, &writable);
  ASSERT_NE(mapped, nullptr) << "the daemon's own board";
  EXPECT_TRUE(writable);
  unmap_bell(mapped);
  EXPECT_EQ(map_bell(path("bell"), kEpoch + 1, &writable), nullptr) << "another daemon's";
  chmod(path("bell").c_str(), 0622);
  EXPECT_EQ(map_bell(path("bell"), kEpoch, &writable), nullptr) << "writable by others";
  chmod(path("bell").c_str(), 0600);
  unmap_bell(own);
  if (geteuid() != 0) GTEST_SKIP() << "the rest needs root: it plants a board as another user";
  ASSERT_EQ(chown(path("bell").c_str(), 65534, 65534), 0);
  EXPECT_EQ(map_bell(path("bell"), kEpoch, &writable), nullptr) << "planted by another user";
  ASSERT_EQ(truncate(path("bell").c_str(), 0), 0);   // the attack's second step: harms no one
  EXPECT_EQ(map_bell(path("bell"), kEpoch, &writable), nullptr);
  // In a sticky folder such as /dev/shm: root's daemon replaces the planted file with its own.
  chmod(dir_.c_str(), 01777);
  own = create_bell(path("bell"), kEpoch, error);
  ASSERT_NE(own, nullptr) << error;
  struct stat st;
  ASSERT_EQ(stat(path("bell").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  mapped = map_bell(path("bell"), kEpoch, &writable);
  EXPECT_NE(mapped, nullptr);
  unmap_bell(mapped);
  unmap_bell(own);
}

// Issue 40: a job in a container of another user than root's daemon hears the holder's return from
// the board (mode 0644, whatever the umask), read-only: it may listen, never ring.
TEST_F(SharedFile, AnotherUserMapsRootsBellBoardReadOnly) {
  constexpr uint64_t kEpoch = 0xdef;
  std::string error;
  const mode_t old_umask = umask(077);
  BellBoard* own = create_bell(path("bell"), kEpoch, error);
  umask(old_umask);
  ASSERT_NE(own, nullptr) << error;
  struct stat st;
  ASSERT_EQ(stat(path("bell").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  if (geteuid() != 0) {
    unmap_bell(own);
    GTEST_SKIP() << "the rest needs root: it maps root's board as another user";
  }
  chmod(dir_.c_str(), 0755);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {   // another user: maps it, reads what root rings, and is told not to ring
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(10);
    bool writable = true;
    BellBoard* board = map_bell(path("bell"), kEpoch, &writable);
    if (board == nullptr) _exit(11);
    if (writable) _exit(12);
    for (int i = 0; i < 5000 && board->slots[3].generation.load() != 7; ++i) usleep(1000);
    _exit(board->slots[3].generation.load() == 7 ? 0 : 13);
  }
  own->slots[3].generation.store(7);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: setuid, 11: not mapped, 12: mapped writable, 13: ring not seen";
  unmap_bell(own);
}

TEST(Auth, RandomIdsAreNonZeroAndDiffer) {
  const uint64_t a = random_nonzero_u64(), b = random_nonzero_u64();
  EXPECT_NE(a, 0u);
  EXPECT_NE(a, b);
}

using values::format_bytes;
using values::MemorySize;
using values::parse_memory_size;

// Sizes as fikit-run --memory-limit, FIKIT_MEMORY_LIMIT and --reserve-memory take them.
TEST(MemorySize, UnitsSharesAndWhatIsWrong) {
  MemorySize m;
  const std::pair<const char*, uint64_t> sizes[] = {
      {"1073741824", 1ull << 30}, {"20GiB", 20ull << 30}, {"20G", 20ull << 30}, {"20gi", 20ull << 30},
      {"512MiB", 512ull << 20},   {"1.5G", 3ull << 29},   {"2GB", 2'000'000'000}, {"4 KiB", 4096},
      {"1TiB", 1ull << 40},       {"0", 0},               {"7B", 7}};
  for (const auto& [text, bytes] : sizes) {
    ASSERT_EQ(parse_memory_size(text, m), nullptr) << text;
    EXPECT_EQ(m.bytes, bytes) << text;
    EXPECT_FALSE(m.is_share()) << text;
  }
  ASSERT_EQ(parse_memory_size("30%", m), nullptr);
  EXPECT_EQ(m.ppm, 300'000u);
  EXPECT_EQ(m.on_device(80ull << 30), 24ull << 30);
  ASSERT_EQ(parse_memory_size("12.5%", m), nullptr);
  EXPECT_EQ(m.ppm, 125'000u);
  const std::pair<const char*, const char*> bad[] = {
      {"", "no size"},   {"GiB", "not a size"},   {"-5G", "negative"}, {"20XB", "unknown unit"},
      {"0%", "0 %"},     {"101%", "above 100"},   {"99999999999T", "2^64"},
      {"30", "without a unit"}, {"1048575", "without a unit"},
      {"18446744073709551616", "2^64"}};
  for (const auto& [text, why] : bad) {
    const char* error = parse_memory_size(text, m);
    ASSERT_NE(error, nullptr) << text;
    EXPECT_NE(std::string(error).find(why), std::string::npos) << text << ": " << error;
  }
  char out[32];
  format_bytes(20ull << 30, out, sizeof out);
  EXPECT_STREQ(out, "20.0 GiB");
  format_bytes(3, out, sizeof out);
  EXPECT_STREQ(out, "3 B");
}

}  // namespace
}  // namespace fikit::protocol
