// Issue 53 probe: does a CUDA graph's kernel run only on a green context's SMs, by how the graph was
// made? (green_probe.cu, case 5, found that a graph made in the primary context and launched onto a
// green-context stream runs on all SMs, also when instantiated with the green context current; this
// probe adds graphs captured on the green stream and graphs built with the green context as the node's
// context.) Every block of a many-block kernel records %smid; the probe prints the distinct SMs seen.
//
//   control    the kernel launched directly on the green stream, and on a primary-context stream
//   a1/a2      captured on the green-context stream (a1: CUfunction of a module loaded in the primary
//              context; a2: a context-independent CUkernel)
//   b1         built explicitly with the green context current: kernel node {kern = CUkernel, ctx = NULL
//              (the current, green, context)}, instantiated with the green context current
//   b2         as b1, the node's func = cuKernelGetFunction(CUkernel) taken with the green context current
//   b3         built and instantiated in the primary context, kernel node {kern = CUkernel, ctx = the green
//              context's CUcontext}
//   c1         captured on a primary-context stream (CUfunction), instantiated in the primary context
//   c2         built in the primary context, kernel node {kern = CUkernel, ctx = NULL}
// Each graph is launched onto the green stream and onto a primary-context stream.
// Build: nvcc -O2 -o graph_green_probe graph_green_probe.cu -lcuda   Run: ./graph_green_probe [N_SMS]
#include <cuda.h>
#include <cstdio>
#include <string>
#include <cstdlib>

#include "smid_ptx.h"
#include "smid_readback.h"

static const std::string kPtxText = std::string(kProbePtxHeader) + kSmidKernelPtx + R"(
)";
static const char* kPtx = kPtxText.c_str();

static int g_blocks;
static CUdeviceptr g_out;
static unsigned long long g_spin = 20000;
static void* g_args[] = {&g_out, &g_spin};

static int distinct_after(CUresult launch_rc, CUstream s, unsigned* max_id) {
  return smid_distinct_after(launch_rc, s, g_out, g_blocks, max_id);
}
static void reset_out() { smid_reset(g_out, g_blocks); }

static void report_graph(const char* name, CUgraph graph, CUcontext inst_ctx, CUstream green, CUstream app) {
  CUgraphExec exec = nullptr;
  if (inst_ctx) CK(cuCtxPushCurrent(inst_ctx));
  CUresult r = cuGraphInstantiate(&exec, graph, 0);
  CUcontext popped;
  if (inst_ctx) CK(cuCtxPopCurrent(&popped));
  if (r != CUDA_SUCCESS) { std::printf("CASE %-3s instantiate error %d\n", name, int(r)); return; }
  unsigned mg = 0, ma = 0;
  reset_out();
  int on_green = distinct_after(cuGraphLaunch(exec, green), green, &mg);
  reset_out();
  int on_app = distinct_after(cuGraphLaunch(exec, app), app, &ma);
  std::printf("CASE %-3s graph launched on green stream: %d distinct SMs (max id %u); on primary stream: %d distinct SMs (max id %u)\n",
              name, on_green, mg, on_app, ma);
  CK(cuGraphExecDestroy(exec));
}

static CUgraph node_graph(CUfunction func, CUkernel kern, CUcontext node_ctx) {
  CUgraph g;
  CK(cuGraphCreate(&g, 0));
  CUDA_KERNEL_NODE_PARAMS kp{};
  kp.func = func; kp.kern = kern; kp.ctx = node_ctx;
  kp.gridDimX = g_blocks; kp.gridDimY = kp.gridDimZ = 1;
  kp.blockDimX = 128; kp.blockDimY = kp.blockDimZ = 1; kp.kernelParams = g_args;
  CUgraphNode node;
  CUresult r = cuGraphAddKernelNode(&node, g, nullptr, 0, &kp);
  if (r != CUDA_SUCCESS) { std::printf("  cuGraphAddKernelNode error %d\n", int(r)); CK(cuGraphDestroy(g)); return nullptr; }
  return g;
}

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  unsigned want = argc > 1 ? unsigned(std::atoi(argv[1])) : 16;
  CK(cuInit(0));
  int drv = 0; CK(cuDriverGetVersion(&drv));
  CUdevice dev; CK(cuDeviceGet(&dev, 0));
  CUcontext primary; CK(cuDevicePrimaryCtxRetain(&primary, dev)); CK(cuCtxSetCurrent(primary));
  int sms = 0; CK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
  CUmodule mod; CK(cuModuleLoadData(&mod, kPtx));
  CUfunction f_prim; CK(cuModuleGetFunction(&f_prim, mod, "smid_kernel"));
  CUlibrary lib; CK(cuLibraryLoadData(&lib, kPtx, nullptr, nullptr, 0, nullptr, nullptr, 0));
  CUkernel k; CK(cuLibraryGetKernel(&k, lib, "smid_kernel"));
  g_blocks = 8 * sms;
  CK(cuMemAlloc(&g_out, g_blocks * 4));
  CUstream app; CK(cuStreamCreate(&app, CU_STREAM_NON_BLOCKING));

  CUdevResource all; CK(cuDeviceGetDevResource(dev, &all, CU_DEV_RESOURCE_TYPE_SM));
  CUdevResource part[1], rest; unsigned n = 1;
  CK(cuDevSmResourceSplitByCount(part, &n, &all, &rest, 0, want));
  CUdevResourceDesc desc; CK(cuDevResourceGenerateDesc(&desc, part, 1));
  CUgreenCtx g; CK(cuGreenCtxCreate(&g, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
  CUstream gs; CK(cuGreenCtxStreamCreate(&gs, g, CU_STREAM_NON_BLOCKING, 0));
  CUcontext gc; CK(cuCtxFromGreenCtx(&gc, g));
  std::printf("driver API %d, device SMs %d, green context %u SMs (asked %u), kernel of %d blocks x 128 threads\n", drv, sms,
              part[0].sm.smCount, want, g_blocks);

  unsigned m1 = 0, m2 = 0;
  reset_out();
  int d_green = distinct_after(cuLaunchKernel((CUfunction)k, g_blocks, 1, 1, 128, 1, 1, 0, gs, g_args, nullptr), gs, &m1);
  reset_out();
  int d_app = distinct_after(cuLaunchKernel(f_prim, g_blocks, 1, 1, 128, 1, 1, 0, app, g_args, nullptr), app, &m2);
  std::printf("CASE ctl direct launch on green stream: %d distinct SMs (max id %u); on primary stream: %d (max id %u)\n",
              d_green, m1, d_app, m2);

  CUcontext popped;
  // a1 / a2: captured on the green-context stream
  for (int v = 0; v < 2; ++v) {
    CUgraph graph = nullptr;
    CK(cuStreamBeginCapture(gs, CU_STREAM_CAPTURE_MODE_RELAXED));
    CUresult lr = cuLaunchKernel(v == 0 ? f_prim : (CUfunction)k, g_blocks, 1, 1, 128, 1, 1, 0, gs, g_args, nullptr);
    CUresult er = cuStreamEndCapture(gs, &graph);
    if (lr != CUDA_SUCCESS || er != CUDA_SUCCESS || !graph) {
      std::printf("CASE %s capture on green stream: launch %d end-capture %d\n", v == 0 ? "a1" : "a2", int(lr), int(er));
      continue;
    }
    report_graph(v == 0 ? "a1" : "a2", graph, nullptr, gs, app);
    CK(cuGraphDestroy(graph));
  }
  // b1: green context current, node {kern, ctx = NULL}, instantiated with green current
  CK(cuCtxPushCurrent(gc));
  CUgraph gb1 = node_graph(nullptr, k, nullptr);
  CUfunction f_green = nullptr;
  CUresult kr = cuKernelGetFunction(&f_green, k);
  CK(cuCtxPopCurrent(&popped));
  if (gb1) { report_graph("b1", gb1, gc, gs, app); CK(cuGraphDestroy(gb1)); }
  // b2: node func = cuKernelGetFunction taken with green current
  if (kr != CUDA_SUCCESS) {
    std::printf("CASE b2  cuKernelGetFunction with green current: error %d\n", int(kr));
  } else {
    CK(cuCtxPushCurrent(gc));
    CUgraph gb2 = node_graph(f_green, nullptr, nullptr);
    CK(cuCtxPopCurrent(&popped));
    if (gb2) { report_graph("b2", gb2, gc, gs, app); CK(cuGraphDestroy(gb2)); }
  }
  // b3: built in primary, node {kern, ctx = green CUcontext}
  CUgraph gb3 = node_graph(nullptr, k, gc);
  if (gb3) { report_graph("b3", gb3, nullptr, gs, app); CK(cuGraphDestroy(gb3)); }
  // c1: captured on the primary stream (CUfunction)
  {
    CUgraph graph = nullptr;
    CK(cuStreamBeginCapture(app, CU_STREAM_CAPTURE_MODE_RELAXED));
    CK(cuLaunchKernel(f_prim, g_blocks, 1, 1, 128, 1, 1, 0, app, g_args, nullptr));
    CK(cuStreamEndCapture(app, &graph));
    report_graph("c1", graph, nullptr, gs, app);
    CK(cuGraphDestroy(graph));
  }
  // c2: built in primary, node {kern, ctx = NULL}
  CUgraph gc2 = node_graph(nullptr, k, nullptr);
  if (gc2) { report_graph("c2", gc2, nullptr, gs, app); CK(cuGraphDestroy(gc2)); }

  CK(cuStreamDestroy(gs)); CK(cuGreenCtxDestroy(g));
  std::printf("done\n");
  return 0;
}
