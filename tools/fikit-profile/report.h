#pragma once
// The renderings fikit-profile prints or writes: pure functions from profile data to a stream, so
// that each output format is testable and main.cpp only parses arguments and maps errors.
#include <ostream>
#include <string>
#include <vector>

#include "profiledb.h"

namespace fikit::profile_cli {

void write_task_list(std::ostream& out, const std::vector<profiledb::TaskInfo>& tasks);
// Kernels as given (the database returns them by total GPU time), one aligned row each.
void write_kernel_table(std::ostream& out, const profiledb::TaskInfo& task,
                        const std::vector<profiledb::KernelProfile>& kernels);
// Machine-readable exports: the same fields in both; kernel IDs as "0x..." strings because JSON
// numbers lose 64-bit precision in most readers.
void write_kernels_csv(std::ostream& out, const std::vector<profiledb::KernelProfile>& kernels);
void write_kernels_json(std::ostream& out, const profiledb::TaskInfo& task,
                        const std::vector<profiledb::KernelProfile>& kernels);
// Chrome / Perfetto trace-event JSON, one track (tid) per stream, times relative to the first op.
void write_trace_json(std::ostream& out, const std::string& task_key, const std::vector<profiledb::TraceOp>& ops,
                      const std::vector<profiledb::KernelProfile>& kernels);
// Gap histogram of the whole task, one bar per octave, drawn with '#'.
void write_gap_histogram(std::ostream& out, const profiledb::Histogram& gaps, uint64_t boundary_count,
                         int width = 50);

}  // namespace fikit::profile_cli
