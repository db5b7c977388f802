#include "timeline.h"

#include <algorithm>

namespace fikit::simgpu {
namespace {

constexpr uint64_t kNever = UINT64_MAX;

bool live(const CtxSlot& s) { return s.state == SlotState::Live; }
const Op& head_op(const CtxSlot& s) { return s.ring[s.head % kRingOps]; }
bool has_pending(const CtxSlot& s) { return live(s) && s.head < s.tail; }

// Event markers never occupy the device: one at the head of an idle context completes when the
// op before it did, or when it was submitted if the context had nothing in flight.
void complete_event_markers(CtxSlot& s) {
  while (!s.running && has_pending(s) && head_op(s).kind == OpKind::EventMarker) {
    const Op& op = head_op(s);
    const uint64_t t = std::max(op.submit_ns, s.last_end_ns);
    if (op.event < kMaxEvents && s.events[op.event].seq == s.head) s.events[op.event].time_ns = t;
    s.last_end_ns = t;
    ++s.head;
  }
}

// The head op of a context that could start at `t` (submitted by then, not a marker).
bool startable(const CtxSlot& s, uint32_t device, uint64_t t) {
  return live(s) && s.device == device && !s.running && s.head < s.tail &&
         head_op(s).kind != OpKind::EventMarker && head_op(s).submit_ns <= t;
}

// MPS: an op whose predecessor in its context ended less than kMpsDependencyNs ago: the blocks
// other contexts have waiting are placed before it.
bool fresh(const CtxSlot& s, uint64_t t) {
  return !s.running && s.stats.ops_done != 0 && s.last_end_ns + kMpsDependencyNs > t && head_op(s).submit_ns <= s.last_end_ns;
}

// The head op of context `i` goes on the device at `exec_start` (its wait counted from when it was
// ready). Time-slice: it runs to run_end_ns. MPS: its blocks are placed by place_blocks().
void start(DeviceState& st, int i, uint64_t exec_start) {
  CtxSlot& s = st.ctx[i];
  DeviceSim& d = st.dev[s.device];
  const Op& op = head_op(s);
  const bool resumed = s.left_ns != 0;   // preempted before: its wait was counted at its first start
  const uint64_t ready = std::max(op.submit_ns, s.last_end_ns);
  const uint64_t wait = exec_start > ready && !resumed ? exec_start - ready : 0;
  s.stats.wait_ns += wait;
  s.stats.max_wait_ns = std::max(s.stats.max_wait_ns, wait);
  s.running = 1;
  s.running_threads = 0;
  s.run_end_ns = s.op_end_ns = exec_start + (resumed ? s.left_ns : op.duration_ns);
  s.left_ns = 0;
  s.batch_count = 0;
  if (st.sharing == Sharing::Mps) {
    // Blocks of at most the device, as many as the op's threads make; the time of one block is the
    // op's alone-time over the waves it takes alone.
    const uint64_t threads = std::min<uint64_t>(op.threads, kDeviceThreads * 1024ull);
    const uint64_t per_block = std::clamp<uint64_t>(op.block_threads != 0 ? op.block_threads : threads, 1, kDeviceThreads);
    const uint64_t blocks = threads == 0 ? 1 : (threads + per_block - 1) / per_block;
    const uint64_t per_wave = std::max<uint64_t>(1, kDeviceThreads / per_block);
    const uint64_t waves = (blocks + per_wave - 1) / per_wave;
    s.blocks_left = uint32_t(blocks);
    s.block_threads = threads == 0 ? 0 : uint32_t(per_block);
    s.block_ns = op.duration_ns / waves;
    s.op_end_ns = exec_start;
  }
  ++d.running_count;
  if (resumed) return;
  d.busy_ns += op.duration_ns;
  ++d.ops_run;
}

// MPS: places as many of the running op's remaining blocks as the free threads hold, as one batch
// ending a block's time from `t`. Returns how many it placed.
uint32_t place_blocks(DeviceState& st, CtxSlot& s, uint64_t t) {
  DeviceSim& d = st.dev[s.device];
  if (s.blocks_left == 0 || s.batch_count >= kMaxBatches) return 0;
  const uint64_t fit = s.block_threads == 0 ? s.blocks_left : std::min<uint64_t>(s.blocks_left, d.free_threads / s.block_threads);
  if (fit == 0) return 0;
  const uint32_t threads = uint32_t(fit * s.block_threads);
  s.batches[s.batch_count++] = Batch{t + s.block_ns, threads};
  s.blocks_left -= uint32_t(fit);
  s.running_threads += threads;
  d.free_threads -= threads;
  s.op_end_ns = std::max(s.op_end_ns, t + s.block_ns);
  s.run_end_ns = std::min(s.run_end_ns, t + s.block_ns);
  return uint32_t(fit);
}

void finish(DeviceState& st, CtxSlot& s) {
  DeviceSim& d = st.dev[s.device];
  d.free_threads += s.running_threads;
  --d.running_count;
  s.running = 0;
  s.running_threads = 0;
  s.batch_count = 0;
  s.blocks_left = 0;
  if (!live(s)) return;   // released while its op ran: the op is gone with it
  s.stats.busy_ns += head_op(s).duration_ns;
  ++s.stats.ops_done;
  s.last_end_ns = st.sharing == Sharing::Mps ? s.op_end_ns : s.run_end_ns;
  ++s.head;
  complete_event_markers(s);
}

// MPS: batches that ended by `t` give their threads back; an op whose blocks are all placed and
// ended is done.
void retire_batches(DeviceState& st, CtxSlot& s, uint64_t t) {
  DeviceSim& d = st.dev[s.device];
  if (!live(s)) s.blocks_left = 0;   // released: its blocks on the device end, the rest are gone
  uint32_t kept = 0;
  uint64_t next = UINT64_MAX;
  for (uint32_t b = 0; b < s.batch_count; ++b) {
    if (s.batches[b].end_ns <= t) {
      d.free_threads += s.batches[b].threads;
      s.running_threads -= std::min(s.running_threads, s.batches[b].threads);
    } else {
      next = std::min(next, s.batches[b].end_ns);
      s.batches[kept++] = s.batches[b];
    }
  }
  s.batch_count = kept;
  s.run_end_ns = next;
  if (kept == 0 && s.blocks_left == 0) finish(st, s);
}

// Time-slice: the end of the resident context's slice that is current at `t` (its slices follow
// each other from when it got the device; kNever: it has none).
uint64_t slice_end(const DeviceSim& d, const CtxSlot& s, uint64_t t) {
  if (s.slice_ns == 0) return kNever;
  const uint64_t since = std::min(d.resident_since_ns, t);
  return since + ((t - since) / s.slice_ns + 1) * s.slice_ns;
}

// Time-slice: whether a context other than the resident one has an op submitted by `t`.
bool other_waits(const DeviceState& st, uint32_t device, int resident, uint64_t t) {
  for (int i = 0; i < kMaxContexts; ++i)
    if (i != resident && startable(st.ctx[i], device, t)) return true;
  return false;
}

// Time-slice: when the device is free, the resident context goes on if it has a slice of its own;
// otherwise the next context round-robin after it
// starts its head op, after a switch if it is another context.
void dispatch_time_slice(DeviceState& st, uint32_t device, uint64_t t) {
  DeviceSim& d = st.dev[device];
  if (d.running_count > 0) return;
  if (d.resident >= 0) {
    const CtxSlot& r = st.ctx[d.resident];
    // Its slice goes on (preemption_at ends it when another context waits); an op of it that was
    // just preempted waits for its turn.
    if (r.slice_ns != 0 && r.gen == d.resident_gen && startable(r, device, t) &&
        (r.left_ns == 0 || !other_waits(st, device, d.resident, t))) {
      start(st, d.resident, t);
      return;
    }
  }
  const int from = d.resident < 0 ? 0 : d.resident + 1;
  for (int k = 0; k < kMaxContexts; ++k) {
    const int i = (from + k) % kMaxContexts;
    if (!startable(st.ctx[i], device, t)) continue;
    const bool same = d.resident == i && d.resident_gen == st.ctx[i].gen;
    const bool first = d.resident < 0;
    if (!same && !first) ++d.switches;
    d.resident = i;
    d.resident_gen = st.ctx[i].gen;
    const uint64_t at = t + (same || first ? 0 : st.switch_ns);
    if (!same) d.resident_since_ns = at;
    start(st, i, at);
    return;
  }
}

// Time-slice: when the running op of a context with a slice is preempted (its slice ends while
// another context waits), kNever when it is not.
uint64_t preemption_at(const DeviceState& st, uint32_t device, const CtxSlot& s, int slot, uint64_t cur) {
  const DeviceSim& d = st.dev[device];
  if (st.sharing != Sharing::TimeSlice || !s.running || s.slice_ns == 0 || !live(s) || slot != d.resident) return kNever;
  // The earliest another context has work: now, or its next submission.
  uint64_t waits = kNever;
  for (int i = 0; i < kMaxContexts; ++i) {
    const CtxSlot& o = st.ctx[i];
    if (i == slot || o.device != device || !has_pending(o) || o.running || head_op(o).kind == OpKind::EventMarker) continue;
    waits = std::min(waits, std::max(head_op(o).submit_ns, cur));
  }
  if (waits == kNever) return kNever;
  const uint64_t at = std::max(waits, d.resident_since_ns);
  const uint64_t end = slice_end(d, s, at == d.resident_since_ns ? at : at - 1);
  return end < s.run_end_ns ? end : kNever;
}

// The op stops where it is: what is left goes on when the context's turn comes again.
void preempt(DeviceState& st, CtxSlot& s, uint64_t t) {
  DeviceSim& d = st.dev[s.device];
  s.left_ns = s.run_end_ns - t;
  s.running = 0;
  --d.running_count;
  ++s.stats.preemptions;
}

// MPS: the ops with blocks to place (started or ready to start), in order of client priority, then
// of the time they became ready, an op whose dependency just ended after all others (fresh()); each
// places what fits of its blocks (an op starts with its first block), and what does not fit leaves
// the room to the next (greedy, like the block scheduler).
void dispatch_mps(DeviceState& st, uint32_t device, uint64_t t) {
  DeviceSim& d = st.dev[device];
  uint64_t tried = 0;   // contexts whose blocks did not fit this round
  for (;;) {
    int best = -1;
    uint64_t best_ready = 0;
    uint32_t best_rank = 0;
    for (int i = 0; i < kMaxContexts; ++i) {
      const CtxSlot& s = st.ctx[i];
      if (tried & (uint64_t{1} << i)) continue;
      const bool placing = s.running && s.device == device && s.blocks_left > 0 && live(s);
      if (!placing && !startable(s, device, t)) continue;
      const uint64_t ready = std::max(head_op(s).submit_ns, s.last_end_ns);
      const uint32_t rank = (placing || !fresh(s, t) ? 0 : 2) + s.priority;
      if (best < 0 || rank < best_rank || (rank == best_rank && ready < best_ready)) {
        best = i;
        best_ready = ready;
        best_rank = rank;
      }
    }
    if (best < 0) return;
    CtxSlot& s = st.ctx[best];
    tried |= uint64_t{1} << best;
    if (!s.running) {
      // It starts with its first block: none fits, it waits (its wait is counted when one does).
      const Op& op = head_op(s);
      const uint64_t per_block = std::clamp<uint64_t>(op.block_threads != 0 ? op.block_threads : op.threads, 0, kDeviceThreads);
      if (op.threads != 0 && per_block > d.free_threads) continue;
      start(st, best, t);
    }
    place_blocks(st, s, t);
    if (s.blocks_left == 0 && s.batch_count == 0) finish(st, s);   // nothing to run (no threads, no time)
  }
}

void advance_device(DeviceState& st, uint32_t device, uint64_t now) {
  DeviceSim& d = st.dev[device];
  uint64_t cur = d.cur_ns;
  for (int i = 0; i < kMaxContexts; ++i)
    if (st.ctx[i].device == device) complete_event_markers(st.ctx[i]);
  for (;;) {
    // Completions due by `cur`, then whatever may start at `cur`.
    for (int i = 0; i < kMaxContexts; ++i) {
      CtxSlot& s = st.ctx[i];
      if (!s.running || s.device != device) continue;
      if (s.run_end_ns > cur) {
        if (preemption_at(st, device, s, i, cur) <= cur) preempt(st, s, cur);
        continue;
      }
      if (st.sharing == Sharing::Mps) retire_batches(st, s, cur);
      else finish(st, s);
    }
    if (st.sharing == Sharing::Mps) dispatch_mps(st, device, cur); else dispatch_time_slice(st, device, cur);
    // The next event: a running op ending or preempted, or a later submission arriving.
    uint64_t next = kNever;
    for (int i = 0; i < kMaxContexts; ++i) {
      const CtxSlot& s = st.ctx[i];
      if (s.device != device) continue;
      if (s.running) next = std::min({next, s.run_end_ns, preemption_at(st, device, s, i, cur)});
      else if (has_pending(s) && head_op(s).submit_ns > cur) next = std::min(next, head_op(s).submit_ns);
    }
    const uint64_t until = std::min(next, now);
    if (d.running_count >= 2 && until > cur)
      for (CtxSlot& s : st.ctx)
        if (s.running && s.device == device && live(s)) s.stats.overlap_ns += until - cur;
    if (next > now) break;
    cur = next;
  }
  d.cur_ns = std::max(cur, now);
}

}  // namespace

void init_state(DeviceState& st, uint64_t switch_ns, uint64_t now_ns, uint32_t device_count, Sharing sharing,
                uint64_t memory_total) {
  st.version = kLayoutVersion;
  st.memory_total = memory_total;
  st.slot_size = sizeof(CtxSlot);
  st.switch_ns = switch_ns;
  st.device_count = std::clamp<uint32_t>(device_count, 1, kMaxDevices);
  st.sharing = sharing;
  st.created_ns = st.sim_ns = st.last_reap_ns = now_ns;
  for (DeviceSim& d : st.dev) {
    d.cur_ns = now_ns;
    d.resident = -1;
    d.free_threads = kDeviceThreads;
  }
  st.magic = kMagic;
}

void advance(DeviceState& st, uint64_t now_ns) {
  for (uint32_t d = 0; d < st.device_count; ++d) advance_device(st, d, now_ns);
  st.sim_ns = std::max(st.sim_ns, now_ns);
}

int claim_slot(DeviceState& st, int32_t pid, uint32_t local_id, uint64_t now_ns, uint32_t device, uint32_t priority) {
  if (device >= st.device_count) return -1;
  for (int i = 0; i < kMaxContexts; ++i) {
    CtxSlot& s = st.ctx[i];
    if (live(s) || s.running) continue;   // a released slot whose op still runs is not free yet
    s.pid = pid;
    s.local_id = local_id;
    s.device = device;
    s.priority = priority > 1 ? 1 : priority;
    s.head = s.tail = 0;
    s.last_end_ns = now_ns;
    s.stats = CtxStats{};
    s.memory_used = 0;
    s.slice_ns = s.left_ns = 0;
    for (EventSlot& e : s.events) e = EventSlot{UINT64_MAX, 0};
    s.state = SlotState::Live;
    return i;
  }
  return -1;
}

int set_process_slice(DeviceState& st, int32_t pid, uint64_t slice_ns) {
  int n = 0;
  for (CtxSlot& s : st.ctx)
    if (live(s) && s.pid == pid) {
      s.slice_ns = slice_ns;
      ++n;
    }
  return n;
}

void release_slot(DeviceState& st, int slot) {
  if (slot < 0 || slot >= kMaxContexts) return;
  CtxSlot& s = st.ctx[slot];
  if (s.device < kMaxDevices) st.dev[s.device].memory_used -= std::min(s.memory_used, st.dev[s.device].memory_used);
  s.memory_used = 0;
  s.state = SlotState::Free;
  s.head = s.tail;
  ++s.gen;
}

bool charge_memory(DeviceState& st, int slot, uint64_t bytes) {
  if (slot < 0 || slot >= kMaxContexts || !live(st.ctx[slot]) || st.ctx[slot].device >= kMaxDevices) return false;
  DeviceSim& d = st.dev[st.ctx[slot].device];
  if (bytes > st.memory_total || d.memory_used > st.memory_total - bytes) return false;
  d.memory_used += bytes;
  st.ctx[slot].memory_used += bytes;
  return true;
}

void uncharge_memory(DeviceState& st, int slot, uint32_t gen, uint64_t bytes) {
  if (slot < 0 || slot >= kMaxContexts) return;
  CtxSlot& s = st.ctx[slot];
  if (s.gen != gen || !live(s)) return;   // released since: its memory went back then
  bytes = std::min(bytes, s.memory_used);
  s.memory_used -= bytes;
  st.dev[s.device].memory_used -= std::min(bytes, st.dev[s.device].memory_used);
}

uint64_t submit(DeviceState& st, int slot, const Op& op) {
  if (slot < 0 || slot >= kMaxContexts || !live(st.ctx[slot])) return UINT64_MAX;
  CtxSlot& s = st.ctx[slot];
  if (s.tail - s.head >= kRingOps) return UINT64_MAX;
  s.ring[s.tail % kRingOps] = op;
  const uint64_t seq = s.tail;
  if (op.kind == OpKind::EventMarker && op.event < kMaxEvents) s.events[op.event].seq = seq;
  ++s.tail;  // published last, so a holder that dies mid-submit leaves no half-written op
  return seq;
}

uint64_t next_progress_ns(const DeviceState& st, uint64_t now_ns) {
  uint64_t next = kNever;
  for (const CtxSlot& s : st.ctx)
    if (s.running) next = std::min(next, s.run_end_ns);
  return next == kNever ? now_ns : std::max(next, now_ns);
}

}  // namespace fikit::simgpu
