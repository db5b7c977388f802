#include "policy.h"

#include <algorithm>

namespace fikit::policy {

using protocol::Message;
using protocol::TaskMode;

namespace {
constexpr uint32_t kMaxTasks = 256;
constexpr int kNoPriority = protocol::kPriorityLevels;   // "no task at any priority"

Action reply(uint32_t task_id, uint32_t seq, protocol::Body body) {
  return Action{task_id, Message{protocol::Header{protocol::Type::Heartbeat, task_id, seq}, std::move(body)}};
}
}  // namespace

Policy::Policy(Settings settings, ProfileSource& profiles) : settings_(settings), profiles_(profiles) {}

Policy::Task* Policy::find(uint32_t id) {
  auto it = tasks_.find(id);
  return it == tasks_.end() ? nullptr : &it->second;
}

uint64_t Policy::duration_of(const KernelStats& s) const {
  double d = 0;
  switch (settings_.duration_estimator) {
    case DurationEstimator::Mean: d = s.dur_mean; break;
    case DurationEstimator::P50: d = double(s.dur_p50); break;
    case DurationEstimator::P90: d = double(s.dur_p90); break;
  }
  return d < 1 ? 1 : uint64_t(d);
}

uint64_t Policy::gap_after(const KernelStats& s) const {
  const double total = double(s.gap_count + s.boundary_count);
  // A kernel that usually ends an iteration is followed by "wait for the next request": not a gap.
  if (s.gap_count == 0 || double(s.boundary_count) > settings_.boundary_fraction * total) return 0;
  switch (settings_.gap_estimator) {
    case GapEstimator::Mean: return uint64_t(s.gap_mean);
    case GapEstimator::P50: return s.gap_p50;
    case GapEstimator::P10: return s.gap_p10;
  }
  return 0;
}

int Policy::top_registered_priority() const {
  int top = kNoPriority;
  for (const auto& [id, t] : tasks_) top = std::min(top, t.priority);
  return top;
}

int Policy::measuring_priority() const {
  int m = kNoPriority;
  for (const auto& [id, t] : tasks_)
    if (t.mode == TaskMode::Measure) m = std::min(m, t.priority);
  return m;
}

void Policy::on_register(uint64_t now, uint32_t seq, const protocol::Register& reg, std::vector<Action>& out) {
  if (!started_set_) { started_ = now; started_set_ = true; }
  Task* task = nullptr;
  for (auto& [id, t] : tasks_)
    if (t.pid == reg.pid && t.key == reg.key_view()) task = &t;
  if (task == nullptr) {
    if (tasks_.size() >= kMaxTasks) {
      out.push_back(reply(0, seq, protocol::Error{protocol::ErrorCode::TooManyTasks}));
      return;
    }
    uint32_t id = next_task_id_++;
    if (next_task_id_ == 0) next_task_id_ = 1;   // 0 means "unregistered" on the wire
    task = &tasks_[id];
    task->id = id;
    task->pid = reg.pid;
    task->key = std::string(reg.key_view());
    task->profile = profiles_.load(task->key);
    if (!task->profile) task->profile = std::make_shared<Profile>();
  } else if (task->priority != reg.priority) {
    // Its queued requests sit in the old priority's queue: move them.
    auto& from = queues_[task->priority];
    for (auto it = from.begin(); it != from.end();) {
      if (it->task_id == task->id) { queues_[reg.priority].push_back(*it); it = from.erase(it); } else ++it;
    }
  }
  task->priority = reg.priority;
  task->mode = reg.mode;
  task->last_heard = now;
  task->active = task->active || reg.mode == TaskMode::Measure;
  std::vector<Action> changes;
  schedule(now, changes);
  // The registration reply carries the role, so the new task's own Role message is not needed.
  // The fill thresholds let a holder skip notifications after kernels whose gap nothing could fill.
  const auto u32 = [](uint64_t v) { return uint32_t(std::min<uint64_t>(v, UINT32_MAX)); };
  out.push_back(reply(task->id, seq,
                      protocol::Registered{uint32_t(settings_.lease_ns / 1'000'000), task->role,
                                           u32(settings_.min_gap_ns), u32(settings_.grant_latency_ns)}));
  for (Action& a : changes)
    if (!(a.task_id == task->id && std::holds_alternative<protocol::Role>(a.message.body))) out.push_back(std::move(a));
}

void Policy::on_message(uint64_t now, const Message& msg, std::vector<Action>& out) {
  if (!started_set_) { started_ = now; started_set_ = true; }
  // Dispatch on the body: the header's type field was validated against it by the decoder.
  const auto& h = msg.header;
  if (const auto* reg = std::get_if<protocol::Register>(&msg.body)) {
    on_register(now, h.seq, *reg, out);
    return;
  }
  Task* t = find(h.task_id);
  if (t == nullptr) {
    // Unknown or expired task (or a restarted daemon): tell it to register again.
    if (!std::holds_alternative<protocol::Goodbye>(msg.body))
      out.push_back(reply(h.task_id, h.seq, protocol::Error{protocol::ErrorCode::UnknownTask}));
    return;
  }
  t->last_heard = now;
  if (const auto* n = std::get_if<protocol::LaunchNotify>(&msg.body)) {
    // The gap is predicted from the launch; a launch time from the future or older than the
    // holder-quiet timeout is not believed (clock trouble, a stale datagram).
    uint64_t launched = now;
    if (n->launched_ns != 0 && n->launched_ns <= now && now - n->launched_ns < settings_.holder_quiet_ns)
      launched = n->launched_ns;
    handle_notify(now, launched, *t, n->kernel_id);
  } else if (std::holds_alternative<protocol::LaunchRequest>(msg.body)) {
    handle_request(now, *t, msg, out);
  } else if (std::holds_alternative<protocol::Idle>(msg.body)) {
    handle_idle(now, *t);
  } else if (std::holds_alternative<protocol::Heartbeat>(msg.body)) {
    out.push_back(reply(t->id, h.seq, protocol::Role{t->role, t->role_epoch}));
  } else if (std::holds_alternative<protocol::Goodbye>(msg.body)) {
    drop(t->id);
  } else {
    // Daemon-to-client messages sent to the daemon.
    out.push_back(reply(t->id, h.seq, protocol::Error{protocol::ErrorCode::BadRequest}));
    return;
  }
  schedule(now, out);
}

void Policy::on_tick(uint64_t now, std::vector<Action>& out) {
  std::vector<uint32_t> expired;
  for (const auto& [id, t] : tasks_)
    if (now > t.last_heard && now - t.last_heard > settings_.lease_ns) expired.push_back(id);
  for (uint32_t id : expired) {
    ++counters_.lease_expiries;
    drop(id);
  }
  schedule(now, out);
}

void Policy::drop(uint32_t id) {
  for (auto& q : queues_)
    q.erase(std::remove_if(q.begin(), q.end(), [id](const Request& r) { return r.task_id == id; }), q.end());
  if (holder_ == id) {
    holder_ = 0;
    gap_.open = false;
  }
  tasks_.erase(id);
}

void Policy::handle_notify(uint64_t now, uint64_t launched, Task& t, uint64_t kernel_id) {
  ++t.notifications;
  ++counters_.notifications;
  t.active = true;
  t.idle_at = 0;
  t.last_launch = now;
  t.last_kernel = kernel_id;
  if (t.id != holder_) return;   // a former holder's launch racing its role change: activity only
  if (gap_.open) {
    // Early stop: the holder is back, the rest of the predicted gap is gone.
    bool waiting = false;
    for (int p = t.priority + 1; p < protocol::kPriorityLevels; ++p) waiting |= !queues_[p].empty();
    if (waiting && gap_.end > now) ++counters_.early_stops;
    gap_.open = false;
  }
  auto it = t.profile->find(kernel_id);
  if (it == t.profile->end()) return;   // unknown kernel: no prediction, no fill
  uint64_t gap = gap_after(it->second);
  if (gap == 0) return;
  if (gap < settings_.min_gap_ns) {
    ++counters_.gaps_too_short;
    return;
  }
  ++counters_.gaps_predicted;
  // The GPU is idle from the end of this kernel for `gap` (assuming it started at its launch).
  const uint64_t start = launched + duration_of(it->second);
  if (start + gap <= now) return;   // the notification came too late: the gap is over
  gap_ = Gap{true, start + gap, start};
}

void Policy::handle_idle(uint64_t now, Task& t) {
  if (t.queued > 0) return;
  if (t.id == holder_) {
    gap_.open = false;   // its GPU work drained: nothing is predicted any more
    // A sync in the middle of an iteration is followed by the last kernel's usual gap; the holder
    // stays active for that long (schedule() ends it) so that lower tasks do not free-run into it.
    // A kernel launched meanwhile keeps it active. The same kernel often ends iterations and runs
    // inside them (one ID, several uses), so the profile alone cannot tell the two apart.
    auto it = t.profile->find(t.last_kernel);
    const uint64_t gap = it != t.profile->end() ? gap_after(it->second) : 0;
    if (gap > 0 && t.active) {
      t.idle_at = now + gap + settings_.grant_latency_ns;
      return;
    }
  }
  t.active = false;
  t.idle_at = 0;
}

void Policy::handle_request(uint64_t now, Task& t, const Message& msg, std::vector<Action>& out) {
  const auto& req = std::get<protocol::LaunchRequest>(msg.body);
  const uint32_t seq = msg.header.seq;
  // A retransmission is idempotent by sequence number: the same grant again, or "still queued".
  for (int i = 0; i < Task::kRecentGrants; ++i)
    if (t.recent_grant_seq[i] == seq && seq != 0) {
      out.push_back(reply(t.id, seq, t.recent_grant[i]));
      return;
    }
  const auto& queue = queues_[t.priority];
  for (size_t i = 0; i < queue.size(); ++i)
    if (queue[i].task_id == t.id && queue[i].seq == seq) {
      out.push_back(reply(t.id, seq, protocol::Queued{uint32_t(i + 1)}));
      return;
    }
  ++t.requests;
  ++counters_.requests;
  t.active = true;
  t.last_launch = now;
  Request r{t.id, seq, req.kernel_id, req.predicted_ns, false};
  auto it = t.profile->find(req.kernel_id);
  if (it != t.profile->end()) {
    r.known = true;
    r.duration_ns = duration_of(it->second);
  }
  auto& q = queues_[t.priority];
  q.push_back(r);
  ++t.queued;
  out.push_back(reply(t.id, seq, protocol::Queued{uint32_t(q.size())}));
}

void Policy::grant(uint64_t now, Task& t, const Request& r, uint64_t credit, uint64_t deadline,
                   std::vector<Action>& out) {
  (void)now;
  protocol::Grant g{credit, deadline};
  out.push_back(reply(t.id, r.seq, g));
  t.recent_grant_seq[t.next_recent] = r.seq;
  t.recent_grant[t.next_recent] = g;
  t.next_recent = (t.next_recent + 1) % Task::kRecentGrants;
  ++t.grants;
  ++counters_.grants;
  if (t.queued > 0) --t.queued;
}

void Policy::schedule(uint64_t now, std::vector<Action>& out) {
  next_wake_ = kNever;
  // A share task that stopped launching without saying so (no sync) is not active forever.
  for (auto& [id, t] : tasks_) {
    if (t.mode == TaskMode::Share && t.active && t.queued == 0) {
      const uint64_t quiet_end = t.last_launch + settings_.holder_quiet_ns;
      const uint64_t end = t.idle_at != 0 ? std::min(t.idle_at, quiet_end) : quiet_end;
      if (now >= end) {
        t.active = false;
        t.idle_at = 0;
        if (id == holder_) gap_.open = false;
      } else {
        wake_at(end);
      }
    }
    if (t.mode == TaskMode::Measure) t.active = true;
    wake_at(t.last_heard + settings_.lease_ns + 1);
  }

  // The holder: the one share task at the highest registered priority (none when it shares that
  // priority with another task: equal priorities interleave through their queue instead).
  const int top = top_registered_priority();
  uint32_t holder = 0;
  int at_top = 0;
  for (const auto& [id, t] : tasks_)
    if (t.priority == top) { ++at_top; holder = id; }
  if (at_top != 1 || tasks_[holder].mode != TaskMode::Share) holder = 0;
  if (holder != holder_) gap_.open = false;
  holder_ = holder;

  int active_top = kNoPriority;
  for (const auto& [id, t] : tasks_)
    if (t.active || t.queued > 0) active_top = std::min(active_top, t.priority);
  const bool holder_active = holder_ != 0 && tasks_[holder_].active;

  // Roles: the holder notifies while any other share task has work; free-run credit of a task
  // that may no longer run freely is revoked.
  for (auto& [id, t] : tasks_) {
    uint8_t flags = 0;
    if (id == holder_) {
      flags = protocol::kRoleHolder;
      for (const auto& [oid, o] : tasks_)
        if (oid != id && o.mode == TaskMode::Share && (o.active || o.queued > 0)) flags |= protocol::kRoleNotify;
    }
    const bool may_free_run = !holder_active && t.priority == active_top;
    bool revoke = false;
    if (t.credit_until > now && !may_free_run && id != holder_) {
      revoke = true;
      t.credit_until = 0;
    }
    if (flags != t.role || revoke) {
      t.role = flags;
      out.push_back(reply(id, 0, protocol::Role{uint8_t(flags | (revoke ? protocol::kRoleRevoke : 0)), ++t.role_epoch}));
    }
  }

  // The holder launches without asking: requests it sent before it became holder are granted.
  if (holder_ != 0) {
    Task& h = tasks_[holder_];
    auto& q = queues_[h.priority];
    for (auto it = q.begin(); it != q.end();) {
      if (it->task_id == holder_) {
        grant(now, h, *it, it->duration_ns, now + settings_.outstanding_bound_ns, out);
        it = q.erase(it);
      } else {
        ++it;
      }
    }
  }

  if (holder_active) {
    if (gap_.open) fill_gap(now, out);
  } else {
    gap_.open = false;
    free_run(now, active_top, out);
  }
}

void Policy::fill_gap(uint64_t now, std::vector<Action>& out) {
  const uint64_t latency = settings_.grant_latency_ns;
  const int holder_priority = tasks_[holder_].priority;
  const int measuring = measuring_priority();
  while (gap_.open) {
    // Pace the fills: grant the next one when the GPU is about to be free of the previous one,
    // so that an early stop cancels as little as possible.
    if (gap_.cursor > now + latency) {
      wake_at(gap_.cursor - latency);
      return;
    }
    const uint64_t start = std::max(gap_.cursor, now + latency);
    if (start >= gap_.end) {
      gap_.open = false;
      return;
    }
    // A fill is not free: the GPU switches to the filler's context and back to the holder's.
    const uint64_t sw = settings_.switch_cost_ns;
    if (gap_.end - start <= 2 * sw) {
      gap_.open = false;
      return;
    }
    const uint64_t remaining = gap_.end - start - 2 * sw;
    // BestPrioFit: the highest priority with a fitting request; in it, the longest that fits.
    std::deque<Request>* queue = nullptr;
    std::deque<Request>::iterator best;
    for (int p = holder_priority + 1; p < protocol::kPriorityLevels && queue == nullptr; ++p) {
      if (p > measuring) break;   // below a measuring task: kept off the GPU
      auto& q = queues_[p];
      for (auto it = q.begin(); it != q.end(); ++it) {
        if (!it->known || it->duration_ns > remaining) continue;
        if (queue == nullptr || it->duration_ns > best->duration_ns) { queue = &q; best = it; }
      }
    }
    if (queue == nullptr) return;   // nothing fits now; a later request may
    Request r = *best;
    queue->erase(best);
    Task& t = tasks_[r.task_id];
    grant(now, t, r, r.duration_ns, gap_.end - 2 * sw - r.duration_ns, out);
    ++t.fills;
    ++counters_.fills;
    gap_.cursor = start + sw + r.duration_ns;
  }
}

void Policy::free_run(uint64_t now, int priority, std::vector<Action>& out) {
  if (priority >= protocol::kPriorityLevels || priority > measuring_priority()) return;
  const uint64_t bound = settings_.outstanding_bound_ns;
  auto& q = queues_[priority];
  while (!q.empty()) {
    const Request r = q.front();
    const uint64_t credit = std::max(settings_.free_run_credit_ns, r.duration_ns);
    const uint64_t outstanding = busy_until_ > now ? busy_until_ - now : 0;
    // Always let one grant through on an idle GPU, even one larger than the bound.
    if (outstanding > 0 && outstanding + credit > bound) {
      wake_at(busy_until_ + credit - bound);
      return;
    }
    q.pop_front();
    Task& t = tasks_[r.task_id];
    const uint64_t deadline = now + std::max(bound, credit);
    grant(now, t, r, credit, deadline, out);
    ++counters_.free_run_grants;
    busy_until_ = std::max(busy_until_, now) + credit;
    t.credit_until = deadline;
  }
}

protocol::StatusReply Policy::status(uint64_t now) const {
  protocol::StatusReply s;
  s.uptime_ns = started_set_ && now > started_ ? now - started_ : 0;
  s.grants = counters_.grants;
  s.fills = counters_.fills;
  s.free_run_grants = counters_.free_run_grants;
  s.early_stops = counters_.early_stops;
  s.gaps_predicted = counters_.gaps_predicted;
  s.lease_expiries = counters_.lease_expiries;
  s.notifications = counters_.notifications;
  s.requests = counters_.requests;
  s.holder_task_id = holder_;
  for (const auto& [id, t] : tasks_) {
    if (s.tasks.size() == protocol::kMaxStatusTasks) break;
    protocol::TaskStatus ts;
    ts.task_id = id;
    ts.pid = t.pid;
    ts.priority = uint8_t(t.priority);
    ts.mode = t.mode;
    ts.role = t.role;
    ts.active = t.active ? 1 : 0;
    ts.queue_length = t.queued;
    ts.grants = t.grants;
    ts.fills = t.fills;
    ts.notifications = t.notifications;
    ts.requests = t.requests;
    protocol::set_key(ts, t.key);
    s.tasks.push_back(ts);
  }
  std::sort(s.tasks.begin(), s.tasks.end(),
            [](const auto& a, const auto& b) { return a.priority != b.priority ? a.priority < b.priority : a.task_id < b.task_id; });
  return s;
}

}  // namespace fikit::policy
