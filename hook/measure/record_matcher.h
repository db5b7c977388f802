#pragma once
// Ties CUPTI activity records to the hook's ops without any per-launch CUPTI call: by order, per
// stream. Records of kernels, copies and sets carry CUPTI's (context id, stream id); the launching
// thread resolves the same pair for each op (once per new stream). A stream runs its work in launch
// order, so the records of one (context, stream, class) come mostly in the order of the ops the hook
// saw there, interleaved with records of work the hook did not see (launched during capture,
// synchronous copies, unwrapped entry points). Mostly: CUPTI may keep a buffer per launching thread,
// so when two threads launch on one stream (PyTorch's autograd thread ends the backward pass, the main
// thread's optimizer follows) one thread's records can arrive a buffer before the other's. Each record
// goes to the oldest waiting op of its queue that it fits (kernel: same grid, block and, where both
// are known, name; copy and set: same byte count), looking at most kLookahead ops deep; otherwise it
// is skipped. An op passed over keeps waiting for its late record.
//
// Classes get separate queues (kernel, copy, set, graph) so that no ordering is assumed between
// different kinds of record. Records with a graph id belong to graph launches: the oldest graph op
// of the stream takes them all, and is complete when a record repeats a graph node it already has
// or names another graph (the next launch), when a later op of its stream got its record, or when
// two flushes in a row brought it nothing new (settle()). A graph op's kernel records also come
// out one by one with its result (MatchResult::nodes): measure mode profiles graph kernels like
// launched ones (docs/scheduling.md, "Graphs").
//
// Pure: no CUDA, no CUPTI, no threads (the caller locks). tests/measure_test/record_matcher_test.cpp.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <tuple>
#include <vector>

namespace fikit::hook::measure {

enum class OpClass : uint8_t { Kernel = 0, Memcpy = 1, Memset = 2, Graph = 3 };
inline constexpr int kOpClasses = 4;

struct MatchOp {
  uint64_t seq = 0;
  uint32_t context = 0, stream = 0;   // CUPTI's ids
  OpClass cls = OpClass::Kernel;
  uint32_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};   // Kernel
  uint64_t bytes = 0;                                  // Memcpy, Memset (0: not checked)
  uint64_t name = 0;                                   // Kernel: hash of its function name (0: unknown)
  uint64_t kernel_id = 0;                              // diagnostics only (mismatches())
};

struct MatchRecord {
  OpClass cls = OpClass::Kernel;      // Kernel, Memcpy or Memset: what the record is
  uint32_t context = 0, stream = 0;
  uint64_t start = 0, end = 0;        // end 0 (or before start): incomplete (a forced flush)
  uint32_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
  uint64_t bytes = 0;
  uint32_t graph_id = 0;              // non-zero: a node of a graph launch
  uint64_t graph_node = 0;
  uint64_t name_hash = 0;             // kernel: hash of its function name, as MatchOp::name (0: unknown)
  // Kernel: CUPTI's name of it. CUPTI keeps one copy per kernel for the process (its records share
  // it), so the pointer stays valid after the record's buffer went back.
  const char* name = nullptr;
  uint32_t shared_mem = 0;            // kernel: dynamic shared memory per block, bytes
};

// A kernel node of a graph launch, from its record.
struct NodeTiming {
  uint64_t start = 0, end = 0;
  uint32_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
  uint32_t shared_mem = 0;
  const char* name = nullptr;         // CUPTI's (MatchRecord::name)
};

// A kernel record that did not fit the op waiting at the head of its queue (a few are kept, for
// the log: kernels whose launch and record disagree on shape are never timed).
struct Mismatch {
  char record_name[96] = {};
  uint32_t record_grid[3] = {}, record_block[3] = {};
  uint32_t record_context = 0, record_stream = 0;
  uint64_t op_kernel_id = 0;
  uint32_t op_grid[3] = {}, op_block[3] = {};
  uint64_t ops_waiting = 0;          // in the record's queue
  // An op of another (context, stream) that the record fits (by shape and name), if any.
  bool fits_elsewhere = false;
  uint32_t elsewhere_context = 0, elsewhere_stream = 0;
};

// An op given up while still waiting for its record (a few are kept, for the log).
struct Expired {
  uint64_t kernel_id = 0;
  uint32_t context = 0, stream = 0;
  uint32_t grid[3] = {}, block[3] = {};
};

struct MatchResult {
  uint64_t seq = 0;
  uint64_t start = 0, end = 0;
  bool timed = false;                 // false: the op will get no timing (its record was incomplete or missing)
  std::vector<NodeTiming> nodes;      // a graph op's kernel records, in start order (at most kMaxGraphNodes)
};

struct MatchCounters {
  // Indexed by OpClass; a record with a graph id counts as Graph whatever its kind.
  uint64_t received[kOpClasses] = {};
  uint64_t matched[kOpClasses] = {};      // taken by an op
  uint64_t unmatched[kOpClasses] = {};    // skipped: work the hook did not see
  uint64_t incomplete = 0;                // records without an end
  uint64_t ops_queued = 0, ops_timed = 0;
  uint64_t ops_lost = 0;                  // given up: kMissesBeforeLost records went to ops after it
  uint64_t matched_ahead = 0;             // records that went to an op behind the oldest waiting one
  uint64_t unmatched_fit_elsewhere = 0;   // kernel records skipped that fit an op waiting on another stream
  uint64_t ops_expired = 0;               // still waiting when the measurement thread gave up on it
};

class RecordMatcher {
 public:
  // An op, in sequence order (ops the caller does not time are simply not added).
  void add_op(const MatchOp& op, std::vector<MatchResult>& out);
  // Every op below `seq` has been offered through add_op (or was not timed). Records that arrived
  // when their op could not have been added yet wait until then; after that a record with no op
  // waiting is skipped.
  void ingested_below(uint64_t seq, std::vector<MatchResult>& out);
  // A batch of records, as delivered (reordered here by start time). `claimed`: how many ops had
  // been claimed when the batch was received (its records' ops are all below that).
  void add_records(std::vector<MatchRecord>& batch, uint64_t claimed, std::vector<MatchResult>& out);
  // Ops below `seq` are decided by the caller (timed, or given up): forget them, drop their results.
  void retire_below(uint64_t seq);
  // After a flush: graph ops that took records but nothing since the previous settle() are complete.
  // all_done: the flush followed a host synchronisation after the ops: every graph op that took
  // records is complete now (all its nodes' records came with the flush).
  void settle(std::vector<MatchResult>& out, bool all_done = false);

  const MatchCounters& counters() const noexcept { return counters_; }
  static constexpr size_t kMaxMismatches = 8;
  // How deep a record looks for its op; how many records may go past an op before it is given up
  // (a record that never comes must not hold its slot for ever when no drain decides it).
  static constexpr size_t kLookahead = 64;
  static constexpr uint32_t kMissesBeforeLost = 256;
  const std::vector<Mismatch>& mismatches() const noexcept { return mismatches_; }
  const std::vector<Expired>& expired() const noexcept { return expired_; }
  size_t ops_waiting() const noexcept;

 private:
  static constexpr size_t kMaxGraphNodes = 4096;   // node ids (and kernel records) kept per graph launch

  struct PendingOp {
    MatchOp op;
    uint64_t start = UINT64_MAX, end = 0;
    uint32_t records = 0;           // graph: records taken so far
    uint32_t graph_id = 0;
    bool grew = false;              // graph: took a record since the last settle()
    uint32_t misses = 0;            // records that went to ops after this one
    std::vector<uint64_t> nodes;    // graph: node ids taken
    std::vector<NodeTiming> kernels;// graph: its kernel records taken
  };
  struct Held {
    MatchRecord rec;
    uint64_t claimed;
  };
  struct Queue {
    std::deque<PendingOp> ops;
    std::deque<Held> held;          // records not yet decided, in order
  };
  using Key = std::tuple<uint32_t, uint32_t, uint8_t>;
  enum class Decision { Done, Wait };

  Queue& queue(uint32_t context, uint32_t stream, OpClass cls) {
    return queues_[Key{context, stream, static_cast<uint8_t>(cls)}];
  }
  void process(Queue& q, const Key& key, std::vector<MatchResult>& out);
  Decision decide(Queue& q, const Key& key, const MatchRecord& rec, std::vector<MatchResult>& out);
  void drop_retired(Queue& q);
  void emit(uint64_t seq, uint64_t start, uint64_t end, bool timed, std::vector<MatchResult>& out,
            std::vector<NodeTiming> nodes = {});
  void close_graph(Queue& q, std::vector<MatchResult>& out);
  void close_graphs_before(uint32_t context, uint32_t stream, uint64_t seq, std::vector<MatchResult>& out);
  void note_mismatch(const Queue& q, const MatchRecord& rec);
  const MatchOp* waiting_elsewhere(const MatchRecord& rec) const;
  static long find_fit(const Queue& q, const MatchRecord& rec);

  std::map<Key, Queue> queues_;
  uint64_t ingested_below_ = 0;
  uint64_t retired_below_ = 0;
  uint64_t purged_at_ = 0;
  MatchCounters counters_;
  std::vector<Mismatch> mismatches_;   // the first kMaxMismatches distinct ones
  std::vector<Expired> expired_;       // the first kMaxMismatches, of distinct kernels
};

}  // namespace fikit::hook::measure
