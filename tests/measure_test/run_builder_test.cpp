// RunBuilder: gaps, iteration boundaries and run splitting from a hand-made op sequence.
#include <gtest/gtest.h>

#include <map>

#include "run_builder.h"

using MeasuredRun = fikit::hook::measure::Run;
using fikit::hook::measure::RunBuilder;
using fikit::hook::measure::TimedOp;
using fikit::hook::measure::GraphNodeTime;

namespace {

std::map<uint64_t, fikit::profiledb::KernelSample> by_id(const MeasuredRun& r) {
  std::map<uint64_t, fikit::profiledb::KernelSample> m;
  for (const auto& k : r.kernels) m[k.kernel_id] = k;
  return m;
}

// One iteration: kernel 1 (10 us), 5 us gap, kernel 2 (20 us); then a sync.
void iteration(RunBuilder& b, uint64_t t0, uint64_t epoch, std::optional<MeasuredRun>* out = nullptr) {
  auto r = b.add({1, 7, epoch, t0, t0 + 10000});
  if (out && r) *out = std::move(r);
  r = b.add({2, 7, epoch, t0 + 15000, t0 + 35000});
  if (out && r) *out = std::move(r);
}

}  // namespace

TEST(RunBuilder, GapsGoToThePreviousOpAndSyncsAreBoundaries) {
  RunBuilder b(0);
  for (uint64_t i = 0; i < 4; ++i) iteration(b, i * 100000, i);
  auto run = b.finish();
  ASSERT_TRUE(run.has_value());
  auto k = by_id(*run);
  EXPECT_EQ(k[1].duration.count, 4u);
  EXPECT_EQ(k[1].gap.count, 4u);
  EXPECT_EQ(k[1].gap.min, 5000u);
  EXPECT_EQ(k[1].gap.max, 5000u);
  EXPECT_EQ(k[1].boundary_count, 0u);
  EXPECT_EQ(k[2].duration.min, 20000u);
  EXPECT_EQ(k[2].gap.count, 0u);          // every gap after kernel 2 spans a sync
  EXPECT_EQ(k[2].boundary_count, 3u);     // the last one has no next op
  EXPECT_EQ(run->summary.iterations, 3u);
  EXPECT_EQ(run->summary.gpu_ops, 8u);
  EXPECT_EQ(run->summary.busy_ns, 4u * 30000u);
  EXPECT_EQ(run->summary.wall_ns, 300000u + 35000u);
  EXPECT_EQ(run->trace.size(), 8u);
  EXPECT_FALSE(b.finish().has_value());
}

TEST(RunBuilder, OverlappingOpsLeaveNoGap) {
  RunBuilder b(0);
  b.add({1, 1, 0, 1000, 5000});
  b.add({2, 2, 0, 3000, 9000});   // another stream, started before op 1 ended
  auto run = b.finish();
  auto k = by_id(*run);
  EXPECT_EQ(k[1].gap.count, 1u);
  EXPECT_EQ(k[1].gap.max, 0u);
  EXPECT_EQ(run->summary.busy_ns, 8000u);
}

TEST(RunBuilder, RunEndsAfterTheConfiguredIterations) {
  RunBuilder b(2);
  std::vector<MeasuredRun> runs;
  for (uint64_t i = 0; i < 5; ++i) {
    std::optional<MeasuredRun> r;
    iteration(b, i * 100000, i, &r);
    if (r) runs.push_back(std::move(*r));
  }
  // Iterations end at the syncs after iterations 0..3: runs close after 2 and 4 boundaries.
  ASSERT_EQ(runs.size(), 2u);
  for (const MeasuredRun& r : runs) {
    EXPECT_EQ(r.summary.iterations, 2u);
    EXPECT_EQ(r.summary.gpu_ops, 4u);
    EXPECT_EQ(by_id(r)[2].boundary_count, 2u);
  }
  auto rest = b.finish();
  ASSERT_TRUE(rest.has_value());
  EXPECT_EQ(rest->summary.gpu_ops, 2u);
  EXPECT_EQ(rest->summary.iterations, 0u);
}

// FIKIT_RUN_SECONDS: a run of a process that never exits (a server) is ended by time. Asked to, it
// ends at the next iteration boundary, not in the middle of an iteration, and only once.
TEST(RunBuilder, ARunAskedToEndEndsAtItsNextBoundaryOnce) {
  RunBuilder b(0);
  std::vector<MeasuredRun> runs;
  auto feed = [&](uint64_t i) {
    std::optional<MeasuredRun> r;
    iteration(b, i * 100000, i, &r);
    if (r) runs.push_back(std::move(*r));
  };
  feed(0);
  feed(1);
  b.end_at_next_boundary();
  EXPECT_TRUE(runs.empty()) << "nothing ends before the next synchronisation";
  feed(2);   // its first op comes after the boundary that ended iteration 1: the run ends there
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].summary.iterations, 2u);
  EXPECT_EQ(runs[0].summary.gpu_ops, 4u);
  for (uint64_t i = 3; i < 8; ++i) feed(i);
  EXPECT_EQ(runs.size(), 1u) << "the request was for one run";
  auto rest = b.finish();
  ASSERT_TRUE(rest.has_value());
  EXPECT_EQ(rest->summary.gpu_ops, 12u);
}

TEST(RunBuilder, LostOpsBreakTheGapChainButKeepBoundaries) {
  RunBuilder b(0);
  b.add({1, 1, 0, 0, 1000});
  b.add_untimed(0);
  b.add({2, 1, 0, 5000, 6000});
  b.add_untimed(1);                      // a sync before this untimed op: a boundary after op 2
  b.add({3, 1, 1, 9000, 9500, true});
  auto run = b.finish();
  auto k = by_id(*run);
  EXPECT_EQ(k[1].gap.count, 0u);
  EXPECT_EQ(k[2].boundary_count, 1u);
  EXPECT_EQ(k[2].gap.count, 0u);
  EXPECT_EQ(run->summary.iterations, 1u);
  EXPECT_EQ(run->summary.gpu_ops, 3u);
}

TEST(RunBuilder, AfterDropFlagSuppressesTheGapBefore) {
  RunBuilder b(0);
  b.add({1, 1, 0, 0, 1000});
  b.add({2, 1, 0, 2000, 3000, true});
  b.add({1, 1, 0, 4000, 5000});
  auto k = by_id(*b.finish());
  EXPECT_EQ(k[1].gap.count, 0u);
  EXPECT_EQ(k[2].gap.count, 1u);
  EXPECT_EQ(k[2].gap.min, 1000u);
}

TEST(RunBuilder, TheTimersOwnTimeComesOffTheGapBefore) {
  RunBuilder b(0);
  b.add({1, 1, 0, 0, 1000});
  TimedOp next{2, 1, 0, 4000, 9000};
  next.gap_stretch_ns = 2500;
  b.add(next);
  TimedOp close{1, 1, 0, 10000, 11000};
  close.gap_stretch_ns = 5000;   // more than the gap read: none left
  b.add(close);
  auto k = by_id(*b.finish());
  EXPECT_EQ(k[1].gap.min, 500u);
  EXPECT_EQ(k[2].gap.min, 0u);
}

TEST(RunBuilder, AnOpWhoseStartIsUnknownCountsNeitherItsDurationNorTheGapBefore) {
  RunBuilder b(0);
  b.add({1, 1, 0, 0, 1000});
  TimedOp unknown{2, 1, 0, 2000, 9000};
  unknown.start_unknown = true;
  b.add(unknown);
  b.add({1, 1, 0, 10000, 11000});
  auto k = by_id(*b.finish());
  EXPECT_EQ(k[1].gap.count, 0u) << "the gap before the unknown start";
  EXPECT_EQ(k[2].duration.count, 0u);
  EXPECT_EQ(k[2].dur_unresolved, 1u) << "counted as unresolved";
  ASSERT_EQ(k[2].gap.count, 1u) << "its end still starts the next gap";
  EXPECT_EQ(k[2].gap.min, 1000u);
}

// What requests keep the GPU busy: per iteration, its ops' time over its span (first start to last
// end, host waits between iterations left out), the median over the run's iterations.
TEST(RunBuilder, RequestBusyShareIsTheMedianIterationsBusyTime) {
  RunBuilder b(0);
  // A warm-up iteration of eager kernels waiting on the host: 3 x 10 us in a 230 us span (13 %)...
  b.add({1, 7, 0, 0, 10000});
  b.add({1, 7, 0, 110000, 120000});
  b.add({1, 7, 0, 220000, 230000});
  // ...then requests of one CUDA-graph replay each, far apart (Poisson arrivals): 100 % each.
  for (uint64_t i = 1; i <= 4; ++i) b.add({2, 7, i, i * 5'000'000, i * 5'000'000 + 900'000});
  auto run = b.finish();
  ASSERT_TRUE(run.has_value());
  EXPECT_EQ(run->summary.request_busy_pct, 100);
  // A CPU-bound service: every iteration 20 us of kernels in 100 us.
  RunBuilder c(0);
  for (uint64_t i = 0; i < 5; ++i) {
    const uint64_t t = i * 1'000'000;
    c.add({3, 7, i, t, t + 10000});
    c.add({3, 7, i, t + 90000, t + 100000});
  }
  run = c.finish();
  ASSERT_TRUE(run.has_value());
  EXPECT_EQ(run->summary.request_busy_pct, 20);
}

// A token-by-token generation loop: each iteration uploads its token (a copy from pageable memory
// whose measured span covers the host's staging, 1.3 ms on an H100) and runs 10 us of kernels in a
// 100 us span. Its GPU is busy 10 % of what its SMs see, not the 100 % the copy would make it.
TEST(RequestBusyShare, CopiesDoNotCountAsBusyNorStretchTheSpan) {
  RunBuilder b(0);
  for (uint64_t i = 0; i < 5; ++i) {
    const uint64_t t = i * 10'000'000;
    TimedOp copy{7, 1, i, t, t + 1'300'000};
    copy.sm_work = false;
    b.add(copy);
    b.add({3, 1, i, t + 1'300'000, t + 1'305'000});
    b.add({3, 1, i, t + 1'395'000, t + 1'400'000});
  }
  auto run = b.finish();
  ASSERT_TRUE(run.has_value());
  EXPECT_EQ(run->summary.request_busy_pct, 10);
}

// Measured in windows (FIKIT_MEASURE_UNIT=window): every synchronisation here followed work on SMs.
TimedOp in_window(uint64_t id, uint64_t epoch, uint64_t start, uint64_t end) {
  TimedOp op{id, 1, epoch, start, end};
  op.work_epoch = epoch;
  return op;
}

// A window's first op follows an op nobody timed.
TimedOp head(uint64_t id, uint64_t epoch, uint64_t start, uint64_t end) {
  TimedOp op = in_window(id, epoch, start, end);
  op.window_head = true;
  return op;
}

TEST(RunBuilderWindows, AWindowsFirstOpHasNoDurationNoGapBeforeAndIsNotUnresolved) {
  RunBuilder b(0, /*windows=*/true);
  b.add(head(1, 0, 0, 1000));
  b.add({2, 1, 0, 3000, 4000});
  b.add(head(3, 0, 50000, 52000));   // a window later in the same iteration
  b.add({2, 1, 0, 53000, 54000});
  auto k = by_id(*b.finish());
  EXPECT_EQ(k[1].duration.count, 0u);
  EXPECT_EQ(k[1].dur_unresolved, 0u) << "not something the timer failed to resolve";
  ASSERT_EQ(k[1].gap.count, 1u) << "its end starts the next gap";
  EXPECT_EQ(k[1].gap.min, 2000u);
  EXPECT_EQ(k[2].duration.count, 2u);
  EXPECT_EQ(k[2].gap.count, 0u) << "no gap across the ops left out";
  EXPECT_EQ(k[3].duration.count, 0u);
  ASSERT_EQ(k[3].gap.count, 1u);
  EXPECT_EQ(k[3].gap.min, 1000u);
}

TEST(RunBuilderWindows, ABoundaryCountsOnlyWhenTheSynchronisationCameRightAfterTheOp) {
  RunBuilder b(0, /*windows=*/true);
  b.add(head(1, 0, 0, 1000));
  b.add({2, 1, 0, 2000, 3000});
  b.add({3, 1, 1, 9000, 9500});   // the window goes on past a synchronisation: op 2 ended an iteration
  b.add(head(1, 4, 90000, 91000));  // a later window: op 3 was followed by ops nobody timed
  auto k = by_id(*b.finish());
  EXPECT_EQ(k[2].boundary_count, 1u);
  EXPECT_EQ(k[3].boundary_count, 0u);
  EXPECT_EQ(k[3].gap.count, 0u);
}

TEST(RunBuilderWindows, EverySynchronisationCountsAndARunEndsAfterThem) {
  // Windows land in epochs 0, 3 and 7 of a program that synchronises after every iteration: a run
  // of 5 holds 5 synchronisations, not 5 windows.
  RunBuilder b(5, /*windows=*/true);
  EXPECT_FALSE(b.add(head(1, 0, 0, 1000)));
  EXPECT_FALSE(b.add(head(1, 3, 30000, 31000)));
  auto run = b.add(head(1, 7, 70000, 71000));
  ASSERT_TRUE(run.has_value());
  EXPECT_EQ(run->summary.iterations, 7u);
  EXPECT_EQ(run->summary.gpu_ops, 2u);
  // Synchronisations after copies alone (a model's weights uploaded) do not count.
  RunBuilder copies(5, /*windows=*/true);
  TimedOp first = head(1, 0, 0, 1000), later = head(1, 40, 30000, 31000);
  later.work_epoch = 2;   // 40 synchronisations, 2 of them after kernels
  copies.add(first);
  EXPECT_FALSE(copies.add(later));
  EXPECT_EQ(copies.finish()->summary.iterations, 2u);
  // Measured whole, iterations are the synchronisations between measured ops.
  RunBuilder whole(5);
  whole.add({1, 1, 0, 0, 1000});
  whole.add({1, 1, 3, 30000, 31000});
  EXPECT_EQ(whole.finish()->summary.iterations, 1u);
}

// The busy share of an iteration measured in windows: the windows' busy time over their spans, not
// over the stretch from the first window to the last (which holds the ops left out).
TEST(RunBuilderWindows, TheBusyShareComesFromTheWindowsSpans) {
  RunBuilder b(0, /*windows=*/true);
  for (uint64_t i = 0; i < 3; ++i) {
    const uint64_t t = i * 10'000'000;
    // Two windows an iteration, each 40 us of kernels in 80 us (from the first op's end).
    b.add(head(1, i, t, t + 10000));
    b.add({2, 1, i, t + 30000, t + 50000});
    b.add({2, 1, i, t + 70000, t + 90000});
    b.add(head(1, i, t + 1'000'000, t + 1'010'000));
    b.add({2, 1, i, t + 1'030'000, t + 1'050'000});
    b.add({2, 1, i, t + 1'070'000, t + 1'090'000});
  }
  auto run = b.finish();
  ASSERT_TRUE(run.has_value());
  EXPECT_EQ(run->summary.request_busy_pct, 50);
}

TEST(RunBuilderWindows, AnOpOfAnotherThreadWithAnOlderEpochCountsNoSynchronisationTwice) {
  RunBuilder b(0, /*windows=*/true);
  b.add(head(1, 10, 0, 1000));
  b.add(in_window(2, 9, 2000, 3000));   // launched by a thread that read the epoch before the sync
  b.add(in_window(1, 12, 4000, 5000));
  EXPECT_EQ(b.finish()->summary.iterations, 2u) << "synchronisations 11 and 12, once each";
}

// Measured whole, an op whose timing was lost leaves its iteration one span: its busy share counts
// the time around the lost op as the iteration's (as it was before windows).
TEST(RunBuilder, ALostOpDoesNotSplitItsIterationsSpan) {
  RunBuilder b(0);
  b.add({1, 1, 0, 0, 10000});
  b.add_untimed(0);
  b.add({1, 1, 0, 100000, 110000});
  EXPECT_EQ(b.finish()->summary.request_busy_pct, 18);   // 20 us of 110
}

// A model's weights uploaded a copy and a wait at a time are not iterations: a run of N holds N
// iterations that ran kernels.
TEST(RunBuilder, IterationsOfCopiesAloneDoNotCount) {
  RunBuilder b(2);
  for (uint64_t i = 0; i < 5; ++i) {
    TimedOp upload{9, 1, i, i * 1000, i * 1000 + 500};
    upload.sm_work = false;
    EXPECT_FALSE(b.add(upload));
  }
  EXPECT_FALSE(b.add({1, 1, 5, 10000, 11000}));
  EXPECT_FALSE(b.add({1, 1, 6, 20000, 21000}));
  auto run = b.add({1, 1, 7, 30000, 31000});
  ASSERT_TRUE(run.has_value());
  EXPECT_EQ(run->summary.iterations, 2u);
  EXPECT_EQ(run->summary.gpu_ops, 7u);
}

TEST(RunBuilder, AGraphsKernelNodesAreProfiledUnderItsOp) {
  RunBuilder b(0);
  const auto node = [](uint64_t id, uint64_t start, uint64_t end, const char* name) {
    GraphNodeTime n;
    n.id = id, n.start_ns = start, n.end_ns = end, n.name = name;
    n.grid = {8, 1, 1}, n.block = {256, 1, 1}, n.shared_mem = 1024;
    return n;
  };
  for (uint64_t i = 0; i < 3; ++i) {
    const uint64_t t0 = i * 100000;
    b.add({50, 7, i, t0, t0 + 40000, false, true});   // the graph launch: one op
    // Nodes 60 and 61 run on parallel branches (overlap); 62 starts 3 us after 61 ends.
    b.add_graph_nodes(50, {node(60, t0, t0 + 10000, "a"), node(61, t0 + 5000, t0 + 20000, "b"),
                           node(62, t0 + 23000, t0 + 40000, "c")});
  }
  auto run = b.finish();
  ASSERT_TRUE(run.has_value());
  auto k = by_id(*run);
  EXPECT_EQ(run->summary.gpu_ops, 3u) << "the nodes are not ops of their own";
  EXPECT_EQ(run->summary.busy_ns, 3u * 40000u);
  EXPECT_EQ(run->trace.size(), 3u);
  EXPECT_EQ(k[50].graph_op, 0u);
  EXPECT_EQ(k[50].duration.count, 3u);
  EXPECT_EQ(k[60].graph_op, 50u);
  EXPECT_EQ(k[60].name, "a");
  EXPECT_EQ(k[60].grid[0], 8u);
  EXPECT_EQ(k[60].block[0], 256u);
  EXPECT_EQ(k[60].shared_mem, 1024u);
  EXPECT_EQ(k[60].duration.count, 3u);
  EXPECT_EQ(k[60].duration.max, 10000u);
  EXPECT_EQ(k[60].gap.max, 0u) << "the next node started before it ended";
  EXPECT_EQ(k[61].gap.min, 3000u);
  EXPECT_EQ(k[61].gap.max, 3000u);
  EXPECT_EQ(k[62].duration.min, 17000u);
  EXPECT_EQ(k[62].gap.count, 0u) << "after the last node the graph op's own gap counts";
}

TEST(RunBuilder, AnOpCannotEndAfterTheNextOpOfItsStreamStarted) {
  using fikit::hook::measure::ends_after_next_started;
  const TimedOp earlier{1, 7, 0, 1000, 35'000'000};   // a CUPTI record that ends a whole step late
  const TimedOp later{2, 7, 0, 60'000, 260'000};
  EXPECT_TRUE(ends_after_next_started(earlier, 0x10007, later, 0x10007, false));
  EXPECT_FALSE(ends_after_next_started(earlier, 0x10007, later, 0x10008, false)) << "another stream may overlap";
  EXPECT_FALSE(ends_after_next_started(earlier, 0, later, 0, false)) << "a stream not known (events) is not compared";
  EXPECT_FALSE(ends_after_next_started(earlier, 0x10007, later, 0x10007, true))
      << "a kernel may start early after a kernel (a programmatic dependency)";
  const TimedOp in_order{1, 7, 0, 1000, 59'500};   // within the tolerance of the next start
  EXPECT_FALSE(ends_after_next_started(in_order, 0x10007, later, 0x10007, false));
  TimedOp unknown_start = later;
  unknown_start.start_unknown = true;
  EXPECT_FALSE(ends_after_next_started(earlier, 0x10007, unknown_start, 0x10007, false));
}
