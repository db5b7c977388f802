#pragma once
// The GPU side every example shares: device 0's primary context, the spin kernel loaded from PTX,
// and one stream to launch it on. Driver API only, so the same binary runs on a real GPU and on
// the simulated libcuda.so.1 (tests/simgpu), whichever the loader finds.
#include <cuda.h>

#include <cstdint>
#include <vector>

namespace fikit::examples {

struct LaunchShape {
  uint32_t blocks = 132;    // one block per SM of an H100/H200
  uint32_t threads = 128;
  uint32_t cluster = 1;     // blocks per thread-block cluster (above 1: launched with cuLaunchKernelEx)
};

class SpinGpu {
 public:
  explicit SpinGpu(LaunchShape shape);   // exits via die_cuda on any failure
  ~SpinGpu();
  SpinGpu(const SpinGpu&) = delete;
  SpinGpu& operator=(const SpinGpu&) = delete;

  // Queues one spin kernel of `duration_ns` on the stream; returns at once.
  void launch(uint64_t duration_ns);
  // Waits until everything launched so far has finished.
  void synchronize();
  // Captures `kernels` spin kernels of `duration_ns` into a CUDA graph (stream capture), instantiated
  // once; launch_graph() queues all of them in one launch, as a framework replays a captured step.
  void capture_graph(uint64_t kernels, uint64_t duration_ns, bool uncuttable = false);
  void launch_graph();
  // Sets every kernel node of the instantiated graph again (to `duration_ns`), as XLA sets its
  // command buffer's nodes before each launch.
  void set_graph_nodes(uint64_t duration_ns);
  // Later launches use this shape (a new input shape: to FIKIT, new kernels).
  void set_shape(LaunchShape shape) { shape_ = shape; }

 private:
  LaunchShape shape_;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  CUmodule module_ = nullptr;
  CUfunction spin_ = nullptr;
  CUstream stream_ = nullptr;
  CUgraph graph_ = nullptr;
  CUgraphExec graph_exec_ = nullptr;
  std::vector<CUgraphNode> graph_nodes_;
};

}  // namespace fikit::examples
