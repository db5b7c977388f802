#include "request_clock.h"

#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace fikit::hook::measure {
namespace {

TEST(RequestClock, ARequestRunsFromItsFirstLaunchToTheNextSynchronisation) {
  RequestClock clock;
  EXPECT_FALSE(clock.open());
  clock.synchronised(50);   // a synchronisation with nothing launched: no request
  clock.launched(100);
  EXPECT_TRUE(clock.open());
  clock.launched(130);      // later launches of the same request do not move its start
  clock.synchronised(1100);
  EXPECT_FALSE(clock.open());
  clock.launched(2000);
  clock.synchronised(2300);
  clock.launched(3000);
  clock.synchronised(3500);
  const RequestClock::Taken t = clock.take();
  EXPECT_EQ(t.requests, 3u);
  EXPECT_EQ(t.p50_ns, 500u) << "the median of 1000, 300 and 500 ns";
  const RequestClock::Taken next = clock.take();
  EXPECT_EQ(next.requests, 0u) << "a take starts over";
  EXPECT_EQ(next.p50_ns, 0u);
}

TEST(RequestClock, TheMedianIsOfTheLastRequestsKept) {
  RequestClock clock;
  uint64_t t = 1;
  // 2 x kKept requests: the first half 10 us each, the last half 30 us: the last ones count.
  for (size_t i = 0; i < 2 * RequestClock::kKept; ++i) {
    clock.launched(t);
    t += i < RequestClock::kKept ? 10'000 : 30'000;
    clock.synchronised(t);
    t += 5'000;
  }
  const RequestClock::Taken taken = clock.take();
  EXPECT_EQ(taken.requests, 2 * RequestClock::kKept);
  EXPECT_EQ(taken.p50_ns, 30'000u);
}

// Several threads launch and synchronise at once: every request closed is counted once, and the
// median is one of the durations they had.
TEST(RequestClock, ThreadsThatLaunchAndSynchroniseAtOnceCountEachRequestOnce) {
  RequestClock clock;
  constexpr int kThreads = 4, kEach = 5000;
  std::atomic<uint64_t> closed{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < kThreads; ++k)
    threads.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) {
        const uint64_t start = 1'000'000 + uint64_t(i) * 10;
        clock.launched(start);
        clock.synchronised(start + 700);
        closed.fetch_add(1);
      }
    });
  for (auto& t : threads) t.join();
  const RequestClock::Taken taken = clock.take();
  EXPECT_GT(taken.requests, 0u);
  EXPECT_LE(taken.requests, closed.load()) << "a synchronisation closes at most one request";
  EXPECT_GT(taken.p50_ns, 0u);
}

}  // namespace
}  // namespace fikit::hook::measure
