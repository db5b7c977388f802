#include "timeline.h"

#include <algorithm>
#include <cstring>

namespace fikit::simgpu {
namespace {

bool live(const CtxSlot& s) { return s.state == SlotState::Live; }
const Op& head_op(const CtxSlot& s) { return s.ring[s.head % kRingOps]; }

// Event markers never occupy the device: one at the head of an idle context completes when the
// op before it did, or when it was submitted if the context had nothing in flight.
void complete_event_markers(DeviceState& dev, CtxSlot& s) {
  (void)dev;
  while (s.head < s.tail && head_op(s).kind == OpKind::EventMarker) {
    const Op& op = head_op(s);
    const uint64_t t = std::max(op.submit_ns, s.last_end_ns);
    if (op.event < kMaxEvents && s.events[op.event].seq == s.head) s.events[op.event].time_ns = t;
    s.last_end_ns = t;
    ++s.head;
  }
}

void complete_running(DeviceState& dev) {
  CtxSlot& s = dev.ctx[dev.running];
  const uint64_t end = dev.running_end_ns;
  if (live(s) && s.gen == dev.running_gen && s.head < s.tail) {
    s.busy_ns += head_op(s).duration_ns;
    ++s.ops_done;
    s.last_end_ns = end;
    ++s.head;
    complete_event_markers(dev, s);
  }
  dev.free_at_ns = std::max(dev.free_at_ns, end);
  dev.running = -1;
}

// Round-robin after the resident context among those whose head op was submitted by `at_ns`.
int pick_next(const DeviceState& dev, uint64_t at_ns) {
  const int start = dev.resident < 0 ? 0 : dev.resident + 1;
  for (int k = 0; k < kMaxContexts; ++k) {
    const int i = (start + k) % kMaxContexts;
    const CtxSlot& s = dev.ctx[i];
    if (live(s) && s.head < s.tail && head_op(s).submit_ns <= at_ns) return i;
  }
  return -1;
}

}  // namespace

void init_state(DeviceState& dev, uint64_t switch_ns, uint64_t now_ns) {
  dev.version = kLayoutVersion;
  dev.slot_size = sizeof(CtxSlot);
  dev.switch_ns = switch_ns;
  dev.created_ns = dev.sim_ns = dev.free_at_ns = dev.last_reap_ns = now_ns;
  dev.resident = dev.running = -1;
  dev.magic = kMagic;
}

void advance(DeviceState& dev, uint64_t now_ns) {
  for (int i = 0; i < kMaxContexts; ++i)
    if (live(dev.ctx[i]) && dev.running != i) complete_event_markers(dev, dev.ctx[i]);
  for (;;) {
    if (dev.running >= 0) {
      if (dev.running_end_ns > now_ns) break;
      complete_running(dev);
    }
    // The device is free at free_at; if nobody had work queued by then, it idled until the
    // earliest pending submission.
    uint64_t decide = dev.free_at_ns;
    if (pick_next(dev, decide) < 0) {
      uint64_t earliest = UINT64_MAX;
      for (const CtxSlot& s : dev.ctx)
        if (live(s) && s.head < s.tail) earliest = std::min(earliest, head_op(s).submit_ns);
      if (earliest > now_ns) break;
      decide = std::max(decide, earliest);
    }
    const int next = pick_next(dev, decide);
    if (next < 0) break;
    CtxSlot& s = dev.ctx[next];
    const bool same = dev.resident == next && dev.resident_gen == s.gen;
    const bool first = dev.resident < 0;
    const uint64_t start = decide + (same || first ? 0 : dev.switch_ns);
    if (!same && !first) ++dev.switches;
    dev.resident = next;
    dev.resident_gen = s.gen;
    dev.running = next;
    dev.running_gen = s.gen;
    dev.running_end_ns = start + head_op(s).duration_ns;
    dev.busy_ns += head_op(s).duration_ns;
    ++dev.ops_run;
  }
  dev.sim_ns = std::max(dev.sim_ns, now_ns);
}

int claim_slot(DeviceState& dev, int32_t pid, uint32_t local_id, uint64_t now_ns) {
  for (int i = 0; i < kMaxContexts; ++i) {
    CtxSlot& s = dev.ctx[i];
    if (live(s)) continue;
    s.pid = pid;
    s.local_id = local_id;
    s.head = s.tail = 0;
    s.last_end_ns = now_ns;
    s.ops_done = s.busy_ns = 0;
    for (EventSlot& e : s.events) e = EventSlot{UINT64_MAX, 0};
    s.state = SlotState::Live;
    return i;
  }
  return -1;
}

void release_slot(DeviceState& dev, int slot) {
  if (slot < 0 || slot >= kMaxContexts) return;
  CtxSlot& s = dev.ctx[slot];
  s.state = SlotState::Free;
  s.head = s.tail;
  ++s.gen;
}

uint64_t submit(DeviceState& dev, int slot, const Op& op) {
  if (slot < 0 || slot >= kMaxContexts || !live(dev.ctx[slot])) return UINT64_MAX;
  CtxSlot& s = dev.ctx[slot];
  if (s.tail - s.head >= kRingOps) return UINT64_MAX;
  s.ring[s.tail % kRingOps] = op;
  const uint64_t seq = s.tail;
  if (op.kind == OpKind::EventMarker && op.event < kMaxEvents) s.events[op.event].seq = seq;
  ++s.tail;  // published last, so a holder that dies mid-submit leaves no half-written op
  return seq;
}

uint64_t next_progress_ns(const DeviceState& dev, uint64_t now_ns) {
  return dev.running >= 0 ? std::max(dev.running_end_ns, now_ns) : now_ns;
}

}  // namespace fikit::simgpu
