#include "run_builder.h"

#include <algorithm>

namespace fikit::hook::measure {

void RunBuilder::close_segment() {
  if (seg_end_ > seg_start_) iter_span_ += seg_end_ - seg_start_;
  seg_start_ = UINT64_MAX;
  seg_end_ = 0;
}

void RunBuilder::close_iteration() {
  close_segment();
  if (iter_span_ > 0) ++iter_busy_pct_[std::min<uint64_t>(100, (iter_busy_ * 100 + iter_span_ / 2) / iter_span_)];
  iter_span_ = iter_busy_ = iter_covered_ = 0;
}

std::optional<Run> RunBuilder::boundary(uint64_t work_epoch, bool adjacent) {
  if (have_prev_ && adjacent) kernels_[prev_id_].boundary_count++;
  close_iteration();
  // Only iterations that ran work on SMs count: PyTorch uploads a model's weights a copy and a wait
  // at a time. Windows: the synchronisations after such work between two measured ops count too,
  // each once (an op of another thread can carry an older epoch).
  if (!windows_) {
    if (iter_sm_work_) ++summary_.iterations;
    iter_sm_work_ = false;
  } else if (work_epoch > max_work_epoch_) {
    summary_.iterations += work_epoch - max_work_epoch_;
  }
  if (iterations_per_run_ && summary_.iterations >= iterations_per_run_) return take();
  if (end_requested_ && summary_.iterations > 0) return take();
  return std::nullopt;
}

std::optional<Run> RunBuilder::add(const TimedOp& op) {
  std::optional<Run> finished;
  if (!epoch_known_) max_work_epoch_ = op.work_epoch;
  if (epoch_known_ && op.sync_epoch != prev_epoch_) {
    finished = boundary(op.work_epoch, !op.window_head);
  } else if (have_prev_ && !op.after_drop && !op.start_unknown && !op.window_head) {
    // All streams merged: a next op that starts before this one ended leaves no gap.
    const uint64_t gap = op.start_ns > prev_end_ ? op.start_ns - prev_end_ : 0;
    kernels_[prev_id_].gap.add(gap > op.gap_stretch_ns ? gap - op.gap_stretch_ns : 0);
  }

  profiledb::KernelSample& k = kernels_[op.kernel_id];
  k.kernel_id = op.kernel_id;
  if (op.window_head) {
    close_segment();
  } else {
    if (!op.start_unknown) k.duration.add(op.end_ns - op.start_ns);
    if (op.unresolved || op.start_unknown) ++k.dur_unresolved;
  }
  ++summary_.gpu_ops;
  // A window's first op counts from its end: where its start lies is not known.
  const uint64_t start = op.window_head ? op.end_ns : op.start_ns;
  first_start_ = std::min(first_start_, start);
  last_end_ = std::max(last_end_, op.end_ns);
  // Busy time = union of op intervals, kept incrementally: exact when ops start in launch order
  // (one stream, or streams that do not overlap), a slight overcount for overlapping streams.
  const uint64_t from = std::max(start, covered_until_);
  if (op.end_ns > from) summary_.busy_ns += op.end_ns - from;
  covered_until_ = std::max(covered_until_, op.end_ns);
  if (op.sm_work) {
    seg_start_ = std::min(seg_start_, start);
    seg_end_ = std::max(seg_end_, op.end_ns);
    const uint64_t iter_from = std::max(start, iter_covered_);
    if (op.end_ns > iter_from) iter_busy_ += op.end_ns - iter_from;
    iter_covered_ = std::max(iter_covered_, op.end_ns);
    iter_sm_work_ = true;
  }
  if (trace_.size() < profiledb::TraceOp::kMaxPerRun)
    trace_.push_back({op.kernel_id, op.stream, start, op.end_ns});

  have_prev_ = epoch_known_ = true;
  prev_id_ = op.kernel_id;
  prev_end_ = op.end_ns;
  prev_epoch_ = op.sync_epoch;
  max_work_epoch_ = std::max(max_work_epoch_, op.work_epoch);
  return finished;
}

void RunBuilder::add_graph_nodes(uint64_t graph_op, const std::vector<GraphNodeTime>& nodes) {
  for (size_t i = 0; i < nodes.size(); ++i) {
    const GraphNodeTime& n = nodes[i];
    profiledb::KernelSample& k = kernels_[n.id];
    if (k.graph_op == 0) {
      k.kernel_id = n.id;
      k.graph_op = graph_op;
      k.name.assign(n.name);
      k.grid = n.grid;
      k.block = n.block;
      k.shared_mem = n.shared_mem;
    }
    if (n.end_ns >= n.start_ns) k.duration.add(n.end_ns - n.start_ns);
    // Nodes of parallel branches overlap: no gap between them.
    if (i + 1 < nodes.size()) k.gap.add(nodes[i + 1].start_ns > n.end_ns ? nodes[i + 1].start_ns - n.end_ns : 0);
  }
}

std::optional<Run> RunBuilder::add_untimed(uint64_t sync_epoch, bool window_head, uint64_t work_epoch) {
  std::optional<Run> finished;
  if (!epoch_known_) max_work_epoch_ = work_epoch;
  if (epoch_known_ && sync_epoch != prev_epoch_) finished = boundary(work_epoch, !window_head);
  max_work_epoch_ = std::max(max_work_epoch_, work_epoch);
  if (window_head) close_segment();
  // The boundary (if any) is counted; later gaps are measured from the next timed op on.
  epoch_known_ = true;
  have_prev_ = false;
  prev_epoch_ = sync_epoch;
  return finished;
}

std::optional<Run> RunBuilder::finish() {
  if (summary_.gpu_ops == 0) return std::nullopt;
  return take();
}

Run RunBuilder::take() {
  Run run;
  close_iteration();   // at process exit the last iteration had no closing synchronisation
  uint64_t iterations = 0;
  for (uint32_t n : iter_busy_pct_) iterations += n;
  if (iterations > 0) {
    uint64_t seen = 0;
    for (size_t pct = 0; pct < iter_busy_pct_.size(); ++pct) {
      seen += iter_busy_pct_[pct];
      if (2 * seen >= iterations) {
        summary_.request_busy_pct = int32_t(pct);
        break;
      }
    }
  }
  iter_busy_pct_ = {};
  summary_.wall_ns = last_end_ > first_start_ ? last_end_ - first_start_ : 0;
  run.summary = summary_;
  run.kernels.reserve(kernels_.size());
  for (auto& [id, k] : kernels_) {
    k.kernel_id = id;
    run.kernels.push_back(std::move(k));
  }
  run.trace = std::move(trace_);
  kernels_.clear();
  trace_.clear();
  summary_ = {};
  first_start_ = UINT64_MAX;
  last_end_ = covered_until_ = 0;
  // The op before the boundary belongs to the finished run: no gap links it to the next one.
  have_prev_ = false;
  end_requested_ = false;
  return run;
}

}  // namespace fikit::hook::measure
