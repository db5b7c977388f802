#pragma once
// The FIKIT scheduling policy as a pure, deterministic core: events in (with the time passed in),
// actions out (messages to send, the next time to wake). No sockets, threads, clocks or SQLite:
// the daemon wraps it in Asio, tests and the benchmark drive it in virtual time. Profiles are
// handed in (ProfileSource). The rules are written down in docs/scheduling.md.
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "controller.h"
#include "request_estimate.h"
#include "kernel_rules.h"
#include "memory_size.h"
#include "protocol.h"

namespace fikit::policy {

// How much of its active time a program keeps the GPU busy, in percent: what its requests do on the
// GPU (Profile::request_busy_pct) when its runs say, else its measured kernel time against that
// plus the gaps inside its iterations. 0 when the profile holds nothing.
uint32_t busy_percent(const Profile& profile);

// Where profiles come from: the daemon reads profiledb, tests hand in tables.
class ProfileSource {
 public:
  virtual ~ProfileSource() = default;
  // The profile of `task_key`; an empty one when nothing is measured. Called when a task registers,
  // and again when it registers to share after it was measured (its profile has grown since).
  // `mode`: why it registers (a task that comes to be measured is expected to have no profile).
  virtual std::shared_ptr<const Profile> load(std::string_view task_key, protocol::TaskMode mode) = 0;
};

struct Settings {
  uint64_t min_gap_ns = 5'000;                 // predicted gaps shorter than this are not filled
  Estimators estimators;                       // gap and duration predictions (kernel_rules.h); sent to clients
  uint64_t grant_latency_ns = 20'000;          // a directive's trip + the filler's launch: credit starts no earlier
  uint64_t switch_cost_ns = 5'000;             // time-sliced GPU: switching to a filler's context and back, each
  uint64_t run_bound_ns = 200'000;             // predicted work a task keeps in flight in Run
  // Once everything above a task has been idle this long, its bound becomes run_bound_idle_ns: a
  // service that is rarely busy lets the job run at full speed, and pays at most that on its return.
  uint64_t idle_grace_ns = 20'000'000;
  uint64_t run_bound_idle_ns = 1'000'000;
  // A holder whose last kIdleHistory idle periods lasted at least L and at most 2L (a periodic
  // service, a camera feed) is expected back L after it went idle: the bound is run_bound_idle_ns
  // from the start of its idle period until return_margin_ns before L (so the work in flight drains
  // to run_bound_ns before it returns), and the idle grace counts from L. 0: never predicted.
  uint64_t return_margin_ns = 3'000'000;
  // Below such holders, and only while every task above is in a predicted pause, a directive in Run
  // also carries when the first of them is due back less the margin (credit_until_ns): a launch
  // predicted to end by then may go whatever the bound. The job then keeps as much work queued as
  // drains before the service returns (a CPU-bound job loses ~4 % under a 1 ms bound: docs/results.md).
  bool return_credit = true;
  // MPS. A kernel's SM hold (how long one of its blocks keeps an SM: kernel_rules.h): launches
  // holding SMs up to this are short holds, which the ShortBeside regime lets run beside an active
  // service (under MPS client priority its blocks are dispatched first as SMs free up).
  uint64_t short_hold_ns = kDefaultShortHoldNs;
  // Share of the GPU's SMs (percent, 0: no partitions) on which a task below runs, in the regimes
  // that say so, what may not run at full width: a green context, the rest of the SMs stay free
  // for the service (docs/scheduling.md).
  uint32_t partition_pct = 35;
  // What the MPS tasks below a service may do while it is active: chosen per service by its
  // controller (controller.h) from its measured periods, or one regime for every service.
  bool regime_auto = true;
  Regime fixed_regime = Regime::Hold;
  // Time-sliced: the time slice of a job's own contexts in every step below free, when it is the only
  // job below the service (0: none, and no regime preempt). The GPU switches a job out within about
  // this when the service has work; each switch costs a tenth of a millisecond or more of GPU time,
  // so a short slice is given only to a job alone below the service (two jobs at short slices would
  // spend the GPU switching between themselves). A job alone switches as often at any slice (when
  // the service's work arrives): beside the LLM decode graph service on an H100 25, 50 and 100 us
  // kept GraphSAGE at the same share, the service's p99 at 1.36x, 1.38x and 1.45x, within each
  // other's intervals (docs/results.md; one pair, other families untried).
  uint64_t preempt_slice_ns = 50'000;
  // ... and the service's own, so that once it has the GPU it keeps it through its request instead
  // of giving the job a slice and two switches every 1-2 ms (0: the service keeps its own). On an
  // H100 a 7-ms kernel a request beside a job of 10-ms kernels at 100 us took 1.23x alone at the
  // service's default slice, 1.03x at 16 ms (docs/results.md).
  uint64_t preempt_service_slice_ns = 16'000'000;
  // The controller's windows and pauses, and the objective of services that state none.
  ControllerSettings controller;
  uint64_t max_predicted_ns = 100'000'000;     // a client's prediction of a kernel the daemon has no profile of
  uint64_t lease_ns = 1'000'000'000;           // silent this long: the task is dropped
  uint64_t holder_quiet_ns = 20'000'000;       // an active task silent this long counts as idle
  uint64_t measure_hold_max_ns = 120'000'000'000;  // a measuring task holds lower priorities at most this long
  // With a key configured, tasks that registered without authenticating get at best this priority,
  // and hold no authenticated task by measuring.
  int min_unauthenticated_priority = 0;
  bool keyed = false;
  // Device memory kept for priority-0 tasks (0: none): the tasks below share what it leaves of the
  // GPU's memory, beside what priority-0 tasks hold beyond it. Each may hold what it holds plus an
  // equal part of what is still free of that, in steps of memory_step_bytes (docs/memory.md).
  values::MemorySize reserve_memory;
  uint64_t memory_step_bytes = 64ull << 20;
  // Daemon only (not the policy): after a notification, while the holder notifies, poll the socket
  // this long before sleeping. A datagram that wakes a sleeping daemon costs the sender ~8 us on a
  // 2-core VM, ~3 us when the daemon is polling (docs/performance-scheduler.md). 0: always sleep.
  uint64_t notify_poll_ns = 200'000;
};

// A registration as the policy takes it: the TASK rows of the register (protocol.h's
// FIKIT_REGISTER_FIELDS, under their names there), and what the daemon adds.
struct Registration {
#define FIKIT_REGISTRATION_MEMBER(name, type, initial, valid, kept_as) type name = initial;
  FIKIT_REGISTER_FIELDS(FIKIT_REGISTRATION_MEMBER, FIKIT_REGISTER_SKIP)
#undef FIKIT_REGISTRATION_MEMBER
  std::string key;
  bool authenticated = false;
  bool profile_grew = false;   // the client stored new kernels: read the profile again
  // The task ID this client had before its lease ran out (a client late on a busy host): a new task
  // gets it back when no task holds it (0: none).
  uint32_t reclaim_id = 0;

  // What `reg` says: its TASK rows, its key, and its flags; the daemon fills in the rest.
  static Registration of(const protocol::Register& reg);
};

// One message for one task (task_id names the receiver; 0: whoever sent the event).
struct Action {
  uint32_t task_id = 0;
  protocol::Body body;
};

// The policy's counters, once: the struct, the sum of two (a freed GPU's counters carried into the
// daemon's totals), status --json and the metrics (fikit_NAME_total per GPU; the unfilled_* ones as
// the family fikit_gaps_unfilled_total by reason) come from this list, so no counter can be left
// out of any (7 were: the unfilled-gap and overlap totals fell to 0 when a GPU's last task left).
// X(name, what it counts).
#define FIKIT_POLICY_COUNTERS(X)                                                                            \
  X(registrations, "Task registrations (new and repeated).")                                                \
  X(capped_registrations, "Registrations without the key capped below the priorities reserved for it.")     \
  X(refused_registrations, "Registrations refused at the GPU's task limit.")                                \
  X(resumed_registrations, "Clients whose lease ran out that registered again as the task they were.")     \
  X(notifications, "Holder notifications (activity starts, gap openings).")                                 \
  X(wants, "Launches tasks below the holder asked gap credit for.")                                         \
  X(directives, "Directives sent to tasks.")                                                                \
  X(gaps_predicted, "Idle gaps of the holder predicted from its profile.")                                  \
  X(gaps_too_short, "Predicted gaps shorter than min-gap, not filled.")                                     \
  X(fills, "Predicted idle gaps of the holder handed to a lower task.")                                     \
  X(early_stops, "Fills ended early because the holder launched again before the predicted gap ended.")     \
  X(lease_expiries, "Tasks dropped because they went silent.")                                              \
  X(measure_holds_ended, "Measuring tasks that held lower priorities as long as measure-hold-max.")          \
  X(clamped_predictions, "Predictions of unprofiled kernels capped at max-predicted.")                      \
  X(unfilled_no_want, "Predicted gaps that ended with nobody waiting to fill.")                             \
  X(unfilled_unprofiled, "Predicted gaps that ended with only kernels not in their profile waiting.")       \
  X(unfilled_too_long, "Predicted gaps that ended with every waiting kernel too long for them.")            \
  X(unfilled_late, "Predicted gaps that ended before a grant could reach a filler.")                        \
  X(regime_trials, "Trials of a more generous regime for the tasks below a service.")                       \
  X(regime_climbs, "Regimes adopted after a trial kept the service within its objective.")                  \
  X(regime_drops, "Regimes given up: a window past the objective, or one period past the limit.")           \
  X(baselines, "Baseline windows measured with the tasks below a service held.")
struct Counters {
#define FIKIT_COUNTER_FIELD(name, help) uint64_t name = 0;
  FIKIT_POLICY_COUNTERS(FIKIT_COUNTER_FIELD)
#undef FIKIT_COUNTER_FIELD
  Counters& operator+=(const Counters& o) noexcept {
#define FIKIT_COUNTER_ADD(name, help) name += o.name;
    FIKIT_POLICY_COUNTERS(FIKIT_COUNTER_ADD)
#undef FIKIT_COUNTER_ADD
    return *this;
  }
};

// How long tasks waited on a want until the daemon let the launch go (a fill or Run), in the
// buckets the metrics endpoint exposes.
struct WaitHistogram {
  static constexpr std::array<uint64_t, 11> kBoundsNs = {10'000,    50'000,    100'000,    250'000,
                                                         500'000,   1'000'000, 2'500'000,  5'000'000,
                                                         10'000'000, 50'000'000, 250'000'000};
  std::array<uint64_t, kBoundsNs.size() + 1> counts{};   // the last: above every bound
  uint64_t count = 0, sum_ns = 0;
  void add(uint64_t ns);
};

// The bell board's slots (protocol::kBellSlots), one per task: the domains of one daemon share them.
using BellSlots = std::array<bool, protocol::kBellSlots>;

// Who a task is and what it holds, as the policy keeps it and its status row shows it: one
// declaration for both.
struct TaskIdentity {
  uint32_t id = 0;
  std::string key;
  int priority = 0;   // in force: capped without the key (as asked: requested_priority)
  bool authenticated = false;
  // The TASK rows of its registration (protocol.h's FIKIT_REGISTER_FIELDS, under their kept_as names).
#define FIKIT_TASK_IDENTITY_MEMBER(name, type, initial, valid, kept_as) type kept_as = initial;
  FIKIT_REGISTER_FIELDS(FIKIT_TASK_IDENTITY_MEMBER, FIKIT_REGISTER_SKIP)
#undef FIKIT_TASK_IDENTITY_MEMBER
  // Device memory: what its allocations hold (its last heartbeat), and the allocations it refused
  // over its cap.
  uint64_t memory_used = 0;
  uint32_t memory_refusals = 0;
  // The time slice its own contexts run at, as its last heartbeat said (protocol::Heartbeat).
  uint16_t slice_us = 0;

  // Takes the TASK rows of a registration (its key names the task from its first; the priority in
  // force is the policy's to decide).
  void take(const Registration& reg);
};

struct TaskStatus : TaskIdentity {
  bool active = false, waiting = false;
  protocol::Directive directive;
  uint64_t fills = 0, notifications = 0, wants = 0;
  // Of its time since it registered, the share in Run (nothing above it active), permille: what a
  // job keeps of the GPU's time; 1000 for a task never held.
  uint32_t run_permille = 1000;
  size_t kernels = 0;   // in its profile
  WaitHistogram waits;
  uint64_t predicted_pause_ns = 0;   // the shortest of its last 16 pauses, when its return is predicted (0: not)
  uint32_t busy_pct = 0;             // busy_percent of its profile
  // Its controller, while it has MPS share tasks below it (controlled): the regime they are under,
  // its objective, the last judged window against the baseline (permille, 0: none yet), the
  // baseline's median period, its counts, and how long the tasks below were held for baselines.
  bool controlled = false;
  Regime regime = Regime::Held, adopted = Regime::Held;   // in force (a trial's, a baseline's); adopted
  uint32_t objective_permille = 0, inflation_permille = 0;
  // What its clients saw lately (Controller::recent_permille), over how many of its periods.
  uint32_t recent_permille = 0, recent_periods = 0;
  bool inflation_overrun = false;    // inflation_permille is the limit a period ran past, not a measurement
  bool inflation_within = false;     // the last judged window kept the objective (its median, upper quartile and tail)
  uint64_t baseline_period_ns = 0;
  uint64_t regime_trials = 0, regime_climbs = 0, regime_drops = 0, held_ns = 0;
  // Its active time in the periods its controller judged (a task below exposed to its regime), and
  // of that the time under a regime that let them run beside it (above hold): what being an MPS
  // client bought its jobs (rules/backend_rule.h, fikit-run's next start).
  uint64_t judged_ns = 0, beside_ns = 0;
  // A controlled time-sliced service whose ladder lacks the regime preempt, and why (nullptr: it
  // has it, or it is no such service).
  const char* preempt_off = nullptr;
};

class Policy {
 public:
  static constexpr uint64_t kNever = UINT64_MAX;
  static constexpr size_t kMaxTasks = 256;   // = protocol::kBellSlots

  // Task IDs of one policy: id_base + 1 .. id_base + kIdSpan - 1 (a daemon with one policy per GPU
  // gives each its own range). bell_slots: shared with other policies (nullptr: its own).
  static constexpr uint32_t kIdSpan = 1u << 24;
  Policy(Settings settings, ProfileSource& profiles, uint32_t id_base = 0, BellSlots* bell_slots = nullptr);
  Policy(const Policy&) = delete;
  Policy& operator=(const Policy&) = delete;

  // A registration. `existing` is the task the sender's session registered before (0: none): the
  // same task is updated then. Returns the task ID, or 0 when refused (`out` then holds an Error for
  // task 0). `out` gets the Registered reply first, then the directives that changed for others.
  uint32_t on_register(uint64_t now, uint32_t existing, const Registration& reg, std::vector<Action>& out);
  // Notify, Idle, Want, Heartbeat or Goodbye of a registered task (the daemon checked who sent it).
  void on_message(uint64_t now, uint32_t task, const protocol::Body& body, std::vector<Action>& out);
  // Timers: leases, quiet tasks, measurement holds.
  void on_tick(uint64_t now, std::vector<Action>& out);
  // A task's profile was read (again), after its registration: every task of that key gets it.
  void update_profile(uint64_t now, const std::string& key, std::shared_ptr<const Profile> profile,
                      std::vector<Action>& out);
  // The earliest time on_tick has something to do (kNever: nothing).
  uint64_t next_wake() const { return next_wake_; }
  // Tasks dropped since the last call (lease expired, goodbye): the daemon forgets their sessions.
  std::vector<uint32_t> take_dropped() { return std::exchange(dropped_, {}); }
  // What services' controllers judged and decided since the last call (the daemon logs them: a
  // change of regime at info, every judged period at debug), at most kMaxServicePeriods of them.
  struct ServicePeriod {
    uint32_t task_id = 0;
    std::string key;
    uint64_t response_ns = 0, work_ns = 0;   // the request's estimated response; its period alone
    uint32_t load_permille = 1000;           // the load it met (RequestEstimate::load_permille)
    Regime regime = Regime::Held;            // the regime it ran under
    bool overrun = false;                    // ran past the limit: judged while under way
    Regime next = Regime::Held, adopted = Regime::Held;   // the controller's regime and adopted step after it
    bool changed = false;                    // either of them changed with it
    uint32_t inflation_permille = 0;         // the last judged window's reading after it
    bool within = false;                     // and whether it kept the objective
  };
  static constexpr size_t kMaxServicePeriods = 4096;
  std::vector<ServicePeriod> take_service_periods() { return std::exchange(service_periods_, {}); }

  // The backend a job starting now should take where both are open to it (fikit-scheduler --mps
  // on publishes it for fikit-run): time-sliced, for a job below priority `above`, when the top
  // services are time-sliced and have no job below them yet, so that they can switch the job out
  // at its short slice (directive_core; an MPS client's work runs in the MPS server's context,
  // which FIKIT never touches); else MPS, where jobs run beside each other. `why`: what it found.
  protocol::Backend job_backend(int& above, const char*& why) const;
  // The holder is active and sends gap notifications: more are coming soon (the daemon polls).
  bool notifications_expected() const;
  std::vector<TaskStatus> status(uint64_t now) const;
  const Counters& counters() const { return counters_; }
  const Settings& settings() const { return settings_; }
  uint32_t holder() const { return holder_; }
  bool has_task(uint32_t id) const { return tasks_.count(id) != 0; }
  uint32_t pid_of(uint32_t id) const {   // 0: no such task
    auto it = tasks_.find(id);
    return it == tasks_.end() ? 0 : it->second.pid;
  }
  size_t task_count() const { return tasks_.size(); }
  // The local part of the next task ID it gives (1 .. kIdSpan - 1), and where a policy made for the
  // same slot goes on from (Domains: IDs of a freed domain are not handed out again at once).
  uint32_t next_local_id() const { return next_local_id_; }
  void continue_ids_from(uint32_t next) { next_local_id_ = next >= 1 && next < kIdSpan ? next : 1; }

 private:
  // The lengths of a task's last kIdleHistory idle periods (from its idle to its next activity).
  static constexpr size_t kIdleHistory = 16;
  struct IdleHistory {
    std::array<uint64_t, kIdleHistory> ns{};
    size_t count = 0;   // periods seen (the ring holds the last kIdleHistory)
    void add(uint64_t len) { ns[count++ % kIdleHistory] = len; }
    // The shortest of the last kIdleHistory periods when they keep a rhythm (the longest at most
    // twice the shortest); 0 until that many were seen, or when they vary more. Random arrivals
    // vary far more: of 16 exponential pauses the longest is typically dozens of times the shortest,
    // and the next pause would come before all 16 one time in 17.
    uint64_t steady_shortest() const;
  };
  // A service's active period under way (first launch after an idle to its last idle), for its
  // controller: counted when one regime was in force throughout and a task below was exposed to it.
  struct Period {
    uint64_t start = 0, last_idle = 0;   // last_idle 0: no idle yet
    uint64_t arrival = 0;                // its request's estimated arrival (request_estimate.h)
    bool valid = false;
    Regime regime = Regime::Held;
  };
  struct Wanted {
    uint64_t kernel_id = 0, duration_ns = 0;
    bool known = false;   // the daemon has a profile for it: it may fill gaps
    uint64_t since = 0;   // the first want of this wait
  };
  struct Task : TaskIdentity {
    std::shared_ptr<const Profile> profile;
    uint32_t busy_pct = 0;           // busy_percent(*profile)
    uint64_t last_heard = 0;
    uint64_t measure_since = 0;      // when it registered in measure mode
    bool hold_ended = false;         // its measurement hold ran out (counted once)
    bool active = false;             // launched since its last idle (share tasks, from notifications)
    uint64_t inactive_since = 0;     // when it last stopped being active
    uint64_t last_launch = 0;
    uint64_t idle_at = 0;            // idle reported mid-iteration: inactive from then (0: not pending)
    IdleHistory idle_history;        // how long its recent idle periods lasted
    Controller controller;           // what the tasks below it may do (while it has any)
    uint64_t judged_ns = 0, beside_ns = 0;   // TaskStatus's
    Period period;
    RequestEstimate requests;        // its periods as its clients wait for them
    std::optional<Wanted> want;      // blocked on this launch
    protocol::Directive directive;   // last sent
    uint16_t bell_slot = protocol::kNoBellSlot;
    uint32_t activity_generation = 0;   // its last activity start rung on the bell
    uint64_t fills = 0, notifications = 0, wants = 0;
    // Time in each directive state so far (status: run_permille): the state's start, and the time in
    // Run and in all, up to it.
    uint64_t state_since = 0, run_ns = 0, stated_ns = 0;
    WaitHistogram waits;
    // Memory caps in force: the last one its hook said it applies, and the largest sent since (0:
    // none pending). Until the hook confirms, the task may hold any of them (memory_committed).
    uint64_t cap_confirmed = 0, cap_pending = 0, cap_sent_at = 0;
    uint64_t cap_ever = 0;           // the largest cap it was ever sent (reported_use)
  };
  // The holder's predicted idle gap, handed to one filler as credit.
  enum class Miss : uint8_t { Late, NoWant, Unprofiled, TooLong };
  struct Gap {
    bool open = false;
    Miss miss = Miss::Late;          // why the last try found no filler
    uint64_t start = 0, end = 0;
    uint32_t filler = 0;             // 0: not handed out yet
    uint64_t credit_ns = 0, credit_until_ns = 0;
  };

  Task* find(uint32_t id);
  void drop(uint32_t id);
  void handle_notify(uint64_t now, Task& t, const protocol::Notify& n);
  void handle_idle(uint64_t now, Task& t, uint64_t last_kernel);
  void handle_want(uint64_t now, Task& t, const protocol::Want& w);
  // Opens the holder's gap after `kernel` launched at `launched` and hands it to the best filler.
  void open_gap(uint64_t now, const Task& holder, uint64_t kernel, uint64_t launched);
  void fill_gap(uint64_t now);
  // Ends the holder's gap; one that got no filler is counted by why (Counters::unfilled_*).
  void close_gap();
  // Recomputes the holder, every task's directive, sends the changed ones, sets next_wake_.
  void schedule(uint64_t now, std::vector<Action>& out, uint64_t cause_ns = 0, uint32_t always_to = 0);
  protocol::Directive directive_for(uint64_t now, const Task& t) const;
  // The device memory `t` may hold (Settings::reserve_memory); 0: no cap.
  uint64_t memory_cap_for(const Task& t) const;
  // What a task below priority 0 may hold as far as the daemon can tell: what it holds, the cap its
  // hook confirmed, or a larger one sent since (it may believe any of them), whichever is most.
  uint64_t memory_committed(const Task& t, uint64_t total) const;
  // What a task below priority 0 reports holding, believed up to the largest cap it was sent; a
  // report above the GPU's size (`total`) not at all.
  uint64_t reported_use(const Task& t, uint64_t total) const;
  bool blocks(uint64_t now, const Task& above, const Task& below) const;
  bool measuring_hold(uint64_t now, const Task& t) const;
  bool only_holder_blocks(uint64_t now, const Task& t) const;
  int top_priority() const;   // the highest registered (lowest number); kPriorityLevels: none
  uint32_t find_preempt_job(const char*& why_not) const;
  const char* why_no_preempt(const Task& s) const;
  bool preemptible(const Task& t) const;
  bool preempt_below(const Task& s) const;
  uint16_t service_slice_us(uint64_t now, const Task& t) const;
  protocol::Directive directive_core(uint64_t now, const Task& t) const;
  // Nothing above `t` is active, and each is outside its tight span: `t` may keep run_bound_idle_ns
  // in flight.
  bool relaxed_bound(uint64_t now, const Task& t) const;
  // How long the idle task `u` is expected to pause: L when its last kIdleHistory idle periods
  // lasted between L and 2L and L is longer than return_margin_ns, else 0 (not predicted).
  uint64_t predicted_pause(const Task& u) const;
  // The part of `u`'s pause in which the tasks below keep the tight bound: from return_margin_ns
  // before its predicted return (from the start of the pause when none is predicted) until
  // idle_grace_ns after that return (kNever when idle_grace_ns is 0).
  struct TightSpan {
    uint64_t from = 0, until = kNever;
  };
  TightSpan tight_span(const Task& u) const;
  // Run credit for `t` (return_credit): the earliest start of a tight span among the tasks above it,
  // when each of them is idle in a predicted pause that has not reached it yet; else 0.
  uint64_t return_credit_until(uint64_t now, const Task& t) const;
  // When the first task above `t` is predicted back, when each of them is idle in a predicted pause
  // that has not ended yet; else 0.
  uint64_t predicted_return(uint64_t now, const Task& t) const;
  // The controller: a service's active period begins, ends (its last idle: judged), or runs past its
  // limit (overrun); the counts its controller changed go into the policy's.
  void begin_period(Task& t, uint64_t launched);
  void end_period(uint64_t now, Task& t);
  void overrun(uint64_t now, Task& t);
  void count_controller(const Controller& before, const Controller& after);
  // A share task below `t`.
  bool share_below(const Task& t) const;
  // Whether `t`'s controller runs: it is a share task with a share task below it. A time-sliced
  // service's ladder is Hold, Preempt (one job below that took its slice) and Free (controller.h).
  bool controlled(const Task& t) const {
    return settings_.regime_auto && t.mode == protocol::TaskMode::Share && share_below(t);
  }
  // The regime a task below is under: the most protective of the share tasks above it.
  Regime regime_for(uint64_t now, const Task& below) const;
  // What `u` imposes on the tasks below now: its controller's regime, except that a baseline
  // window lets them go (its adopted regime) once `u` has rested past baseline_idle_max_ns.
  Regime regime_of(uint64_t now, const Task& u) const;
  // A task below `t` is under `t`'s regime (another service above it may hold it tighter).
  bool exposed(uint64_t now, const Task& t) const;
  uint64_t duration_of(const KernelStats& s) const;
  uint64_t gap_after(const KernelStats& s) const;   // 0 when it usually ends an iteration
  void wake_at(uint64_t t) { if (t < next_wake_) next_wake_ = t; }
  // Every event passes `now` here first: when the policy was not called for half a lease past a
  // time it had asked to be woken at, the daemon itself was stopped or starved, and its silence is
  // not the clients'. Every task then gets a fresh lease (those whose clients live are heard within
  // a quarter of it; only the dead go, a lease later) instead of all being dropped at once, and
  // the next schedule() sends every task its directive: a client that took the daemon's silence
  // for its death hears at once that its task is still there.
  void notice_time(uint64_t now);
  void end_wait(uint64_t now, Task& t);   // its want is granted (a fill, or Run)

  Settings settings_;
  ProfileSource& profiles_;
  std::unordered_map<uint32_t, Task> tasks_;
  const uint32_t id_base_;
  uint32_t next_local_id_ = 1;
  uint32_t holder_ = 0;              // 0: none
  uint32_t preempt_job_ = 0;         // find_preempt_job() at the last schedule()...
  const char* no_preempt_why_ = nullptr;   // ...and why there is none
  Gap gap_;
  uint64_t next_wake_ = kNever;
  uint64_t last_event_ns_ = 0;       // notice_time()
  bool resend_all_ = false;          // notice_time() saw the daemon's own stall
  std::vector<uint32_t> dropped_;
  std::vector<ServicePeriod> service_periods_;
  void note_period(const Task& t, const Controller& before, uint64_t response, uint64_t work, bool overrun);
  BellSlots own_bell_slots_{};
  BellSlots& bell_slot_used_;
  Counters counters_;
};

}  // namespace fikit::policy
