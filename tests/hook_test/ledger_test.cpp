// The memory ledger alone (hook/memory/ledger.h): exact counts under concurrent claims and frees,
// and a cap that concurrent claims cannot overshoot.
#include "memory/ledger.h"

#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>
#include <vector>

namespace fikit::hook::memory {
namespace {

TEST(MemoryLedger, ClaimsWithinTheCapAndFreesGiveBack) {
  Ledger ledger;
  EXPECT_TRUE(ledger.claim(0, 600, 1000));
  EXPECT_TRUE(ledger.record(Kind::Linear, 0x1000, 0, 600));
  EXPECT_FALSE(ledger.claim(0, 401, 1000));
  EXPECT_TRUE(ledger.claim(0, 400, 0));           // 0: no cap
  ledger.unclaim(0, 400);                         // its allocation failed
  EXPECT_TRUE(ledger.claim(1, 1000, 1000));       // devices are counted apart
  EXPECT_EQ(ledger.used(0), 600u);
  EXPECT_EQ(ledger.release(Kind::Handle, 0x1000), 0u) << "same value, other kind: not that allocation";
  EXPECT_EQ(ledger.release(Kind::Linear, 0x1000), 600u);
  EXPECT_EQ(ledger.release(Kind::Linear, 0x1000), 0u) << "freed twice";
  EXPECT_EQ(ledger.used(0), 0u);
  EXPECT_FALSE(ledger.claim(0, UINT64_MAX, 1000));
  EXPECT_TRUE(ledger.claim(-1, 5, 1)) << "an unknown device is not accounted, so not refused";
  EXPECT_EQ(ledger.used(-1), 0u);
}

// Trust v3, F9: the driver gave an address still listed (its memory went with a context the hook
// missed): the new allocation was not counted at all. Now it replaces the stale entry.
TEST(MemoryLedger, ARecordOfAKnownKeyReplacesTheStaleEntry) {
  Ledger ledger;
  ASSERT_TRUE(ledger.claim(0, 100, 0));
  ASSERT_TRUE(ledger.record(Kind::Linear, 7, 0, 100));
  ASSERT_TRUE(ledger.claim(0, 50, 0));
  EXPECT_TRUE(ledger.record(Kind::Linear, 7, 0, 50));
  EXPECT_EQ(ledger.used(0), 50u);
  EXPECT_EQ(ledger.release(Kind::Linear, 7), 50u);
  EXPECT_EQ(ledger.used(0), 0u);
}

// Trust v3, F9: a destroyed context (or a reset device) takes its allocations along: what the
// ledger held of it is given back, and only of it. Before, 2 of 6 later allocations under the same
// limit succeeded.
TEST(MemoryLedger, AContextsTeardownGivesBackWhatWasAllocatedInIt) {
  Ledger ledger;
  for (uint64_t key = 1; key <= 3; ++key) {
    ASSERT_TRUE(ledger.claim(0, 100, 300));
    ASSERT_TRUE(ledger.record(Kind::Linear, key, 0, 100, /*context=*/11));
  }
  EXPECT_FALSE(ledger.claim(0, 100, 300));
  ASSERT_TRUE(ledger.claim(1, 40, 0));
  ASSERT_TRUE(ledger.record(Kind::Array, 9, 1, 40, /*context=*/12));
  EXPECT_EQ(ledger.forget_context(11), 300u);
  EXPECT_EQ(ledger.used(0), 0u);
  EXPECT_EQ(ledger.used(1), 40u) << "another context's allocation stays";
  EXPECT_EQ(ledger.allocations(), 1u);
  EXPECT_EQ(ledger.forget_context(0), 0u) << "0 is no context";
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(ledger.claim(0, 100, 300));
}

// A free the driver refuses (a bad stream, a handle still mapped) leaves the memory allocated: its
// bytes count again, and a later free gives them back.
TEST(MemoryLedger, AFreeTheDriverRefusedIsPutBack) {
  Ledger ledger;
  ASSERT_TRUE(ledger.claim(0, 100, 0));
  ASSERT_TRUE(ledger.record(Kind::Handle, 5, 0, 100, 0));
  const auto taken = ledger.take(Kind::Handle, 5);
  EXPECT_EQ(taken.bytes, 100u);
  EXPECT_EQ(ledger.used(0), 0u);
  ledger.restore(Kind::Handle, 5, taken);
  EXPECT_EQ(ledger.used(0), 100u);
  EXPECT_EQ(ledger.release(Kind::Handle, 5), 100u);
  EXPECT_EQ(ledger.used(0), 0u);
}

// Eight threads allocate and free at random under a cap: the count never passes the cap, and at
// the end equals the sum of what each thread still holds, exactly.
TEST(MemoryLedger, ConcurrentRandomClaimsAreExactAndNeverPassTheCap) {
  Ledger ledger;
  constexpr uint64_t kCap = 1 << 20;
  std::atomic<bool> overshoot{false};
  std::atomic<uint64_t> next_key{1};
  std::vector<uint64_t> held(8, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      std::vector<std::pair<uint64_t, uint64_t>> mine;
      for (int i = 0; i < 20000; ++i) {
        if (!mine.empty() && rng() % 2 == 0) {
          const size_t k = rng() % mine.size();
          EXPECT_EQ(ledger.release(Kind::Linear, mine[k].first), mine[k].second);
          mine[k] = mine.back();
          mine.pop_back();
          continue;
        }
        const uint64_t bytes = 1 + rng() % 65536;
        if (!ledger.claim(0, bytes, kCap)) continue;
        if (ledger.used(0) > kCap) overshoot = true;
        const uint64_t key = next_key++;
        if (ledger.record(Kind::Linear, key, 0, bytes)) mine.emplace_back(key, bytes);
      }
      for (const auto& [key, bytes] : mine) held[t] += bytes;
    });
  }
  for (auto& t : threads) t.join();
  uint64_t total = 0;
  for (uint64_t h : held) total += h;
  EXPECT_FALSE(overshoot.load());
  EXPECT_EQ(ledger.used(0), total);
}

TEST(MemoryLedger, AForkedChildHoldsNothing) {
  Ledger ledger;
  ASSERT_TRUE(ledger.claim(0, 100, 0));
  ASSERT_TRUE(ledger.record(Kind::Linear, 1, 0, 100));
  ledger.reset_after_fork();
  EXPECT_EQ(ledger.used(0), 0u);
  EXPECT_EQ(ledger.allocations(), 0u);
  EXPECT_EQ(ledger.release(Kind::Linear, 1), 0u) << "the parent's allocation is not the child's";
}

}  // namespace
}  // namespace fikit::hook::memory
