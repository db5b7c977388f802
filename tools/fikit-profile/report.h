#pragma once
// The renderings fikit-profile prints or writes: pure functions from profile data to a stream, so
// that each output format is testable and main.cpp only parses arguments and maps errors.
#include <ostream>
#include <string>
#include <vector>

#include "kernel_rules.h"
#include "profiledb.h"

namespace fikit::profile_cli {

void write_task_list(std::ostream& out, const std::vector<profiledb::TaskInfo>& tasks);
// Kernels as given (the database returns them by total GPU time), one aligned row each.
void write_kernel_table(std::ostream& out, const profiledb::TaskInfo& task,
                        const std::vector<profiledb::KernelProfile>& kernels);
// Machine-readable exports: the same fields in both; kernel IDs as "0x..." strings because JSON
// numbers lose 64-bit precision in most readers.
// `uncertainty_ns`: what each duration and gap may be off by (profiledb::timing_uncertainty of the
// task's runs; 0: exact or unknown).
void write_kernels_csv(std::ostream& out, const std::vector<profiledb::KernelProfile>& kernels, uint64_t uncertainty_ns);
void write_kernels_json(std::ostream& out, const profiledb::TaskInfo& task,
                        const std::vector<profiledb::KernelProfile>& kernels, uint64_t uncertainty_ns);
// Chrome / Perfetto trace-event JSON, one track (tid) per stream, times relative to the first op.
void write_trace_json(std::ostream& out, const std::string& task_key, const std::vector<profiledb::TraceOp>& ops,
                      const std::vector<profiledb::KernelProfile>& kernels);
// One line on how much of the task's launched work its runs timed ("coverage"), and whether that is
// below profiledb::kGoodCoverage. False when it is (the caller warns).
bool write_coverage(std::ostream& out, const std::vector<profiledb::RunSummary>& runs);
// One line on how the runs were timed (CUPTI, or calibrated CUDA events with their bias and
// uncertainty) and how many kernels had durations too short for that timer.
void write_timing(std::ostream& out, const std::vector<profiledb::RunSummary>& runs,
                  const std::vector<profiledb::KernelProfile>& kernels);
// One line on what being an MPS client costs the task's requests, as its runs under each backend
// show (rules/backend_rule.h; fikit-run decides a service's backend by it); nothing when no run
// says its backend.
void write_backend(std::ostream& out, const std::vector<profiledb::RunSummary>& runs, uint32_t runs_wanted);
// Two profiles of one program (e.g. sampled vs every iteration): the kernels both have, their
// duration means and gap medians side by side, and how many agree within the given tolerances.
// Launched ops only: a graph's kernels timed inside it (graph_op) are left out, as its op stands for them.
struct CompareRules {
  double dur_tolerance = 0.05, gap_tolerance = 0.10;
  uint64_t min_dur_ns = 0;       // durations compared only for kernels at least this long in A
  // Gap medians also agree when they differ by no more than this (the larger timing uncertainty of
  // the two profiles' runs: what their timers state they may be off by).
  uint64_t gap_slack_ns = 0;
  uint64_t short_hold_ns = policy::kDefaultShortHoldNs;   // SM hold class: short up to this, long above
};
struct Agreement {
  size_t kernels_a = 0, kernels_b = 0, common = 0;
  size_t dur_compared = 0, dur_within = 0, gap_compared = 0, gap_within = 0;
  size_t hold_compared = 0, hold_same = 0;   // kernels with occupancy known in both; same SM hold class
  size_t copies = 0;           // copies and sets both have: neither their durations nor their gaps compared
  double time_common = 0;      // share of A's GPU time in kernels B has too
  double time_dur_within = 0;  // share of the compared kernels' time in kernels whose durations agree
};
Agreement compare_profiles(const std::vector<profiledb::KernelProfile>& a, const std::vector<profiledb::KernelProfile>& b,
                           const CompareRules& rules);
void write_comparison(std::ostream& out, const std::string& key_a, const std::string& key_b,
                      const std::vector<profiledb::KernelProfile>& a, const std::vector<profiledb::KernelProfile>& b,
                      const CompareRules& rules);

// Gap histogram of the whole task, one bar per octave, drawn with '#'.
void write_gap_histogram(std::ostream& out, const profiledb::Histogram& gaps, uint64_t boundary_count,
                         int width = 50);

}  // namespace fikit::profile_cli
