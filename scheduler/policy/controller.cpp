#include "controller.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "rank_test.h"
#include "sample_quantile.h"

namespace fikit::policy {

namespace {
constexpr const char* kRegimeNames[kRegimes] = {"held", "hold-narrow", "hold", "partition", "short-beside", "beside", "preempt", "free"};
}

const char* to_string(Regime r) { return unsigned(r) < unsigned(kRegimes) ? kRegimeNames[unsigned(r)] : "?"; }

bool regime_from_string(const char* name, bool& automatic, Regime& fixed) {
  if (std::strcmp(name, "auto") == 0) {
    automatic = true;
    return true;
  }
  // "held" is the baseline's, never a regime to run under for good: the tasks below would never run.
  for (int i = int(Regime::HoldNarrow); i < kRegimes; ++i)
    if (std::strcmp(name, kRegimeNames[i]) == 0) {
      automatic = false;
      fixed = Regime(i);
      return true;
    }
  return false;
}

Controller::Controller(const ControllerSettings& s) : s_(s) {
  s_.window = std::clamp<uint32_t>(s_.window, 2, kWindowMax);
  s_.early_judge = std::clamp<uint32_t>(s_.early_judge, 2, s_.window);
  s_.baseline_first = std::clamp<uint32_t>(s_.baseline_first, 1, kBaselineRing);
  s_.baseline_refresh = std::clamp<uint32_t>(s_.baseline_refresh, 1, kBaselineRing);
  if (s_.top == Regime::Held) s_.top = Regime::HoldNarrow;
  // The most protective step first: the controller climbs from there as the service allows.
  adopted_ = trial_ = std::min(s_.partition && !s_.timesliced ? Regime::HoldNarrow : Regime::Hold, s_.top);
  baseline_needed_ = s_.baseline_first;
  warmup_left_ = s_.warmup;
  pause_ = s_.first_pause_ns;
}

bool Controller::is_step(Regime r) const {
  if (s_.timesliced) return r == Regime::Hold || r == Regime::Free || (r == Regime::Preempt && s_.preempt);
  return r != Regime::Preempt && (s_.partition || (r != Regime::HoldNarrow && r != Regime::Partition));
}

Regime Controller::step_up(Regime r) const {
  for (int i = int(r) + 1; i <= int(s_.top); ++i)
    if (is_step(Regime(i))) return Regime(i);
  return r;
}

Regime Controller::step_down(Regime r) const {
  for (int i = int(r) - 1; i > int(Regime::Held); --i)
    if (is_step(Regime(i))) return Regime(i);
  return r;
}

uint32_t Controller::recent_permille() const {
  const uint64_t b = baseline_quantile(50);
  if (b == 0 || recent_count_ == 0) return 0;
  const size_t n = std::min(recent_count_, kRecent);
  const uint64_t m = sample_quantile(recent_, n, 50), load = std::max<uint64_t>(1000, sample_quantile(recent_load_, n, 50));
  return uint32_t(std::min<uint64_t>(m * 1000 * 1000 / load / b, UINT32_MAX));
}

uint64_t Controller::alone_work_ns() const {
  if (baseline_count_ != 0) return sample_quantile(baseline_work_, std::min(baseline_count_, kBaselineRing), 50);
  return phase_ == Phase::Baseline && warmup_left_ == 0 && n_ != 0 ? sample_quantile(window_work_, n_, 50) : 0;
}

uint64_t Controller::baseline_quantile(unsigned pct) const {
  return sample_quantile(baseline_, std::min(baseline_count_, kBaselineRing), pct);
}

std::vector<uint64_t> Controller::judged_window() const {
  const uint64_t load = n_ == 0 ? 1000 : std::max<uint64_t>(1000, sample_quantile(window_load_, n_, 50));
  std::vector<uint64_t> window(window_.begin(), window_.begin() + n_);
  for (uint64_t& w : window) w = w * 1000 / load;
  return window;
}

// The window's periods at a reach of `permille` of the baseline (the objective, or twice it): each
// taken down by it, against the baseline's. One-sided rank test (rank_test.h): the chance that they
// read this much longer when the step costs the service no more than that.
double Controller::past_p(uint32_t permille) const {
  std::vector<uint64_t> window = judged_window(), baseline;
  for (uint64_t& w : window) w = w * 1000 / permille;
  baseline.assign(baseline_.begin(), baseline_.begin() + std::min(baseline_count_, kBaselineRing));
  return rules::rank_test_p(window, baseline);
}

bool Controller::tail_within() const {
  // A period in 10 of the baseline's is past its 90th percentile; past the objective of it, fewer.
  // More of the window's than chance gives a window of the baseline (binomial tail) is a step that
  // hurts the service's tail though its body keeps.
  const uint64_t bound = baseline_quantile(90) * s_.objective_permille / 1000;
  uint32_t over = 0;
  for (uint64_t w : judged_window()) over += w > bound;
  return rules::binomial_tail_p(n_, over, 0.1) > kTailSignificance;
}

void Controller::judge_inflation(bool within) {
  const std::vector<uint64_t> window = judged_window();
  const uint64_t b = baseline_quantile(50), w = sample_quantile(window, 50);
  inflation_ = b == 0 ? 0 : uint32_t(std::min<uint64_t>(w * 1000 / b, UINT32_MAX));
  overran_ = false;
  within_ = within;
}

uint64_t Controller::limit_ns() const {
  if (phase_ == Phase::Baseline || baseline_count_ == 0) return UINT64_MAX;
  // Four baseline upper quartiles at the objective: a period that long says the step hurts without
  // waiting for the window (a service held up by a long hold, or SMs it never gets back).
  return 4 * baseline_quantile(75) * s_.objective_permille / 1000;
}

void Controller::begin(uint64_t now, Phase p) {
  phase_ = p;
  phase_since_ = now;
  n_ = 0;
  if (p == Phase::Baseline)
    baseline_needed_ = std::min<uint32_t>(baseline_count_ == 0 ? s_.baseline_first : s_.baseline_refresh, kWindowMax);
}

void Controller::refuse(uint64_t now) {
  // A drop gives a step up: a trial's, or the adopted one's (at the bottom there is none to give).
  if (phase_ == Phase::Trial || step_down(adopted_) != adopted_) ++drops_;
  // A step whose periods read past twice the objective beyond doubt (as a trial's first half is
  // judged) is not one that noise refused: the service's load or its jobs must change before it can
  // keep it, so it waits the longest pause. Each trial of it costs the service's clients the requests
  // it spans (8 at least: a window's upper percentiles), and the doubling from 2 s spent five such
  // trials in the first minute. It takes as many periods as the early judgement (a period past the
  // limit counts among them): fewer, however long, are what a burst of queued requests or a host
  // short of CPU gives (with two, e2e.timesliced_free's quiet job lost free for the rest of its run
  // in 2 of 3 runs beside one busy loop); nor is a window's median enough: at 40 % load queueing
  // reads 2.4x in windows of a job that costs nothing (ControllerSim: free kept 58 % of the time,
  // not 70 %).
  const bool far = n_ >= s_.early_judge && past_p(2 * s_.objective_permille) <= kEarlySignificance;
  const uint64_t pause = far ? s_.max_pause_ns : pause_;
  if (phase_ == Phase::Trial) {
    next_trial_ = service_ns_ + pause;
    pause_ = std::min(2 * pause_, s_.max_pause_ns);
  } else if (step_down(adopted_) != adopted_) {
    // The adopted step hurts now (the load or either program changed): one step down at once, and
    // the step given up is tried again after the pause as any refused one.
    adopted_ = step_down(adopted_);
    next_trial_ = service_ns_ + pause;
  } else if (now - last_refresh_ >= kBottomRefreshNs) {
    // Even the most protective step reads past the objective: the baseline no longer says what the
    // service takes alone (its load, its requests, or a host that got busier), or nothing can
    // protect it more. Measure it again, at most every kBottomRefreshNs; the trials' schedule stays.
    begin(now, Phase::Baseline);
    return;
  }
  begin(now, Phase::Steady);
}

void Controller::on_overrun(uint64_t now) {
  if (phase_ == Phase::Baseline) return;
  inflation_ = std::max(inflation_, s_.objective_permille * 4);
  overran_ = true;
  within_ = false;
  refuse(now);
}

void Controller::tick(uint64_t now, uint64_t len) {
  const uint64_t start = now > len ? now - len : 0;
  if (last_end_ != 0 && now > last_end_) {
    const uint64_t gap = start > last_end_ ? start - last_end_ : 0;
    service_ns_ += std::min(gap, kIdleCountedNs) + (now - std::max(start, last_end_));
  }
  last_end_ = std::max(last_end_, now);
}

void Controller::on_period(uint64_t now, uint64_t len, uint64_t work_ns, uint32_t load_permille) {
  tick(now, len);
  // The first baseline's hold began with the service's first period, or with its last warm-up one
  // (regime()); counted from the clock's zero it read as the host's uptime.
  if (phase_since_ == 0) phase_since_ = now > len ? now - len : 1;
  if (warmup_left_ > 0) {
    if (--warmup_left_ == 1) phase_since_ = now;
    return;
  }
  load_permille = std::max<uint32_t>(load_permille, 1000);
  recent_load_[recent_count_ % kRecent] = load_permille;
  recent_[recent_count_++ % kRecent] = len;
  window_load_[n_] = load_permille;
  window_work_[n_] = work_ns;
  if (phase_ == Phase::Baseline) {
    window_[n_++] = len;
    if (n_ < baseline_needed_) return;
    // A refresh whose median is off the older baseline's by more than the objective either way
    // says the service itself changed (its requests, its load), or that its 8 periods met a burst
    // of requests queueing behind each other (on an H100 such a refresh set an LLM decode service's
    // baseline far above its time alone, and status read it near alone while its clients saw much
    // worse: docs/results.md, "The far-refusal pause"). So a slower one replaces the baseline only
    // when the next refresh, one window later (a burst seldom spans both), is off too; until then it
    // is set aside, and the window between is judged against neither (the regime stays; an overrun
    // still drops it). A faster one replaces it at once: a burst makes held periods longer, never
    // shorter, so it says the baseline itself was taken slow (a busy start).
    const std::vector<uint64_t> judged = judged_window();
    bool slower = false, faster = false;
    if (baseline_count_ != 0) {
      const uint64_t fresh = sample_quantile(judged, 50), old = baseline_quantile(50);
      const uint64_t obj = s_.objective_permille;
      slower = fresh * 1000 > old * obj;
      faster = old * 1000 > fresh * obj;
    }
    const bool replace = faster || (slower && suspect_refresh_);
    suspect_refresh_ = slower && !replace;
    if (replace) baseline_count_ = 0;
    if (!suspect_refresh_)
      for (uint32_t i = 0; i < n_; ++i) {
        baseline_work_[baseline_count_ % kBaselineRing] = window_work_[i];
        baseline_[baseline_count_++ % kBaselineRing] = judged[i];
      }
    ++baselines_;
    held_ns_ += now - phase_since_;
    last_refresh_ = now;
    begin(now, Phase::Steady);
    if (!suspect_refresh_) climb(now);
    return;
  }
  // (The limit is at no load: the policy stretches it by the load of the request under way.)
  if (len * 1000 / load_permille > limit_ns()) {
    window_[n_++] = len;   // n_ < window here: the far test in refuse() weighs it with the others
    on_overrun(now);
    return;
  }
  window_[n_++] = len;
  // Half a window in, a step the service plainly cannot take is given up at once.
  if (phase_ == Phase::Trial && n_ == s_.early_judge && past_p(s_.objective_permille) <= kEarlySignificance) {
    judge_inflation(false);
    refuse(now);
    return;
  }
  if (n_ < s_.window) return;
  if (suspect_refresh_) {
    begin(now, Phase::Baseline);
    return;
  }
  judge_inflation(past_p(s_.objective_permille) > kBodySignificance && tail_within());
  const bool ok = within_;
  // Faster than the baseline by more than the objective: the baseline is what is off (a service
  // still warming up, or one whose requests got shorter). Measure it again before going on.
  if (ok && uint64_t(inflation_) * s_.objective_permille < 1000ull * 1000) {
    begin(now, Phase::Baseline);
    return;
  }
  // An adopted step is given up on two windows in a row past the objective: at a service's
  // busier moments (its requests queueing behind each other) one window in twenty or so reads past
  // it by chance, and each drop costs the jobs a pause before the step is tried again. A trial is
  // judged on its one window; a period past the limit drops any step at once (on_overrun).
  if (!ok && phase_ == Phase::Steady && !strike_ && step_down(adopted_) != adopted_) {
    strike_ = true;
    begin(now, Phase::Steady);
    return;
  }
  strike_ = false;
  if (!ok) {
    refuse(now);
  } else if (phase_ == Phase::Trial) {
    adopted_ = trial_;
    ++climbs_;
    pause_ = s_.first_pause_ns;
    begin(now, Phase::Steady);
  } else {
    begin(now, Phase::Steady);
  }
  // Either program may have changed since the baseline: measure it afresh now and then. The first
  // refresh comes sooner: a first baseline taken while the host or the daemon was slow (a busy
  // start, a huge profile being read) reads every window after it as faster than alone.
  const uint64_t refresh = baselines_ == 1 ? std::min(kFirstRefreshNs, s_.refresh_every_ns) : s_.refresh_every_ns;
  if (now - last_refresh_ >= refresh) {
    begin(now, Phase::Baseline);
    return;
  }
  climb(now);
}

void Controller::allow_preempt(uint64_t now, bool on) {
  if (!s_.timesliced || s_.preempt == on) return;
  s_.preempt = on;
  if (on) return;
  // The window under way was under a step that is no more: it says nothing of the one after.
  const bool trial = phase_ == Phase::Trial && trial_ == Regime::Preempt;
  if (adopted_ == Regime::Preempt) adopted_ = step_down(Regime::Preempt);
  if (trial || (phase_ == Phase::Steady && n_ != 0)) begin(now, Phase::Steady);
}

void Controller::climb(uint64_t now) {
  // Straight on after a baseline or a window that passed; a refused step waits out its pause.
  if (phase_ != Phase::Steady || service_ns_ < next_trial_ || step_up(adopted_) == adopted_) return;
  trial_ = step_up(adopted_);
  ++trials_;
  begin(now, Phase::Trial);
}

}  // namespace fikit::policy
