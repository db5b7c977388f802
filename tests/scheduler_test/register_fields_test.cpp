// A task's registration fields are one table (protocol.h's FIKIT_REGISTER_FIELDS). Every row, set
// to a value other than its default, survives encode and decode, and each TASK row reaches the
// policy's status and status --json under its kept_as name, with no code of its own: a new field is
// its row plus its use (and its value in example() below, which the first test asks for).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <array>
#include <type_traits>

#include "policy.h"
#include "protocol.h"
#include "snapshot.h"

namespace fikit {
namespace {

// A valid value for every row, none of them its default.
protocol::Register example() {
  protocol::Register r;
  r.priority = 3;
  r.mode = protocol::TaskMode::Measure;
  r.backend = protocol::Backend::Mps;
  r.flags = protocol::kRegisterProfileGrew;
  r.pid = 4242;
  r.device[0] = 0xab, r.device[15] = 0xcd;
  r.sm_count = 132;
  r.memory_total = 80ull << 30;
  r.memory_limit = 20ull << 30;
  r.objective_permille = 1250;
  protocol::set_key(r, "resnet50-infer");   // and key_length
  return r;
}

TEST(RegisterFields, TheExampleGivesEveryRowAValueOfItsOwn) {
  const protocol::Register ex = example(), initial;
#define FIKIT_EXPECT_SET(name, ...) EXPECT_NE(ex.name, initial.name) << #name ": give it a value in example()";
  FIKIT_REGISTER_FIELDS(FIKIT_EXPECT_SET, FIKIT_EXPECT_SET)
#undef FIKIT_EXPECT_SET
}

TEST(RegisterFields, EveryRowSurvivesEncodeAndDecode) {
  const protocol::Register sent = example();
  protocol::Header h;
  h.session = 1, h.seq = 1;
  std::array<uint8_t, protocol::kMaxDatagram> buf{};
  const size_t n = protocol::encode(h, sent, buf);
  ASSERT_NE(n, 0u);
  protocol::Message m;
  ASSERT_EQ(protocol::decode(std::span<const uint8_t>(buf.data(), n), m), protocol::DecodeError::None);
  const auto& got = std::get<protocol::Register>(m.body);
#define FIKIT_EXPECT_SAME(name, ...) EXPECT_EQ(got.name, sent.name) << #name;
  FIKIT_REGISTER_FIELDS(FIKIT_EXPECT_SAME, FIKIT_EXPECT_SAME)
#undef FIKIT_EXPECT_SAME
  EXPECT_EQ(got.key_view(), sent.key_view());
}

struct NoProfiles : policy::ProfileSource {
  std::shared_ptr<const policy::Profile> load(std::string_view, protocol::TaskMode) override { return nullptr; }
};

// What status --json shows of a value: a number, or an enum's name.
template <class T>
nlohmann::json shown(const T& v) {
  if constexpr (std::is_enum_v<T>) return protocol::to_string(v);
  else return v;
}

TEST(RegisterFields, EveryTaskRowReachesTheStatusAndItsJson) {
  const protocol::Register sent = example();
  policy::Registration reg = policy::Registration::of(sent);
  EXPECT_EQ(reg.key, "resnet50-infer");
  EXPECT_TRUE(reg.profile_grew) << "the flags row";
  reg.authenticated = true;
  NoProfiles profiles;
  policy::Policy policy(policy::Settings{}, profiles);
  std::vector<policy::Action> out;
  ASSERT_NE(policy.on_register(1, 0, reg, out), 0u);
  scheduler::DaemonSnapshot snapshot;
  snapshot.domains.push_back({"GPU-test", policy.holder(), policy.counters(), policy.status(1)});
  ASSERT_EQ(snapshot.domains[0].tasks.size(), 1u);
  const policy::TaskStatus& t = snapshot.domains[0].tasks[0];
  EXPECT_EQ(t.key, "resnet50-infer");
  const nlohmann::json json = nlohmann::json::parse(scheduler::format_json(snapshot)).at("tasks").at(0);
#define FIKIT_EXPECT_KEPT(name, type, initial, valid, kept_as) \
  EXPECT_EQ(t.kept_as, sent.name) << #name " as " #kept_as;   \
  EXPECT_EQ(json.value(#kept_as, nlohmann::json()), shown(sent.name)) << "status --json: " #kept_as;
  FIKIT_REGISTER_FIELDS(FIKIT_EXPECT_KEPT, FIKIT_REGISTER_SKIP)
#undef FIKIT_EXPECT_KEPT
}

}  // namespace
}  // namespace fikit
