// Issue 53 probe: can a graph made in the primary context be confined to a green context's SMs
// afterwards, by giving its kernel nodes the green context (CUDA_KERNEL_NODE_PARAMS.ctx)? The hook
// sees a job's graphs only once they are made (captured by PyTorch, built by XLA), so confining them
// means rebinding their nodes, not making them elsewhere (graph_green_probe.cu found that a graph is
// confined by the context it was made in: captured on a green stream or built with it current).
// The driver's header says the node's ctx is ignored when its func is set, and libcudart >= 12
// launches CUkernel handles cast to CUfunction; so the probe asks, for the two kinds of kernel a job
// captures:
//
//   rt         a runtime-API kernel (<<< >>>, libcudart) captured on a primary-context stream: what its
//              node's params hold (func, kern, ctx; whether func is a CUkernel the driver names)
//   rt-ctx     its node set again with func kept and ctx = the green context
//   rt-kern    its node set again with func = NULL, kern = the CUkernel it launched, ctx = green
//   rt-exec    the original graph instantiated, then that executable's node set as rt-kern
//              (cuGraphExecKernelNodeSetParams: may an executable's node change context?)
//   mod-ctx    a module's CUfunction (cuModuleLoadData: Triton's way) captured on a primary stream,
//              its node set with ctx = green (func kept)
//   mod-kern   the same with func = NULL, kern = the handle: expected refused (not a CUkernel)
//   clone      rt-kern done to a cuGraphClone of the graph (what the hook's segments are made from)
// Each is launched onto the green stream and onto a primary-context stream; every block records
// %smid and the probe prints how many distinct SMs ran them.
// Build: nvcc -O2 -arch=sm_90 -o graph_rebind_probe graph_rebind_probe.cu -lcuda
// Run: ./graph_rebind_probe [N_SMS]
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "smid_ptx.h"
#include "smid_readback.h"

#define RT(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  std::printf("FAIL %s:%d %s -> %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); std::exit(1); } } while (0)

__global__ void rt_smid(unsigned* out, unsigned long long spin) {
  unsigned id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  if (threadIdx.x == 0) {
    out[blockIdx.x] = id;
    long long t0 = clock64();
    while ((unsigned long long)(clock64() - t0) < spin) {}
  }
}

static const std::string kPtxText = std::string(kProbePtxHeader) + kSmidKernelPtx;
static int g_blocks;
static CUdeviceptr g_out;
static unsigned long long g_spin = 20000;
static void* g_args[] = {&g_out, &g_spin};

static int distinct_after(CUresult launch_rc, CUstream s, unsigned* max_id) {
  return smid_distinct_after(launch_rc, s, g_out, g_blocks, max_id);
}
static void reset_out() { smid_reset(g_out, g_blocks); }

static void report_exec(const char* name, CUgraphExec exec, CUstream green, CUstream app) {
  unsigned mg = 0, ma = 0;
  reset_out();
  int on_green = distinct_after(cuGraphLaunch(exec, green), green, &mg);
  reset_out();
  int on_app = distinct_after(cuGraphLaunch(exec, app), app, &ma);
  std::printf("CASE %-8s on green stream: %d distinct SMs (max id %u); on primary stream: %d (max id %u)\n", name,
              on_green, mg, on_app, ma);
}

static void report_graph(const char* name, CUgraph graph, CUstream green, CUstream app) {
  CUgraphExec exec = nullptr;
  CUresult r = cuGraphInstantiate(&exec, graph, 0);
  if (r != CUDA_SUCCESS) { std::printf("CASE %-8s instantiate error %d\n", name, int(r)); return; }
  report_exec(name, exec, green, app);
  CK(cuGraphExecDestroy(exec));
}

// the graph's one kernel node
static CUgraphNode kernel_node(CUgraph graph) {
  size_t n = 0;
  CK(cuGraphGetNodes(graph, nullptr, &n));
  std::vector<CUgraphNode> nodes(n);
  CK(cuGraphGetNodes(graph, nodes.data(), &n));
  for (CUgraphNode node : nodes) {
    CUgraphNodeType t;
    CK(cuGraphNodeGetType(node, &t));
    if (t == CU_GRAPH_NODE_TYPE_KERNEL) return node;
  }
  std::printf("no kernel node\n");
  std::exit(1);
}

static void describe(const char* name, CUgraphNode node, CUcontext primary, CUcontext green) {
  CUDA_KERNEL_NODE_PARAMS p{};
  CK(cuGraphKernelNodeGetParams(node, &p));
  const char* fname = nullptr;
  const char* kname = nullptr;
  CUresult fr = p.func ? cuFuncGetName(&fname, p.func) : CUDA_ERROR_INVALID_VALUE;
  CUresult kr = p.func ? cuKernelGetName(&kname, reinterpret_cast<CUkernel>(p.func)) : CUDA_ERROR_INVALID_VALUE;
  std::printf("NODE %-8s func %p (cuFuncGetName %d, cuKernelGetName %d) kern %p ctx %s\n", name, (void*)p.func,
              int(fr), int(kr), (void*)p.kern,
              p.ctx == nullptr ? "NULL" : p.ctx == primary ? "primary" : p.ctx == green ? "green" : "other");
}

// the node's params with ctx = green; as_kernel: func = NULL, kern = the handle it launched
static CUresult rebind(CUgraphNode node, CUcontext green, bool as_kernel) {
  CUDA_KERNEL_NODE_PARAMS p{};
  CUresult r = cuGraphKernelNodeGetParams(node, &p);
  if (r != CUDA_SUCCESS) return r;
  if (as_kernel && p.kern == nullptr) p.kern = reinterpret_cast<CUkernel>(p.func);
  if (as_kernel) p.func = nullptr;
  p.ctx = green;
  return cuGraphKernelNodeSetParams(node, &p);
}

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  unsigned want = argc > 1 ? unsigned(std::atoi(argv[1])) : 16;
  CK(cuInit(0));
  int drv = 0;
  CK(cuDriverGetVersion(&drv));
  CUdevice dev;
  CK(cuDeviceGet(&dev, 0));
  RT(cudaSetDevice(0));
  RT(cudaFree(nullptr));   // the runtime's primary context
  CUcontext primary;
  CK(cuCtxGetCurrent(&primary));
  int sms = 0;
  CK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
  CUmodule mod;
  CK(cuModuleLoadData(&mod, kPtxText.c_str()));
  CUfunction f_mod;
  CK(cuModuleGetFunction(&f_mod, mod, "smid_kernel"));
  g_blocks = 8 * sms;
  CK(cuMemAlloc(&g_out, g_blocks * 4));
  CUstream app;
  CK(cuStreamCreate(&app, CU_STREAM_NON_BLOCKING));

  CUdevResource all;
  CK(cuDeviceGetDevResource(dev, &all, CU_DEV_RESOURCE_TYPE_SM));
  CUdevResource part[1], rest;
  unsigned n = 1;
  CK(cuDevSmResourceSplitByCount(part, &n, &all, &rest, 0, want));
  CUdevResourceDesc desc;
  CK(cuDevResourceGenerateDesc(&desc, part, 1));
  CUgreenCtx g;
  CK(cuGreenCtxCreate(&g, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
  CUstream gs;
  CK(cuGreenCtxStreamCreate(&gs, g, CU_STREAM_NON_BLOCKING, 0));
  CUcontext gc;
  CK(cuCtxFromGreenCtx(&gc, g));
  std::printf("driver API %d, device SMs %d, green context %u SMs (asked %u), kernel of %d blocks x 128 threads\n", drv,
              sms, part[0].sm.smCount, want, g_blocks);

  auto capture_rt = [&]() {
    CUgraph graph = nullptr;
    CK(cuStreamBeginCapture(app, CU_STREAM_CAPTURE_MODE_RELAXED));
    rt_smid<<<g_blocks, 128, 0, (cudaStream_t)app>>>((unsigned*)g_out, g_spin);
    RT(cudaGetLastError());
    CK(cuStreamEndCapture(app, &graph));
    return graph;
  };
  auto capture_mod = [&]() {
    CUgraph graph = nullptr;
    CK(cuStreamBeginCapture(app, CU_STREAM_CAPTURE_MODE_RELAXED));
    CK(cuLaunchKernel(f_mod, g_blocks, 1, 1, 128, 1, 1, 0, app, g_args, nullptr));
    CK(cuStreamEndCapture(app, &graph));
    return graph;
  };

  // rt: as captured
  CUgraph rt = capture_rt();
  describe("rt", kernel_node(rt), primary, gc);
  report_graph("rt", rt, gs, app);

  // rt-exec: the executable's node changed (before the graph's own node is)
  {
    CUgraphExec exec = nullptr;
    CK(cuGraphInstantiate(&exec, rt, 0));
    CUDA_KERNEL_NODE_PARAMS p{};
    CK(cuGraphKernelNodeGetParams(kernel_node(rt), &p));
    if (p.kern == nullptr) p.kern = reinterpret_cast<CUkernel>(p.func);
    p.func = nullptr;
    p.ctx = gc;
    CUresult r = cuGraphExecKernelNodeSetParams(exec, kernel_node(rt), &p);
    std::printf("SET  rt-exec cuGraphExecKernelNodeSetParams(func NULL, kern, ctx green) -> %d\n", int(r));
    if (r == CUDA_SUCCESS) report_exec("rt-exec", exec, gs, app);
    CK(cuGraphExecDestroy(exec));
  }

  // clone: rebinding a copy (the hook's segments are clones)
  {
    CUgraph copy = nullptr;
    CK(cuGraphClone(&copy, rt));
    CUresult r = rebind(kernel_node(copy), gc, true);
    std::printf("SET  clone rebind(func NULL, kern, ctx green) -> %d\n", int(r));
    if (r == CUDA_SUCCESS) { describe("clone", kernel_node(copy), primary, gc); report_graph("clone", copy, gs, app); }
    CK(cuGraphDestroy(copy));
    describe("rt-after", kernel_node(rt), primary, gc);
    report_graph("rt-after", rt, gs, app);   // the original unchanged
  }

  // rt-ctx: func kept, ctx green
  {
    CUresult r = rebind(kernel_node(rt), gc, false);
    std::printf("SET  rt-ctx rebind(func kept, ctx green) -> %d\n", int(r));
    if (r == CUDA_SUCCESS) { describe("rt-ctx", kernel_node(rt), primary, gc); report_graph("rt-ctx", rt, gs, app); }
  }
  CK(cuGraphDestroy(rt));

  // rt-kern: func NULL, kern, ctx green
  {
    CUgraph graph = capture_rt();
    CUresult r = rebind(kernel_node(graph), gc, true);
    std::printf("SET  rt-kern rebind(func NULL, kern, ctx green) -> %d\n", int(r));
    if (r == CUDA_SUCCESS) { describe("rt-kern", kernel_node(graph), primary, gc); report_graph("rt-kern", graph, gs, app); }
    CK(cuGraphDestroy(graph));
  }

  // mod-ctx / mod-kern: a module's CUfunction
  {
    CUgraph graph = capture_mod();
    describe("mod", kernel_node(graph), primary, gc);
    report_graph("mod", graph, gs, app);
    CUresult r = rebind(kernel_node(graph), gc, false);
    std::printf("SET  mod-ctx rebind(func kept, ctx green) -> %d\n", int(r));
    if (r == CUDA_SUCCESS) report_graph("mod-ctx", graph, gs, app);
    r = rebind(kernel_node(graph), gc, true);
    std::printf("SET  mod-kern rebind(func NULL, kern = the CUfunction, ctx green) -> %d\n", int(r));
    if (r == CUDA_SUCCESS) report_graph("mod-kern", graph, gs, app);
    CK(cuGraphDestroy(graph));
  }

  CK(cuStreamDestroy(gs));
  CK(cuGreenCtxDestroy(g));
  std::printf("done\n");
  return 0;
}
