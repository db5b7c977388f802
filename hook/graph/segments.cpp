#include "segments.h"

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <new>
#include <vector>

#include "clock.h"
#include "config.h"
#include "cut_rule.h"
#include "driver.h"
#include "kernelid.h"
#include "log.h"

namespace fikit::hook::graph {

struct Plan {
  struct Node {
    CUgraphNode original;   // the program's node (of the graph it instantiated)
    uint32_t segment;
    CUgraphNode copy;       // the same node in the segment's graph
    bool stale;             // changed while the graph launched whole, and not since (node changes)
  };
  std::vector<Segment> segments;
  std::vector<CUgraph> graphs;   // each segment's graph, kept: calls on the executable name its nodes
  // Per segment: node changes (segments.h). Changed only by calls the program makes on this
  // executable, which it makes one at a time (CUDA's graph thread safety).
  struct SegmentState {
    bool dirty = false;    // its graph has changes its executable lacks
    bool direct = false;   // changes go to its executable at once
  };
  std::vector<SegmentState> states;
  uint32_t dirty_segments = 0;
  uint32_t stale_nodes = 0;      // Node::stale
  uint32_t stale_launches = 0;   // launched whole in a row for stale nodes
  CUgraphExec owner = nullptr;   // the program's executable
  std::vector<Node> nodes;       // sorted by `original`
  unsigned long long flags = 0;
  // The driver runs whole launches of one executable one after the other, whatever their streams.
  // Its pieces on two streams could interleave: a launch on another stream than the last one waits
  // for this event, recorded after each launch's last piece.
  CUevent done = nullptr;
  std::atomic<CUstream> last_stream{nullptr};
  // Recorded after each segment in turn (segment i into ahead[i % kSegmentsAhead]): a launch waits
  // for the segment kSegmentsAhead back before it queues the next (queued()).
  CUevent ahead[kSegmentsAhead] = {};
  uint32_t clean_cuts = 0;   // boundaries where the graph's branches met (one node open)
};

namespace {

// ---- counts ----

std::atomic<uint64_t> g_segmented{0}, g_segments{0}, g_segment_launches{0}, g_clean_cuts{0}, g_change_ns{0},
    g_mirrored{0}, g_direct{0}, g_updates{0}, g_stale_launches{0}, g_skipped_changes{0}, g_kernel_nodes{0},
    g_kernel_nodes_known{0};
std::atomic<uint64_t> g_whole[size_t(Whole::kCount)] = {};
std::atomic<bool> g_warned[size_t(Whole::kCount)] = {};

void left_whole(Whole why) noexcept {
  g_whole[size_t(why)].fetch_add(1, std::memory_order_relaxed);
  // Fitting one segment costs nothing; the others mean a service may wait behind the whole graph.
  if (why != Whole::OnePiece && !g_warned[size_t(why)].exchange(true))
    log(LogLevel::Warn, "graphs: a CUDA graph of this job is launched whole (%s): the scheduler holds or releases "
        "all of it at once, so a service may wait for all of it (docs/scheduling.md, \"Graphs\")",
        whole_reason(why));
}

// ---- the executables with segments: an open-addressed table, read without locks ----

constexpr size_t kSlots = 4096;   // a power of two
constexpr uint64_t kDefaultSegmentUs = settings::fallback_of("FIKIT_GRAPH_SEGMENT_US");
constexpr size_t kMaxProbe = 64;
struct Slot {
  std::atomic<CUgraphExec> key{nullptr};
  std::atomic<Plan*> plan{nullptr};
};
Slot g_slots[kSlots];
std::atomic<uint32_t> g_live{0};
std::mutex g_table_mutex;   // taken by instantiation, update and destruction only
const CUgraphExec kTombstone = reinterpret_cast<CUgraphExec>(uintptr_t(1));

size_t home(CUgraphExec exec) noexcept {
  uint64_t h = reinterpret_cast<uintptr_t>(exec);
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return size_t(h) & (kSlots - 1);
}

Slot* slot_of(CUgraphExec exec) noexcept {
  for (size_t i = 0, at = home(exec); i < kMaxProbe; ++i, at = (at + 1) & (kSlots - 1)) {
    const CUgraphExec key = g_slots[at].key.load(std::memory_order_acquire);
    if (key == exec) return &g_slots[at];
    if (key == nullptr) return nullptr;
  }
  return nullptr;
}

bool insert(CUgraphExec exec, Plan* plan) noexcept {
  std::lock_guard lock(g_table_mutex);
  for (size_t i = 0, at = home(exec); i < kMaxProbe; ++i, at = (at + 1) & (kSlots - 1)) {
    Slot& s = g_slots[at];
    const CUgraphExec key = s.key.load(std::memory_order_relaxed);
    if (key != nullptr && key != kTombstone) continue;
    s.plan.store(plan, std::memory_order_relaxed);
    s.key.store(exec, std::memory_order_release);
    g_live.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  return false;
}

Plan* take(CUgraphExec exec) noexcept {
  if (g_live.load(std::memory_order_relaxed) == 0) return nullptr;
  std::lock_guard lock(g_table_mutex);
  Slot* s = slot_of(exec);
  if (s == nullptr) return nullptr;
  Plan* plan = s->plan.exchange(nullptr, std::memory_order_acq_rel);
  s->key.store(kTombstone, std::memory_order_release);
  g_live.fetch_sub(1, std::memory_order_relaxed);
  return plan;
}

void release(Plan* plan) noexcept {
  if (plan == nullptr) return;
  const DriverCalls& d = driver_calls();
  for (const Segment& s : plan->segments)
    if (s.exec != nullptr && d.graph_exec_destroy != nullptr) d.graph_exec_destroy(s.exec);
  for (CUgraph g : plan->graphs)
    if (g != nullptr && d.graph_destroy != nullptr) d.graph_destroy(g);
  if (plan->done != nullptr && d.event_destroy != nullptr) d.event_destroy(plan->done);
  for (CUevent e : plan->ahead)
    if (e != nullptr && d.event_destroy != nullptr) d.event_destroy(e);
  delete plan;
}

// ---- cutting a graph ----

uint64_t mix(uint64_t h, uint64_t v) noexcept {
  for (int i = 0; i < 8; ++i) {
    h ^= (v >> (8 * i)) & 0xff;
    h *= 0x100000001b3ull;
  }
  return h;
}

struct Cutter {
  const DriverCalls& d;
  const std::vector<CUgraphNode>& original;   // topological order
  std::vector<size_t> cut;                    // piece s holds [cut[s], cut[s + 1])
  std::vector<CUgraph> made;                  // every graph made, for the cleanup of a failure
  std::vector<CUgraph> pieces;                // each piece's graph
  std::vector<CUgraphNode> placed;            // by position in the order: the node in its piece's graph

  // Copies `graph` and cuts the copy into the pieces of `cut`.
  bool cut_copy(CUgraph graph) noexcept {
    const size_t n = original.size();
    pieces.assign(cut.size() - 1, nullptr);
    placed.assign(n, nullptr);
    CUgraph first = nullptr;
    if (d.graph_clone(&first, graph) != CUDA_SUCCESS) return false;
    made.push_back(first);
    std::vector<CUgraphNode> handles(n);
    for (size_t k = 0; k < n; ++k)
      if (d.graph_node_find_in_clone(&handles[k], original[k], first) != CUDA_SUCCESS) return false;
    return split(first, 0, pieces.size(), handles);
  }

  // `g` holds the nodes of pieces [lo, hi); handles[i] are they in `g`.
  bool split(CUgraph g, size_t lo, size_t hi, std::vector<CUgraphNode>& handles) noexcept {
    if (hi - lo == 1) {
      pieces[lo] = g;
      for (size_t i = cut[lo]; i < cut[hi]; ++i) placed[i] = handles[i];
      return true;
    }
    const size_t mid = lo + (hi - lo) / 2;
    CUgraph second = nullptr;
    if (d.graph_clone(&second, g) != CUDA_SUCCESS) return false;
    made.push_back(second);
    // The second half's nodes in the copy; the first half goes from it, the second from `g`.
    std::vector<CUgraphNode> copies(cut[hi] - cut[mid]);
    for (size_t i = cut[mid]; i < cut[hi]; ++i)
      if (d.graph_node_find_in_clone(&copies[i - cut[mid]], handles[i], second) != CUDA_SUCCESS) return false;
    for (size_t i = cut[lo]; i < cut[mid]; ++i) {
      CUgraphNode there = nullptr;
      if (d.graph_node_find_in_clone(&there, handles[i], second) != CUDA_SUCCESS ||
          d.graph_destroy_node(there) != CUDA_SUCCESS)
        return false;
    }
    for (size_t i = cut[mid]; i < cut[hi]; ++i) {
      if (d.graph_destroy_node(handles[i]) != CUDA_SUCCESS) return false;
      handles[i] = copies[i - cut[mid]];
    }
    return split(g, lo, mid, handles) && split(second, mid, hi, handles);
  }
};

bool calls_present(const DriverCalls& d) noexcept {
  return d.graph_get_nodes && (d.graph_get_edges_v2 || d.graph_get_edges) && d.graph_node_get_type &&
         d.graph_kernel_node_get_params && d.graph_clone && d.graph_node_find_in_clone && d.graph_destroy_node &&
         d.graph_destroy && d.graph_instantiate && d.graph_exec_destroy && d.event_create && d.event_record &&
         d.event_destroy && d.event_query && d.stream_wait_event;
}

uint64_t kernel_shape(const DriverCalls& d, CUgraphNode node) noexcept {
  CUDA_KERNEL_NODE_PARAMS p{};
  if (d.graph_kernel_node_get_params(node, &p) != CUDA_SUCCESS) return 0;
  CUfunction f = p.func;
  if (f == nullptr && p.kern != nullptr && d.kernel_get_function != nullptr &&
      d.kernel_get_function(&f, p.kern) != CUDA_SUCCESS)
    f = nullptr;
  if (f == nullptr) return 0;
  const uint32_t grid[3] = {p.gridDimX, p.gridDimY, p.gridDimZ}, block[3] = {p.blockDimX, p.blockDimY, p.blockDimZ};
  return kernelid::shape_id(f, grid, block, p.sharedMemBytes);
}

// The segments of `graph`, or nullptr with the reason it stays whole.
Plan* cut_graph(KernelPredictor* mode, CUgraph graph, unsigned long long flags, uint64_t budget_ns, Whole* why) {
  const DriverCalls& d = driver_calls();
  *why = Whole::Failed;
  if (!calls_present(d)) return nullptr;
  if (flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH) {
    *why = Whole::DeviceLaunch;
    return nullptr;
  }
  size_t n = 0;
  if (d.graph_get_nodes(graph, nullptr, &n) != CUDA_SUCCESS) return nullptr;
  std::vector<CUgraphNode> nodes(n);
  if (n != 0 && d.graph_get_nodes(graph, nodes.data(), &n) != CUDA_SUCCESS) return nullptr;
  nodes.resize(n);
  // What each node weighs against the budget, and what it adds to its segment's identity.
  std::vector<uint64_t> weight(n), identity(n);
  const uint64_t unknown_kernel = budget_ns / 4, memory_op = budget_ns / 16;
  for (size_t i = 0; i < n; ++i) {
    CUgraphNodeType type;
    if (d.graph_node_get_type(nodes[i], &type) != CUDA_SUCCESS) return nullptr;
    identity[i] = uint64_t(type) + 1;
    switch (type) {
      case CU_GRAPH_NODE_TYPE_KERNEL: {
        const uint64_t shape = kernel_shape(d, nodes[i]);
        const uint64_t predicted = shape != 0 && mode != nullptr ? mode->graph_kernel_ns(shape) : 0;
        weight[i] = predicted != 0 ? predicted : unknown_kernel;
        identity[i] = mix(identity[i], shape);
        g_kernel_nodes.fetch_add(1, std::memory_order_relaxed);
        if (predicted != 0) g_kernel_nodes_known.fetch_add(1, std::memory_order_relaxed);
        break;
      }
      case CU_GRAPH_NODE_TYPE_MEMCPY:
      case CU_GRAPH_NODE_TYPE_MEMSET: weight[i] = memory_op; break;
      case CU_GRAPH_NODE_TYPE_GRAPH: weight[i] = budget_ns; break;   // one piece: its own segment
      case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
      case CU_GRAPH_NODE_TYPE_MEM_FREE:
      case CU_GRAPH_NODE_TYPE_CONDITIONAL: *why = Whole::NotCloneable; return nullptr;
      default: weight[i] = 0; break;
    }
  }
  // Dependencies. A programmatic one (the dependent kernel may start before its producer ends) that
  // falls between two segments becomes a full one, which is what stream order gives: the producer
  // has ended by then, and the dependent's wait for it returns at once.
  size_t edges = 0;
  const bool typed = d.graph_get_edges_v2 != nullptr;
  if ((typed ? d.graph_get_edges_v2(graph, nullptr, nullptr, nullptr, &edges)
             : d.graph_get_edges(graph, nullptr, nullptr, &edges)) != CUDA_SUCCESS)
    return nullptr;
  std::vector<CUgraphNode> from(edges), to(edges);
  // (The edges' data is asked for though unused: without it the driver refuses to list an edge that
  // carries some, CUDA_ERROR_LOSSY_QUERY.)
  std::vector<CUgraphEdgeData> data(typed ? edges : 0);
  if (edges != 0 && (typed ? d.graph_get_edges_v2(graph, from.data(), to.data(), data.data(), &edges)
                           : d.graph_get_edges(graph, from.data(), to.data(), &edges)) != CUDA_SUCCESS)
    return nullptr;
  // A topological order, ties broken by the driver's order of the nodes.
  std::vector<size_t> order_index(n);
  std::vector<std::vector<size_t>> after;   // each node's successors (indices into `nodes`)
  {
    std::vector<std::pair<CUgraphNode, size_t>> index(n);
    for (size_t i = 0; i < n; ++i) index[i] = {nodes[i], i};
    std::sort(index.begin(), index.end());
    const auto position = [&](CUgraphNode node) -> size_t {
      auto it = std::lower_bound(index.begin(), index.end(), std::make_pair(node, size_t(0)));
      return it != index.end() && it->first == node ? it->second : SIZE_MAX;
    };
    after.assign(n, {});
    std::vector<size_t> waiting(n, 0);
    for (size_t e = 0; e < edges; ++e) {
      const size_t a = position(from[e]), b = position(to[e]);
      if (a == SIZE_MAX || b == SIZE_MAX) return nullptr;
      after[a].push_back(b);
      ++waiting[b];
    }
    std::vector<size_t> ready, order;
    for (size_t i = n; i-- > 0;)
      if (waiting[i] == 0) ready.push_back(i);
    // `ready` kept sorted descending: the lowest index is taken from the back.
    while (!ready.empty()) {
      const size_t i = ready.back();
      ready.pop_back();
      order.push_back(i);
      for (size_t j : after[i]) {
        if (--waiting[j] != 0) continue;
        ready.insert(std::upper_bound(ready.begin(), ready.end(), j, std::greater<>()), j);
      }
    }
    if (order.size() != n) return nullptr;   // a cycle: the driver would not have instantiated it
    order_index = std::move(order);
  }
  // Consecutive pieces of at most the budget (a heavier node alone), ending where the graph's
  // branches meet when one such place keeps half the budget in the piece (cut_rule.h).
  std::vector<CUgraphNode> original;
  original.reserve(n);
  Cutter c{d, original, {}, {}, {}, {}};
  std::vector<size_t> position_of(n);
  for (size_t k = 0; k < n; ++k) position_of[order_index[k]] = k;
  std::vector<uint64_t> weight_in_order(n);
  std::vector<size_t> succ_last(n, n);
  for (size_t k = 0; k < n; ++k) {
    const size_t i = order_index[k];
    weight_in_order[k] = weight[i];
    original.push_back(nodes[i]);
    if (!after[i].empty()) {
      succ_last[k] = 0;
      for (size_t j : after[i]) succ_last[k] = std::max(succ_last[k], position_of[j]);
    }
  }
  const std::vector<uint32_t> open = open_nodes(succ_last);
  c.cut = choose_cuts(weight_in_order, open, budget_ns);
  const size_t pieces = c.cut.size() - 1;
  uint32_t clean_cuts = 0;
  for (size_t s = 1; s < pieces; ++s) clean_cuts += open[c.cut[s]] == 1;
  if (pieces <= 1) {
    *why = Whole::OnePiece;
    return nullptr;
  }
  auto* plan = new (std::nothrow) Plan;
  if (plan == nullptr) return nullptr;
  plan->flags = flags;
  plan->clean_cuts = clean_cuts;
  plan->segments.assign(pieces, Segment{nullptr, 0, 0});
  bool ok = c.cut_copy(graph);
  if (ok) {
    plan->graphs = c.pieces;
    plan->nodes.reserve(n);
    for (size_t s = 0; s < pieces; ++s)
      for (size_t k = c.cut[s]; k < c.cut[s + 1]; ++k)
        plan->nodes.push_back({original[k], uint32_t(s), c.placed[k], false});
  }
  // The graph's own identity: with a segment's place in it and its nodes, the segment's op ID (the
  // same in every run of the program), and the name of its segments in profiles.
  uint64_t graph_identity = 0xcbf29ce484222325ull;
  for (size_t k = 0; k < n; ++k) graph_identity = mix(graph_identity, identity[order_index[k]]);
  // The segments, instantiated as the program asked (an upload is done when the program asks for one).
  const unsigned long long segment_flags = flags & ~uint64_t(CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD);
  for (size_t s = 0; ok && s < pieces; ++s) {
    uint64_t id = mix(graph_identity, s), predicted = 0;
    for (size_t k = c.cut[s]; k < c.cut[s + 1]; ++k) {
      const size_t i = order_index[k];
      id = mix(id, identity[i]);
      if (identity[i] != uint64_t(CU_GRAPH_NODE_TYPE_EMPTY) + 1) predicted += weight[i];
    }
    plan->segments[s].id = id != 0 ? id : 1;
    plan->segments[s].predicted_ns = predicted;
    char name[96];
    std::snprintf(name, sizeof name, "[graph %08x segment %zu/%zu, %zu nodes]", unsigned(graph_identity >> 32), s + 1,
                  pieces, c.cut[s + 1] - c.cut[s]);
    kernelid::describe_op(plan->segments[s].id, name);
    ok = d.graph_instantiate(&plan->segments[s].exec, plan->graphs[s], segment_flags) == CUDA_SUCCESS;
  }
  ok = ok && d.event_create(&plan->done, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS;
  for (CUevent& e : plan->ahead) ok = ok && d.event_create(&e, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS;
  if (!ok) {
    // What was made goes: the segments' executables, and every graph (split or not).
    for (const Segment& s : plan->segments)
      if (s.exec != nullptr) d.graph_exec_destroy(s.exec);
    for (CUgraph g : c.made) d.graph_destroy(g);
    delete plan;
    return nullptr;
  }
  std::sort(plan->nodes.begin(), plan->nodes.end(),
            [](const Plan::Node& a, const Plan::Node& b) { return a.original < b.original; });
  return plan;
}

void make_plan(KernelPredictor* mode, CUgraphExec exec, CUgraph graph, unsigned long long flags) noexcept {
  const Config& cfg = config();
  if (mode == nullptr || exec == nullptr || !mode->is_job(cfg.priority > 0)) return;
  // 0 once meant "launch whole", which let a job's own setting hold a returning service behind a
  // whole graph: a job's graphs are cut at the default length then.
  const uint64_t segment_us = cfg.graph_segment_us != 0 ? cfg.graph_segment_us : kDefaultSegmentUs;
  Whole why = Whole::Failed;
  Plan* plan = nullptr;
  try {
    plan = cut_graph(mode, graph, flags, segment_us * 1000, &why);
  } catch (...) {   // out of memory: the graph stays whole
    plan = nullptr;
    why = Whole::Failed;
  }
  if (plan == nullptr) {
    left_whole(why);
    return;
  }
  plan->owner = exec;
  plan->states.assign(plan->segments.size(), Plan::SegmentState{});
  if (!insert(exec, plan)) {
    release(plan);
    left_whole(Whole::TableFull);
    return;
  }
  g_segmented.fetch_add(1, std::memory_order_relaxed);
  g_segments.fetch_add(plan->segments.size(), std::memory_order_relaxed);
  g_clean_cuts.fetch_add(plan->clean_cuts, std::memory_order_relaxed);
}

}  // namespace

const char* whole_reason(Whole why) noexcept {
  switch (why) {
    case Whole::OnePiece: return "it fits one segment";
    case Whole::NotCloneable: return "it has memory allocation, free or conditional nodes, which the driver cannot copy";
    case Whole::DeviceLaunch: return "it was instantiated for launches from the device";
    case Whole::Failed: return "making or updating its segments failed";
    case Whole::TableFull: return "too many segmented graphs are alive at once";
    case Whole::kCount: break;
  }
  return "?";
}

Counts counts() noexcept {
  Counts c{};
  c.segmented = g_segmented.load(std::memory_order_relaxed);
  c.segments = g_segments.load(std::memory_order_relaxed);
  for (size_t i = 0; i < size_t(Whole::kCount); ++i) c.whole[i] = g_whole[i].load(std::memory_order_relaxed);
  c.segment_launches = g_segment_launches.load(std::memory_order_relaxed);
  c.clean_cuts = g_clean_cuts.load(std::memory_order_relaxed);
  c.change_ns = g_change_ns.load(std::memory_order_relaxed);
  c.mirrored = g_mirrored.load(std::memory_order_relaxed);
  c.direct = g_direct.load(std::memory_order_relaxed);
  c.updates = g_updates.load(std::memory_order_relaxed);
  c.stale_launches = g_stale_launches.load(std::memory_order_relaxed);
  c.skipped_changes = g_skipped_changes.load(std::memory_order_relaxed);
  c.kernel_nodes = g_kernel_nodes.load(std::memory_order_relaxed);
  c.kernel_nodes_known = g_kernel_nodes_known.load(std::memory_order_relaxed);
  return c;
}

void instantiated(KernelPredictor* mode, CUgraphExec exec, CUgraph graph, unsigned long long flags) noexcept {
  make_plan(mode, exec, graph, flags);
}

void updated(KernelPredictor* mode, CUgraphExec exec, CUgraph graph) noexcept {
  Plan* old = take(exec);
  if (old == nullptr) return;   // it was launched whole; it stays so
  const unsigned long long flags = old->flags;
  release(old);
  make_plan(mode, exec, graph, flags);
}

void destroying(CUgraphExec exec) noexcept { release(take(exec)); }

const Plan* find(CUgraphExec exec) noexcept {
  if (g_live.load(std::memory_order_relaxed) == 0) [[likely]] return nullptr;
  const Slot* s = slot_of(exec);
  return s != nullptr ? s->plan.load(std::memory_order_acquire) : nullptr;
}

namespace {

// The segment's executable updated from its graph (node changes).
CUresult bring_up_to_date(Plan& plan, uint32_t segment) noexcept {
  Plan::SegmentState& st = plan.states[segment];
  if (!st.dirty) return CUDA_SUCCESS;
  const DriverCalls& d = driver_calls();
  CUgraphExecUpdateResultInfo info{};
  const CUresult r = d.graph_exec_update != nullptr
                         ? d.graph_exec_update(plan.segments[segment].exec, plan.graphs[segment], &info)
                         : CUDA_ERROR_NOT_SUPPORTED;
  if (r != CUDA_SUCCESS) return r;
  st.dirty = false;
  --plan.dirty_segments;
  g_updates.fetch_add(1, std::memory_order_relaxed);
  return CUDA_SUCCESS;
}

}  // namespace

bool launching(const Plan& plan, CUstream stream) noexcept {
  Plan& p = const_cast<Plan&>(plan);   // its segments' and ordering state change
  for (uint32_t i = 0, n = uint32_t(p.states.size()); p.dirty_segments != 0 && i < n; ++i) {
    const CUresult r = bring_up_to_date(p, i);
    if (r == CUDA_SUCCESS) continue;
    segment_out_of_step(p.owner, r);   // releases `plan`
    return false;
  }
  const CUstream last = p.last_stream.exchange(stream, std::memory_order_acq_rel);
  if (last != nullptr && last != stream) (void)driver_calls().stream_wait_event(stream, p.done, 0);
  return true;
}

void launched(const Plan& plan, CUstream stream) noexcept {
  (void)driver_calls().event_record(plan.done, stream);
  g_segment_launches.fetch_add(plan.segments.size(), std::memory_order_relaxed);
}

bool wait_for_room(const Plan& plan, uint32_t i, uint64_t max_wait_ns) noexcept {
  if (i < kSegmentsAhead) return true;
  const DriverCalls& d = driver_calls();
  CUevent back = plan.ahead[i % kSegmentsAhead];   // recorded after segment i - kSegmentsAhead
  uint64_t deadline_ns = 0;
  for (uint32_t spins = 0;; ++spins) {
    const CUresult r = d.event_query(back);
    if (r != CUDA_ERROR_NOT_READY) return true;   // done (or unusable: no throttle is no error)
    const uint64_t now = monotonic_ns();
    if (deadline_ns == 0) deadline_ns = now + max_wait_ns;
    if (now >= deadline_ns) {
      log(LogLevel::Debug, "graphs: a segment ran %llu ms without finishing; the rest of this launch is not throttled",
          static_cast<unsigned long long>(max_wait_ns / 1000000));
      return false;
    }
    // A segment lasts tens of microseconds: spin briefly, then let other threads of the program run.
    if (spins >= 64) sched_yield();
  }
}

void queued(const Plan& plan, uint32_t i, CUstream stream) noexcept {
  (void)driver_calls().event_record(plan.ahead[i % kSegmentsAhead], stream);
}

uint32_t segment_count(const Plan& plan) noexcept { return uint32_t(plan.segments.size()); }
const Segment& segment(const Plan& plan, uint32_t i) noexcept { return plan.segments[i]; }

bool node_copy(const Plan& plan, CUgraphNode node, NodeCopy* out) noexcept {
  auto it = std::lower_bound(plan.nodes.begin(), plan.nodes.end(), node,
                             [](const Plan::Node& a, CUgraphNode b) { return a.original < b; });
  if (it == plan.nodes.end() || it->original != node) return false;
  *out = NodeCopy{plan.segments[it->segment].exec, it->copy, it->segment, uint32_t(it - plan.nodes.begin())};
  return true;
}

void set_stale(const Plan& plan, uint32_t index, bool stale) noexcept {
  Plan& p = const_cast<Plan&>(plan);
  Plan::Node& n = p.nodes[index];
  if (stale) g_skipped_changes.fetch_add(1, std::memory_order_relaxed);
  if (n.stale == stale) return;
  n.stale = stale;
  if (stale) ++p.stale_nodes;
  else --p.stale_nodes;
}

bool launches_whole_for_stale_nodes(const Plan& plan) noexcept {
  Plan& p = const_cast<Plan&>(plan);
  if (p.stale_nodes == 0) {
    p.stale_launches = 0;
    return false;
  }
  g_stale_launches.fetch_add(1, std::memory_order_relaxed);
  static std::atomic<bool> warned{false};
  if (++p.stale_launches == 3 && !warned.exchange(true))
    log(LogLevel::Warn, "graphs: nodes of a CUDA graph of this job were changed while it launched whole, and the "
        "program has not set them again since, so the graph still launches whole: a task above it may wait for all "
        "of it (docs/scheduling.md, \"Graphs\")");
  return true;
}

// (Without cuGraphExecUpdate_v2, before CUDA 12.0, a change goes to the executable at once.)
bool defers(const Plan& plan, uint32_t segment) noexcept {
  return !plan.states[segment].direct && driver_calls().graph_exec_update != nullptr;
}

void deferred(const Plan& plan, uint32_t segment) noexcept {
  Plan& p = const_cast<Plan&>(plan);
  Plan::SegmentState& st = p.states[segment];
  if (!st.dirty) {
    st.dirty = true;
    ++p.dirty_segments;
  }
  g_mirrored.fetch_add(1, std::memory_order_relaxed);
}

CUresult goes_direct(const Plan& plan, uint32_t segment) noexcept {
  Plan& p = const_cast<Plan&>(plan);
  const CUresult r = bring_up_to_date(p, segment);
  if (r != CUDA_SUCCESS) return r;
  p.states[segment].direct = true;
  g_direct.fetch_add(1, std::memory_order_relaxed);
  return CUDA_SUCCESS;
}

CUresult mirror_change(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS_v1* params) noexcept {
  if (params == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  CUDA_KERNEL_NODE_PARAMS p{};
  p.func = params->func;
  p.gridDimX = params->gridDimX, p.gridDimY = params->gridDimY, p.gridDimZ = params->gridDimZ;
  p.blockDimX = params->blockDimX, p.blockDimY = params->blockDimY, p.blockDimZ = params->blockDimZ;
  p.sharedMemBytes = params->sharedMemBytes;
  p.kernelParams = params->kernelParams;
  p.extra = params->extra;
  return mirror_change(node, &p);
}

CUresult mirror_change(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS* params) noexcept {
  const DriverCalls& d = driver_calls();
  return d.graph_kernel_node_set_params != nullptr ? d.graph_kernel_node_set_params(node, params)
                                                   : CUDA_ERROR_NOT_SUPPORTED;
}

// (The context of a copy or set in a graph is the one it was made in; an executable's change that
// names another goes to the executable.)
static bool same_context(CUcontext context) noexcept {
  return context == nullptr || context_key(context) == current_context_key();
}

CUresult mirror_change(CUgraphNode node, const CUDA_MEMCPY3D* params, CUcontext context) noexcept {
  const DriverCalls& d = driver_calls();
  if (d.graph_memcpy_node_set_params == nullptr || !same_context(context)) return CUDA_ERROR_NOT_SUPPORTED;
  return d.graph_memcpy_node_set_params(node, params);
}

CUresult mirror_change(CUgraphNode node, const CUDA_MEMSET_NODE_PARAMS* params, CUcontext context) noexcept {
  const DriverCalls& d = driver_calls();
  if (d.graph_memset_node_set_params == nullptr || !same_context(context)) return CUDA_ERROR_NOT_SUPPORTED;
  return d.graph_memset_node_set_params(node, params);
}

CUresult mirror_change(CUgraphNode node, const CUDA_HOST_NODE_PARAMS* params) noexcept {
  const DriverCalls& d = driver_calls();
  return d.graph_host_node_set_params != nullptr ? d.graph_host_node_set_params(node, params) : CUDA_ERROR_NOT_SUPPORTED;
}

CUresult mirror_change(CUgraphNode node, CUgraphNodeParams* params) noexcept {
  const DriverCalls& d = driver_calls();
  if (params == nullptr || d.graph_node_set_params == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  // (Not a child graph: set in a graph node it is copied whole, about 2 us against 0.4 us in the
  // executable.)
  switch (params->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
    case CU_GRAPH_NODE_TYPE_MEMCPY:
    case CU_GRAPH_NODE_TYPE_MEMSET:
    case CU_GRAPH_NODE_TYPE_HOST: return d.graph_node_set_params(node, params);
    default: return CUDA_ERROR_NOT_SUPPORTED;
  }
}

void add_change_time(uint64_t ns) noexcept { g_change_ns.fetch_add(ns, std::memory_order_relaxed); }

void segment_out_of_step(CUgraphExec exec, CUresult result) noexcept {
  log(LogLevel::Debug, "graphs: a change to a node failed in its segment (CUresult %d)", int(result));
  release(take(exec));
  g_segmented.fetch_sub(1, std::memory_order_relaxed);
  left_whole(Whole::Failed);
}

}  // namespace fikit::hook::graph
