// Share mode: launches follow the directives fikit-scheduler pushes (docs/scheduling.md), per GPU
// (device_lanes.h). On each GPU the holder launches at once and reports its activity (and, while
// someone waits for credit, the launches that open fillable gaps); the tasks below it go through
// the launch gate. Without a daemon the program runs unscheduled.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <new>
#include <thread>

#include "client.h"
#include "kernelid.h"
#include "clock.h"
#include "device_lanes.h"
#include "graph/segments.h"
#include "log.h"
#include "mode.h"
#include "predictions.h"
#include "relearner.h"

namespace fikit::hook {
namespace {


using share::Client;
using share::Lane;

// This thread's launch between before_launch and after_launch: the relearner's sample, and the
// launch's prediction (looked up once: in a framework's process each lookup of the prediction table
// is a cache miss, docs/performance-hook.md). (Its lane travels in the op: op.mode_context.)
struct InLaunch {
  uint32_t relearn_ticket;
  share::Predictions::Kernel kernel;   // id 0: none looked up for this launch
  uint64_t partition_charge_ns;        // a launch sent to the partition: what it counts against the bound
};
constinit thread_local InLaunch t_launch __attribute__((tls_model("initial-exec"))) = {0, {}, 0};
// Lanes whose windows this thread holds around a primary context's release (two releases at once, on
// two threads, hold in turn).
constinit thread_local size_t t_held_lanes __attribute__((tls_model("initial-exec"))) = 0;

Lane* lane_of(const LaunchInfo& op) noexcept { return static_cast<Lane*>(op.mode_context); }

class ShareMode final : public Mode {
 public:
  explicit ShareMode(const Config& cfg)
      : cfg_(cfg), lanes_(cfg, &ShareMode::on_new_lane, this),
        relearner_(cfg, {.sample_every = cfg.relearn_sample, .flush_ms = cfg.relearn_flush_ms}, [this] {
          predictions_.load(cfg_);
          lanes_.each([](Lane& l) { l.client.profile_grew(); });
        }) {}

  // A new lane's client tells which prediction rules its daemon uses: the predictions follow them
  // (receiver thread, or the thread making the lane; never the launch path of a made lane).
  static void on_new_lane(void* self, Lane& lane) noexcept {
    lane.client.set_estimators_listener(
        [](void* mode, uint32_t packed) {
          auto* m = static_cast<ShareMode*>(mode);
          policy::Estimators e;
          e.gap = policy::GapEstimator(std::min<uint32_t>(packed & 0xff, protocol::kGapP10));
          e.duration = policy::DurationEstimator(std::min<uint32_t>((packed >> 8) & 0xff, protocol::kDurationP90));
          e.boundary_fraction = double(packed >> 16) / 1000.0;
          const policy::Estimators now = m->predictions_.estimators();
          if (now.gap != e.gap || now.duration != e.duration || now.boundary_fraction != e.boundary_fraction)
            m->predictions_.load(m->cfg_, e);
        },
        self);
  }
  share::Predictions& predictions() { return predictions_; }
  share::Relearner& relearner() { return relearner_; }
  share::DeviceLanes& lanes() { return lanes_; }

  // Asked right before before_launch, on the same thread (wrappers.cpp): the lane is found here.
  // The holder uses kernel IDs only to report gaps someone waits to fill.
  bool begin_launch(LaunchInfo& op) noexcept override {
    Lane* lane = lanes_.current();
    op.mode_context = lane;
    if (lane == nullptr) return false;
    const uint8_t role = lane->client.directive().role();
    return !(role & protocol::kRoleHolder) || (role & protocol::kRoleGaps);
  }

  void before_launch(LaunchInfo& op) noexcept override {
    t_launch.relearn_ticket = 0;
    t_launch.kernel.id = 0;
    Lane* lane = lane_of(op);
    if (lane == nullptr || !lane->client.connected()) return;   // passthrough
    Client& client = lane->client;
    const uint8_t role = client.directive().role();
    if (role & protocol::kRoleActivity) {
      // Activity starts (after a sync, or after a silence the daemon may have taken for idle): the
      // tasks below stop at this news, so it leaves now, from this thread, before the launch: the
      // bell first (they stop within nanoseconds), then the daemon (which confirms). While active,
      // a keep-alive per period through the notification thread, so the daemon never finds it quiet.
      const uint64_t now = monotonic_ns();
      const bool starts = lane->idle.exchange(false, std::memory_order_relaxed) ||
                          now - lane->last_launch_ns.load(std::memory_order_relaxed) >= kSilenceNs;
      lane->last_launch_ns.store(now, std::memory_order_relaxed);
      if (starts) {
        lane->last_notify_ns.store(now, std::memory_order_relaxed);
        client.notify_now(op.id, now, protocol::kNotifyActivityStart, client.ring(now));
      } else if (now - lane->last_notify_ns.load(std::memory_order_relaxed) >= kKeepAliveNs) {
        lane->last_notify_ns.store(now, std::memory_order_relaxed);
        client.notify(op.id, now, 0);
      }
    }
    share::Predictions::Kernel k = predictions_.of(op.id);
    // Not known by its ID (another call site than measured): charged as its shape's kernels were.
    if (!k.measured && op.kind == OpKind::Kernel && !(role & protocol::kRoleHolder))
      predictions_.by_shape(kernelid::shape_id(op.func, op.grid, op.block, op.shared_mem), k);
    // A graph's segment not timed yet: charged what its kernels' profiles add up to.
    if (!k.measured && op.graph_hint_ns != 0) k.dur_ns = op.graph_hint_ns;
    // A whole graph not timed yet: how long it runs is not known, so it is taken to be long.
    else if (!k.measured && op.kind == OpKind::Graph && op.graph_id == 0) k.dur_ns = k.hold_ns = share::kUnknownWholeGraphNs;
    t_launch.kernel = k;
    // The holder never waits. A task below may be sent to its SM partition instead (within the bound).
    if (!(role & protocol::kRoleHolder)) {
      const uint8_t partition_pct = client.directive().partition_pct();
      const auto admission =
          lane->gate.admit(op.id, k.dur_ns, k.hold_ns, k.measured,
                           op.reroutable && partition_pct != 0 && lane->partition.usable(partition_pct) &&
                               !lane->partition.refuses(op.func));
      if (admission.route == share::LaunchGate::Route::Partition) {
        op.rerouted_to = lane->partition.enter(op.stream, admission.partition_pct);
        t_launch.partition_charge_ns = admission.charge_ns;
        // Counted where it runs: without a partition stream it goes where it was meant to.
        if (op.rerouted_to != nullptr) client.stats().on_partition(admission.partition_pct);
      }
    }
    // Kernels the profile lacks are timed now and then (relearner.h), when nothing throttles them.
    // Not a launch sent to the partition: on fewer SMs it is no sample of its length at full width
    // (and its end event would be recorded before the stream waits for it).
    const bool unthrottled = op.rerouted_to == nullptr &&
                             ((role & protocol::kRoleHolder) || client.directive().state() == protocol::State::Run);
    t_launch.relearn_ticket = relearner_.before(op, k.measured, unthrottled);
  }

  void rerouted_launch_failed(const LaunchInfo& op, CUresult result) noexcept override {
    Lane* lane = lane_of(op);
    if (lane == nullptr) return;
    // Keeps the stream's order as a launch there would (what follows waits for an empty hop).
    lane->partition.leave(op.stream, op.rerouted_to);
    // Said once at warn (each further kernel at debug): the program runs on, the kernel at full width.
    static std::atomic<bool> said{false};
    if (lane->partition.refuse(op.func))
      log(said.exchange(true) ? LogLevel::Debug : LogLevel::Warn,
          "SM partition: a kernel launch failed there (CUresult %d: a thread-block cluster its SMs cannot place, "
          "say) and was made again at full width, where the program sent it; that kernel stays off the partition",
          int(result));
  }

  void after_launch(const LaunchInfo& op, CUresult result) noexcept override {
    if (const uint32_t ticket = t_launch.relearn_ticket) {
      t_launch.relearn_ticket = 0;
      relearner_.after(ticket, op, result);
    }
    Lane* lane = lane_of(op);
    // A launch sent to the partition: the stream's next work waits for it, whatever else happens.
    if (lane != nullptr && op.rerouted_to != nullptr) lane->partition.leave(op.stream, op.rerouted_to);
    if (lane == nullptr || result != CUDA_SUCCESS || !lane->client.connected()) return;
    Client& client = lane->client;
    lane->last_kernel.store(op.id, std::memory_order_relaxed);
    const uint8_t role = client.directive().role();
    if (!(role & protocol::kRoleHolder)) {
      client.stats().launched();
      // What runs on the partition counts at the time it takes there (gate_rules.h,
      // partition_charge_ns). Its checkpoint goes on the application's stream, which now waits for it.
      const uint64_t charge = op.rerouted_to != nullptr ? t_launch.partition_charge_ns : prediction(op.id).dur_ns;
      lane->window.launched(op.stream, charge, client.directive().bound_ns());
      return;
    }
    if (!(role & protocol::kRoleGaps) || op.id == 0) return;
    const share::Predictions::Kernel k = prediction(op.id);
    // Someone waits for gap credit. A notification wakes the daemon and makes it plan a fill, so the
    // holder notifies only launches the daemon acts on: one that opens a gap a fill could use, and
    // the one after it (early stop). Sent by the notification thread, after the launch.
    const uint64_t min_gap = client.fill_min_gap_ns(), latency = client.grant_latency_ns();
    const bool opens_gap = k.gap_ns > 0 && k.gap_ns >= min_gap && k.dur_est_ns + k.gap_ns >= latency + min_gap;
    if (!opens_gap && !lane->gap_open.load(std::memory_order_relaxed)) return;
    lane->gap_open.store(opens_gap, std::memory_order_relaxed);
    const uint64_t now = monotonic_ns();
    lane->last_notify_ns.store(now, std::memory_order_relaxed);
    client.notify(op.id, now, 0);
  }

  // In after_launch: what before_launch looked up for this launch, else a lookup now.
  share::Predictions::Kernel prediction(uint64_t id) const noexcept {
    return t_launch.kernel.id == id && id != 0 ? t_launch.kernel : predictions_.of(id);
  }

  // With no daemon, or as the holder (nothing above this task on its GPU), no gate would hold a
  // segment: the graph goes whole (unless FIKIT_GRAPH_SEGMENTS=always, to measure what segments cost).
  bool wants_graph_segments() noexcept override {
    if (config().graph_segments_always) return true;
    Lane* lane = lanes_.current();
    return lane != nullptr && lane->client.connected() && !(lane->client.directive().role() & protocol::kRoleHolder);
  }

  // A program that asks for priority 0 without the key is registered as a job: its graphs are cut
  // as a job's, whatever it asked.
  bool is_job(bool asked) noexcept override {
    Lane* lane = lanes_.current();
    if (lane != nullptr && lane->client.connected()) return lane->client.priority() > 0;
    return asked;
  }

  uint64_t graph_kernel_ns(uint64_t shape_id) noexcept override {
    share::Predictions::Kernel k;
    return predictions_.by_shape(shape_id, k) ? k.dur_ns : 0;
  }

  void before_allocation() noexcept override { (void)lanes_.current(); }

  // What share mode made in the context goes first: the in-flight window's checkpoint events, the
  // SM partition (a green context of the primary context, its streams and events), re-profiling's
  // events. Work still in flight there is counted as done: it goes with the context.
  void before_context_teardown(CUcontext context, uint64_t context_key) noexcept override {
    if (context_key == 0 || owner_pid_ != getpid()) return;
    lanes_.forget_context(context);
    lanes_.each([context_key](Lane& l) {
      l.window.forget_context(context_key);
      l.partition.forget_context(context_key);
    });
    relearner_.forget_context(context_key);
  }

  // A release: the receiver's in-flight probe and re-profiling's reader are held off the context's
  // events until it is known whether the release took the context along.
  // (The lanes held are those made before: another GPU's first launch may add one meanwhile.)
  void before_context_release(uint64_t) noexcept override {
    if (owner_pid_ != getpid()) return;
    t_held_lanes = lanes_.count();
    lanes_.each_of_first(t_held_lanes, [](Lane& l) { l.window.hold(); });
    relearner_.hold();
  }
  void after_context_release(CUcontext context, uint64_t context_key, bool gone) noexcept override {
    if (owner_pid_ != getpid()) return;
    if (gone) {
      lanes_.forget_context(context);
      lanes_.each_of_first(t_held_lanes, [context_key](Lane& l) {
        l.window.forget_held(context_key, /*destroy=*/false);
        l.partition.forget_context(context_key, /*destroy=*/false);
      });
      // (Forgotten while its reader is held: it would query them otherwise.)
      relearner_.forget_context(context_key, /*destroy=*/false);
    }
    relearner_.unhold();
    lanes_.each_of_first(t_held_lanes, [](Lane& l) { l.window.unhold(); });
  }

  void after_sync(SyncKind) noexcept override {
    relearner_.synchronized();
    // This thread's work drained on the current context's GPU: the daemon decides from the last
    // kernel whether the iteration ended.
    Lane* lane = lanes_.current();
    if (lane == nullptr || !(lane->client.directive().role() & protocol::kRoleActivity) || !lane->client.connected())
      return;
    lane->client.send_idle(lane->last_kernel.load(std::memory_order_relaxed));
    lane->gap_open.store(false, std::memory_order_relaxed);
    lane->idle.store(true, std::memory_order_relaxed);   // the next launch starts activity again
  }

  // The profile database was locked at start: read it again every kRetryMs in a thread of its own
  // (bounded: a minute), then tell the daemon the profile grew (it reads its own copy).
  void read_predictions_later() noexcept {
    try {
      retry_ = std::thread([this] {
        for (int i = 0; i < kRetries && !stop_retry_.load(); ++i) {
          std::unique_lock lock(retry_mutex_);
          retry_wake_.wait_for(lock, std::chrono::milliseconds(kRetryMs), [this] { return stop_retry_.load(); });
          if (stop_retry_.load()) return;
          lock.unlock();
          if (predictions_.load_first(cfg_, kFirstReadTimeoutMs)) {
            log(LogLevel::Info, "share mode: profiles read (%zu kernels)", predictions_.size());
            return;
          }
        }
      });
    } catch (...) {
      // No thread: the program runs on without predictions, as it would with no profile.
    }
  }

  void shutdown() noexcept override {
    {
      std::lock_guard lock(retry_mutex_);
      stop_retry_ = true;
    }
    retry_wake_.notify_all();
    if (retry_.joinable() && owner_pid_ == getpid()) retry_.join();
    relearner_.stop();   // stores what it learned
    const graph::Counts g = graph::counts();
    share::ShareStats::Graphs graphs{g.segmented, g.segment_launches, 0};
    for (uint64_t w : g.whole) graphs.whole += w;
    lanes_.each([this, graphs](Lane& l) {
      l.client.stop();
      l.client.stats().write(int(getpid()), l.window.untracked_ns(), relearner_.samples_taken(), graphs);
    });
  }

 private:
  // Well under the daemon's holder-quiet timeout (20 ms by default); a silence half as long may have
  // been taken for idle, so the launch after it starts activity again.
  static constexpr uint64_t kKeepAliveNs = 2'000'000;
  static constexpr uint64_t kSilenceNs = 10'000'000;

  static constexpr int kRetryMs = 500, kRetries = 120;
  const Config& cfg_;
  std::thread retry_;
  std::mutex retry_mutex_;
  std::condition_variable retry_wake_;
  std::atomic<bool> stop_retry_{false};
  const int owner_pid_ = int(getpid());
  share::DeviceLanes lanes_;   // lookups from begin_launch() may add a lane
  share::Predictions predictions_;
  share::Relearner relearner_;
};

}  // namespace

Mode* make_share_mode(const Config& cfg) noexcept {
  auto* mode = new (std::nothrow) ShareMode(cfg);
  if (mode == nullptr) return nullptr;
  // On the program's first CUDA call: a database another program holds locked may delay it this
  // much, not the busy timeout's seconds; it is read again in the background until it can be.
  if (!mode->predictions().load_first(cfg, kFirstReadTimeoutMs)) mode->read_predictions_later();
  mode->relearner().start();
  log(LogLevel::Info, "share mode: task '%s', %zu kernels with predicted durations", cfg.task_key,
      mode->predictions().size());
  // The current context's GPU registers now (bounded by the daemon timeout); others on first use.
  (void)mode->lanes().current();
  return mode;
}

Mode* make_share_gate(const Config& cfg) noexcept {
  // The mode keeps a reference to its settings: a copy of its own, never freed (as the mode is not).
  auto* own = new (std::nothrow) Config(cfg);
  if (own == nullptr) return nullptr;
  own->relearn_sample = 0;   // the measurement times every kernel it samples; no second timer
  auto* mode = new (std::nothrow) ShareMode(*own);
  if (mode == nullptr) return nullptr;
  if (!mode->predictions().load_first(*own, kFirstReadTimeoutMs)) mode->read_predictions_later();
  (void)mode->lanes().current();
  return mode;
}

void announce_measurement(const Config& cfg, bool wait) noexcept {
  bool answered = false;
  // Unless waiting, returns at once: the receiver thread registers (and retries) in the background.
  if (share::client_for(cfg, protocol::TaskMode::Measure, share::current_device(), wait, answered) == nullptr)
    return;
  static std::atomic<bool> exit_registered{false};
  if (!exit_registered.exchange(true)) {
    // The measure mode owns shutdown(); saying goodbye at exit releases lower tasks at once
    // instead of after the lease. Client::stop() does nothing in a forked child.
    std::atexit([] { share::stop_clients(); });
  }
}

}  // namespace fikit::hook
