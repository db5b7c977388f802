#pragma once
// What cutting a job's graph into segments asks of whoever knows the job's kernels (the active mode,
// hook/mode.h): graph/ depends on this, not on the modes.
#include <cstdint>

namespace fikit::hook::graph {

class KernelPredictor {
 public:
  // What the profile predicts for a kernel of this shape (kernelid::shape_id) inside a graph, in
  // ns; 0: unknown. Asked when a job's graph is cut into segments (not on the launch path).
  virtual uint64_t graph_kernel_ns(uint64_t shape_id) noexcept {
    (void)shape_id;
    return 0;
  }
  // Whether this process's graphs are a job's (cut into segments): by the priority the daemon gave
  // it once registered, else by the one it asks (`asked`). A job's graphs are always cut; how long a
  // segment is, FIKIT_GRAPH_SEGMENT_US, is its own to choose, not whether.
  virtual bool is_job(bool asked) noexcept { return asked; }

 protected:
  ~KernelPredictor() = default;
};

}  // namespace fikit::hook::graph
