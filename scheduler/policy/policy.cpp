#include "policy.h"

#include "sample_quantile.h"

#include <algorithm>

namespace fikit::policy {

using protocol::Backend;
using protocol::Directive;
using protocol::State;
using protocol::TaskMode;

namespace {

// Two directives tell the client the same thing at `now` (credit that has run out is no credit).
bool same(const Directive& a, const Directive& b, uint64_t now) {
  // Fill credit is an amount until a time; Run credit (a predicted return) the time alone.
  auto credit = [now](const Directive& d) {
    return d.credit_until_ns > now && (d.credit_ns != 0 || d.state == State::Run);
  };
  const bool ca = credit(a), cb = credit(b);
  if (a.role != b.role || a.state != b.state || a.bound_ns != b.bound_ns || a.short_hold_ns != b.short_hold_ns ||
      a.watch_slot != b.watch_slot || a.watch_generation != b.watch_generation || ca != cb ||
      a.partition_pct != b.partition_pct || a.confine != b.confine || a.return_ns != b.return_ns ||
      a.memory_cap != b.memory_cap || a.slice_us != b.slice_us)
    return false;
  return !ca || (a.credit_ns == b.credit_ns && a.credit_until_ns == b.credit_until_ns);
}

uint32_t u32(uint64_t v) { return uint32_t(std::min<uint64_t>(v, UINT32_MAX)); }

// A directive's slice (us) from a setting (ns): 0 stays 0 (none), kSliceRefused is never one.
uint16_t slice_us_of(uint64_t ns) {
  return ns == 0 ? 0 : uint16_t(std::clamp<uint64_t>(ns / 1000, 1, protocol::kSliceRefused - 1));
}

// The estimators travel as their enum values.
static_assert(uint8_t(GapEstimator::P10) == protocol::kGapP10 && uint8_t(DurationEstimator::P90) == protocol::kDurationP90);

}  // namespace

uint32_t busy_percent(const Profile& profile) {
  if (profile.request_busy_pct >= 0) return uint32_t(std::min(profile.request_busy_pct, 100));
  double busy = 0, gaps = 0;
  for (const auto& [id, k] : profile) {
    busy += double(k.count) * k.dur_mean;
    gaps += double(k.gap_count) * k.gap_mean;
  }
  return busy > 0 ? uint32_t(100.0 * busy / (busy + gaps) + 0.5) : 0;
}

Policy::Policy(Settings settings, ProfileSource& profiles, uint32_t id_base, BellSlots* bell_slots)
    : settings_(settings), profiles_(profiles), id_base_(id_base),
      bell_slot_used_(bell_slots != nullptr ? *bell_slots : own_bell_slots_) {}

void WaitHistogram::add(uint64_t ns) {
  size_t b = 0;
  while (b < kBoundsNs.size() && ns > kBoundsNs[b]) ++b;
  ++counts[b];
  ++count;
  sum_ns += ns;
}

void Policy::end_wait(uint64_t now, Task& t) {
  if (!t.want) return;
  t.waits.add(now > t.want->since ? now - t.want->since : 0);
  t.want.reset();
}

Policy::Task* Policy::find(uint32_t id) {
  auto it = tasks_.find(id);
  return it == tasks_.end() ? nullptr : &it->second;
}

uint64_t Policy::duration_of(const KernelStats& s) const { return predicted_duration(s, settings_.estimators.duration); }

uint64_t Policy::gap_after(const KernelStats& s) const { return predicted_gap(s, settings_.estimators); }

bool Policy::measuring_hold(uint64_t now, const Task& t) const {
  return t.mode == TaskMode::Measure && now - t.measure_since < settings_.measure_hold_max_ns;
}

// Whether `above` keeps the tasks below it from running freely: it is active, or being measured.
bool Policy::blocks(uint64_t now, const Task& above, const Task& below) const {
  // With a key, a task that did not authenticate holds only tasks that did not either: it cannot
  // stop the key's holders by saying it measures, nor by saying its work starts (an outsider's
  // "activity starts" every 2 ms held every keyed job below it).
  if (settings_.keyed && !above.authenticated && below.authenticated) return false;
  if (above.mode == TaskMode::Share) return above.active;
  return measuring_hold(now, above);
}

// Fill by the holder's gaps is for tasks that nothing else above keeps back.
bool Policy::only_holder_blocks(uint64_t now, const Task& t) const {
  bool holder_blocks = false;
  for (const auto& [id, u] : tasks_) {
    if (id == t.id || u.priority >= t.priority || !blocks(now, u, t)) continue;
    if (id != holder_) return false;
    holder_blocks = true;
  }
  return holder_blocks;
}

int Policy::top_priority() const {
  int top = protocol::kPriorityLevels;
  for (const auto& [id, u] : tasks_) top = std::min(top, u.priority);
  return top;
}

// The job the GPU can switch out at a short slice of its own, 0 if none (and why: `why_not`): the
// only task below the top service (a short slice must never make the GPU switch between jobs),
// time-sliced itself (an MPS client's work runs in the MPS server's context), its hook able to set
// it (its heartbeat says when not). Once per schedule(), so that each directive asks it in constant
// time (256 tasks would otherwise cost every datagram millions of steps).
uint32_t Policy::find_preempt_job(const char*& why_not) const {
  why_not = nullptr;
  if (settings_.preempt_slice_ns == 0) return why_not = "the daemon's preempt-slice is 0", 0;
  const int top = top_priority();
  uint32_t sole = 0;
  for (const auto& [id, u] : tasks_) {
    if (u.priority <= top) continue;
    if (sole != 0) return why_not = "more than one job below it (at short slices they would switch between themselves)", 0;
    sole = id;
  }
  if (sole == 0) return 0;
  const Task& j = tasks_.at(sole);
  if (j.backend == Backend::Mps)
    return why_not = "its job is an MPS client, whose work runs in the MPS server's context (a job started after "
                     "the service starts outside MPS: restart it, or fikit-run --backend timeslice)", 0;
  if (j.slice_us == protocol::kSliceRefused) return why_not = "its job's driver refused it a slice of its own", 0;
  return sole;
}

protocol::Backend Policy::job_backend(int& above, const char*& why) const {
  above = protocol::kPriorityLevels;
  if (settings_.preempt_slice_ns == 0 || (!settings_.regime_auto && settings_.fixed_regime == Regime::Free))
    return why = "the daemon never preempts jobs (--regime free, or --preempt-slice 0)", protocol::Backend::Mps;
  const int top = top_priority();
  if (top == protocol::kPriorityLevels) return why = "no service is registered", protocol::Backend::Mps;
  for (const auto& [id, u] : tasks_) {
    if (u.priority > top)
      return why = "a job already runs below the service (one job at a time is preempted)", protocol::Backend::Mps;
    if (u.backend == protocol::Backend::Mps) return why = "the service is an MPS client", protocol::Backend::Mps;
  }
  above = top;
  return why = "the service above runs time-sliced and has no job below it", protocol::Backend::TimeSlice;
}

bool Policy::preemptible(const Task& t) const { return t.id == preempt_job_; }

// Whether the regime preempt is a step of `s`'s controller: a job below it can be switched out so.
bool Policy::preempt_below(const Task& s) const {
  if (s.backend == Backend::Mps || preempt_job_ == 0) return false;
  auto it = tasks_.find(preempt_job_);
  return it != tasks_.end() && it->second.priority > s.priority;
}

// For status: why a controlled time-sliced service's ladder lacks preempt (what to change).
const char* Policy::why_no_preempt(const Task& s) const {
  if (s.backend == Backend::Mps || !controlled(s) || preempt_below(s)) return nullptr;
  return no_preempt_why_ != nullptr ? no_preempt_why_ : "a service above it has its jobs";
}

// A service whose job can be preempted keeps the GPU through its requests at a long slice of its
// own (Settings::preempt_service_slice_ns), in every step below free: under hold too, the job runs
// in its idle time and would otherwise take a slice in the middle of its next request.
uint16_t Policy::service_slice_us(uint64_t now, const Task& t) const {
  if (settings_.preempt_service_slice_ns == 0 || t.mode != TaskMode::Share || !preempt_below(t)) return 0;
  const Regime r = settings_.regime_auto ? regime_of(now, t) : settings_.fixed_regime;
  return r != Regime::Free ? slice_us_of(settings_.preempt_service_slice_ns) : 0;
}

Directive Policy::directive_for(uint64_t now, const Task& t) const {
  Directive d = directive_core(now, t);
  // A task both below a service and above a job is a job first: its short slice wins.
  if (d.slice_us == 0) d.slice_us = service_slice_us(now, t);
  return d;
}

Directive Policy::directive_core(uint64_t now, const Task& t) const {
  Directive d;
  d.bound_ns = u32(settings_.run_bound_ns);
  d.memory_cap = memory_cap_for(t);
  if (t.id == holder_) d.role |= protocol::kRoleHolder;
  bool below = false, above = false, hold = false, fill = false, wanted = false;
  for (const auto& [id, u] : tasks_) {
    if (id == t.id) continue;
    below |= u.priority > t.priority;
    above |= u.priority < t.priority;
    wanted |= u.want && u.want->known;
    if (u.priority < t.priority && blocks(now, u, t)) (u.mode == TaskMode::Measure ? hold : fill) = true;
  }
  // A task being measured runs unscheduled (the measure mode asks nothing); lower ones depend on it.
  if (t.mode == TaskMode::Measure) return d;
  if (below) d.role |= protocol::kRoleActivity;
  if (t.id == holder_ && wanted) d.role |= protocol::kRoleGaps;
  // The regime of the services above decides what runs beside them (a baseline window holds
  // everything; Free lets everything go as without FIKIT). Time-sliced, only those two and Hold
  // differ: nothing runs beside an active context anyway.
  Regime regime = above ? regime_for(now, t) : Regime::Hold;
  if (regime == Regime::Held) hold = true;
  // A job the service can switch out (the sole time-sliced one below it) runs at a short slice of
  // its own in every step below free: under hold it runs in the service's idle time, and the
  // service's next request would otherwise wait for its slice (1-2 ms) to end. Hold and preempt then
  // differ in whether its launches wait while the service is active.
  if (preemptible(t) && regime != Regime::Free) d.slice_us = slice_us_of(settings_.preempt_slice_ns);
  // Preempt: as free, at that slice; a job that cannot be switched out so (an MPS client, or one of
  // several jobs) waits as under hold.
  if (regime == Regime::Preempt && !preemptible(t)) regime = Regime::Hold;
  if ((regime == Regime::Free || regime == Regime::Preempt) && !hold) {
    d.state = State::Run;
    d.bound_ns = UINT32_MAX;
    d.confine = protocol::kConfineFree;
    return d;
  }
  d.state = hold ? State::Hold : fill ? State::Fill : State::Run;
  if (d.state == State::Run && relaxed_bound(now, t))
    d.bound_ns = u32(std::max(settings_.run_bound_ns, settings_.run_bound_idle_ns));
  if (d.state == State::Run && settings_.return_credit) d.credit_until_ns = return_credit_until(now, t);
  if (d.state == State::Run) d.return_ns = predicted_return(now, t);
  // The client applies the confinement in Fill, and in Run while the holder's bell says it is back
  // (and, for long holds and launches that would run into a predicted return, in Run).
  if (t.backend == Backend::Mps && d.state != State::Hold && above) {
    const uint8_t partition = settings_.partition_pct != 0 ? uint8_t(settings_.partition_pct) : 0;
    // A long hold in the protective steps is one longer than the bound: what a returning service
    // may find holding SMs is then no more than the work in flight.
    d.short_hold_ns = u32(regime >= Regime::ShortBeside ? settings_.short_hold_ns
                                                        : std::min(settings_.short_hold_ns, settings_.run_bound_ns));
    switch (regime) {
      case Regime::Held: case Regime::Hold: break;
      case Regime::HoldNarrow: d.confine = partition ? protocol::kConfineLong : 0; break;
      case Regime::Partition: d.confine = partition ? protocol::kConfineActive : 0; break;
      case Regime::ShortBeside:
        d.confine = protocol::kConfineShortBeside | (partition ? protocol::kConfineActive : 0);
        break;
      case Regime::Free: case Regime::Preempt:   // handled above
        break;
      case Regime::Beside:
        // At full width within the bound: a step down then finds little of it queued. Unbounded
        // (all of MPS with client priority) lost to a bounded trial on an H200 (docs/scheduling.md).
        d.confine = protocol::kConfineShortBeside | protocol::kConfineBoundBeside;
        break;
    }
    if (d.confine & protocol::kConfinePartition) d.partition_pct = partition;
  }
  if (holder_ != 0 && holder_ != t.id) {
    const Task& h = tasks_.at(holder_);
    if (h.priority < t.priority) {
      d.watch_slot = h.bell_slot;
      d.watch_generation = h.activity_generation;
    }
  }
  if (d.state == State::Fill && gap_.open && gap_.filler == t.id && gap_.credit_until_ns > now) {
    d.credit_ns = gap_.credit_ns;
    d.credit_until_ns = gap_.credit_until_ns;
  }
  return d;
}

Registration Registration::of(const protocol::Register& reg) {
  Registration r;
#define FIKIT_REGISTRATION_OF(name, ...) r.name = reg.name;
  FIKIT_REGISTER_FIELDS(FIKIT_REGISTRATION_OF, FIKIT_REGISTER_SKIP)
#undef FIKIT_REGISTRATION_OF
  r.key = std::string(reg.key_view());
  r.profile_grew = (reg.flags & protocol::kRegisterProfileGrew) != 0;
  return r;
}

void TaskIdentity::take(const Registration& reg) {
#define FIKIT_TASK_TAKE(name, type, initial, valid, kept_as) kept_as = reg.name;
  FIKIT_REGISTER_FIELDS(FIKIT_TASK_TAKE, FIKIT_REGISTER_SKIP)
#undef FIKIT_TASK_TAKE
}

uint32_t Policy::on_register(uint64_t now, uint32_t existing, const Registration& reg, std::vector<Action>& out) {
  notice_time(now);
  Task* task = find(existing);
  const bool fresh = task == nullptr;
  if (fresh) {
    if (tasks_.size() >= kMaxTasks) {
      ++counters_.refused_registrations;
      out.push_back({0, protocol::Error{protocol::ErrorCode::TooManyTasks, 1000, protocol::RefusalReason::TaskLimit}});
      return 0;
    }
    // 0 means "none" on the wire; after a wrap, IDs still in use are skipped. A client whose lease
    // ran out resumes as the task it was, when that ID is this policy's and free.
    uint32_t id = 0;
    if (reg.reclaim_id > id_base_ && reg.reclaim_id - id_base_ < kIdSpan && tasks_.count(reg.reclaim_id) == 0) {
      id = reg.reclaim_id;
      ++counters_.resumed_registrations;
    } else {
      do {
        id = id_base_ + next_local_id_;
        next_local_id_ = next_local_id_ + 1 < kIdSpan ? next_local_id_ + 1 : 1;
      } while (tasks_.count(id) != 0);
    }
    task = &tasks_[id];
    task->id = id;
    for (size_t s = 0; s < bell_slot_used_.size(); ++s)
      if (!bell_slot_used_[s]) {
        bell_slot_used_[s] = true;
        task->bell_slot = uint16_t(s);
        break;
      }
    task->key = reg.key;
    task->inactive_since = now;
    task->state_since = now;
  }
  // What this registration changes against the last (a new task: all of it). Auto mode measured it
  // and now it shares, or share mode learned kernels it did not know: its profile is read again. A
  // new objective or backend: its controller starts over from a baseline.
  const bool reload = fresh || (task->mode == TaskMode::Measure && reg.mode == TaskMode::Share) || reg.profile_grew;
  const bool new_controller =
      fresh || reg.objective_permille != task->requested_objective_permille || reg.backend != task->backend;
  const bool starts_measuring =
      reg.mode == TaskMode::Measure && (task->mode != TaskMode::Measure || task->measure_since == 0);
  task->take(reg);
  task->authenticated = reg.authenticated;
  if (reload) task->profile = profiles_.load(task->key, reg.mode);
  if (!task->profile) task->profile = std::make_shared<Profile>();
  task->busy_pct = busy_percent(*task->profile);
  ++counters_.registrations;
  // Without the key a task cannot take the priorities reserved for those who have it.
  int priority = reg.priority;
  if (!reg.authenticated && priority < settings_.min_unauthenticated_priority) {
    priority = std::min(settings_.min_unauthenticated_priority, protocol::kPriorityLevels - 1);
    ++counters_.capped_registrations;
  }
  task->priority = priority;
  if (new_controller) {
    ControllerSettings cs = settings_.controller;
    if (reg.objective_permille != 0) cs.objective_permille = reg.objective_permille;
    cs.partition = settings_.partition_pct != 0;
    cs.timesliced = reg.backend != Backend::Mps;
    cs.preempt = false;   // until a job it can preempt is below it (schedule)
    task->controller = Controller(cs);
    task->period = Period{};
  }
  if (starts_measuring) {
    task->measure_since = now;
    task->hold_ended = false;
  }
  task->last_heard = now;
  std::vector<Action> changes;
  schedule(now, changes);
  protocol::Registered r;
  r.lease_ms = u32(std::clamp<uint64_t>(settings_.lease_ns / 1'000'000, protocol::kMinLeaseMs, protocol::kMaxLeaseMs));
  r.priority = uint8_t(task->priority);
  r.min_gap_ns = u32(settings_.min_gap_ns);
  r.grant_latency_ns = u32(settings_.grant_latency_ns);
  r.gap_estimator = uint8_t(settings_.estimators.gap);
  r.duration_estimator = uint8_t(settings_.estimators.duration);
  r.boundary_permille = uint16_t(std::clamp(settings_.estimators.boundary_fraction, 0.0, 1.0) * 1000 + 0.5);
  r.bell_slot = task->bell_slot;
  r.directive = task->directive;
  out.push_back({task->id, r});
  // Its own directive travels in the reply.
  for (Action& a : changes)
    if (a.task_id != task->id) out.push_back(std::move(a));
  return task->id;
}

void Policy::on_message(uint64_t now, uint32_t id, const protocol::Body& body, std::vector<Action>& out) {
  notice_time(now);
  Task* t = find(id);
  if (t == nullptr) {
    if (!std::holds_alternative<protocol::Goodbye>(body))
      out.push_back({0, protocol::Error{protocol::ErrorCode::UnknownTask, 0}});
    return;
  }
  t->last_heard = now;
  uint64_t cause = 0;
  uint32_t answer = 0;
  if (const auto* n = std::get_if<protocol::Notify>(&body)) {
    handle_notify(now, *t, *n);
    if (n->flags & protocol::kNotifyActivityStart) cause = n->launched_ns != 0 ? n->launched_ns : now;
  } else if (const auto* i = std::get_if<protocol::Idle>(&body)) {
    handle_idle(now, *t, i->last_kernel_id);
  } else if (const auto* w = std::get_if<protocol::Want>(&body)) {
    handle_want(now, *t, *w);
  } else if (const auto* h = std::get_if<protocol::Heartbeat>(&body)) {
    t->memory_used = h->memory_used;
    t->slice_us = h->slice_us;
    t->memory_refusals = h->memory_refusals;
    // The cap it applies now is the last one sent: once a lease has passed since, its hook has heard
    // it or been dropped, whatever it says. (A task that kept saying an older, larger cap kept that
    // as memory it might hold, and every later job's cap at a byte; what it really holds it reports.)
    const uint64_t sent = t->directive.memory_cap;
    if (t->cap_pending != 0 && (h->memory_cap_mib == protocol::cap_mib(sent) || now - t->cap_sent_at > settings_.lease_ns)) {
      t->cap_confirmed = sent;
      t->cap_pending = 0;
    }
    answer = id;   // the current directive answers it: the client's sign of life, and a repair of lost pushes
  } else if (std::holds_alternative<protocol::Goodbye>(body)) {
    drop(id);
  } else {
    out.push_back({id, protocol::Error{protocol::ErrorCode::BadRequest, 0}});
    return;
  }
  schedule(now, out, cause, answer);
}

void Policy::notice_time(uint64_t now) {
  if (next_wake_ != kNever) {
    const uint64_t since = std::max(next_wake_, last_event_ns_);
    if (now > since && now - since > settings_.lease_ns / 2) {
      for (auto& [id, t] : tasks_) t.last_heard = std::max(t.last_heard, now);
      resend_all_ = true;
    }
  }
  last_event_ns_ = std::max(last_event_ns_, now);
}

void Policy::on_tick(uint64_t now, std::vector<Action>& out) {
  notice_time(now);
  std::vector<uint32_t> expired;
  for (const auto& [id, t] : tasks_)
    if (now > t.last_heard && now - t.last_heard > settings_.lease_ns) expired.push_back(id);
  for (uint32_t id : expired) {
    ++counters_.lease_expiries;
    drop(id);
  }
  schedule(now, out);
}

void Policy::update_profile(uint64_t now, const std::string& key, std::shared_ptr<const Profile> profile,
                            std::vector<Action>& out) {
  notice_time(now);
  if (!profile) return;
  bool any = false;
  for (auto& [id, t] : tasks_) {
    if (t.key != key) continue;
    t.profile = profile;
    t.busy_pct = busy_percent(*profile);
    any = true;
  }
  if (any) schedule(now, out);
}

void Policy::drop(uint32_t id) {
  if (holder_ == id) holder_ = 0;
  if (auto it = tasks_.find(id); it != tasks_.end() && it->second.bell_slot < bell_slot_used_.size())
    bell_slot_used_[it->second.bell_slot] = false;
  if (gap_.open && (gap_.filler == id || holder_ == 0)) close_gap();
  tasks_.erase(id);
  dropped_.push_back(id);
}

void Policy::handle_notify(uint64_t now, Task& t, const protocol::Notify& n) {
  ++t.notifications;
  ++counters_.notifications;
  // The launch time is believed unless it is in the future or older than a quiet period (clock
  // trouble, a stale datagram): the gap is predicted from the launch, not from a late arrival.
  uint64_t launched = now;
  if (n.launched_ns != 0 && n.launched_ns <= now && now - n.launched_ns < settings_.holder_quiet_ns)
    launched = n.launched_ns;
  if (!t.active && t.inactive_since != 0)
    t.idle_history.add(launched > t.inactive_since ? launched - t.inactive_since : 0);
  if (!t.active) begin_period(t, launched);
  else t.period.last_idle = 0;   // an idle inside the period (a mid-iteration sync) did not end it
  t.active = true;
  t.idle_at = 0;
  t.last_launch = now;
  if (n.flags & protocol::kNotifyActivityStart)
    t.activity_generation = std::max(t.activity_generation, n.activity_generation);
  if (t.id != holder_) return;
  if (gap_.open) {
    // Early stop: the holder is back, the rest of its predicted gap is gone.
    if (gap_.filler != 0 && gap_.credit_until_ns > now) ++counters_.early_stops;
    close_gap();
  }
  open_gap(now, t, n.kernel_id, launched);
}

void Policy::open_gap(uint64_t now, const Task& holder, uint64_t kernel, uint64_t launched) {
  auto it = holder.profile->find(kernel);
  if (it == holder.profile->end()) return;   // unknown kernel: no prediction, no fill
  const uint64_t gap = gap_after(it->second);
  if (gap == 0) return;
  if (gap < settings_.min_gap_ns) {
    ++counters_.gaps_too_short;
    return;
  }
  ++counters_.gaps_predicted;
  // The GPU is idle from the end of this kernel (assumed to start at its launch) for `gap`.
  gap_.open = true;
  gap_.start = launched + duration_of(it->second);
  gap_.end = gap_.start + gap;
  fill_gap(now);
}

// BestPrioFit, the FIKIT procedure: of the tasks waiting to fill, the highest priority whose wanted
// kernel fits the usable gap; within it the longest such kernel. It gets the whole usable gap as
// credit (it spends it on that kernel and whatever follows that still fits).
void Policy::fill_gap(uint64_t now) {
  if (!gap_.open || gap_.filler != 0) return;
  if (gap_.end <= now) {
    close_gap();
    return;
  }
  const uint64_t begin = std::max(gap_.start, now + settings_.grant_latency_ns);
  Task* best = nullptr;
  uint64_t best_usable = 0;
  bool waiting = false, profiled = false, in_time = false;   // how far the candidates got, for the miss
  for (auto& [id, t] : tasks_) {
    if (!t.want || t.mode != TaskMode::Share || !only_holder_blocks(now, t)) continue;
    waiting = true;
    if (!t.want->known) continue;
    profiled = true;
    // Time-sliced, a fill costs the GPU a switch to the filler's context and one back.
    const uint64_t sw = t.backend == Backend::TimeSlice ? settings_.switch_cost_ns : 0;
    if (gap_.end <= begin + 2 * sw) continue;
    in_time = true;
    const uint64_t usable = gap_.end - begin - 2 * sw;
    if (t.want->duration_ns > usable) continue;
    if (best == nullptr || t.priority < best->priority ||
        (t.priority == best->priority && t.want->duration_ns > best->want->duration_ns)) {
      best = &t;
      best_usable = usable;
    }
  }
  if (best == nullptr) {   // nothing fits now; a want arriving during the gap may
    gap_.miss = !waiting ? Miss::NoWant : !profiled ? Miss::Unprofiled : !in_time ? Miss::Late : Miss::TooLong;
    return;
  }
  const uint64_t sw = best->backend == Backend::TimeSlice ? settings_.switch_cost_ns : 0;
  gap_.filler = best->id;
  gap_.credit_ns = best_usable;
  gap_.credit_until_ns = gap_.end - sw;
  end_wait(now, *best);
  ++best->fills;
  ++counters_.fills;
}

void Policy::close_gap() {
  if (gap_.open && gap_.filler == 0) {
    switch (gap_.miss) {
      case Miss::NoWant: ++counters_.unfilled_no_want; break;
      case Miss::Unprofiled: ++counters_.unfilled_unprofiled; break;
      case Miss::TooLong: ++counters_.unfilled_too_long; break;
      case Miss::Late: ++counters_.unfilled_late; break;
    }
  }
  gap_ = Gap{};
}

void Policy::handle_idle(uint64_t now, Task& t, uint64_t last_kernel) {
  if (t.active) t.period.last_idle = now;
  if (t.id == holder_) {
    close_gap();   // its GPU work drained: nothing is predicted any more
    // A sync in the middle of an iteration is followed by the last kernel's usual gap: the holder
    // stays active that long (lower tasks must not run into it) unless it launches meanwhile.
    auto it = t.profile->find(last_kernel);
    const uint64_t gap = it != t.profile->end() ? gap_after(it->second) : 0;
    if (gap > 0 && t.active) {
      t.idle_at = now + gap + settings_.grant_latency_ns;
      return;
    }
  }
  if (t.active) {
    t.inactive_since = now;
    end_period(now, t);
  }
  t.active = false;
  t.idle_at = 0;
}

void Policy::handle_want(uint64_t now, Task& t, const protocol::Want& w) {
  ++t.wants;
  ++counters_.wants;
  Wanted want{w.kernel_id, w.predicted_ns, false, t.want ? t.want->since : now};
  // The daemon's own profile decides how long a kernel is; a client's word is capped.
  auto it = t.profile->find(w.kernel_id);
  if (it != t.profile->end()) {
    want.duration_ns = duration_of(it->second);
    want.known = true;
  } else if (want.duration_ns > settings_.max_predicted_ns) {
    want.duration_ns = settings_.max_predicted_ns;
    ++counters_.clamped_predictions;
  }
  t.want = want;
  fill_gap(now);   // a gap may be open with nobody to fill it yet
}

void Policy::schedule(uint64_t now, std::vector<Action>& out, uint64_t cause_ns, uint32_t always_to) {
  next_wake_ = kNever;
  preempt_job_ = find_preempt_job(no_preempt_why_);
  for (auto& [id, t] : tasks_) {
    if (t.mode == TaskMode::Share) t.controller.allow_preempt(now, preempt_below(t));
    // A share task that stopped launching without saying so (no sync) is not active forever.
    if (t.mode == TaskMode::Share && t.active) {
      const uint64_t quiet_end = t.last_launch + settings_.holder_quiet_ns;
      const uint64_t end = t.idle_at != 0 ? std::min(t.idle_at, quiet_end) : quiet_end;
      if (now >= end) {
        t.active = false;
        t.idle_at = 0;
        t.inactive_since = end;
        end_period(now, t);
      } else {
        wake_at(end);
      }
    }
    // A period that runs past its controller's limit: the regime is given up at once. (One whose
    // idle came and which only waits out its last kernel's gap is judged by that idle.)
    if (t.active && t.period.valid && !(t.idle_at != 0 && t.period.last_idle != 0)) {
      const uint64_t limit = t.requests.at_actual_load(t.controller.limit_ns());
      if (limit != UINT64_MAX && t.period.regime == t.controller.regime()) {
        // Counted from its request's estimated arrival, as it is judged (at alone's load).
        if (now - std::min(now, t.period.arrival) >= limit) {
          overrun(now, t);
        } else {
          wake_at(t.period.arrival + limit);
        }
      }
    }
    if (t.mode == TaskMode::Measure) {
      const uint64_t hold_end = t.measure_since + settings_.measure_hold_max_ns;
      if (now < hold_end) {
        wake_at(hold_end);
      } else if (!t.hold_ended) {
        t.hold_ended = true;
        ++counters_.measure_holds_ended;
      }
    }
    wake_at(t.last_heard + settings_.lease_ns + 1);
    // A baseline window lets the tasks below go once it has rested this long.
    if (t.mode == TaskMode::Share && !t.active && t.controller.regime() == Regime::Held)
      if (const uint64_t end = t.inactive_since + settings_.controller.baseline_idle_max_ns; now < end) wake_at(end);
    // The bound of the tasks below changes where this one's tight span begins and ends.
    if (t.mode == TaskMode::Share && !t.active) {
      const TightSpan span = tight_span(t);
      if (now < span.from) wake_at(span.from);
      if (now < span.until) wake_at(span.until);
    }
  }

  // The holder: the one share task at the highest registered priority (none when it shares that
  // priority with another task: equal priorities run side by side).
  const int top = top_priority();
  uint32_t holder = 0;
  int at_top = 0;
  for (const auto& [id, t] : tasks_)
    if (t.priority == top) { ++at_top; holder = id; }
  if (at_top != 1 || tasks_[holder].mode != TaskMode::Share) holder = 0;
  if (holder != holder_ || holder == 0 || !tasks_[holder].active) close_gap();
  holder_ = holder;
  if (gap_.open && gap_.filler != 0 && gap_.credit_until_ns <= now) close_gap();   // spent or too late

  for (auto& [id, t] : tasks_) {
    Directive d = directive_for(now, t);
    if (d.state == State::Run) end_wait(now, t);   // it runs: whatever it waited for is launched
    const bool changed = !same(d, t.directive, now);
    if (!changed && id != always_to && !resend_all_) continue;
    if (changed && d.state != t.directive.state) {
      if (t.state_since != 0 && now > t.state_since) {
        t.stated_ns += now - t.state_since;
        if (t.directive.state == State::Run) t.run_ns += now - t.state_since;
      }
      t.state_since = now;
    }
    if (changed) {
      d.generation = t.directive.generation + 1;
      d.cause_ns = d.state != t.directive.state ? cause_ns : 0;
      ++counters_.directives;
      if (d.memory_cap != t.directive.memory_cap) {
        t.cap_pending = std::max(t.cap_pending, d.memory_cap);
        t.cap_ever = std::max(t.cap_ever, d.memory_cap);
        t.cap_sent_at = now;
      }
      t.directive = d;
    }
    out.push_back({id, t.directive});
  }
  resend_all_ = false;
}

bool Policy::notifications_expected() const {
  auto it = tasks_.find(holder_);
  return it != tasks_.end() && it->second.active && (it->second.directive.role & protocol::kRoleGaps);
}

std::vector<TaskStatus> Policy::status(uint64_t now) const {
  std::vector<TaskStatus> out;
  for (const auto& [id, t] : tasks_) {
    TaskStatus s;
    static_cast<TaskIdentity&>(s) = t;
    s.active = t.active;
    s.waiting = t.want.has_value();
    s.directive = t.directive;
    s.fills = t.fills;
    {
      const uint64_t open = t.state_since != 0 && now > t.state_since ? now - t.state_since : 0;
      const uint64_t all = t.stated_ns + open, run = t.run_ns + (t.directive.state == State::Run ? open : 0);
      s.run_permille = all == 0 ? 1000 : uint32_t(run * 1000 / all);
    }
    s.notifications = t.notifications;
    s.wants = t.wants;
    s.kernels = t.profile ? t.profile->size() : 0;
    s.waits = t.waits;
    s.predicted_pause_ns = predicted_pause(t);
    s.busy_pct = t.busy_pct;
    s.controlled = controlled(t);
    s.regime = t.controller.regime();
    s.adopted = t.controller.adopted();
    s.objective_permille = t.controller.objective_permille();
    s.inflation_permille = t.controller.inflation_permille();
    s.recent_permille = t.controller.recent_permille();
    s.recent_periods = t.controller.recent_periods();
    s.inflation_overrun = t.controller.inflation_overran();
    s.inflation_within = t.controller.within_objective();
    s.baseline_period_ns = t.controller.baseline_quantile(50);
    s.regime_trials = t.controller.trials();
    s.regime_climbs = t.controller.climbs();
    s.regime_drops = t.controller.drops();
    s.held_ns = t.controller.held_ns();
    s.judged_ns = t.judged_ns;
    s.beside_ns = t.beside_ns;
    s.preempt_off = why_no_preempt(t);
    out.push_back(std::move(s));
  }
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.priority != b.priority ? a.priority < b.priority : a.id < b.id; });
  return out;
}

}  // namespace fikit::policy
