// Kernel identity in-process: hashes are fixed functions, call sites tell callers apart, every part
// of a launch's shape reaches the ID, and descriptions are kept.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "fixed_map.h"
#include "hash.h"
#include "kernelid.h"

namespace fikit::kernelid {
namespace {

// Two fake CUfunctions with names, as the driver's cuFuncGetName would give them.
int function_a, function_b;
CUfunction const kFuncA = reinterpret_cast<CUfunction>(&function_a);
CUfunction const kFuncB = reinterpret_cast<CUfunction>(&function_b);

CUresult fake_get_name(const char** name, CUfunction f) {
  *name = f == kFuncA ? "_Z8kernel_av" : "kernel_b";
  return CUDA_SUCCESS;
}

class KernelId : public ::testing::Test {
 protected:
  void SetUp() override {
    Settings s;
    s.func_get_name = fake_get_name;
    s.depth = 1;   // the immediate caller only: two calls of one helper from two test lines are one site
    configure(s);
  }
};

const uint32_t kGrid1[3] = {1, 1, 1}, kGrid2[3] = {2, 1, 1}, kGrid3[3] = {1, 2, 1}, kBlock[3] = {128, 1, 1};

// The empty asm after each call keeps it from becoming a tail call (which would hand the ID the
// test body's line as call site instead of the helper's); noipa keeps identical helpers from being
// folded into one function.
#define NOT_A_TAIL_CALL(expr)              \
  uint64_t result = (expr);                \
  asm volatile("" : "+r"(result));         \
  return result
__attribute__((noipa)) uint64_t site_one() { NOT_A_TAIL_CALL(call_site()); }
__attribute__((noipa)) uint64_t site_two() { NOT_A_TAIL_CALL(call_site()); }
__attribute__((noipa)) uint64_t launch_from_x(CUfunction f, const uint32_t* grid) {
  NOT_A_TAIL_CALL(kernel_id(f, grid, kBlock, 0));
}
__attribute__((noipa)) uint64_t launch_from_y(CUfunction f, const uint32_t* grid) {
  NOT_A_TAIL_CALL(kernel_id(f, grid, kBlock, 0));
}
__attribute__((noipa)) uint64_t copy_site(const char* label, uint64_t bytes) { NOT_A_TAIL_CALL(op_id(label, bytes)); }

TEST(Hash, IsFnv1aAndOrderSensitive) {
  EXPECT_EQ(fnv1a(""), kFnvOffsetBasis);
  EXPECT_EQ(fnv1a("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_NE(combine(combine(7, 1), 2), combine(combine(7, 2), 1));
}

TEST(FixedMap, FindsWhatWasInsertedAndNeverOverwrites) {
  static FixedMap<16> map;
  EXPECT_EQ(map.find(5), 0u);
  EXPECT_EQ(map.insert(5, 50), FixedMap<16>::Insert::Added);
  EXPECT_EQ(map.insert(5, 51), FixedMap<16>::Insert::Present);
  EXPECT_EQ(map.find(5), 50u);
  for (uint64_t k = 100; k < 116; ++k) map.insert(k, k);
  EXPECT_EQ(map.insert(999, 1), FixedMap<16>::Insert::Full);
  EXPECT_EQ(map.find(999), 0u);
}

// Checking a predicted call site costs one stack walk; the dearer the walks, the rarer the checks,
// so that they cost a launch about kWalkBudgetNs on average.
TEST(VerifyInterval, FollowsWhatAWalkCosts) {
  EXPECT_EQ(verify_interval(0), kMinVerifyInterval);
  EXPECT_EQ(verify_interval(1'600), 32u);       // 1.6 us / 32 = 50 ns a launch
  EXPECT_EQ(verify_interval(1'601), 64u);
  EXPECT_EQ(verify_interval(23'000), 512u);     // a PyTorch training process on the H100
  EXPECT_EQ(verify_interval(1'000'000'000), kMaxVerifyInterval);
  for (uint64_t ns = 0; ns < 60'000; ns += 997) {
    const uint32_t n = verify_interval(ns);
    EXPECT_EQ(n & (n - 1), 0u) << ns;           // a power of two: the launch path masks
    EXPECT_TRUE(n == kMaxVerifyInterval || ns <= uint64_t(n) * kWalkBudgetNs) << ns;
    EXPECT_TRUE(n == kMinVerifyInterval || ns > uint64_t(n / 2) * kWalkBudgetNs) << ns;   // the smallest such
  }
}

TEST_F(KernelId, CallSiteIsStablePerCallerAndDiffersBetweenCallers) {
  EXPECT_EQ(site_one(), site_one());
  EXPECT_NE(site_one(), site_two());
}

TEST_F(KernelId, EveryPartOfTheLaunchChangesTheId) {
  const uint64_t base = launch_from_x(kFuncA, kGrid1);
  EXPECT_EQ(launch_from_x(kFuncA, kGrid1), base);
  EXPECT_NE(launch_from_y(kFuncA, kGrid1), base);     // another call site
  EXPECT_NE(launch_from_x(kFuncB, kGrid1), base);     // another function
  EXPECT_NE(launch_from_x(kFuncA, kGrid2), base);     // another grid
  EXPECT_NE(launch_from_x(kFuncA, kGrid2), launch_from_x(kFuncA, kGrid3));
  const uint32_t block2[3] = {64, 1, 1};
  uint64_t by_block[2], by_shared[2];
  for (int i = 0; i < 2; ++i) {   // one call site each time
    by_block[i] = kernel_id(kFuncA, kGrid1, i == 0 ? kBlock : block2, 0);
    by_shared[i] = kernel_id(kFuncA, kGrid1, kBlock, i == 0 ? 0 : 1024);
  }
  EXPECT_NE(by_block[0], by_block[1]);
  EXPECT_NE(by_shared[0], by_shared[1]);
}

// Past a thread's exact first launches a launch is answered without a walk (from the thread's memo
// or the shared tables) except one in verify_interval(); that check still finds a second call site
// of one shape, and from then on each site has its own ID: no answer the memo kept survives.
// (launch_from_x and launch_from_y have the same frame and caller, so they reach the hook at the
// same stack pointer: one memo key and one path for both, which is what makes this a test of the
// memo's retirement.)
TEST_F(KernelId, ASecondCallSiteIsFoundPastTheExactLaunches) {
  const uint32_t grid[3] = {77, 7, 7};
  const uint64_t x = launch_from_x(kFuncB, grid);
  for (int i = 0; i < 600; ++i) ASSERT_EQ(launch_from_x(kFuncB, grid), x);   // past the exact launches
  const uint64_t walks = walk_counts().walks;
  for (uint32_t i = 0; i < 4 * kMaxVerifyInterval; ++i) ASSERT_EQ(launch_from_x(kFuncB, grid), x);
  EXPECT_LE(walk_counts().walks - walks, 4 * kMaxVerifyInterval / kMinVerifyInterval + 1);

  // Until a check walks, the new site may be counted as the old one.
  uint64_t y = x;
  for (uint32_t i = 0; i < 4 * kMaxVerifyInterval && y == x; ++i) y = launch_from_y(kFuncB, grid);
  EXPECT_NE(y, x);
  uint64_t again = y;
  for (uint32_t i = 0; i < 4 * kMaxVerifyInterval && again != x; ++i) again = launch_from_x(kFuncB, grid);
  EXPECT_EQ(again, x);
  for (int i = 0; i < 300; ++i) {
    ASSERT_EQ(launch_from_x(kFuncB, grid), x) << i;
    ASSERT_EQ(launch_from_y(kFuncB, grid), y) << i;
  }
}

// A shape the full shared table cannot hold is walked on every launch, never memoised: its launches
// from two call sites at one stack pointer keep their own IDs. In a child process: filling the
// tables would spoil them for the other tests. Exits 0 if so.
[[noreturn]] void fill_the_shape_table_then_launch_from_two_sites() {
  Settings s;
  s.func_get_name = fake_get_name;
  s.depth = 1;
  configure(s);
  // New shapes until one is not kept: launched twice, its second launch still walks.
  uint32_t grid[3] = {1, 3, 5};
  bool full = false;
  for (uint32_t batch = 0; batch < 64 && !full; ++batch) {
    for (int i = 0; i < 4096; ++i, ++grid[0]) launch_from_x(kFuncA, grid);
    ++grid[0];
    launch_from_x(kFuncA, grid);
    const uint64_t before = walk_counts().unpredictable;
    launch_from_x(kFuncA, grid);
    full = walk_counts().unpredictable > before;
  }
  if (!full) {
    std::fprintf(stderr, "the shape table never filled\n");
    std::exit(2);
  }
  const uint64_t x = launch_from_x(kFuncA, grid), y = launch_from_y(kFuncA, grid);
  for (int i = 0; i < 100; ++i) {
    if (x == y || launch_from_x(kFuncA, grid) != x || launch_from_y(kFuncA, grid) != y) {
      std::fprintf(stderr, "launch %d: an ID of one call site given to the other\n", i);
      std::exit(1);
    }
  }
  std::exit(0);
}

TEST(KernelIdFullTables, AShapeTheTablesCannotHoldIsWalkedEveryTime) {
  EXPECT_EXIT(fill_the_shape_table_then_launch_from_two_sites(), ::testing::ExitedWithCode(0), "");
}

TEST_F(KernelId, DescriptionKeepsTheReadableForm) {
  const uint64_t id = launch_from_x(kFuncA, kGrid2);
  const Description* d = describe(id);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->id, id);
  EXPECT_EQ(d->name, "kernel_a()");   // demangled
  EXPECT_EQ(d->grid[0], 2u);
  EXPECT_EQ(d->block[0], 128u);
  EXPECT_NE(d->call_site.find("kernelid_test"), std::string::npos) << d->call_site;
  EXPECT_EQ(describe(12345), nullptr);
}

// CUPTI's records name kernels in mangled form; a launch's description holds the readable one.
TEST_F(KernelId, NameHashesOfALaunchAndOfAMangledNameAgree) {
  const Description* d = describe(launch_from_x(kFuncA, kGrid1));
  ASSERT_NE(d, nullptr);
  EXPECT_NE(readable_name_hash(d->name), 0u);
  const auto mangled_hash = [](const char* name) { return readable_name_hash(readable_name(name)); };
  EXPECT_EQ(readable_name_hash(d->name), mangled_hash("_Z8kernel_av"));
  EXPECT_NE(mangled_hash("_Z8kernel_bv"), mangled_hash("_Z8kernel_av"));
  EXPECT_EQ(mangled_hash("kernel_b"), readable_name_hash("kernel_b"));   // not mangled: as is
  EXPECT_EQ(readable_name_hash("?"), 0u);                                // no name from the driver
  EXPECT_EQ(mangled_hash(nullptr), 0u);
}

TEST_F(KernelId, CopiesAreIdentifiedByLabelSiteAndSize) {
  const auto copy = copy_site;
  EXPECT_EQ(copy("[memcpy HtoD]", 4096), copy("[memcpy HtoD]", 4096));
  EXPECT_NE(copy("[memcpy HtoD]", 4096), copy("[memcpy HtoD]", 8192));
  EXPECT_NE(copy("[memcpy HtoD]", 4096), copy("[memcpy DtoH]", 4096));
  const Description* d = describe(copy("[memset]", 64));
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->name, "[memset]");
}

}  // namespace
}  // namespace fikit::kernelid
