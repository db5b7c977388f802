#pragma once
// Whether a service is an MPS client: decided by what being one costs it, measured.
//
// Being an MPS client costs some services before any job runs (an LLM decode replayed as CUDA
// graphs: 1.08x at p50 on an H100, docs/results.md), which no regime of the controller can give
// back: its baseline is measured under MPS. A process is an MPS client or not for its whole life,
// so the comparison is made across the service's measured runs: fikit-run measures its runs under
// both backends in turn (with the jobs below held, as while any task measures), stores the median
// of its requests as the host saw them per run (profiledb RunSummary::request_p50_ns), and from then
// on starts the service outside MPS when the runs as an MPS client were slower than the runs of a
// context of its own by more than the limit (their medians), and slower beyond chance (a one-sided
// rank test of the runs, p <= 0.05): the processes of a noisy service differ by more than a few
// per cent, and outside MPS its jobs lose what MPS would let beside it. Outside MPS the jobs below wait while it is active
// (time-sliced hold: docs/scheduling.md); inside, its controller may let them beside it.
//
// Header-only and dependency-free: fikit-run decides with it, fikit-profile shows it.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "rank_test.h"
#include "sample_quantile.h"

namespace fikit::rules {

// One measured run whose backend is known (runs stored before schema version 6 are left out): its
// backend and the median of its requests (0: it had none the host could tell: no synchronisation).
struct BackendRun {
  bool mps = false;
  uint64_t request_p50_ns = 0;
};

// What being an MPS client may cost a service, unset: 3 % (FIKIT_MPS_COST_LIMIT).
inline constexpr uint32_t kMpsCostLimitPermille = 1030;

struct BackendChoice {
  bool mps = true;               // start the service as an MPS client
  bool trial = false;            // measuring: this start measures runs under `mps` to learn the cost
  uint32_t measure_more = 0;     // runs to measure beyond those stored (a trial after the task measured)
  uint32_t runs_mps = 0, runs_plain = 0;   // runs that tell, each way
  uint64_t mps_p50_ns = 0, plain_p50_ns = 0;   // the medians of their request medians (0: no run)
  double cost = 0;               // mps_p50_ns / plain_p50_ns once both have their runs (0: not known)
  double p_value = 1;            // that the MPS runs are this much slower by chance (rank test)
  bool by_chance = false;        // a cost past the limit that the runs do not tell from chance: MPS
};

// Runs each backend needs before the cost is read: half of the runs measured (10 by default: 5
// and 5). 5 runs of 300 requests each way resolved an LLM decode's 7 % cost on an H200, every run as
// an MPS client slower than every run outside. Fewer than 3 each way can never be significant.
inline uint32_t backend_trial_runs(uint32_t runs_wanted) { return std::max<uint32_t>(1, runs_wanted / 2); }

// The significance asked of a cost before a service leaves MPS.
inline constexpr double kBackendSignificance = 0.05;
// The runs of each backend the test reads at most (the latest).
inline constexpr size_t kBackendTestRuns = 20;

// runs: the task's stored runs; runs_stored: all of them (those that do not tell included);
// runs_wanted: the runs a task measures before it shares (FIKIT_MEASURE_RUNS); limit_permille: the
// most being an MPS client may cost it.
inline BackendChoice choose_backend(const std::vector<BackendRun>& runs, uint64_t runs_stored, uint32_t runs_wanted,
                                    uint32_t limit_permille) {
  std::vector<uint64_t> mps, plain;
  uint32_t silent = 0;
  for (const BackendRun& r : runs) {
    if (r.request_p50_ns > 0)
      (r.mps ? mps : plain).push_back(r.request_p50_ns);
    else
      ++silent;
  }
  BackendChoice c;
  c.runs_mps = uint32_t(mps.size());
  c.runs_plain = uint32_t(plain.size());
  c.mps_p50_ns = sample_quantile(mps, 50);
  c.plain_p50_ns = sample_quantile(plain, 50);
  const uint32_t need = backend_trial_runs(runs_wanted);
  // A program whose runs show no requests (it never synchronises with the GPU), or that measured a
  // whole trial past its runs without the runs telling: nothing to compare, and no end to measuring.
  if (silent >= need || runs_stored >= uint64_t(runs_wanted) + 2 * need) return c;
  if (c.runs_mps >= need && c.runs_plain >= need) {
    c.cost = double(c.mps_p50_ns) / double(c.plain_p50_ns);
    const auto latest = [](const std::vector<uint64_t>& v) {
      return std::vector<uint64_t>(v.end() - std::ptrdiff_t(std::min(v.size(), kBackendTestRuns)), v.end());
    };
    c.p_value = rank_test_p(latest(mps), latest(plain));
    c.by_chance = c.cost * 1000.0 > double(limit_permille) && c.p_value > kBackendSignificance;
    c.mps = c.cost * 1000.0 <= double(limit_permille) || c.by_chance;
    return c;
  }
  // The backend with fewer runs next, MPS first: alternate while the task measures anyway; a task
  // that measured all its runs one way (a server measuring them in one process) measures the runs
  // the other way lacks before it shares.
  c.trial = true;
  c.mps = c.runs_mps <= c.runs_plain;
  const uint32_t have = c.mps ? c.runs_mps : c.runs_plain;
  if (runs_stored >= runs_wanted) c.measure_more = need - have;
  return c;
}

// What being an MPS client bought a service's jobs, from its last run as one (fikit-scheduler
// --mps records it: mps/outcomes.h): of its active time judged with jobs below (judged_ns), the
// part under a regime adopted by its controller that runs them beside it at full width (beside_ns:
// above the partition). Where its jobs ran so less than a tenth of that time, its controller could
// only hold them or keep them on an SM partition: outside MPS they get its idle time, a sole job its
// gaps too (the regime preempt), and it pays no MPS cost, so it starts time-sliced, whatever the
// cost rule above says (on an H100, beside three GPU-bound services replayed as CUDA graphs, the
// fixed regime preempt read better than FIKIT on MPS on every column, significantly beside one:
// docs/results.md; untried on other families). Judged on at least 20 s of such time: a run too
// short to say leaves the cost rule.
// Kept until its jobs change (the daemon forgets the outcome then, and the next start tries MPS).
inline constexpr uint64_t kOutcomeMinJudgedNs = 20'000'000'000;
inline constexpr uint32_t kOutcomeBesidePermille = 100;
inline bool mps_bought_nothing(uint64_t judged_ns, uint64_t beside_ns) {
  return judged_ns >= kOutcomeMinJudgedNs && beside_ns * 1000 < judged_ns * kOutcomeBesidePermille;
}

}  // namespace fikit::rules
