// The CUPTI record matcher on its own: records in, (seq, start, end) out.
#include "record_matcher.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <utility>
#include <vector>

namespace fikit::hook::measure {
namespace {

MatchOp kernel_op(uint64_t seq, uint32_t stream, uint32_t grid, uint32_t block = 128, uint32_t context = 1) {
  MatchOp op;
  op.seq = seq;
  op.context = context;
  op.stream = stream;
  op.cls = OpClass::Kernel;
  op.grid[0] = grid, op.grid[1] = 1, op.grid[2] = 1;
  op.block[0] = block, op.block[1] = 1, op.block[2] = 1;
  return op;
}

MatchOp mem_op(uint64_t seq, uint32_t stream, OpClass cls, uint64_t bytes) {
  MatchOp op;
  op.seq = seq;
  op.context = 1;
  op.stream = stream;
  op.cls = cls;
  op.bytes = bytes;
  return op;
}

MatchOp graph_op(uint64_t seq, uint32_t stream) {
  MatchOp op;
  op.seq = seq;
  op.context = 1;
  op.stream = stream;
  op.cls = OpClass::Graph;
  return op;
}

MatchRecord kernel_rec(uint32_t stream, uint64_t start, uint64_t end, uint32_t grid, uint32_t block = 128,
                       uint32_t context = 1) {
  MatchRecord r;
  r.cls = OpClass::Kernel;
  r.context = context;
  r.stream = stream;
  r.start = start;
  r.end = end;
  r.grid[0] = grid, r.grid[1] = 1, r.grid[2] = 1;
  r.block[0] = block, r.block[1] = 1, r.block[2] = 1;
  return r;
}

MatchRecord mem_rec(uint32_t stream, OpClass cls, uint64_t start, uint64_t end, uint64_t bytes) {
  MatchRecord r;
  r.cls = cls;
  r.context = 1;
  r.stream = stream;
  r.start = start;
  r.end = end;
  r.bytes = bytes;
  return r;
}

MatchRecord graph_rec(uint32_t stream, uint64_t start, uint64_t end, uint32_t graph, uint64_t node) {
  MatchRecord r = kernel_rec(stream, start, end, 1);
  r.graph_id = graph;
  r.graph_node = node;
  return r;
}

struct Harness {
  RecordMatcher m;
  std::vector<MatchResult> out;
  uint64_t claimed = 0;

  void op(const MatchOp& o) {
    claimed = std::max(claimed, o.seq + 1);
    m.add_op(o, out);
    m.ingested_below(o.seq + 1, out);
  }
  void records(std::vector<MatchRecord> batch) { m.add_records(batch, claimed, out); }
  std::vector<MatchResult> take() { return std::exchange(out, {}); }
};

void expect_timed(const MatchResult& r, uint64_t seq, uint64_t start, uint64_t end) {
  EXPECT_EQ(r.seq, seq);
  EXPECT_TRUE(r.timed);
  EXPECT_EQ(r.start, start);
  EXPECT_EQ(r.end, end);
}

TEST(RecordMatcher, KernelsOfOneStreamInOrder) {
  Harness h;
  h.op(kernel_op(0, 7, 10));
  h.op(kernel_op(1, 7, 20));
  h.op(kernel_op(2, 7, 10));
  h.records({kernel_rec(7, 100, 150, 10), kernel_rec(7, 160, 200, 20), kernel_rec(7, 210, 260, 10)});
  auto r = h.take();
  ASSERT_EQ(r.size(), 3u);
  expect_timed(r[0], 0, 100, 150);
  expect_timed(r[1], 1, 160, 200);
  expect_timed(r[2], 2, 210, 260);
  EXPECT_EQ(h.m.counters().received[0], 3u);
  EXPECT_EQ(h.m.counters().matched[0], 3u);
  EXPECT_EQ(h.m.counters().ops_timed, 3u);
  EXPECT_EQ(h.m.ops_waiting(), 0u);
}

TEST(RecordMatcher, RecordsOutOfOrderInABatchAndAcrossStreams) {
  Harness h;
  h.op(kernel_op(0, 7, 10));
  h.op(kernel_op(1, 8, 10));
  h.op(kernel_op(2, 7, 10));
  h.op(kernel_op(3, 8, 10));
  // CUPTI need not write records in time order: the matcher orders them by start.
  h.records({kernel_rec(7, 300, 320, 10), kernel_rec(8, 250, 280, 10), kernel_rec(7, 100, 150, 10),
             kernel_rec(8, 110, 130, 10)});
  auto r = h.take();
  ASSERT_EQ(r.size(), 4u);
  std::sort(r.begin(), r.end(), [](auto& a, auto& b) { return a.seq < b.seq; });
  expect_timed(r[0], 0, 100, 150);
  expect_timed(r[1], 1, 110, 130);
  expect_timed(r[2], 2, 300, 320);
  expect_timed(r[3], 3, 250, 280);
}

TEST(RecordMatcher, ContextsKeepStreamIdsApart) {
  Harness h;
  h.op(kernel_op(0, 7, 10, 128, 1));
  h.op(kernel_op(1, 7, 10, 128, 2));
  h.records({kernel_rec(7, 100, 110, 10, 128, 2)});
  auto r = h.take();
  ASSERT_EQ(r.size(), 1u);
  expect_timed(r[0], 1, 100, 110);
}

TEST(RecordMatcher, KernelsTheHookDidNotSeeAreSkipped) {
  Harness h;
  h.op(kernel_op(0, 7, 10));
  h.op(kernel_op(1, 7, 20));
  // A kernel of other dims (launched during capture, or by an unwrapped path) comes between.
  h.records({kernel_rec(7, 100, 150, 10), kernel_rec(7, 155, 158, 99, 32), kernel_rec(7, 160, 200, 20)});
  auto r = h.take();
  ASSERT_EQ(r.size(), 2u);
  expect_timed(r[0], 0, 100, 150);
  expect_timed(r[1], 1, 160, 200);
  EXPECT_EQ(h.m.counters().unmatched[0], 1u);
  // A record on a stream where no op waits, once every claimed op was offered: skipped at once.
  h.records({kernel_rec(9, 300, 310, 10)});
  EXPECT_TRUE(h.take().empty());
  EXPECT_EQ(h.m.counters().unmatched[0], 2u);
}

TEST(RecordMatcher, ARecordWaitsForAnOpNotYetPublished) {
  Harness h;
  // Op 0 claimed but not yet offered (its launching thread is still in the call) when its record
  // arrives in a batch received with 1 op claimed.
  std::vector<MatchRecord> batch{kernel_rec(7, 100, 150, 10)};
  h.m.add_records(batch, 1, h.out);
  EXPECT_TRUE(h.take().empty());
  EXPECT_EQ(h.m.counters().unmatched[0], 0u);
  h.m.add_op(kernel_op(0, 7, 10), h.out);
  auto r = h.take();
  ASSERT_EQ(r.size(), 1u);
  expect_timed(r[0], 0, 100, 150);
}

TEST(RecordMatcher, AWaitingRecordIsSkippedOnceEveryCandidateOpWasOffered) {
  Harness h;
  std::vector<MatchRecord> batch{kernel_rec(7, 100, 150, 10)};
  h.m.add_records(batch, 2, h.out);   // ops 0 and 1 could be its own
  h.m.add_op(kernel_op(0, 8, 10), h.out);
  h.m.ingested_below(1, h.out);
  EXPECT_EQ(h.m.counters().unmatched[0], 0u);
  h.m.ingested_below(2, h.out);        // op 1 was not timed: nothing more can claim the record
  EXPECT_EQ(h.m.counters().unmatched[0], 1u);
  EXPECT_TRUE(h.take().empty());
}

TEST(RecordMatcher, CopiesAndSetsMatchByBytesInTheirOwnQueues) {
  Harness h;
  h.op(mem_op(0, 7, OpClass::Memcpy, 4096));
  h.op(kernel_op(1, 7, 10));
  h.op(mem_op(2, 7, OpClass::Memset, 512));
  h.op(mem_op(3, 7, OpClass::Memcpy, 64));
  h.records({mem_rec(7, OpClass::Memcpy, 100, 140, 4096), kernel_rec(7, 150, 180, 10),
             mem_rec(7, OpClass::Memcpy, 181, 185, 8),   // a synchronous copy: no op of the hook
             mem_rec(7, OpClass::Memset, 190, 195, 512), mem_rec(7, OpClass::Memcpy, 200, 210, 64)});
  auto r = h.take();
  ASSERT_EQ(r.size(), 4u);
  std::sort(r.begin(), r.end(), [](auto& x, auto& y) { return x.seq < y.seq; });   // one queue per class
  expect_timed(r[0], 0, 100, 140);
  expect_timed(r[1], 1, 150, 180);
  expect_timed(r[2], 2, 190, 195);
  expect_timed(r[3], 3, 200, 210);
  EXPECT_EQ(h.m.counters().unmatched[1], 1u);
  EXPECT_EQ(h.m.counters().matched[1], 2u);
  EXPECT_EQ(h.m.counters().matched[2], 1u);
}

TEST(RecordMatcher, AnOpWhoseRecordWentMissingWaitsWithoutStallingTheOthers) {
  Harness h;
  h.op(kernel_op(0, 7, 10));   // its record never comes
  h.op(kernel_op(1, 7, 20));
  h.op(kernel_op(2, 7, 20));
  h.op(kernel_op(3, 7, 20));
  h.records({kernel_rec(7, 100, 110, 20), kernel_rec(7, 120, 130, 20), kernel_rec(7, 140, 150, 20)});
  auto r = h.take();
  ASSERT_EQ(r.size(), 3u);
  expect_timed(r[0], 1, 100, 110);
  expect_timed(r[1], 2, 120, 130);
  expect_timed(r[2], 3, 140, 150);
  EXPECT_EQ(h.m.counters().matched_ahead, 3u);
  EXPECT_EQ(h.m.counters().ops_lost, 0u);
  EXPECT_EQ(h.m.ops_waiting(), 1u);   // op 0, for a record that may still come
}

TEST(RecordMatcher, AnOpPassedOverByManyRecordsIsGivenUp) {
  Harness h;
  h.op(kernel_op(0, 7, 10));   // its record never comes
  const uint64_t n = RecordMatcher::kMissesBeforeLost;
  for (uint64_t i = 1; i <= n; ++i) h.op(kernel_op(i, 7, 20));
  for (uint64_t i = 1; i <= n; ++i) h.records({kernel_rec(7, 100 * i, 100 * i + 50, 20)});
  auto r = h.take();
  ASSERT_EQ(r.size(), n + 1);
  EXPECT_EQ(r.back().seq, 0u);
  EXPECT_FALSE(r.back().timed);
  EXPECT_EQ(h.m.counters().ops_lost, 1u);
  EXPECT_EQ(h.m.ops_waiting(), 0u);
}

// PyTorch: the autograd thread launches the last backward kernel, the main thread the optimizer's
// right after, on the same stream; CUPTI delivered the main thread's buffer first.
TEST(RecordMatcher, RecordsOfOneStreamDeliveredByTwoThreadsBuffersOutOfOrder) {
  Harness h;
  h.op(kernel_op(0, 7, 128, 384));   // gemm, autograd thread
  h.op(kernel_op(1, 7, 71, 512));    // foreach, main thread
  h.op(kernel_op(2, 7, 155, 512));
  h.op(kernel_op(3, 7, 71, 512));
  h.records({kernel_rec(7, 200, 210, 71, 512), kernel_rec(7, 220, 230, 155, 512), kernel_rec(7, 240, 250, 71, 512)});
  h.records({kernel_rec(7, 100, 190, 128, 384)});
  auto r = h.take();
  ASSERT_EQ(r.size(), 4u);
  std::sort(r.begin(), r.end(), [](auto& a, auto& b) { return a.seq < b.seq; });
  expect_timed(r[0], 0, 100, 190);
  expect_timed(r[1], 1, 200, 210);
  expect_timed(r[2], 2, 220, 230);
  expect_timed(r[3], 3, 240, 250);
  EXPECT_EQ(h.m.counters().unmatched[0], 0u);
}

TEST(RecordMatcher, NamesKeepKernelsOfOneShapeApart) {
  Harness h;
  MatchOp a = kernel_op(0, 7, 10), b = kernel_op(1, 7, 10);
  a.name = 111, b.name = 222;
  h.op(a);
  h.op(b);
  MatchRecord rb = kernel_rec(7, 300, 310, 10), ra = kernel_rec(7, 100, 110, 10);
  rb.name_hash = 222, ra.name_hash = 111;
  h.records({rb});   // b's record first: not a's, though the shape is the same
  h.records({ra});
  auto r = h.take();
  ASSERT_EQ(r.size(), 2u);
  expect_timed(r[0], 1, 300, 310);
  expect_timed(r[1], 0, 100, 110);
  // A name the driver did not give (0) matches any.
  MatchOp c = kernel_op(2, 7, 10);
  h.op(c);
  MatchRecord rc = kernel_rec(7, 400, 410, 10);
  rc.name_hash = 333;
  h.records({rc});
  r = h.take();
  ASSERT_EQ(r.size(), 1u);
  expect_timed(r[0], 2, 400, 410);
}

TEST(RecordMatcher, AnIncompleteRecordLeavesItsOpUntimed) {
  Harness h;
  h.op(kernel_op(0, 7, 10));
  h.op(kernel_op(1, 7, 10));
  h.records({kernel_rec(7, 100, 150, 10), kernel_rec(7, 160, 0, 10)});
  auto r = h.take();
  ASSERT_EQ(r.size(), 2u);
  expect_timed(r[0], 0, 100, 150);
  EXPECT_EQ(r[1].seq, 1u);
  EXPECT_FALSE(r[1].timed);
  EXPECT_EQ(h.m.counters().incomplete, 1u);
}

TEST(RecordMatcher, RetiredOpsAreForgotten) {
  Harness h;
  h.op(kernel_op(0, 7, 10));
  h.op(kernel_op(1, 7, 10));
  h.m.retire_below(1);   // the measurement thread gave up on op 0
  h.records({kernel_rec(7, 100, 150, 10)});
  auto r = h.take();
  ASSERT_EQ(r.size(), 1u);
  expect_timed(r[0], 1, 100, 150);
  EXPECT_EQ(h.m.counters().ops_expired, 1u);
}

TEST(RecordMatcher, GraphLaunchesSpanTheirNodes) {
  Harness h;
  h.op(graph_op(0, 7));
  h.op(graph_op(1, 7));
  h.op(kernel_op(2, 7, 10));
  // Two launches of a three-node graph, then a plain kernel; one batch, any order.
  h.records({graph_rec(7, 100, 120, 5, 1), graph_rec(7, 121, 140, 5, 2), graph_rec(7, 121, 150, 5, 3),
             graph_rec(7, 200, 220, 5, 1), graph_rec(7, 221, 240, 5, 3), graph_rec(7, 221, 260, 5, 2),
             kernel_rec(7, 300, 310, 10)});
  auto r = h.take();
  ASSERT_EQ(r.size(), 3u);
  expect_timed(r[0], 0, 100, 150);   // closed by the repeat of node 1
  expect_timed(r[1], 2, 300, 310);
  expect_timed(r[2], 1, 200, 260);   // closed by the kernel launched after it
  EXPECT_EQ(h.m.counters().received[3], 6u);
  EXPECT_EQ(h.m.counters().matched[3], 6u);
}

TEST(RecordMatcher, AGraphLaunchHandsOverItsKernelsOneByOne) {
  Harness h;
  h.op(graph_op(0, 7));
  h.op(graph_op(1, 7));
  MatchRecord gemm = graph_rec(7, 130, 170, 5, 2);
  gemm.grid[0] = 64, gemm.block[0] = 256, gemm.shared_mem = 4096, gemm.name = "gemm";
  MatchRecord copy = mem_rec(7, OpClass::Memcpy, 171, 180, 1 << 20);
  copy.graph_id = 5, copy.graph_node = 3;
  MatchRecord first = graph_rec(7, 100, 120, 5, 1);
  first.name = "norm";
  // Two batches (CUPTI's buffers), the later node in the first; then the next launch's first node.
  h.records({gemm, copy});
  h.records({first});
  EXPECT_TRUE(h.take().empty());
  h.records({graph_rec(7, 200, 220, 5, 1)});
  auto r = h.take();
  ASSERT_EQ(r.size(), 1u);
  expect_timed(r[0], 0, 100, 180);
  ASSERT_EQ(r[0].nodes.size(), 2u) << "kernels only: the copy node times the launch, not a kernel";
  EXPECT_STREQ(r[0].nodes[0].name, "norm");
  EXPECT_EQ(r[0].nodes[0].start, 100u);
  EXPECT_EQ(r[0].nodes[0].end, 120u);
  EXPECT_STREQ(r[0].nodes[1].name, "gemm");
  EXPECT_EQ(r[0].nodes[1].grid[0], 64u);
  EXPECT_EQ(r[0].nodes[1].block[0], 256u);
  EXPECT_EQ(r[0].nodes[1].shared_mem, 4096u);
  EXPECT_EQ(r[0].nodes[1].start, 130u);
}

TEST(RecordMatcher, TheLastGraphLaunchClosesWhenFlushesBringNothingMore) {
  Harness h;
  h.op(graph_op(0, 7));
  h.records({graph_rec(7, 100, 120, 5, 1)});
  h.m.settle(h.out);          // it grew since: maybe more records are coming
  EXPECT_TRUE(h.take().empty());
  h.records({graph_rec(7, 121, 180, 5, 2)});
  h.m.settle(h.out);
  EXPECT_TRUE(h.take().empty());
  h.m.settle(h.out);          // a flush with nothing new: done
  auto r = h.take();
  ASSERT_EQ(r.size(), 1u);
  expect_timed(r[0], 0, 100, 180);
}

TEST(RecordMatcher, KernelRecordsOfAnotherShapeAreNotedForTheLog) {
  Harness h;
  MatchOp op = kernel_op(0, 7, 10);
  op.kernel_id = 42;
  h.op(op);
  MatchRecord odd = kernel_rec(7, 100, 120, 10, 256);   // the launch said 128 threads a block
  odd.name = "gemm_kernel";
  h.records({odd, odd});
  EXPECT_TRUE(h.take().empty());
  ASSERT_EQ(h.m.mismatches().size(), 1u) << "the same disagreement is noted once";
  const Mismatch& m = h.m.mismatches()[0];
  EXPECT_STREQ(m.record_name, "gemm_kernel");
  EXPECT_EQ(m.record_block[0], 256u);
  EXPECT_EQ(m.op_block[0], 128u);
  EXPECT_EQ(m.op_kernel_id, 42u);
  EXPECT_EQ(m.record_stream, 7u);
  EXPECT_EQ(m.ops_waiting, 1u);
  EXPECT_FALSE(m.fits_elsewhere);
  EXPECT_EQ(h.m.counters().unmatched[0], 2u);
  EXPECT_EQ(h.m.counters().unmatched_fit_elsewhere, 0u);
}

TEST(RecordMatcher, ARecordThatFitsAnOpOfAnotherStreamIsCounted) {
  Harness h;
  h.op(kernel_op(0, 7, 10));
  MatchOp misplaced = kernel_op(1, 8, 30);   // the hook put it on stream 8; CUPTI says 7
  misplaced.kernel_id = 5;
  h.op(misplaced);
  h.records({kernel_rec(7, 100, 120, 30)});
  EXPECT_TRUE(h.take().empty());
  EXPECT_EQ(h.m.counters().unmatched_fit_elsewhere, 1u);
  ASSERT_EQ(h.m.mismatches().size(), 1u);
  EXPECT_TRUE(h.m.mismatches()[0].fits_elsewhere);
  EXPECT_EQ(h.m.mismatches()[0].elsewhere_stream, 8u);
  // Given up, both are kept for the log (one entry per kernel).
  h.m.retire_below(2048);
  ASSERT_EQ(h.m.expired().size(), 2u);
  EXPECT_EQ(h.m.expired()[1].kernel_id, 5u);
  EXPECT_EQ(h.m.expired()[1].stream, 8u);
  EXPECT_EQ(h.m.expired()[1].grid[0], 30u);
}

TEST(RecordMatcher, AfterASynchronisationOneSettleClosesTheGraph) {
  Harness h;
  h.op(graph_op(0, 7));
  h.records({graph_rec(7, 100, 120, 5, 1), graph_rec(7, 121, 180, 5, 2)});
  h.m.settle(h.out, /*all_done=*/true);   // a drain after the iteration's synchronisation
  auto r = h.take();
  ASSERT_EQ(r.size(), 1u);
  expect_timed(r[0], 0, 100, 180);
}

TEST(RecordMatcher, AnotherGraphClosesTheOpenOne) {
  Harness h;
  h.op(graph_op(0, 7));
  h.op(graph_op(1, 7));
  h.records({graph_rec(7, 100, 120, 5, 1), graph_rec(7, 130, 140, 6, 1)});
  auto r = h.take();
  ASSERT_EQ(r.size(), 1u);
  expect_timed(r[0], 0, 100, 120);
  EXPECT_EQ(h.m.ops_waiting(), 1u);
}

}  // namespace
}  // namespace fikit::hook::measure
