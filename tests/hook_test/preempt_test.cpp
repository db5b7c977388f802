// The hook's preempt room without a GPU: the driver's channel groups as the ioctls it watches make
// them, set and restored through a resource manager played here; and the GOT patch that routes one
// library's ioctl calls through the watch.
#include <asm/ioctl.h>
#include <dlfcn.h>
#include <sys/ioctl.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdarg>
#include <map>
#include <string>
#include <utility>

#include "preempt/channel_groups.h"
#include "preempt/got_patch.h"

namespace fikit::hook::preempt {
namespace {

constexpr uint32_t kClient = 0xc1d00042, kOk = 0, kBadHandle = 0x33;
constexpr uint64_t kDefaultUs = 2048;

// The resource manager's answer to controls: each known object's slice (GET and SET), or a bad handle.
std::map<std::pair<uint32_t, uint32_t>, uint64_t> g_slices;
int g_controls = 0;

int fake_rm(int, unsigned long request, ...) {
  va_list ap;
  va_start(ap, request);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  if (_IOC_NR(request) != rm::kEscControl || _IOC_SIZE(request) != sizeof(rm::Control54)) {
    errno = ENOTTY;
    return -1;
  }
  ++g_controls;
  auto* c = static_cast<rm::Control54*>(arg);
  auto* value = reinterpret_cast<uint64_t*>(uintptr_t(c->params));
  auto it = g_slices.find({c->client, c->object});
  if (it == g_slices.end() || c->params_size != sizeof(uint64_t)) {
    c->status = kBadHandle;
    return 0;
  }
  if (c->cmd == rm::kGetTimeslice) *value = it->second;
  else if (c->cmd == rm::kSetTimeslice) it->second = *value;
  c->status = kOk;
  return 0;
}

unsigned long alloc_request(size_t size) { return _IOC(_IOC_READ | _IOC_WRITE, rm::kIoctlMagic, rm::kEscAlloc, size); }

class ChannelGroupsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_slices.clear();
    g_controls = 0;
    groups.set_next(fake_rm);
  }
  // The driver allocated `object` of `klass` (a TSG: known to the RM from then).
  void allocated(uint32_t object, uint32_t klass = rm::kChannelGroupClass, uint32_t status = kOk) {
    rm::Alloc21 a{kClient, kClient, object, klass, 0, 0, status};
    if (status == kOk && klass == rm::kChannelGroupClass) g_slices[{kClient, object}] = kDefaultUs;
    groups.observe(3, alloc_request(sizeof a), &a, 0);
  }
  ChannelGroups groups;
};

TEST_F(ChannelGroupsTest, OnlyChannelGroupsTheDriverGotAreRecorded) {
  allocated(0x5c000001);
  allocated(0x5c000002, 0xC86F);               // a channel, not a group
  allocated(0x5c000003, rm::kChannelGroupClass, 0x1F);   // refused by the RM
  rm::Alloc21 failed{kClient, kClient, 0x5c000004, rm::kChannelGroupClass, 0, 0, kOk};
  groups.observe(3, alloc_request(sizeof failed), &failed, -1);   // the ioctl itself failed
  EXPECT_EQ(groups.live(), 1u);
  // The large form (NVOS64 through NV_ESC_IOCTL_XFER_CMD) too.
  rm::Alloc64 big{kClient, kClient, 0x5c000005, rm::kChannelGroupClass, 0, 0, 0, 0, kOk, 0};
  g_slices[{kClient, 0x5c000005}] = 1024;
  rm::Xfer x{rm::kEscAlloc, sizeof big, uint64_t(uintptr_t(&big))};
  groups.observe(3, _IOC(_IOC_READ | _IOC_WRITE, rm::kIoctlMagic, rm::kEscXfer, sizeof x), &x, 0);
  EXPECT_EQ(groups.live(), 2u);
  // Another device's ioctls are not the RM's.
  groups.observe(3, _IOC(_IOC_READ | _IOC_WRITE, 'T', rm::kEscAlloc, sizeof big), &big, 0);
  EXPECT_EQ(groups.live(), 2u);
}

TEST_F(ChannelGroupsTest, EachGroupTakesTheSliceAndGetsItsOwnBack) {
  allocated(0x5c000001);
  allocated(0x5c000002);
  g_slices[{kClient, 0x5c000002}] = 1024;
  EXPECT_EQ(groups.set_all(100), 2u);
  EXPECT_EQ((g_slices[{kClient, 0x5c000001}]), 100u);
  EXPECT_EQ((g_slices[{kClient, 0x5c000002}]), 100u);
  EXPECT_EQ(groups.set_all(50), 2u);   // the original is read once, before the first set
  EXPECT_EQ(groups.restore_all(), 2u);
  EXPECT_EQ((g_slices[{kClient, 0x5c000001}]), kDefaultUs);
  EXPECT_EQ((g_slices[{kClient, 0x5c000002}]), 1024u);
}

TEST_F(ChannelGroupsTest, AGroupFreedOrUnknownToTheResourceManagerIsForgotten) {
  allocated(0x5c000001);
  allocated(0x5c000002);
  allocated(0x5c000003);
  rm::Free00 f{kClient, kClient, 0x5c000001, kOk};
  groups.observe(3, _IOC(_IOC_READ | _IOC_WRITE, rm::kIoctlMagic, rm::kEscFree, sizeof f), &f, 0);
  EXPECT_EQ(groups.live(), 2u);
  g_slices.erase({kClient, 0x5c000002});   // gone without the free being seen
  EXPECT_EQ(groups.set_all(100), 1u);
  EXPECT_EQ(groups.live(), 1u);
  // Freeing the client frees everything of it.
  rm::Free00 all{kClient, 0, kClient, kOk};
  groups.observe(3, _IOC(_IOC_READ | _IOC_WRITE, rm::kIoctlMagic, rm::kEscFree, sizeof all), &all, 0);
  EXPECT_EQ(groups.live(), 0u);
  const int before = g_controls;
  EXPECT_EQ(groups.set_all(100), 0u);
  EXPECT_EQ(g_controls, before);
}

// A program that makes and destroys contexts all its life reuses the slots of freed groups.
TEST_F(ChannelGroupsTest, FreedGroupsMakeRoomForNewOnes) {
  for (uint32_t round = 0; round < 3 * ChannelGroups::kMax; ++round) {
    const uint32_t object = 0x5c100000 + round;
    allocated(object);
    rm::Free00 f{kClient, kClient, object, kOk};
    if (round + 1 < 3 * ChannelGroups::kMax)
      groups.observe(3, _IOC(_IOC_READ | _IOC_WRITE, rm::kIoctlMagic, rm::kEscFree, sizeof f), &f, 0);
  }
  EXPECT_EQ(groups.live(), 1u);
  EXPECT_EQ(groups.set_all(100), 1u);
  EXPECT_EQ((g_slices[{kClient, 0x5c100000 + 3 * ChannelGroups::kMax - 1}]), 100u);
}

TEST_F(ChannelGroupsTest, AForkedChildForgetsItsParentsGroups) {
  allocated(0x5c000001);
  groups.forget();
  EXPECT_EQ(groups.live(), 0u);
  EXPECT_EQ(groups.set_all(100), 0u);
  EXPECT_EQ((g_slices[{kClient, 0x5c000001}]), kDefaultUs);
}

int g_seen = 0;
int counting_ioctl(int, unsigned long, ...) {
  ++g_seen;
  return 42;
}

class GotPatch : public ::testing::TestWithParam<const char*> {};

TEST_P(GotPatch, OnlyTheNamedLibrarysCallsGoToTheReplacement) {
  const std::string path = GetParam();
  const std::string name = path.substr(path.rfind('/') + 1, path.rfind(".so") - path.rfind('/') - 1);
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  auto call = reinterpret_cast<int (*)(int, unsigned long, void*)>(dlsym(lib, "fikit_got_target_ioctl"));
  ASSERT_NE(call, nullptr);
  EXPECT_EQ(call(-1, 0, nullptr), -1);   // the C library's: a bad descriptor
  g_seen = 0;
  EXPECT_EQ(patch_imports("libfikit_no_such_library", "ioctl", reinterpret_cast<void*>(counting_ioctl)), 0u);
  EXPECT_EQ(patch_imports(name.c_str(), "fikit_not_imported", reinterpret_cast<void*>(counting_ioctl)), 0u);
  ASSERT_GE(patch_imports((name + ".so").c_str(), "ioctl", reinterpret_cast<void*>(counting_ioctl)), 1u);
  EXPECT_EQ(call(-1, 0, nullptr), 42);
  EXPECT_EQ(g_seen, 1);
  EXPECT_EQ(ioctl(-1, 0, nullptr), -1);   // this program's own calls are not the library's
  EXPECT_EQ(g_seen, 1);
}

INSTANTIATE_TEST_SUITE_P(LazyAndRelro, GotPatch, ::testing::Values(FIKIT_GOT_TARGET, FIKIT_GOT_TARGET_RELRO));

}  // namespace
}  // namespace fikit::hook::preempt
