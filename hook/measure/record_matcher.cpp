#include "record_matcher.h"

#include <algorithm>
#include <cstdio>
#include <utility>

namespace fikit::hook::measure {
namespace {

bool complete(const MatchRecord& r) { return r.end != 0 && r.start != 0 && r.end >= r.start; }

// Does `rec` look like the record of `op`? (Same queue, so same stream and class already.)
bool fits(const MatchOp& op, const MatchRecord& rec) {
  switch (op.cls) {
    case OpClass::Kernel:
      return std::equal(op.grid, op.grid + 3, rec.grid) && std::equal(op.block, op.block + 3, rec.block) &&
             (op.name == 0 || rec.name_hash == 0 || op.name == rec.name_hash);
    case OpClass::Memcpy:
    case OpClass::Memset:
      return op.bytes == 0 || op.bytes == rec.bytes;
    case OpClass::Graph:
      return true;
  }
  return false;
}

}  // namespace

size_t RecordMatcher::ops_waiting() const noexcept {
  size_t n = 0;
  for (const auto& [key, q] : queues_) n += q.ops.size();
  return n;
}

void RecordMatcher::emit(uint64_t seq, uint64_t start, uint64_t end, bool timed, std::vector<MatchResult>& out,
                         std::vector<NodeTiming> nodes) {
  if (seq < retired_below_) return;   // the caller has moved on; its slot may hold another op
  out.push_back({seq, start, end, timed, std::move(nodes)});
  if (timed) ++counters_.ops_timed;
}

void RecordMatcher::add_op(const MatchOp& op, std::vector<MatchResult>& out) {
  const Key key{op.context, op.stream, static_cast<uint8_t>(op.cls)};
  Queue& q = queues_[key];
  PendingOp pending;
  pending.op = op;
  q.ops.push_back(std::move(pending));
  ++counters_.ops_queued;
  if (!q.held.empty()) process(q, key, out);
}

void RecordMatcher::ingested_below(uint64_t seq, std::vector<MatchResult>& out) {
  if (seq <= ingested_below_) return;
  ingested_below_ = seq;
  for (auto& [key, q] : queues_)
    if (!q.held.empty()) process(q, key, out);
}

void RecordMatcher::add_records(std::vector<MatchRecord>& batch, uint64_t claimed, std::vector<MatchResult>& out) {
  // One stream runs its work in order, so start times give the launch order within a queue,
  // whatever order CUPTI wrote the records in.
  std::stable_sort(batch.begin(), batch.end(),
                   [](const MatchRecord& a, const MatchRecord& b) { return a.start < b.start; });
  std::vector<Key> touched;
  for (const MatchRecord& rec : batch) {
    const OpClass cls = rec.graph_id != 0 ? OpClass::Graph : rec.cls;
    ++counters_.received[static_cast<int>(cls)];
    const Key key{rec.context, rec.stream, static_cast<uint8_t>(cls)};
    Queue& q = queues_[key];
    q.held.push_back({rec, claimed});
    if (q.held.size() == 1) touched.push_back(key);
  }
  for (const Key& key : touched) process(queues_[key], key, out);
}

void RecordMatcher::drop_retired(Queue& q) {
  while (!q.ops.empty() && q.ops.front().op.seq < retired_below_) {
    const MatchOp& op = q.ops.front().op;
    if (op.cls == OpClass::Kernel && expired_.size() < kMaxMismatches &&
        std::none_of(expired_.begin(), expired_.end(), [&](const Expired& e) { return e.kernel_id == op.kernel_id; })) {
      Expired e;
      e.kernel_id = op.kernel_id, e.context = op.context, e.stream = op.stream;
      std::copy(op.grid, op.grid + 3, e.grid);
      std::copy(op.block, op.block + 3, e.block);
      expired_.push_back(e);
    }
    q.ops.pop_front();
    ++counters_.ops_expired;
  }
}

void RecordMatcher::retire_below(uint64_t seq) {
  if (seq <= retired_below_) return;
  retired_below_ = seq;
  // Queues that no record reaches would keep their ops forever: sweep now and then.
  if (seq - purged_at_ >= 1024) {
    purged_at_ = seq;
    for (auto& [key, q] : queues_) drop_retired(q);
  }
}

void RecordMatcher::process(Queue& q, const Key& key, std::vector<MatchResult>& out) {
  drop_retired(q);
  while (!q.held.empty()) {
    const Held& h = q.held.front();
    if (decide(q, key, h.rec, out) == Decision::Wait) {
      // No op waits here. Its op may not have been added yet, unless every op that could be its
      // own has been: then it is work the hook did not see.
      if (h.claimed > ingested_below_) return;
      ++counters_.unmatched[std::get<2>(key)];
    }
    q.held.pop_front();
  }
}

RecordMatcher::Decision RecordMatcher::decide(Queue& q, const Key& key, const MatchRecord& rec,
                                             std::vector<MatchResult>& out) {
  const int cls = std::get<2>(key);
  if (static_cast<OpClass>(cls) == OpClass::Graph) {
    if (!complete(rec)) {
      ++counters_.incomplete;
      return Decision::Done;
    }
    while (!q.ops.empty()) {
      PendingOp& head = q.ops.front();
      if (head.records > 0 &&
          (rec.graph_id != head.graph_id || std::find(head.nodes.begin(), head.nodes.end(), rec.graph_node) !=
                                                 head.nodes.end())) {
        close_graph(q, out);   // the record belongs to the next launch
        continue;
      }
      head.graph_id = rec.graph_id;
      if (head.nodes.size() < kMaxGraphNodes) head.nodes.push_back(rec.graph_node);
      if (rec.cls == OpClass::Kernel && head.kernels.size() < kMaxGraphNodes) {
        NodeTiming t;
        t.start = rec.start, t.end = rec.end;
        std::copy(rec.grid, rec.grid + 3, t.grid);
        std::copy(rec.block, rec.block + 3, t.block);
        t.shared_mem = rec.shared_mem;
        t.name = rec.name;
        head.kernels.push_back(t);
      }
      head.start = std::min(head.start, rec.start);
      head.end = std::max(head.end, rec.end);
      ++head.records;
      head.grew = true;
      ++counters_.matched[cls];
      return Decision::Done;
    }
    return Decision::Wait;
  }

  if (q.ops.empty()) return Decision::Wait;
  const long at = find_fit(q, rec);
  if (at < 0) {
    // Work the hook did not see (or a record whose op is further back than kLookahead).
    if (!complete(rec)) {
      ++counters_.incomplete;
      return Decision::Done;
    }
    ++counters_.unmatched[cls];
    if (static_cast<OpClass>(cls) == OpClass::Kernel) {
      if (waiting_elsewhere(rec)) ++counters_.unmatched_fit_elsewhere;
      if (mismatches_.size() < kMaxMismatches) note_mismatch(q, rec);
    }
    return Decision::Done;
  }
  const uint64_t seq = q.ops[static_cast<size_t>(at)].op.seq;
  q.ops.erase(q.ops.begin() + at);
  if (!complete(rec)) {
    // A forced flush handed over a record still in progress: its op will get no other.
    ++counters_.incomplete;
    emit(seq, 0, 0, false, out);
  } else {
    emit(seq, rec.start, rec.end, true, out);
    ++counters_.matched[cls];
    close_graphs_before(rec.context, rec.stream, seq, out);
  }
  if (at > 0) {
    ++counters_.matched_ahead;
    // The ops passed over wait for their late records, but not for ever: one whose record went
    // missing would hold its slot until the measurement thread gives up on it.
    PendingOp& head = q.ops.front();
    if (++head.misses >= kMissesBeforeLost) {
      emit(head.op.seq, 0, 0, false, out);
      q.ops.pop_front();
      ++counters_.ops_lost;
    }
  }
  return Decision::Done;
}

long RecordMatcher::find_fit(const Queue& q, const MatchRecord& rec) {
  const size_t depth = std::min(q.ops.size(), kLookahead);
  for (size_t i = 0; i < depth; ++i)
    if (fits(q.ops[i].op, rec)) return static_cast<long>(i);
  return -1;
}

void RecordMatcher::note_mismatch(const Queue& q, const MatchRecord& rec) {
  const MatchOp& op = q.ops.front().op;
  for (const Mismatch& m : mismatches_)
    if (m.op_kernel_id == op.kernel_id && std::equal(rec.grid, rec.grid + 3, m.record_grid) &&
        std::equal(rec.block, rec.block + 3, m.record_block))
      return;
  Mismatch m;
  if (rec.name) std::snprintf(m.record_name, sizeof m.record_name, "%s", rec.name);
  std::copy(rec.grid, rec.grid + 3, m.record_grid);
  std::copy(rec.block, rec.block + 3, m.record_block);
  m.record_context = rec.context, m.record_stream = rec.stream;
  m.op_kernel_id = op.kernel_id;
  std::copy(op.grid, op.grid + 3, m.op_grid);
  std::copy(op.block, op.block + 3, m.op_block);
  m.ops_waiting = q.ops.size();
  if (const MatchOp* other = waiting_elsewhere(rec)) {
    m.fits_elsewhere = true;
    m.elsewhere_context = other->context, m.elsewhere_stream = other->stream;
  }
  mismatches_.push_back(m);
}

// Diagnostics: an op on another stream (or context) that a skipped kernel record would fit.
const MatchOp* RecordMatcher::waiting_elsewhere(const MatchRecord& rec) const {
  for (const auto& [key, q] : queues_) {
    if (static_cast<OpClass>(std::get<2>(key)) != OpClass::Kernel) continue;
    if (std::get<0>(key) == rec.context && std::get<1>(key) == rec.stream) continue;
    const long at = find_fit(q, rec);
    if (at >= 0) return &q.ops[static_cast<size_t>(at)].op;
  }
  return nullptr;
}

void RecordMatcher::close_graph(Queue& q, std::vector<MatchResult>& out) {
  PendingOp& head = q.ops.front();
  // Records come in start order within a batch, not across batches.
  std::stable_sort(head.kernels.begin(), head.kernels.end(),
                   [](const NodeTiming& a, const NodeTiming& b) { return a.start < b.start; });
  emit(head.op.seq, head.start, head.end, true, out, std::move(head.kernels));
  q.ops.pop_front();
}

// A later op of the stream got its record: a graph launched before it has finished (stream order).
void RecordMatcher::close_graphs_before(uint32_t context, uint32_t stream, uint64_t seq,
                                        std::vector<MatchResult>& out) {
  auto it = queues_.find(Key{context, stream, static_cast<uint8_t>(OpClass::Graph)});
  if (it == queues_.end()) return;
  Queue& q = it->second;
  drop_retired(q);
  if (!q.ops.empty() && q.ops.front().records > 0 && q.ops.front().op.seq < seq) close_graph(q, out);
}

void RecordMatcher::settle(std::vector<MatchResult>& out, bool all_done) {
  for (auto& [key, q] : queues_) {
    if (static_cast<OpClass>(std::get<2>(key)) != OpClass::Graph) continue;
    drop_retired(q);
    if (q.ops.empty() || q.ops.front().records == 0) continue;
    if (q.ops.front().grew && !all_done) {
      q.ops.front().grew = false;
    } else {
      close_graph(q, out);
    }
  }
}

}  // namespace fikit::hook::measure
