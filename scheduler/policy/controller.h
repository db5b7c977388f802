#pragma once
// The sharing engine's closed loop for one service (docs/scheduling.md, "The controller"): it
// measures the service's active periods (its first launch after an idle to its next idle) and
// chooses what the MPS tasks below it may do while it is active: the most generous regime on the
// ladder under which the service's periods stay within its objective of what they last were with
// the tasks below held (its baseline). Pure: periods and times in, the regime out; the policy
// (policy.h) feeds it and turns the regime into directives. Under MPS and time-sliced alike.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace fikit::policy {

// What the MPS tasks below a service may do, from most protective to most generous.
enum class Regime : uint8_t {
  Held,          // a baseline window: they launch nothing at all, the service runs alone
  HoldNarrow,    // while it is active they wait (gap credit only); long holds always on the partition
  Hold,          // while it is active they wait; while it is idle everything at full width, bounded
  Partition,     // while it is active everything runs on the partition instead of waiting
  ShortBeside,   // ... and launches that hold SMs briefly run beside it at full width
  Beside,        // everything beside it at full width, within the in-flight bound
  // Time-sliced: the job runs as without FIKIT, its own contexts at a short time slice, so that the
  // GPU switches it out within about that slice when the service has work (instead of the GPU's
  // default slice of 1-2 ms, or draining what it queued).
  Preempt,
  // Nothing held: the jobs run as they would without FIKIT (under MPS beside it with client
  // priority, time-sliced in the GPU's own slices), so the ladder's top is what the baselines give.
  Free,
};
constexpr int kRegimes = int(Regime::Free) + 1;
const char* to_string(Regime r);
// "auto" is the controller; a regime's name fixes that regime. false: no such name.
bool regime_from_string(const char* name, bool& automatic, Regime& fixed);

struct ControllerSettings {
  // The service's objective: its periods at most this many permille of the baseline's (1200:
  // 1.2x), judged with their noise: a window is past it when its periods, each taken down by the
  // objective, are still longer than the baseline's, with a chance of at most 1 in 5 that noise
  // alone reads them so (one-sided rank test),
  // or when more of them than chance allows are past the objective at the baseline's 90th
  // percentile (the tail: a request that meets a job's long hold; binomial, p <= 0.1).
  uint32_t objective_permille = 1200;
  uint32_t window = 16;             // periods judged together
  uint32_t early_judge = 8;         // a trial's median judged after this many periods already
  uint32_t warmup = 8;              // a service's first periods are not counted (lazy loading, autotuning)
  uint32_t baseline_first = 16;     // held periods before the first judgement
  uint32_t baseline_refresh = 8;    // held periods of each refresh
  uint64_t refresh_every_ns = 60'000'000'000;   // a baseline refresh at most this often
  // In a baseline window the tasks below are held while the service is idle too (its next period
  // must find nothing of theirs in flight), but no longer than this after it went idle: a service
  // that rests longer does not stop them, and its next period is not counted.
  uint64_t baseline_idle_max_ns = 500'000'000;
  uint64_t first_pause_ns = 2'000'000'000;      // a refused step is tried again after this, doubling (the service's time)...
  uint64_t max_pause_ns = 60'000'000'000;       // ...up to this (load changes: try again within a minute)
  bool partition = true;            // the SM partition exists (HoldNarrow and Partition are steps)
  // A time-sliced service: only Hold, Preempt and Free are steps. Beside another context nothing
  // runs at once, so the steps between (what may run beside it, or on a partition) change nothing.
  bool timesliced = false;
  bool preempt = false;             // time-sliced: Preempt is a step (allow_preempt)
  Regime top = Regime::Free;        // the most generous step it may climb to
};

class Controller {
 public:
  Controller() = default;
  explicit Controller(const ControllerSettings& s);

  // The regime the tasks below are under now.
  // (During the service's warm-up periods, which are not counted, the tasks below are not held:
  // only the last one, whose rest must leave the first counted period clean.)
  Regime regime() const {
    if (phase_ == Phase::Baseline) return warmup_left_ > 1 ? adopted_ : Regime::Held;
    return phase_ == Phase::Trial ? trial_ : adopted_;
  }
  Regime adopted() const { return adopted_; }
  // A period ended, `len` long, under regime() from its start to its end, with a task below
  // exposed to it. Decides the next regime. `len` is what is judged (the policy's: the request's
  // response, request_estimate.h); `work_ns` the period's own length, first launch to idle (0: not
  // known), of which a baseline keeps the median as the service's work alone; `load_permille` the
  // load its request met (RequestEstimate::load_permille). A window's responses are taken down by
  // the median load of its requests before they are judged or kept as a baseline: two windows'
  // medians differ by how the arrivals bunched as much as by what a job costs (at 40 % load an
  // eager UNet's baselines of 16 read 11 to 25 ms on an H100 while its work took 12 to 16 ms), and
  // the objective is the clients' median against the same requests served alone.
  void on_period(uint64_t now, uint64_t len, uint64_t work_ns = 0, uint32_t load_permille = 1000);
  // The service's work per request alone: the median period of its baseline (of the first
  // baseline's periods so far while it is measured; 0: none known).
  uint64_t alone_work_ns() const;
  // Time-sliced: whether Preempt is a step now (a job below it can be switched out at a short slice
  // of its own: policy.cpp, preemptible). Taken away, a trial of it ends and an adopted Preempt is
  // Hold again; given, the next climb from Hold tries it.
  void allow_preempt(uint64_t now, bool on);
  // The longest a period under regime() may last before it is a violation, counted from its start
  // (UINT64_MAX: no limit: held, or no baseline yet).
  uint64_t limit_ns() const;
  // A period under way passed limit_ns(): the step is refused at once.
  void on_overrun(uint64_t now);
  // The last judged window against the baseline: its median over the baseline's, permille (0:
  // none judged yet): what the service's clients' median wait is, against alone.
  uint32_t inflation_permille() const { return inflation_; }
  // What the service's clients saw lately: the median of its last kRecent counted periods (under
  // baselines, trials and adopted steps alike, as its requests met them) over the baseline's median,
  // permille (0: no baseline yet). A judged window is 16 periods, a few seconds of a loaded service:
  // its median strays far from what the clients see over a hundred requests (docs/results.md, "What
  // the controller reads against what the clients see"), so status and the metrics show this
  // reading, and the window's only as the verdict the controller acts on.
  uint32_t recent_permille() const;
  uint32_t recent_periods() const { return uint32_t(std::min(recent_count_, kRecent)); }
  // Whether that window kept the objective: its body and its tail (ControllerSettings::objective_permille).
  bool within_objective() const { return within_; }
  // Whether inflation_permille() is the limit a period ran past (4x the objective), not a measured
  // window: said as such, never as a measurement.
  bool inflation_overran() const { return overran_; }
  uint64_t baseline_quantile(unsigned pct) const;
  uint32_t objective_permille() const { return s_.objective_permille; }
  // Counts: trials begun, steps adopted by a trial, steps given up (a failed window or an overrun),
  // baseline windows measured, and how long the tasks below were held for them.
  uint64_t trials() const { return trials_; }
  uint64_t climbs() const { return climbs_; }
  uint64_t drops() const { return drops_; }
  uint64_t baselines() const { return baselines_; }
  uint64_t held_ns() const { return held_ns_; }

 private:
  enum class Phase : uint8_t { Baseline, Steady, Trial };
  static constexpr size_t kBaselineRing = 32;
  static constexpr size_t kWindowMax = 64;
  static constexpr size_t kRecent = 128;
  static constexpr uint64_t kBottomRefreshNs = 10'000'000'000;   // a baseline again after a window past the objective at the bottom
  static constexpr uint64_t kFirstRefreshNs = 10'000'000'000;    // the first baseline is measured again this soon
  // A refused step's pause runs on the service's own clock (service_ns_): time from one period to
  // the next, each gap before a period counted up to this. A trial costs the service the requests it
  // spans, so its pause is counted in the service's time too: a service that is idle for minutes
  // between bursts of requests is not tried at the start of every burst (on a wall clock each burst
  // began with a trial the pause had long expired for), while one with requests every few hundred
  // milliseconds, whatever its load, sees its pauses as they are set.
  static constexpr uint64_t kIdleCountedNs = 1'000'000'000;
  bool is_step(Regime r) const;       // a step of this service's ladder
  Regime step_up(Regime r) const;     // the next more generous step (r when none)
  Regime step_down(Regime r) const;   // the next more protective step, never Held (r when none)
  // The significance asked of a window past the objective: its body, its tail, and a trial's first
  // half window (which gives the step up at once). The body's is loose (1 in 5): at 0.05 an eager
  // UNet's window read 1.40x and was kept on an H100 (its clients saw 1.49x under MPS); in virtual
  // time 0.2 keeps as much of the job beside a service it costs nothing (two windows in a row
  // before an adopted step goes keep chance from dropping it) and gives up a 1.3x step 1-18 % of
  // the time instead of 14-31 %.
  static constexpr double kBodySignificance = 0.2, kTailSignificance = 0.1, kEarlySignificance = 0.01;
  // That the window's periods read this long within `permille` of the baseline (the objective: the
  // body; twice it: a step far past).
  double past_p(uint32_t permille) const;
  bool tail_within() const;           // no more periods past the objective of the baseline's p90 than chance gives
  void judge_inflation(bool within);   // the window's median against the baseline's, and the verdict
  void begin(uint64_t now, Phase p);
  void refuse(uint64_t now);
  void climb(uint64_t now);
  void tick(uint64_t now, uint64_t len);   // the service's clock on to the end of a period

  ControllerSettings s_;
  Phase phase_ = Phase::Baseline;
  Regime adopted_ = Regime::HoldNarrow, trial_ = Regime::HoldNarrow;
  std::array<uint64_t, kBaselineRing> baseline_{}, baseline_work_{};   // (the same periods)
  size_t baseline_count_ = 0;         // periods ever added (the ring holds the last ones)
  uint32_t baseline_needed_ = 0;      // held periods still to measure in this baseline window
  std::array<uint64_t, kWindowMax> window_{}, window_work_{};
  std::array<uint32_t, kWindowMax> window_load_{};
  // The window's responses taken down by the median load of its requests (on_period).
  std::vector<uint64_t> judged_window() const;
  uint32_t n_ = 0, warmup_left_ = 0;
  uint64_t phase_since_ = 0, last_refresh_ = 0, pause_ = 0;
  uint64_t service_ns_ = 0, last_end_ = 0;   // the service's clock (kIdleCountedNs), the last period's end
  uint64_t next_trial_ = 0;                  // on the service's clock
  uint32_t inflation_ = 0;
  std::array<uint64_t, kRecent> recent_{};   // the last counted periods (recent_permille)...
  std::array<uint32_t, kRecent> recent_load_{};   // ...and the load each met
  size_t recent_count_ = 0;
  bool overran_ = false, within_ = false;
  bool strike_ = false;               // the adopted step's last window read past the objective
  bool suspect_refresh_ = false;      // the last refresh read off the baseline, set aside: the next one decides
  uint64_t trials_ = 0, climbs_ = 0, drops_ = 0, baselines_ = 0, held_ns_ = 0;
};

}  // namespace fikit::policy
