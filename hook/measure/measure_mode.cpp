// Measure mode: every op is timed on the GPU (timer.h) and handed through a lock-free ring
// (op_ring.h) to one measurement thread, which builds runs (run_builder.h) and stores each run in
// the profile database. Auto mode is measure mode that hands over to share mode after enough runs.
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cinttypes>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <thread>

#include "../clock.h"
#include "../driver.h"
#include "../kernel_names.h"
#include "../log.h"
#include "../mode.h"
#include "kernelid.h"
#include "op_ring.h"
#include "profiledb.h"
#include "request_clock.h"
#include "run_builder.h"
#include "sampling.h"
#include "timer.h"

namespace fikit::hook {
namespace {

using measure::OpRing;
using measure::OpSlot;
using measure::Timer;

uint64_t now_ms() { return monotonic_ms(); }

void sleep_us(long us) {
  timespec ts{0, us * 1000};
  nanosleep(&ts, nullptr);
}

std::string db_path_of(const Config& cfg) {
  return cfg.db_path[0] ? std::string(cfg.db_path) : profiledb::Database::default_path();
}

// The op between before_launch and after_launch of this thread. initial-exec: the hook is
// preloaded, so its TLS is static and reading it never allocates.
struct InFlight {
  OpSlot* slot;
  uint64_t seq;
};
thread_local InFlight t_in_flight __attribute__((tls_model("initial-exec"))) = {nullptr, 0};

class MeasureMode;
std::atomic<MeasureMode*> g_draining_mode{nullptr};

class MeasureMode final : public Mode {
 public:
  // share_after_runs > 0: auto mode, hand over to share mode once the task has that many runs.
  // gate: share mode's gate for a job (make_share_gate), which every launch passes first.
  MeasureMode(const Config& cfg, Timer* timer, std::unique_ptr<OpRing> ring, uint32_t share_after_runs, Mode* gate)
      : cfg_(cfg), ring_(std::move(ring)), timer_(timer), gate_(gate), share_after_runs_(share_after_runs),
        windows_(measures_windows(cfg, *timer)),
        sample_every_(windows_ && !cfg.measure_sample_set ? settings::kMeasureWindowSampleFallback : std::max(cfg.measure_sample, 1u)),
        burst_(cfg.measure_burst > 0 ? cfg.measure_burst : 1), owner_pid_(getpid()),
        // A run holds run_iterations measured iterations' worth of ops either way: with windows,
        // that many times sample_every_ synchronisations, each measured in part.
        builder_(windows_ ? uint64_t{cfg.run_iterations} * sample_every_ : cfg.run_iterations, windows_) {}

  // Windows where asked, or by default where the timer's cost is per op (events): CUPTI's is
  // being attached at all, and it switches collection per whole iteration. One in one: every op.
  static bool measures_windows(const Config& cfg, const Timer& timer) noexcept {
    if (cfg.measure_sample <= 1 || cfg.measure_unit == SampleUnit::Iteration) return false;
    if (timer.times_with_events()) return true;
    // CUPTI hands over records per whole measured iteration (collection on and off, drained at its
    // end); windows would get records of launches nobody measured.
    if (cfg.measure_unit == SampleUnit::Window)
      log(LogLevel::Warn, "measure: FIKIT_MEASURE_UNIT=window needs CUDA events (FIKIT_TIMING=events); timing with "
          "CUPTI, whole iterations are measured");
    return false;
  }

  // Whether this op is measured, into op.mode_context (read by before_launch): non-null when it is
  // (with windows, its window's serial). Only measured ops need kernel IDs (up to a stack walk each).
  bool begin_launch(LaunchInfo& op) noexcept override {
    bool gate_wants_id = false;
    if (gate_ != nullptr) {
      gate_wants_id = gate_->begin_launch(op);
      op.gate_context = op.mode_context;
    } else if (measurement_demoted() && !demoted_.exchange(true, std::memory_order_relaxed)) [[unlikely]] {
      hand_over_demoted();
    }
    // Windows count a run in synchronisations that ended work on SMs (after_sync). A load before
    // the first store: the line stays shared while the flag is set.
    if (windows_ && (op.kind == OpKind::Kernel || op.kind == OpKind::Graph) &&
        !sm_work_since_sync_.load(std::memory_order_relaxed))
      sm_work_since_sync_.store(true, std::memory_order_relaxed);
    // A request's start: the first launch of work after a synchronisation (a clock read per request).
    if ((op.kind == OpKind::Kernel || op.kind == OpKind::Graph) && !requests_.open()) {
      requests_.launched(monotonic_ns());
      if (backend_.load(std::memory_order_relaxed) == kBackendUnknown) note_backend();
    }
    uintptr_t measured = 0;
    if (retired_.load(std::memory_order_relaxed)) {
      measured = 0;
    } else if (windows_) {
      measured = window_of_next_launch();
    } else if (sample_every_ == 1) {
      measured = 1;
    } else {
      const uint64_t in_iteration = lengths_.launched();
      const uint64_t epoch = sync_epoch_.load(std::memory_order_relaxed);
      bool m = measured_iteration(epoch);
      if (!m && in_iteration >= lengths_.long_after(kLongIterationLaunches)) m = promote(epoch);
      measured = m ? 1 : 0;
    }
    op.mode_context = reinterpret_cast<void*>(measured);
    return measured != 0 || gate_wants_id;
  }

  void before_launch(LaunchInfo& op) noexcept override {
    t_in_flight.slot = nullptr;
    // A job waits at the gate first: its timing (events or CUPTI) starts where the launch reaches
    // the driver. Never to its SM partition: the measurement's events are on the program's stream.
    if (gate_ != nullptr) {
      void* own = op.mode_context;
      const bool reroutable = op.reroutable;
      op.mode_context = op.gate_context;
      op.reroutable = false;
      gate_->before_launch(op);
      op.reroutable = reroutable;
      op.mode_context = own;
    }
    // Iterations: one iteration (the ops between two host synchronisations) in sample_every_ is
    // measured, whole: its gaps stay gaps. Windows: a few consecutive ops in every sample_every_
    // ops. The ops not measured cost the program nothing but that choice.
    if (op.mode_context == nullptr || retired_.load(std::memory_order_relaxed)) return;
    const uint64_t epoch = sync_epoch_.load(std::memory_order_relaxed);
    start_thread_once();
    uint64_t seq = 0;
    OpSlot* slot = ring_->claim(seq);
    if (!slot) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      drop_pending_.store(true, std::memory_order_relaxed);
      return;
    }
    slot->kernel_id = op.id;
    slot->stream = reinterpret_cast<uint64_t>(op.stream);
    slot->kind = op.kind;
    slot->sync_epoch = epoch;
    slot->work_epoch = work_epoch_.load(std::memory_order_relaxed);
    slot->after_drop = drop_pending_.exchange(false, std::memory_order_relaxed);
    slot->window = windows_ ? reinterpret_cast<uintptr_t>(op.mode_context) : 0;
    slot->thread = reinterpret_cast<uintptr_t>(&t_in_flight);
    timer_->before(*slot, seq, op);
    t_in_flight = {slot, seq};
  }

  void after_launch(const LaunchInfo& op, CUresult result) noexcept override {
    if (gate_ != nullptr) {
      LaunchInfo gated = op;
      gated.mode_context = op.gate_context;
      gate_->after_launch(gated, result);
    }
    const InFlight f = t_in_flight;
    if (!f.slot) return;
    t_in_flight.slot = nullptr;
    f.slot->launched = result == CUDA_SUCCESS;
    timer_->after(*f.slot, f.seq, op, f.slot->launched);
    ring_->publish(*f.slot, f.seq);
  }

  // A job joins the daemon as a job (its gate, which also holds it to its memory cap); a service
  // says that it measures, so that the tasks below it keep off the GPU meanwhile.
  void before_allocation() noexcept override {
    if (gate_ != nullptr) gate_->before_allocation();
    else announce_measurement(cfg_, /*wait=*/true);
  }

  void after_sync(SyncKind kind) noexcept override {
    if (gate_ != nullptr) gate_->after_sync(kind);
    if (requests_.open()) requests_.synchronised(monotonic_ns());
    // With windows a run is counted in these: PyTorch uploads a model's weights with hundreds of
    // synchronous copies, which would otherwise make the first runs of a few ops each.
    if (windows_ && sm_work_since_sync_.exchange(false, std::memory_order_relaxed))
      work_epoch_.fetch_add(1, std::memory_order_relaxed);
    const uint64_t epoch = sync_epoch_.fetch_add(1, std::memory_order_relaxed) + 1;
    if (sample_every_ == 1 || windows_ || retired_.load(std::memory_order_relaxed)) return;
    // After promote(), which holds the same lock: its switch never outlives the iteration it was for.
    std::lock_guard guard(collecting_mutex_);
    lengths_.ended(measured_iteration(epoch - 1));
    // The GPU collects timings (CUPTI) only during measured iterations; the one that just ended is
    // complete, so its records can be delivered at once rather than when a buffer fills.
    timer_->set_collecting(sampled(epoch));
    if (measured_iteration(epoch - 1) && !sampled(epoch)) drain_below_epoch_.store(epoch, std::memory_order_release);
  }

  void before_context_teardown(CUcontext context, uint64_t context_key) noexcept override {
    if (gate_ != nullptr) gate_->before_context_teardown(context, context_key);
    if (getpid() != owner_pid_ || thread_state_.load(std::memory_order_acquire) != kRunning ||
        !timer_->times_with_events())
      return;
    // Every op launched so far is read (or given up) before its events go with the context.
    const uint64_t claimed = ring_->claimed();
    const uint64_t deadline = now_ms() + kDrainMs;
    while (consumed_.load(std::memory_order_acquire) < claimed && !finished_.load(std::memory_order_acquire) &&
           now_ms() < deadline)
      sleep_us(200);
    // (Not while ops not read yet may still need their events.)
    if (context_key != 0 && consumed_.load(std::memory_order_acquire) >= claimed) timer_->forget_context(context_key);
  }

  void before_context_release(uint64_t context_key) noexcept override {
    if (gate_ != nullptr) gate_->before_context_release(context_key);
  }

  void after_context_release(CUcontext context, uint64_t context_key, bool gone) noexcept override {
    if (gate_ != nullptr) gate_->after_context_release(context, context_key, gone);
    // (Not while ops not read yet may still need their pairs: the drain before ran out.)
    if (gone && getpid() == owner_pid_ && thread_state_.load(std::memory_order_acquire) == kRunning &&
        consumed_.load(std::memory_order_acquire) >= ring_->claimed())
      timer_->forget_context(context_key, /*destroy=*/false);
  }

  void shutdown() noexcept override {
    drain_and_store();
    // (Called twice at exit: by the handler registered with the measurement thread, then the hook's.)
    if (gate_ != nullptr && !gate_shut_.exchange(true)) gate_->shutdown();
  }

 private:
  // The daemon gave this task, which asked for priority 0 without the key, a lower one: it is a job,
  // and a job never runs ungated. It measures no more and shares from its next launch on.
  void hand_over_demoted() noexcept {
    retired_.store(true, std::memory_order_relaxed);
    log(LogLevel::Warn, "measure: the scheduler gave task %s a lower priority than %d (priorities reserved for its "
        "key need FIKIT_KEY_FILE): it is scheduled as a job from now on, and no longer measured",
        cfg_.task_key, cfg_.priority);
    Mode* share = make_share_mode(cfg_);
    if (share == nullptr) log(LogLevel::Warn, "measure: share mode did not start; running as passthrough");
    set_mode(share);
  }

  void drain_and_store() noexcept {
    // A forked child inherits the exit handlers but not the measurement thread: nothing to drain.
    if (getpid() != owner_pid_) return;
    if (thread_state_.load(std::memory_order_acquire) != kRunning || finished_.load(std::memory_order_acquire))
      return;
    stopping_.store(true, std::memory_order_release);
    if (sample_every_ > 1 && !windows_) {
      lengths_.ended(measured_iteration(sync_epoch_.load(std::memory_order_relaxed)));   // the last one, still open
      const uint64_t all = lengths_.launches();
      const uint64_t longest = lengths_.longest_unmeasured();
      if (all >= 1000 && longest > all / 2)
        log(LogLevel::Warn, "measure: %" PRIu64 " of this process's %" PRIu64 " launches came between two host "
            "synchronisations in an iteration that was not measured (one in %u is): the program rarely "
            "synchronises the way the hook counts (a JAX job waits for its results without cuStreamSynchronize or "
            "cuEventSynchronize), so its profile misses most of its work. Measure every iteration "
            "(fikit-run --measure-sample 1) or windows of ops (FIKIT_TIMING=events)", longest, all, sample_every_);
    }
    // Bounded: the thread drains for at most kDrainMs, then writes the run; a database that
    // stays locked is given up after the busy timeout.
    const uint64_t deadline = now_ms() + kDrainMs + kDbTimeoutMs + 200;
    while (!finished_.load(std::memory_order_acquire) && now_ms() < deadline) sleep_us(1000);
    if (!finished_.load(std::memory_order_acquire))
      log(LogLevel::Warn, "measure: the last run of task %s was not stored in time", cfg_.task_key);
  }

  static constexpr int kIdle = 0, kStarting = 1, kRunning = 2, kFailed = 3;
  static constexpr int kBackendUnknown = 0, kBackendPlain = 1, kBackendMps = 2;

  // Whether this process is an MPS client, from the device of the launching thread's context: a
  // run's requests are compared with the task's runs under the other backend (rules/backend_rule.h).
  void note_backend() noexcept {
    const auto get_device = driver_calls().ctx_get_device;
    CUdevice dev = 0;
    if (get_device == nullptr || get_device(&dev) != CUDA_SUCCESS) return;
    backend_.store(mps_client(dev) ? kBackendMps : kBackendPlain, std::memory_order_relaxed);
  }
  // Bursts of burst_ iterations in a row, one iteration in sample_every_ overall, at an offset
  // drawn per period (sampling.h): one switch of CUPTI's collection on and one off per burst.
  // (Measured on an H100, fewer switches did not make the launches between measured iterations
  // faster: CUPTI attached at all is what costs them; docs/performance-measure.md.)
  bool sampled(uint64_t epoch) const noexcept { return measure::sampled_iteration(epoch, burst_, sample_every_); }
  // Sampled, or measured from its middle on for being far longer than the program's iterations
  // before it (promote()).
  bool measured_iteration(uint64_t epoch) const noexcept {
    return sampled(epoch) || promoted_epoch_.load(std::memory_order_relaxed) == epoch + 1;
  }
  // An iteration not sampled that has run this many launches is measured from then on: at least
  // kLongIterationLaunches, and 8 times the longest the program ended with a synchronisation
  // (IterationLengths, sampling.h). A JAX job's steady state makes no synchronisation the hook
  // counts (45 in 360 steps of a training job, H200), so, measured whole iterations at a time, it
  // was measured by chance or not at all; a program that synchronises every step is never promoted.
  static constexpr uint64_t kLongIterationLaunches = 4096;
  // Measures the rest of the iteration after `epoch` synchronisations, if it is still in progress:
  // CUPTI collects from now on (its first records are checked against stream order: feed_held). Its
  // first ops went unmeasured, so the gap before the first measured one is unknown, as after any
  // unmeasured op. Rare (once per such iteration), so a lock, shared with after_sync's switch.
  bool promote(uint64_t epoch) noexcept {
    std::lock_guard guard(collecting_mutex_);
    if (sync_epoch_.load(std::memory_order_relaxed) != epoch) return measured_iteration(epoch);
    if (promoted_epoch_.load(std::memory_order_relaxed) == epoch + 1) return true;
    promoted_epoch_.store(epoch + 1, std::memory_order_relaxed);   // epochs only grow: forward
    timer_->set_collecting(true);
    if (!promoted_said_.exchange(true, std::memory_order_relaxed))
      log(LogLevel::Info, "measure: an iteration ran %" PRIu64 " launches without a host synchronisation the hook "
          "counts: the rest of it is measured (a program that rarely synchronises, as a JAX job)",
          lengths_.long_after(kLongIterationLaunches));
    return true;
  }

  // Windows (FIKIT_MEASURE_UNIT): of every kWindowOps * sample_every_ launches (a period), the
  // kWindowOps consecutive ones at an offset drawn for that period are measured: one op in
  // sample_every_ overall, and about that share of every iteration's ops, so no iteration pays the
  // whole cost of being measured (an eager service's measured request, every op with its two event
  // records, took 1.35x). The offset is a fixed hash of the period's index, so no kernel's place in
  // an iteration is always left out or always a window's first op (whose start the events cannot
  // place: run_builder.h), and the choice is a function of the launch's number alone: one relaxed
  // fetch_add, nothing a stalled thread could hold up. The first window opens at the first launch:
  // a short program (a few requests) is still measured. Returns the window's serial (period + 1),
  // or 0 for a launch not measured.
  static constexpr uint64_t kWindowOps = 8;
  uintptr_t window_of_next_launch() noexcept {
    const uint64_t n = window_launches_.fetch_add(1, std::memory_order_relaxed);
    const uint64_t period = kWindowOps * sample_every_;   // sample_every_ >= 2 with windows
    const uint64_t index = n / period, at = n % period;
    const uint64_t offset = index == 0 ? 0 : measure::mix64(index) % (period - kWindowOps + 1);
    return at >= offset && at - offset < kWindowOps ? uintptr_t(index + 1) : 0;
  }
  // Measurement thread: whether an op of window `window` on `stream` comes first there, after ops
  // nobody timed (the window's first op, or the first on another stream): its start is not known.
  // Decided here, in the order ops reach the builder, not in launch order (another thread's op of
  // the window can claim its slot first).
  // (Streams by context too: each context has its own null stream.)
  bool starts_window(uint64_t context, uint64_t stream, uint64_t window) noexcept {
    for (StreamWindow& w : stream_windows_) {
      if (w.stream == stream && w.context == context && w.window != 0) {
        const bool first = w.window != window;
        w.window = window;
        return first;
      }
    }
    stream_windows_[next_stream_window_++ % stream_windows_.size()] = {context, stream, window};
    return true;
  }
  static constexpr uint64_t kDrainMs = 500;        // at exit: how long to wait for the GPU's last ops
  static constexpr int kDbTimeoutMs = 1000;        // wait for another process's write, then give up

  // The thread starts with the first launch, not at load time: the process may never use the GPU.
  void start_thread_once() noexcept {
    if (thread_state_.load(std::memory_order_acquire) != kIdle) return;
    int expected = kIdle;
    if (!thread_state_.compare_exchange_strong(expected, kStarting)) return;
    // The launching thread's context, so that the measurement thread's driver calls resolve
    // against the same one.
    if (auto get = driver_calls().ctx_get_current) get(&context_);
    try {
      std::thread(&MeasureMode::consume_loop, this).detach();
      thread_state_.store(kRunning, std::memory_order_release);
      // Exit handlers run in reverse order of registration: registered now, after the CUDA runtime
      // and CUPTI have registered theirs, the last run is stored while both still work. (The
      // hook's own exit handler comes too late for that; shutdown() then finds the work done.)
      g_draining_mode = this;
      std::atexit([] { g_draining_mode.load()->shutdown(); });
    } catch (const std::exception& e) {
      log(LogLevel::Error, "measure: cannot start the measurement thread (%s); nothing is measured", e.what());
      thread_state_.store(kFailed, std::memory_order_release);
      retired_.store(true, std::memory_order_relaxed);
    }
  }

  void consume_loop() noexcept {
    // It queries events while the program may capture a graph (driver.h).
    exchange_capture_mode(CU_STREAM_CAPTURE_MODE_RELAXED);
    try {
      if (context_) {
        if (auto set = driver_calls().ctx_set_current) set(context_);
      }
      consume();
    } catch (const std::exception& e) {
      log(LogLevel::Error, "measure: measurement thread failed: %s", e.what());
      timer_->finished();   // nobody will read the ops now: launchers stop waiting for it
    } catch (...) {
      log(LogLevel::Error, "measure: measurement thread failed");
      timer_->finished();
    }
    finished_.store(true, std::memory_order_release);
  }

  void consume() {
    uint64_t pending_since = 0, drain_deadline = 0, last_flush = 0;
    for (;;) {
      bool progressed = false;
      // A run that has lasted FIKIT_RUN_SECONDS ends at its next synchronisation (counted from its
      // first op: a program that idles before its first request does not start a run).
      if (cfg_.run_iterations == 0 && cfg_.run_seconds != 0 && builder_.ops_in_run() > 0) {
        const uint64_t now = now_ms();
        if (run_started_ms_ == 0) run_started_ms_ = now;
        else if (now - run_started_ms_ >= uint64_t{cfg_.run_seconds} * 1000) builder_.end_at_next_boundary();
      }
      while (OpSlot* slot = ring_->published(next_)) {
        measure::TimedOp op;
        Timer::Poll p = slot->launched ? timer_->poll(*slot, next_, op) : Timer::Poll::Lost;
        if (p == Timer::Poll::Pending) {
          const uint64_t now = now_ms();
          if (!pending_since) pending_since = now;
          // CUPTI delivers records in buffers: ask for them, and give up on one that never comes.
          const uint64_t flush_after = timer_->flush_after_ms();
          // (A request that comes when this op is of a later iteration is stale: a forced flush now
          // would cut the records of the ops running.)
          if (const uint64_t below = drain_below_epoch_.exchange(0, std::memory_order_acq_rel);
              below > slot->sync_epoch) {
            // A measured iteration ended with a host synchronisation: its records can all come now,
            // and an op of it that still has none never will (no waiting give_up_ms() on it, while
            // the ring fills behind).
            if (timer_->drain()) drained_below_ = below;
            last_flush = now;
            p = timer_->poll(*slot, next_, op);
          } else if (now - last_flush >= flush_after && now - pending_since >= flush_after) {
            timer_->flush();
            last_flush = now;
          }
          if (p == Timer::Poll::Pending) {
            const bool hopeless = slot->sync_epoch < drained_below_;
            if (!hopeless && (timer_->give_up_ms() == 0 || now - pending_since < timer_->give_up_ms())) break;
            p = Timer::Poll::Lost;
          }
        }
        pending_since = 0;
        const bool window_head = slot->launched && slot->window != 0 && starts_window(slot->context, slot->stream, slot->window);
        if (p == Timer::Poll::Ready) {
          op.kernel_id = slot->kernel_id;
          op.stream = slot->stream;
          op.sync_epoch = slot->sync_epoch;
          op.work_epoch = slot->work_epoch;
          op.after_drop = slot->after_drop;
          op.window_head = window_head;
          op.sm_work = slot->kind == OpKind::Kernel || slot->kind == OpKind::Graph;
          // CUPTI's stream of the op (0: timed with events, in stream order by construction).
          const uint64_t stream_key = slot->via_events ? 0 : uint64_t(slot->cupti_context) << 32 | slot->cupti_stream;
          if (!feed_held(&op, stream_key, slot->thread, slot->kind)) return;   // handed over to share mode
          held_.op = op;
          held_.kind = slot->kind;
          held_.stream_key = stream_key;
          held_.thread = slot->thread;
          held_.nodes.clear();
          if (slot->kind == OpKind::Graph) timer_->take_graph_nodes(next_, slot->kernel_id, held_.nodes);
          held_.valid = true;
        } else if (slot->launched) {
          if (!feed_held(nullptr, 0, 0, OpKind::Kernel)) return;
          ++launched_in_run_;
          std::optional<measure::Run> run = builder_.add_untimed(slot->sync_epoch, window_head, slot->work_epoch);
          if (run && !store(*run)) return;
        }
        ++next_;
        consumed_.store(next_, std::memory_order_release);
        ring_->release_below(timer_->oldest_needed(next_));
        progressed = true;
      }
      if (stopping_.load(std::memory_order_acquire)) {
        const uint64_t now = now_ms();
        if (!drain_deadline) {
          drain_deadline = now + kDrainMs;
          timer_->flush();
        }
        // Done when every claimed op was seen, or the GPU's last ops take too long.
        if (next_ >= ring_->claimed() || now >= drain_deadline) break;
      }
      if (!progressed) sleep_us(200);
    }
    if (!feed_held(nullptr, 0, 0, OpKind::Kernel)) return;
    if (auto run = builder_.finish()) {
      store(*run);
    } else if (launched_in_run_ > 0) {
      log(LogLevel::Warn, "measure: none of the %" PRIu64 " ops of the last run of task %s could be timed: nothing "
          "stored (the program ended before the GPU finished them)", launched_in_run_, cfg_.task_key);
    }
    timer_->finished();
  }

  // A timed op goes to the run builder once the op after it is known: CUPTI's records of the first
  // ops after collection turns on can end long after the next op of their stream started (a ViT-L
  // step's first graph segments read 35 ms where they take 13-200 us, H200, driver 580), which a
  // stream running its work in order rules out: such an op counts as untimed (its graph's nodes
  // too). Only ops of one thread are compared: the ring's order is the order of the launch calls'
  // start, and two threads launching on one stream (PyTorch's autograd thread and the main thread)
  // can reach the driver the other way round. False once auto mode has handed over to share mode.
  bool feed_held(const measure::TimedOp* next, uint64_t next_stream_key, uint64_t next_thread, OpKind next_kind) {
    if (!held_.valid) return true;
    held_.valid = false;
    ++launched_in_run_;
    std::optional<measure::Run> run;
    if (next != nullptr && next_thread == held_.thread &&
        measure::ends_after_next_started(held_.op, held_.stream_key, *next, next_stream_key,
                                         held_.kind == OpKind::Kernel && next_kind == OpKind::Kernel)) {
      ++out_of_order_;
      run = builder_.add_untimed(held_.op.sync_epoch, held_.op.window_head, held_.op.work_epoch);
    } else {
      ++timed_in_run_;
      run = builder_.add(held_.op);
      // After add(): a run it closed is the one before this op; the nodes go with the op.
      if (!held_.nodes.empty()) builder_.add_graph_nodes(held_.op.kernel_id, held_.nodes);
    }
    return !run || store(*run);
  }

  // Writes one run; false once auto mode has handed over to share mode (stop measuring).
  bool store(measure::Run& run) {
    describe_samples(run.kernels);
    const uint64_t dropped = dropped_.exchange(0, std::memory_order_relaxed);
    if (dropped)
      log(LogLevel::Warn, "measure: %" PRIu64 " ops went untimed (the measurement thread fell behind)", dropped);
    run.summary.ops_launched = launched_in_run_ + dropped;
    run.summary.ops_timed = timed_in_run_;
    run.summary.sample_every = sample_every_;
    run.summary.sample_unit = windows_ ? "window" : "iteration";
    const int backend = backend_.load(std::memory_order_relaxed);
    run.summary.backend = backend == kBackendMps ? "mps" : backend == kBackendPlain ? "plain" : "";
    const measure::RequestClock::Taken requests = requests_.take();
    run.summary.request_p50_ns = requests.p50_ns;
    run.summary.requests = requests.requests;
    timer_->describe(run.summary);
    uint64_t runs = 0;
    try {
      if (!db_) db_ = std::make_unique<profiledb::Database>(db_path_of(cfg_), profiledb::Database::Open::Create,
                                                            kDbTimeoutMs);
      runs = db_->add_run(cfg_.task_key, cfg_.command_line, run.summary, run.kernels, run.trace, cfg_.measure_runs);
    } catch (const profiledb::DbError& e) {
      log(LogLevel::Error, "measure: run of task %s not stored in %s: %s", cfg_.task_key, db_path_of(cfg_).c_str(),
          e.what());
      // In auto mode a database that cannot store runs (corrupt, refused) would keep the task
      // measuring at every start, a service holding its jobs meanwhile: it shares now instead, with
      // the profile it has (share mode learns the rest as it runs).
      if (share_after_runs_ != 0) return share_from_now(0);
      return true;
    }
    // Info: what measuring did (FIKIT_LOG_LEVEL=info); the ops not timed say why in their own lines.
    if (share_after_runs_ != 0)
      log(LogLevel::Info, "measure: run %" PRIu64 " of %u of task %s stored: %" PRIu64 " of %" PRIu64 " ops timed",
          runs, share_after_runs_, cfg_.task_key, timed_in_run_, run.summary.ops_launched);
    else
      log(LogLevel::Info, "measure: run %" PRIu64 " of task %s stored: %" PRIu64 " of %" PRIu64 " ops timed", runs,
          cfg_.task_key, timed_in_run_, run.summary.ops_launched);
    if (out_of_order_ != 0) {
      log(LogLevel::Info, "measure: %" PRIu64 " ops so far were timed to end after the next op of their stream "
          "started (CUPTI's first records after collection turns on): counted as untimed", out_of_order_);
    }
    // The op that closed the run belongs to the next one: its timing is counted there next time.
    timer_->run_stored(runs, run.summary.gpu_ops, timed_in_run_);
    timed_in_run_ = 0;
    launched_in_run_ = 0;
    run_started_ms_ = 0;
    if (share_after_runs_ == 0 || runs < share_after_runs_) return true;
    return share_from_now(runs);
  }

  // Auto mode measures no more: it has `runs` measured runs (0: its runs cannot be stored). At exit
  // there is nothing left to share; the next start shares.
  bool share_from_now(uint64_t runs) noexcept {
    retired_.store(true, std::memory_order_relaxed);
    timer_->stop();
    const char* why = runs != 0 ? "measured runs" : "runs stored (its database cannot store them)";
    if (stopping_.load(std::memory_order_acquire)) {
      log(LogLevel::Info, "auto: task %s has %" PRIu64 " %s; it shares from its next start", cfg_.task_key, runs, why);
      return false;
    }
    log(runs != 0 ? LogLevel::Info : LogLevel::Warn, "auto: task %s has %" PRIu64 " %s; switching to share mode",
        cfg_.task_key, runs, why);
    Mode* share = make_share_mode(cfg_);
    if (!share) log(LogLevel::Warn, "auto: share mode did not start; running as passthrough");
    set_mode(share);
    return false;
  }

  const Config cfg_;
  const std::unique_ptr<OpRing> ring_;
  Timer* const timer_;                       // lives as long as the mode (never deleted, like it)
  Mode* const gate_;                         // a job's share-mode gate (nullptr: a service, priority 0)
  std::atomic<bool> demoted_{false};
  std::atomic<bool> gate_shut_{false};
  const uint32_t share_after_runs_;
  const bool windows_;                       // FIKIT_MEASURE_UNIT: windows of ops, not whole iterations
  const uint32_t sample_every_;
  const uint32_t burst_;
  const pid_t owner_pid_;
  CUcontext context_ = nullptr;

  // Shared between launching threads and the measurement thread.
  std::atomic<uint64_t> sync_epoch_{0};
  measure::IterationLengths lengths_;          // iterations sampled one in N
  std::mutex collecting_mutex_;                // CUPTI's collection switched: after_sync, promote
  std::atomic<uint64_t> promoted_epoch_{0};    // epoch + 1 of the iteration promote() measures (0: none)
  std::atomic<bool> promoted_said_{false};
  alignas(64) std::atomic<uint64_t> window_launches_{0};  // launches seen (windows); a line of its own
  // Windows: synchronisations that came after a kernel or graph launch, and whether one came since
  // the last synchronisation.
  std::atomic<uint64_t> work_epoch_{0};
  alignas(64) std::atomic<bool> sm_work_since_sync_{false};
  std::atomic<uint64_t> dropped_{0};
  std::atomic<uint64_t> drain_below_epoch_{0};   // non-zero: drain; ops of earlier epochs are complete
  std::atomic<bool> drop_pending_{false};
  std::atomic<bool> retired_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> finished_{false};
  std::atomic<int> thread_state_{kIdle};
  std::atomic<uint64_t> consumed_{0};        // next_, for launching threads (before_context_teardown)
  std::atomic<int> backend_{kBackendUnknown};
  measure::RequestClock requests_;

  // Measurement thread only.
  uint64_t next_ = 0;
  uint64_t timed_in_run_ = 0;
  uint64_t launched_in_run_ = 0;
  uint64_t run_started_ms_ = 0;   // when the run in progress had its first op (FIKIT_RUN_SECONDS)
  uint64_t drained_below_ = 0;
  struct StreamWindow {
    uint64_t context = 0;              // the event timer's key of it (0: not known)
    uint64_t stream = 0, window = 0;   // the window of the stream's last op seen (0: none)
  };
  std::array<StreamWindow, 32> stream_windows_{};
  uint64_t next_stream_window_ = 0;
  measure::RunBuilder builder_;
  struct Held {   // the last timed op, until the next one is known (feed_held)
    bool valid = false;
    measure::TimedOp op;
    uint64_t stream_key = 0;
    uint64_t thread = 0;
    OpKind kind = OpKind::Kernel;
    std::vector<measure::GraphNodeTime> nodes;   // a graph op's kernels (op.kernel_id: its ID)
  } held_;
  uint64_t out_of_order_ = 0;   // timed ops that ended after the next op of their stream started
  std::unique_ptr<profiledb::Database> db_;
};

Mode* start_measuring(const Config& cfg, uint32_t share_after_runs) noexcept {
  try {
    auto ring = std::make_unique<OpRing>();
    Timer* timer = measure::make_timer(cfg.timing, /*in_place=*/share_after_runs != 0, *ring);
    if (!timer) return nullptr;
    // A job (below priority 0) is scheduled from its first launch: it measures behind share mode's
    // gate. Without a gate it would run ungated beside the service, so it does not run measured then.
    Mode* gate = nullptr;
    if (cfg.priority > 0) {
      gate = make_share_gate(cfg);
      if (gate == nullptr) {
        log(LogLevel::Error, "measure: the launch gate of job %s did not start: sharing unmeasured", cfg.task_key);
        return make_share_mode(cfg);
      }
    }
    auto* mode = new MeasureMode(cfg, timer, std::move(ring), share_after_runs, gate);
    if (gate == nullptr) announce_measurement(cfg);
    return mode;
  } catch (const std::exception& e) {
    log(LogLevel::Error, "measure: cannot start (%s); running as passthrough", e.what());
    return nullptr;
  }
}

}  // namespace

Mode* make_measure_mode(const Config& cfg) noexcept { return start_measuring(cfg, 0); }

Mode* make_auto_mode(const Config& cfg) noexcept {
  uint64_t runs = 0;
  try {
    // (The default busy timeout, 5 s, stalled the program's first CUDA call on a locked database.)
    profiledb::Database db(db_path_of(cfg), profiledb::Database::Open::ReadOnly, kFirstReadTimeoutMs);
    if (auto task = db.task(cfg.task_key)) runs = task->runs_measured;
  } catch (const profiledb::DbError& e) {
    // No database yet is the normal first run; anything else is worth a line, then we measure.
    if (e.kind() != profiledb::DbError::Kind::Missing) log(LogLevel::Warn, "auto: %s; measuring", e.what());
  } catch (const std::exception& e) {
    log(LogLevel::Warn, "auto: %s; measuring", e.what());
  }
  if (runs >= cfg.measure_runs) {
    log(LogLevel::Info, "auto: task %s has %" PRIu64 " measured runs; sharing", cfg.task_key, runs);
    return make_share_mode(cfg);
  }
  // A job shares from its first launch, whatever its key: share mode learns the kernels its profile
  // lacks as it goes (relearner.h). Only a service (priority 0) is measured before it shares.
  if (cfg.priority > 0) {
    log(LogLevel::Info, "auto: task %s is a job (priority %d): scheduled from its first launch, its kernels learned "
        "while it shares", cfg.task_key, cfg.priority);
    return make_share_mode(cfg);
  }
  log(LogLevel::Info, "auto: task %s has %" PRIu64 " of %u runs; measuring", cfg.task_key, runs, cfg.measure_runs);
  return start_measuring(cfg, cfg.measure_runs);
}

}  // namespace fikit::hook
