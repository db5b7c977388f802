// Probe: what changing a node of a CUDA graph costs the host, by how it is done (no FIKIT involved).
// An XLA command buffer has each of its nodes set again before every launch (a JAX training step:
// about 285 kernel nodes and 72 child-graph nodes a step); FIKIT's hook makes each change to the
// copies of the node in a job's segments too (docs/scheduling.md, "Graphs"). Timed, per call, over
// --calls calls each (median of 5 batches):
//   exec-kernel   cuGraphExecKernelNodeSetParams on an instantiated graph of 200 kernels
//   graph-kernel  cuGraphKernelNodeSetParams on the (uninstantiated) graph's node
//   exec-child    cuGraphExecChildGraphNodeSetParams (a child graph of 4 kernels)
//   graph-child   cuGraphNodeSetParams on the graph's child-graph node (its result code is printed)
//   exec-update   cuGraphExecUpdate of an instantiated 4-kernel graph from its graph
// Prints one JSON line.   nvcc -o graph_update_probe graph_update_probe.cu -lcuda && ./graph_update_probe
#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

const char kPtx[] = R"(
.version 8.0
.target sm_90
.address_size 64
.visible .entry touch(.param .u64 a, .param .u64 b, .param .u64 c, .param .u32 n) { ret; }
)";

#define CHECK(call)                                                                    \
  do {                                                                                 \
    CUresult r_ = (call);                                                              \
    if (r_ != CUDA_SUCCESS) {                                                          \
      std::fprintf(stderr, "graph_update_probe: %s failed: %d\n", #call, int(r_));     \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

CUfunction g_fn;
CUdeviceptr g_buf;

struct Args {
  CUdeviceptr a, b, c;
  unsigned n;
  void* p[4];
  Args(unsigned i) : a(g_buf + 256 * (i % 64)), b(g_buf + 256 * ((i + 1) % 64)), c(g_buf), n(i) {
    p[0] = &a, p[1] = &b, p[2] = &c, p[3] = &n;
  }
};

CUDA_KERNEL_NODE_PARAMS kernel_params(Args& args) {
  CUDA_KERNEL_NODE_PARAMS k{};
  k.func = g_fn;
  k.gridDimX = 132, k.gridDimY = 1, k.gridDimZ = 1;
  k.blockDimX = 256, k.blockDimY = 1, k.blockDimZ = 1;
  k.kernelParams = args.p;
  return k;
}

CUgraph chain(int kernels, std::vector<CUgraphNode>* nodes) {
  CUgraph g;
  CHECK(cuGraphCreate(&g, 0));
  CUgraphNode prev = nullptr;
  for (int i = 0; i < kernels; ++i) {
    Args args(i);
    CUDA_KERNEL_NODE_PARAMS k = kernel_params(args);
    CUgraphNode node;
    CHECK(cuGraphAddKernelNode(&node, g, prev ? &prev : nullptr, prev ? 1 : 0, &k));
    if (nodes) nodes->push_back(node);
    prev = node;
  }
  return g;
}

template <class F>
double per_call_ns(int calls, F f) {
  std::vector<double> batches;
  for (int b = 0; b < 5; ++b) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) f(i);
    batches.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / calls);
  }
  std::sort(batches.begin(), batches.end());
  return batches[2];
}

}  // namespace

int main(int argc, char** argv) {
  int calls = 20000;
  for (int i = 1; i + 1 < argc; ++i)
    if (!std::strcmp(argv[i], "--calls")) calls = std::atoi(argv[i + 1]);
  CHECK(cuInit(0));
  CUdevice dev;
  CHECK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  CUmodule mod;
  CHECK(cuModuleLoadData(&mod, kPtx));
  CHECK(cuModuleGetFunction(&g_fn, mod, "touch"));
  CHECK(cuMemAlloc(&g_buf, 256 * 64));

  std::vector<CUgraphNode> nodes;
  CUgraph big = chain(200, &nodes);
  // A child-graph node after the chain.
  CUgraph child = chain(4, nullptr);
  CUgraphNode child_node;
  CHECK(cuGraphAddChildGraphNode(&child_node, big, &nodes.back(), 1, child));
  CUgraphExec exec;
  CHECK(cuGraphInstantiate(&exec, big, 0));
  CUgraph small = chain(4, nullptr);
  CUgraphExec small_exec;
  CHECK(cuGraphInstantiate(&small_exec, small, 0));

  const double exec_kernel = per_call_ns(calls, [&](int i) {
    Args args(i);
    CUDA_KERNEL_NODE_PARAMS k = kernel_params(args);
    CHECK(cuGraphExecKernelNodeSetParams(exec, nodes[i % nodes.size()], &k));
  });
  const double graph_kernel = per_call_ns(calls, [&](int i) {
    Args args(i);
    CUDA_KERNEL_NODE_PARAMS k = kernel_params(args);
    CHECK(cuGraphKernelNodeSetParams(nodes[i % nodes.size()], &k));
  });
  const double exec_child = per_call_ns(calls / 10, [&](int) {
    CHECK(cuGraphExecChildGraphNodeSetParams(exec, child_node, child));
  });
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_GRAPH;
  p.graph.graph = child;
  const CUresult child_set = cuGraphNodeSetParams(child_node, &p);
  const double graph_child = child_set != CUDA_SUCCESS ? -1.0 : per_call_ns(calls / 10, [&](int) {
    CHECK(cuGraphNodeSetParams(child_node, &p));
  });
  const double exec_update = per_call_ns(calls / 10, [&](int) {
    CUgraphExecUpdateResultInfo info{};
    CHECK(cuGraphExecUpdate(small_exec, small, &info));
  });
  std::printf("{\"calls\":%d,\"exec_kernel_ns\":%.0f,\"graph_kernel_ns\":%.0f,\"exec_child_ns\":%.0f,"
              "\"graph_child_ns\":%.0f,\"graph_child_result\":%d,\"exec_update_4_kernels_ns\":%.0f}\n",
              calls, exec_kernel, graph_kernel, exec_child, graph_child, int(child_set), exec_update);
  return 0;
}
