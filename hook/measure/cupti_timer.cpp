// CUPTI timing: kernel, memcpy and memset activity records carry exact GPU start/end timestamps.
// libcupti is loaded at run time (only in measure mode), its functions reached through the C
// library's dlsym. Records are tied to the hook's ops by order per stream (record_matcher.h): the
// launching thread only notes CUPTI's (context id, stream id) of the op's stream, from a per-thread
// cache (one CUPTI call per new stream and thread), and no CUPTI call at all in steady state.
// CUPTI's delivering thread only hands records over; they are matched, under a mutex, when a flush
// of the measurement thread's returns (consume()).
//
// If no op has been matched 2 s after the first flush, CUPTI timing is abandoned for the rest of
// the process and the ops from then on are timed with events (one warning).
#include <cupti.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "../clock.h"
#include "../driver.h"
#include "../log.h"
#include "kernelid.h"
#include "cupti_api.h"
#include "record_matcher.h"
#include "timer.h"

namespace fikit::hook::measure {
namespace {

constexpr size_t kBufferBytes = 1u << 20;   // ~4000 kernel records: delivered well before the ring (65536) fills
constexpr uint64_t kFlushAfterMs = 50;
constexpr size_t kMaxHeldRecords = 1u << 16;   // records delivered and held between two flushes of ours
constexpr uint64_t kFallbackAfterMs = 2000;   // after the first flush, with nothing matched
constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                          CUPTI_ACTIVITY_KIND_MEMSET};

using hook::monotonic_ms;
using hook::monotonic_ns;
inline uint64_t now_ms() { return monotonic_ms(); }


using CtxGetCurrentFn = CUresult (*)(CUcontext*);
using StreamGetCtxFn = CUresult (*)(CUstream, CUcontext*);

// Per launching thread: CUPTI's ids of the streams it launched on lately. The default streams
// (legacy, per-thread) are per context, so their entries are keyed by the current context too.
struct StreamIds {
  CUcontext context;   // nullptr for an explicit stream (its handle is unique)
  CUstream stream;
  uint32_t context_id, stream_id;
};
constexpr int kStreamCache = 8;
thread_local StreamIds t_streams[kStreamCache] __attribute__((tls_model("initial-exec")));
thread_local unsigned t_streams_next __attribute__((tls_model("initial-exec"))) = 0;

bool default_stream(CUstream s) { return s == nullptr || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD; }

class CuptiTimer;
CuptiTimer* g_timer = nullptr;   // CUPTI's buffer callbacks carry no user pointer

class CuptiTimer final : public Timer {
 public:
  CuptiTimer(OpRing& ring, const CuptiApi& api, CtxGetCurrentFn ctx_current, StreamGetCtxFn stream_ctx)
      : ring_(ring), api_(api), ctx_current_(ctx_current), stream_ctx_(stream_ctx) {}

  const char* name() const noexcept override { return "cupti"; }

  void before(OpSlot& slot, uint64_t seq, const LaunchInfo& op) noexcept override {
    if (Timer* ev = events_.load(std::memory_order_acquire)) {
      slot.via_events = true;
      ev->before(slot, seq, op);
      return;
    }
    slot.via_events = false;
    slot.gpu_state.store(GpuState::Pending, std::memory_order_relaxed);
    slot.timed = stream_ids(op.stream, slot.cupti_context, slot.cupti_stream);
    for (int i = 0; i < 3; ++i) {
      slot.grid[i] = op.grid[i];
      slot.block[i] = op.block[i];
    }
    slot.bytes = op.bytes;
  }

  void after(OpSlot& slot, uint64_t seq, const LaunchInfo& op, bool launched) noexcept override {
    if (slot.via_events) {
      events_.load(std::memory_order_acquire)->after(slot, seq, op, launched);
      return;
    }
    slot.timed = slot.timed && launched;
  }

  Poll poll(OpSlot& slot, uint64_t seq, TimedOp& timing) noexcept override {
    polled_.store(seq, std::memory_order_release);   // ops below are decided
    if (slot.via_events) return events_.load(std::memory_order_acquire)->poll(slot, seq, timing);
    if (!slot.timed || fallen_back_) return Poll::Lost;
    GpuState state = slot.gpu_state.load(std::memory_order_acquire);
    // Pending: see what the matcher has. Now and then anyway, so that slots are given back.
    if (state == GpuState::Pending || seq % 256 == 0) {
      {
        std::lock_guard guard(mutex_);
        ingest();
        apply();
      }
      state = slot.gpu_state.load(std::memory_order_acquire);
    }
    if (state == GpuState::Timed) {
      timing.start_ns = slot.gpu_start.load(std::memory_order_relaxed);
      timing.end_ns = std::max(slot.gpu_end.load(std::memory_order_relaxed), timing.start_ns);
      ever_timed_ = true;
      return Poll::Ready;
    }
    if (state == GpuState::Lost) return Poll::Lost;
    if (!ever_timed_ && first_flush_ms_ && now_ms() - first_flush_ms_ >= kFallbackAfterMs) {
      fall_back();
      if (fallen_back_) return Poll::Lost;
    }
    return Poll::Pending;
  }

  uint64_t oldest_needed(uint64_t next) const noexcept override {
    // Slots the matcher may still read (not yet offered to it) or write (not yet retired in it)
    // stay ours.
    uint64_t oldest = std::min({next, ingested_.load(std::memory_order_acquire),
                                retired_.load(std::memory_order_acquire)});
    if (Timer* ev = events_.load(std::memory_order_acquire)) oldest = std::min(oldest, ev->oldest_needed(next));
    return oldest;
  }

  uint64_t give_up_ms() const noexcept override { return fallen_back_ ? 0 : 3000; }
  uint64_t flush_after_ms() const noexcept override { return kFlushAfterMs; }

  void flush() noexcept override {
    if (fallen_back_) return;
    if (!first_flush_ms_) first_flush_ms_ = now_ms();
    api_.flush_all(0);   // completed records only; a forced flush would cut records in progress
    std::lock_guard guard(mutex_);
    match_held();
    matcher_.settle(results_);
    apply();
  }

  bool drain() noexcept override {
    if (fallen_back_) return false;
    if (!first_flush_ms_) first_flush_ms_ = now_ms();
    // Synchronous: the buffer callbacks have run when it returns. Forced only while no activity
    // is collected, and collection stays off until it returns: a forced flush hands over the
    // buffer in use, and CUPTI, recording a launch on another thread meanwhile, wrote into it after
    // it was ours (a crash inside libcupti, on the H100, when the next measured iteration began
    // during a drain). A launching thread starting a measured iteration waits for it (< 1 ms).
    const uint64_t t0 = monotonic_ns();
    {
      std::lock_guard collecting(collecting_mutex_);
      if (collecting_) {
        api_.flush_all(0);
        ++drains_unforced_;
      } else {
        api_.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
      }
      ++drains_;
      drain_ns_ += monotonic_ns() - t0;
    }
    std::lock_guard guard(mutex_);
    match_held();
    matcher_.settle(results_, /*all_done=*/true);   // a graph launch's last node came with this flush
    apply();
    return ever_timed_;   // before CUPTI has ever matched an op, the fallback decides instead
  }

  // After a host synchronisation (not a launch path): serialised, and only on a change.
  void set_collecting(bool on) noexcept override {
    std::lock_guard guard(collecting_mutex_);
    if (on == collecting_ || stopped_) return;
    const uint64_t t0 = monotonic_ns();
    for (auto kind : kKinds) on ? api_.enable(kind) : api_.disable(kind);
    collecting_ = on;
    // What the program's thread pays for it (logged at exit with FIKIT_LOG_LEVEL=info).
    const uint64_t took = monotonic_ns() - t0;
    ++toggles_;
    toggle_ns_ += took;
    toggle_max_ns_ = std::max(toggle_max_ns_, took);
  }

  bool take_graph_nodes(uint64_t seq, uint64_t graph_op, std::vector<GraphNodeTime>& out) noexcept override {
    out.clear();
    std::lock_guard guard(mutex_);
    auto it = graph_nodes_.find(seq);
    if (it == graph_nodes_.end()) return false;
    try {
      for (const NodeTiming& n : it->second) {
        GraphNodeTime t;
        t.start_ns = n.start, t.end_ns = n.end;
        std::copy(n.grid, n.grid + 3, t.grid.begin());
        std::copy(n.block, n.block + 3, t.block.begin());
        t.shared_mem = n.shared_mem;
        const RecordName* name = record_name(n.name);
        t.name = name ? std::string_view(name->readable) : std::string_view("?");
        t.id = kernelid::graph_node_id(graph_op, kernelid::shape_id_of(t.name, n.grid, n.block, n.shared_mem));
        out.push_back(t);
      }
    } catch (const std::bad_alloc&) {
      out.clear();
    }
    graph_nodes_.erase(it);
    return !out.empty();
  }

  bool times_with_events() const noexcept override { return events_.load(std::memory_order_acquire) != nullptr; }
  void forget_context(uint64_t context_key, bool destroy) noexcept override {
    if (Timer* ev = events_.load(std::memory_order_acquire)) ev->forget_context(context_key, destroy);
  }

  void stop() noexcept override {
    if (Timer* ev = events_.load(std::memory_order_acquire)) ev->stop();
    {
      std::lock_guard guard(collecting_mutex_);
      stopped_ = true;
      collecting_ = false;
    }
    for (auto kind : kKinds) api_.disable(kind);
    api_.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    std::lock_guard guard(mutex_);
    match_held();
  }

  void run_stored(uint64_t run, uint64_t ops, uint64_t timed) noexcept override {
    MatchCounters c;
    {
      std::lock_guard guard(mutex_);
      c = matcher_.counters();
    }
    const bool warn = timed == 0 && !fallen_back_;
    if (!warn && !log_enabled(LogLevel::Info)) return;
    char line[640];
    describe(c, line, sizeof line);
    log(warn ? LogLevel::Warn : LogLevel::Info, "measure: cupti: run %" PRIu64 " stored, %" PRIu64 " of %" PRIu64
        " ops timed%s; since start %s", run, timed, ops, fallen_back_ ? " (by events since the fallback)" : "", line);
  }

  void finished() noexcept override {
    if (Timer* ev = events_.load(std::memory_order_acquire)) ev->finished();
    MatchCounters c;
    {
      std::lock_guard guard(mutex_);
      c = matcher_.counters();
    }
    if (c.ops_timed != 0 && !log_enabled(LogLevel::Info)) return;
    char line[640];
    describe(c, line, sizeof line);
    log(c.ops_timed == 0 ? LogLevel::Warn : LogLevel::Info, "measure: cupti: at exit: %s", line);
    std::vector<Mismatch> mismatches;
    std::vector<Expired> expired;
    {
      std::lock_guard guard(mutex_);
      mismatches = matcher_.mismatches();
      expired = matcher_.expired();
    }
    for (const Mismatch& m : mismatches) {
      const kernelid::Description* d = kernelid::describe(m.op_kernel_id);
      char elsewhere[64] = "";
      if (m.fits_elsewhere)
        std::snprintf(elsewhere, sizeof elsewhere, "; it fits an op waiting on context %u stream %u",
                      m.elsewhere_context, m.elsewhere_stream);
      log(LogLevel::Info, "measure: cupti: a record of %.60s grid %u,%u,%u block %u,%u,%u (context %u stream %u) "
          "fitted none of the %" PRIu64 " launches waiting there, the oldest %.60s grid %u,%u,%u block %u,%u,%u%s",
          m.record_name, m.record_grid[0], m.record_grid[1], m.record_grid[2], m.record_block[0], m.record_block[1],
          m.record_block[2], m.record_context, m.record_stream, m.ops_waiting, d ? d->name.c_str() : "?",
          m.op_grid[0], m.op_grid[1], m.op_grid[2], m.op_block[0], m.op_block[1], m.op_block[2], elsewhere);
    }
    for (const Expired& e : expired) {
      const kernelid::Description* d = kernelid::describe(e.kernel_id);
      log(LogLevel::Info, "measure: cupti: no record came for a launch of %.60s grid %u,%u,%u block %u,%u,%u "
          "(context %u stream %u)", d ? d->name.c_str() : "?", e.grid[0], e.grid[1], e.grid[2], e.block[0],
          e.block[1], e.block[2], e.context, e.stream);
    }
    std::lock_guard guard(collecting_mutex_);
    log(LogLevel::Info,
        "measure: cupti: %" PRIu64 " switches on or off (mean %.1f us, max %.1f us on the program's thread), "
        "%" PRIu64 " drains (mean %.1f us; %" PRIu64 " with collection on: not forced)",
        toggles_, toggles_ ? toggle_ns_ / 1e3 / toggles_ : 0.0, toggle_max_ns_ / 1e3, drains_,
        drains_ ? drain_ns_ / 1e3 / drains_ : 0.0, drains_unforced_);
  }

  bool start(char* why, size_t why_len) noexcept {
    g_timer = this;
    CUptiResult r = api_.register_callbacks(&buffer_requested, &buffer_completed);
    for (size_t i = 0; r == CUPTI_SUCCESS && i < std::size(kKinds); ++i) r = api_.enable(kKinds[i]);
    if (r == CUPTI_SUCCESS) return true;
    const char* msg = "unknown error";
    api_.result_string(r, &msg);
    std::snprintf(why, why_len, "enabling activity records failed: %s", msg);
    for (auto kind : kKinds) api_.disable(kind);
    return false;
  }

 private:
  static void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    // CUPTI's thread, not the launching one: allocating here is fine.
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
    *size = *buffer ? kBufferBytes : 0;
    *max_records = 0;
  }

  static void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
    if (g_timer && buffer) g_timer->consume(buffer, valid);
    std::free(buffer);
  }

  // Launching thread: CUPTI's ids of the op's stream; false when CUPTI does not know it.
  bool stream_ids(CUstream stream, uint32_t& context_id, uint32_t& stream_id) noexcept {
    CUcontext ctx = nullptr;
    if (default_stream(stream) && (!ctx_current_ || ctx_current_(&ctx) != CUDA_SUCCESS || !ctx)) return false;
    for (const StreamIds& e : t_streams) {
      if (e.stream == stream && e.context == ctx) {   // an empty entry never matches: no stream or no context
        context_id = e.context_id;
        stream_id = e.stream_id;
        return true;
      }
    }
    // Slow path, once per new stream on this thread.
    CUcontext owner = ctx;   // an explicit stream's own context, else the current one
    if (!owner && (!stream_ctx_ || stream_ctx_(stream, &owner) != CUDA_SUCCESS || !owner) &&
        ctx_current_(&owner) != CUDA_SUCCESS)
      owner = nullptr;
    uint32_t cid = 0, sid = 0;
    if (!owner || api_.context_id(owner, &cid) != CUPTI_SUCCESS) return false;
    CUptiResult r = CUPTI_ERROR_UNKNOWN;
    if (default_stream(stream)) {
      // The default stream of the context: the per-thread one (the calling thread's) or the legacy one.
      const uint8_t per_thread = stream == CU_STREAM_PER_THREAD;
      if (api_.stream_id_ex) r = api_.stream_id_ex(owner, nullptr, per_thread, &sid);
      if (r != CUPTI_SUCCESS && api_.stream_id_ex) r = api_.stream_id_ex(owner, stream, per_thread, &sid);
      if (r != CUPTI_SUCCESS && !per_thread && api_.stream_id) r = api_.stream_id(owner, nullptr, &sid);
    } else {
      if (api_.stream_id_ex) r = api_.stream_id_ex(owner, stream, 0, &sid);
      if (r != CUPTI_SUCCESS && api_.stream_id) r = api_.stream_id(owner, stream, &sid);
    }
    if (r != CUPTI_SUCCESS) return false;
    StreamIds& e = t_streams[t_streams_next++ % kStreamCache];
    e = {ctx, stream, cid, sid};
    context_id = cid;
    stream_id = sid;
    return true;
  }

  // Under mutex_: forget the ops the measurement thread has decided, and offer the matcher every
  // op published since the last time, in sequence order.
  void ingest() noexcept {
    const uint64_t polled = polled_.load(std::memory_order_acquire);
    matcher_.retire_below(polled);   // from now on no result of an op below reaches its slot
    graph_nodes_.erase(graph_nodes_.begin(), graph_nodes_.lower_bound(polled));   // not taken: lost ops
    uint64_t s = std::max(ingested_.load(std::memory_order_relaxed), polled);
    const uint64_t claimed = ring_.claimed();
    try {
      for (; s < claimed; ++s) {
        OpSlot* slot = ring_.published(s);
        if (!slot) break;
        if (slot->via_events || !slot->timed) continue;
        MatchOp op;
        op.seq = s;
        op.context = slot->cupti_context;
        op.stream = slot->cupti_stream;
        switch (slot->kind) {
          case OpKind::Kernel: op.cls = OpClass::Kernel; break;
          case OpKind::Graph: op.cls = OpClass::Graph; break;
          case OpKind::Memset: op.cls = OpClass::Memset; break;
          default: op.cls = OpClass::Memcpy; break;
        }
        std::copy(slot->grid, slot->grid + 3, op.grid);
        std::copy(slot->block, slot->block + 3, op.block);
        op.bytes = slot->bytes;
        op.kernel_id = slot->kernel_id;
        if (op.cls == OpClass::Kernel) op.name = op_name_hash(slot->kernel_id);
        matcher_.add_op(op, results_);
      }
      matcher_.ingested_below(s, results_);
    } catch (const std::bad_alloc&) {
      // Out of memory: the ops not offered go untimed (given up), nothing worse.
    }
    ingested_.store(s, std::memory_order_release);
    retired_.store(polled, std::memory_order_release);
  }

  // Under mutex_: names, hashed once per kernel ID and per CUPTI name (records of one kernel share
  // their name pointer). May throw bad_alloc, as the matcher may.
  uint64_t op_name_hash(uint64_t kernel_id) {
    if (auto it = op_names_.find(kernel_id); it != op_names_.end()) return it->second;
    const kernelid::Description* d = kernelid::describe(kernel_id);
    const uint64_t h = d ? kernelid::readable_name_hash(d->name) : 0;
    op_names_.emplace(kernel_id, h);
    return h;
  }
  // Under mutex_: CUPTI's name of a kernel, demangled once per name (records of one kernel share
  // the pointer): its readable form (graph kernels) and that form's hash (matching).
  struct RecordName {
    std::string readable;
    uint64_t hash;
  };
  const RecordName* record_name(const char* name) {
    if (!name) return nullptr;
    auto it = record_names_.find(name);
    if (it == record_names_.end()) {
      std::string readable = kernelid::readable_name(name);
      const uint64_t hash = kernelid::readable_name_hash(readable);
      it = record_names_.emplace(name, RecordName{std::move(readable), hash}).first;
    }
    return &it->second;
  }

  // Under mutex_: hand the matcher's results to the ops' slots (a graph op's kernel nodes wait in
  // graph_nodes_ for take_graph_nodes()).
  void apply() noexcept {
    for (MatchResult& r : results_) {
      OpSlot& slot = ring_.at(r.seq);
      if (slot.published.load(std::memory_order_acquire) != r.seq + 1) continue;
      if (r.timed && !r.nodes.empty()) {
        try {
          graph_nodes_[r.seq] = std::move(r.nodes);
        } catch (const std::bad_alloc&) {
        }
      }
      slot.gpu_start.store(r.start, std::memory_order_relaxed);
      slot.gpu_end.store(r.end, std::memory_order_relaxed);
      slot.gpu_state.store(r.timed ? GpuState::Timed : GpuState::Lost, std::memory_order_release);
    }
    results_.clear();
  }

  // Records are held until a flush of ours returns, then matched all together, in start order:
  // CUPTI may keep a buffer per launching thread, and the buffers of one flush (or ones it
  // delivered on its own since) arrive one by one. PyTorch's autograd thread launches the backward
  // pass, the main thread the forward pass and the optimizer, on one stream: matched buffer by
  // buffer, the optimizer's records came while hundreds of backward launches still waited for
  // theirs (on an H100: 1-4 % of every training iteration's ops untimed).
  void consume(uint8_t* buffer, size_t valid) noexcept {
    std::lock_guard guard(mutex_);   // CUPTI's thread or a flushing one; never a launching thread
    try {
      CUpti_Activity* rec = nullptr;
      while (api_.next_record(buffer, valid, &rec) == CUPTI_SUCCESS) {
        MatchRecord m;
        switch (rec->kind) {
          case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
          case CUPTI_ACTIVITY_KIND_KERNEL: {
            const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
            m.cls = OpClass::Kernel;
            m.context = k->contextId, m.stream = k->streamId;
            m.start = k->start, m.end = k->end;
            m.grid[0] = static_cast<uint32_t>(k->gridX), m.grid[1] = static_cast<uint32_t>(k->gridY);
            m.grid[2] = static_cast<uint32_t>(k->gridZ);
            m.block[0] = static_cast<uint32_t>(k->blockX), m.block[1] = static_cast<uint32_t>(k->blockY);
            m.block[2] = static_cast<uint32_t>(k->blockZ);
            m.graph_id = k->graphId, m.graph_node = k->graphNodeId;
            m.name = k->name;
            const RecordName* name = record_name(k->name);
            m.name_hash = name ? name->hash : 0;
            m.shared_mem = k->dynamicSharedMemory > 0 ? uint32_t(k->dynamicSharedMemory) : 0;
            break;
          }
          case CUPTI_ACTIVITY_KIND_MEMCPY: {
            const auto* c = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
            m.cls = OpClass::Memcpy;
            m.context = c->contextId, m.stream = c->streamId;
            m.start = c->start, m.end = c->end, m.bytes = c->bytes;
            m.graph_id = c->graphId, m.graph_node = c->graphNodeId;
            break;
          }
          case CUPTI_ACTIVITY_KIND_MEMSET: {
            const auto* s = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
            m.cls = OpClass::Memset;
            m.context = s->contextId, m.stream = s->streamId;
            m.start = s->start, m.end = s->end, m.bytes = s->bytes;
            m.graph_id = s->graphId, m.graph_node = s->graphNodeId;
            break;
          }
          default: continue;
        }
        held_.push_back(m);
      }
      // Bounded: past this many (no flush of ours for a long while), match what is held now.
      if (held_.size() >= kMaxHeldRecords) match_held();
    } catch (const std::bad_alloc&) {
    }
  }

  // Under mutex_: matches the records held. Every op whose record is held was claimed before now
  // (a later count only makes a record wait longer for an op not yet offered).
  void match_held() noexcept {
    try {
      ingest();
      matcher_.add_records(held_, ring_.claimed(), results_);
    } catch (const std::bad_alloc&) {
    }
    held_.clear();
    apply();
  }

  // Measurement thread: CUPTI matched nothing; time the rest with events.
  void fall_back() noexcept {
    Timer* ev = make_event_timer(ring_);
    if (!ev) {
      first_flush_ms_ = now_ms();   // try again later; CUPTI stays on
      return;
    }
    MatchCounters c;
    {
      std::lock_guard guard(mutex_);
      c = matcher_.counters();
    }
    char line[640];
    describe(c, line, sizeof line);
    log(LogLevel::Warn, "measure: CUPTI timed no op %" PRIu64 " ms after the first flush (%s); timing with CUDA "
        "events from now on", kFallbackAfterMs, line);
    fallen_back_ = true;
    events_.store(ev, std::memory_order_release);
    for (auto kind : kKinds) api_.disable(kind);
  }

  static void describe(const MatchCounters& c, char* out, size_t len) {
    static constexpr const char* kNames[kOpClasses] = {"kernel", "memcpy", "memset", "graph"};
    size_t n = 0;
    const auto put = [&](const char* fmt, auto... args) {
      if (n < len) n += static_cast<size_t>(std::snprintf(out + n, len - n, fmt, args...));
    };
    put("records received/matched/unmatched:");
    for (int i = 0; i < kOpClasses; ++i)
      put(" %s %" PRIu64 "/%" PRIu64 "/%" PRIu64, kNames[i], c.received[i], c.matched[i], c.unmatched[i]);
    put(", incomplete %" PRIu64 ", matched past a waiting op %" PRIu64 ", skipped but fitting an op of another "
        "stream %" PRIu64 "; ops queued %" PRIu64 " timed %" PRIu64 " lost %" PRIu64 " expired %" PRIu64,
        c.incomplete, c.matched_ahead, c.unmatched_fit_elsewhere, c.ops_queued, c.ops_timed, c.ops_lost,
        c.ops_expired);
  }

  OpRing& ring_;
  CuptiApi api_;
  CtxGetCurrentFn ctx_current_;
  StreamGetCtxFn stream_ctx_;
  std::atomic<Timer*> events_{nullptr};        // set once, at the fallback
  std::atomic<uint64_t> ingested_{0};          // ops below were offered to the matcher
  std::atomic<uint64_t> polled_{0};            // the op being polled: ops below are decided
  std::atomic<uint64_t> retired_{0};           // ops below are retired in the matcher

  // Under mutex_.
  std::mutex mutex_;
  RecordMatcher matcher_;
  std::vector<MatchRecord> held_;   // delivered, not yet matched (consume())
  std::vector<MatchResult> results_;
  std::unordered_map<uint64_t, uint64_t> op_names_;          // kernel ID -> name hash
  std::unordered_map<const char*, RecordName> record_names_;   // CUPTI's name -> its forms (nodes: stable)
  std::map<uint64_t, std::vector<NodeTiming>> graph_nodes_;   // graph op seq -> its kernel nodes, not yet taken

  // Sampled measurement: CUPTI collects only during measured iterations (set_collecting).
  std::mutex collecting_mutex_;
  bool collecting_ = true;
  bool stopped_ = false;
  uint64_t toggles_ = 0, toggle_ns_ = 0, toggle_max_ns_ = 0;   // under collecting_mutex_
  uint64_t drains_ = 0, drain_ns_ = 0, drains_unforced_ = 0;   // under collecting_mutex_

  // Measurement thread only.
  bool fallen_back_ = false;
  bool ever_timed_ = false;
  uint64_t first_flush_ms_ = 0;
};

}  // namespace

Timer* make_cupti_timer(OpRing& ring, char* why, size_t why_len) noexcept {
  CuptiApi api{};
  if (!load_cupti(api, why, why_len)) return nullptr;
  auto ctx_current = driver_calls().ctx_get_current;
  auto stream_ctx = driver_calls().stream_get_ctx;
  if (!ctx_current) {   // cuStreamGetCtx is optional (the current context stands in)
    std::snprintf(why, why_len, "the driver lacks cuCtxGetCurrent");
    return nullptr;
  }
  auto* timer = new (std::nothrow) CuptiTimer(ring, api, ctx_current, stream_ctx);
  if (!timer) return nullptr;
  if (!timer->start(why, why_len)) {
    g_timer = nullptr;
    delete timer;
    return nullptr;
  }
  return timer;
}

}  // namespace fikit::hook::measure
