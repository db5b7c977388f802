// A driver-API program of CUDA graphs for the hook tests, run on the simulated GPU: graphs of every
// node type the simulator has (kernels, copies, sets, host functions, event records and waits,
// child graphs, empty nodes, a second root), launched, changed node by node, updated, uploaded and
// relaunched; a graph with a memory allocation node; a captured graph. It prints what each step
// left in memory, one line per step, so that a test can compare a run whose graphs the hook cut
// into segments with one whose graphs it launched whole.
//   graph_probe [legacy|flags|params]   how the main graph is instantiated (default: flags)
//   graph_probe queue   one launch of a chain of 12 x (4 kernels of 500 us, an event recorded); prints
//                       how many events were complete when cuGraphLaunch returned, and in the end
#include <cuda.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

const char kPtx[] = R"(
.version 8.0
.target sm_90
.address_size 64
.visible .entry spin_kernel(.param .u64 spin_kernel_param_0) { ret; }
)";

#define CHECK(call)                                                   \
  do {                                                                \
    CUresult r_ = (call);                                             \
    if (r_ != CUDA_SUCCESS) {                                         \
      std::fprintf(stderr, "graph_probe: %s failed: %d\n", #call, r_); \
      return 1;                                                       \
    }                                                                 \
  } while (0)

int g_host_a = 0, g_host_b = 0;
void host_a(void*) { ++g_host_a; }
void host_b(void*) { ++g_host_b; }

CUfunction g_spin;
unsigned long long g_kernel_ns[64];   // each kernel node's duration parameter, kept alive

CUDA_KERNEL_NODE_PARAMS spin_params(unsigned long long* ns) {
  static void* params[64][1];
  static int next = 0;
  void** p = params[next++ % 64];
  p[0] = ns;
  CUDA_KERNEL_NODE_PARAMS k{};
  k.func = g_spin;
  k.gridDimX = 4, k.gridDimY = 1, k.gridDimZ = 1;
  k.blockDimX = 128, k.blockDimY = 1, k.blockDimZ = 1;
  k.kernelParams = p;
  return k;
}

CUDA_MEMSET_NODE_PARAMS memset_params(CUdeviceptr dst, unsigned value) {
  CUDA_MEMSET_NODE_PARAMS m{};
  m.dst = dst;
  m.value = value;
  m.elementSize = 4;
  m.width = 16;
  m.height = 1;
  return m;
}

CUDA_MEMCPY3D copy_params(CUdeviceptr dst, CUdeviceptr src) {
  CUDA_MEMCPY3D c{};
  c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  c.srcDevice = src;
  c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.dstDevice = dst;
  c.WidthInBytes = 64;
  c.Height = 1;
  c.Depth = 1;
  return c;
}

struct Buffers {
  CUdeviceptr x, y, z, w, v, u;
};

struct Built {
  CUgraph graph;
  CUgraphNode m1, k1, h1, m2;
};

// m1: x = first  ->  12 spin kernels  ->  y <- x  ->  host  ->  record ev  ->  wait ev  ->  child (z = 7,
// a kernel)  ->  m2: x = second  ->  w <- x  ->  (and after v = 5, a second root) u <- v  ->  empty
int build(const Buffers& b, CUevent ev, unsigned first, unsigned second, Built* out) {
  CUgraph g;
  CHECK(cuGraphCreate(&g, 0));
  CUgraphNode m1, prev, node;
  CUDA_MEMSET_NODE_PARAMS ms = memset_params(b.x, first);
  CHECK(cuGraphAddMemsetNode(&m1, g, nullptr, 0, &ms, nullptr));
  prev = m1;
  CUgraphNode k1 = nullptr;
  for (int i = 0; i < 12; ++i) {
    g_kernel_ns[i] = 30'000;
    CUDA_KERNEL_NODE_PARAMS k = spin_params(&g_kernel_ns[i]);
    CHECK(cuGraphAddKernelNode(&node, g, &prev, 1, &k));
    if (i == 0) k1 = node;
    prev = node;
  }
  CUDA_MEMCPY3D cp = copy_params(b.y, b.x);
  CHECK(cuGraphAddMemcpyNode(&node, g, &prev, 1, &cp, nullptr));
  prev = node;
  CUgraphNode h1;
  CUDA_HOST_NODE_PARAMS host{host_a, nullptr};
  CHECK(cuGraphAddHostNode(&h1, g, &prev, 1, &host));
  CHECK(cuGraphAddEventRecordNode(&node, g, &h1, 1, ev));
  prev = node;
  CHECK(cuGraphAddEventWaitNode(&node, g, &prev, 1, ev));
  prev = node;
  CUgraph child;
  CHECK(cuGraphCreate(&child, 0));
  CUgraphNode cm, ck;
  CUDA_MEMSET_NODE_PARAMS zs = memset_params(b.z, 7);
  CHECK(cuGraphAddMemsetNode(&cm, child, nullptr, 0, &zs, nullptr));
  g_kernel_ns[20] = 10'000;
  CUDA_KERNEL_NODE_PARAMS kc = spin_params(&g_kernel_ns[20]);
  CHECK(cuGraphAddKernelNode(&ck, child, &cm, 1, &kc));
  CHECK(cuGraphAddChildGraphNode(&node, g, &prev, 1, child));
  CHECK(cuGraphDestroy(child));   // the node holds its own copy
  prev = node;
  CUgraphNode m2;
  CUDA_MEMSET_NODE_PARAMS ms2 = memset_params(b.x, second);
  CHECK(cuGraphAddMemsetNode(&m2, g, &prev, 1, &ms2, nullptr));
  CUgraphNode c2;
  CUDA_MEMCPY3D cw = copy_params(b.w, b.x);
  CHECK(cuGraphAddMemcpyNode(&c2, g, &m2, 1, &cw, nullptr));
  CUgraphNode m3;
  CUDA_MEMSET_NODE_PARAMS vs = memset_params(b.v, 5);
  CHECK(cuGraphAddMemsetNode(&m3, g, nullptr, 0, &vs, nullptr));
  CUgraphNode deps[2] = {c2, m3};
  CUDA_MEMCPY3D cu = copy_params(b.u, b.v);
  CHECK(cuGraphAddMemcpyNode(&node, g, deps, 2, &cu, nullptr));
  CHECK(cuGraphAddEmptyNode(&node, g, &node, 1));
  *out = Built{g, m1, k1, h1, m2};
  return 0;
}

unsigned read(CUdeviceptr p) {
  unsigned v[16];
  if (cuMemcpyDtoH(v, p, sizeof v) != CUDA_SUCCESS) return 0xffffffffu;
  for (unsigned x : v)
    if (x != v[0]) return 0xfffffffeu;   // a set or copy done partly
  return v[0];
}

void print(const char* step, const Buffers& b) {
  std::printf("%s y=%u w=%u z=%u u=%u host_a=%d host_b=%d\n", step, read(b.y), read(b.w), read(b.z), read(b.u),
              g_host_a, g_host_b);
}

unsigned long long g_queue_ns = 500'000;

// The hook keeps at most 8 of one launch's segments queued: when the launch of the 12 segments
// (4 unknown kernels at a quarter of the budget each, then an event recorded) returns, the first 4
// have run. (The simulator runs a host function when its launch is queued, so events tell.)
int queue(CUstream stream) {
  CUgraph g;
  CHECK(cuGraphCreate(&g, 0));
  CUgraphNode prev = nullptr, node;
  CUevent done[12];
  for (int piece = 0; piece < 12; ++piece) {
    for (int i = 0; i < 4; ++i) {
      CUDA_KERNEL_NODE_PARAMS k = spin_params(&g_queue_ns);
      CHECK(cuGraphAddKernelNode(&node, g, prev != nullptr ? &prev : nullptr, prev != nullptr ? 1 : 0, &k));
      prev = node;
    }
    CHECK(cuEventCreate(&done[piece], CU_EVENT_DISABLE_TIMING));
    CHECK(cuGraphAddEventRecordNode(&node, g, &prev, 1, done[piece]));
    prev = node;
  }
  CUgraphExec exec;
  CHECK(cuGraphInstantiate(&exec, g, 0));
  CHECK(cuGraphLaunch(exec, stream));
  int at_return = 0;
  for (CUevent e : done) at_return += cuEventQuery(e) == CUDA_SUCCESS;
  CHECK(cuStreamSynchronize(stream));
  int in_all = 0;
  for (CUevent e : done) in_all += cuEventQuery(e) == CUDA_SUCCESS;
  std::printf("queue pieces_done_at_return %d of %d\n", at_return, in_all);
  CHECK(cuGraphExecDestroy(exec));
  CHECK(cuGraphDestroy(g));
  return 0;
}

int clear(const Buffers& b) {
  for (CUdeviceptr p : {b.x, b.y, b.z, b.w, b.v, b.u}) CHECK(cuMemsetD32(p, 0, 16));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string how = argc > 1 ? argv[1] : "flags";
  CHECK(cuInit(0));
  CUdevice dev;
  CHECK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  CUmodule mod;
  CHECK(cuModuleLoadData(&mod, kPtx));
  CHECK(cuModuleGetFunction(&g_spin, mod, "spin_kernel"));
  CUstream stream;
  CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  if (how == "queue") return queue(stream);
  CUevent ev;
  CHECK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
  Buffers b{};
  for (CUdeviceptr* p : {&b.x, &b.y, &b.z, &b.w, &b.v, &b.u}) CHECK(cuMemAlloc(p, 64));
  if (clear(b)) return 1;

  Built g;
  if (build(b, ev, 1, 2, &g)) return 1;
  CUgraphExec exec;
  if (how == "legacy") {
    using Legacy = CUresult (*)(CUgraphExec*, CUgraph, CUgraphNode*, char*, size_t);
    void* fn = nullptr;
    CHECK(cuGetProcAddress("cuGraphInstantiate", &fn, 11000, CU_GET_PROC_ADDRESS_DEFAULT, nullptr));
    CHECK(reinterpret_cast<Legacy>(fn)(&exec, g.graph, nullptr, nullptr, 0));
  } else if (how == "params") {
    CUDA_GRAPH_INSTANTIATE_PARAMS p{};
    CHECK(cuGraphInstantiateWithParams(&exec, g.graph, &p));
  } else {
    CHECK(cuGraphInstantiate(&exec, g.graph, 0));
  }
  CHECK(cuGraphUpload(exec, stream));
  // Twice, the second time on another stream (ordered after the first, as the driver orders whole
  // launches of one executable).
  CUstream other;
  CHECK(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
  CHECK(cuGraphLaunch(exec, stream));
  CHECK(cuGraphLaunch(exec, other));
  CHECK(cuStreamSynchronize(other));
  CHECK(cuStreamSynchronize(stream));
  print("launch", b);

  // Node by node: a set's value, a host function, a kernel's length, a set disabled.
  if (clear(b)) return 1;
  CUDA_MEMSET_NODE_PARAMS ms = memset_params(b.x, 3);
  CHECK(cuGraphExecMemsetNodeSetParams(exec, g.m1, &ms, ctx));
  CUDA_HOST_NODE_PARAMS host{host_b, nullptr};
  CHECK(cuGraphExecHostNodeSetParams(exec, g.h1, &host));
  g_kernel_ns[40] = 50'000;
  CUDA_KERNEL_NODE_PARAMS k = spin_params(&g_kernel_ns[40]);
  CHECK(cuGraphExecKernelNodeSetParams(exec, g.k1, &k));
  CHECK(cuGraphNodeSetEnabled(exec, g.m2, 0));
  CHECK(cuGraphLaunch(exec, stream));
  CHECK(cuStreamSynchronize(stream));
  print("set-params", b);
  CHECK(cuGraphNodeSetEnabled(exec, g.m2, 1));

  // A whole new graph of the same topology.
  if (clear(b)) return 1;
  Built g2;
  if (build(b, ev, 9, 8, &g2)) return 1;
  CUgraphExecUpdateResultInfo info{};
  CHECK(cuGraphExecUpdate(exec, g2.graph, &info));
  CHECK(cuGraphLaunch(exec, stream));
  CHECK(cuStreamSynchronize(stream));
  print("update", b);

  // A graph with a memory allocation node (the driver clones none): launched whole.
  if (clear(b)) return 1;
  CUgraph alloc_graph;
  CHECK(cuGraphCreate(&alloc_graph, 0));
  CUDA_MEM_ALLOC_NODE_PARAMS ap{};
  ap.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  ap.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  ap.bytesize = 64;
  CUgraphNode alloc_node, prev;
  CHECK(cuGraphAddMemAllocNode(&alloc_node, alloc_graph, nullptr, 0, &ap));
  prev = alloc_node;
  for (int i = 0; i < 12; ++i) {
    g_kernel_ns[48 + i] = 30'000;
    CUDA_KERNEL_NODE_PARAMS kk = spin_params(&g_kernel_ns[48 + i]);
    CUgraphNode n;
    CHECK(cuGraphAddKernelNode(&n, alloc_graph, &prev, 1, &kk));
    prev = n;
  }
  CUDA_MEMSET_NODE_PARAMS ys = memset_params(b.y, 11);
  CUgraphNode n;
  CHECK(cuGraphAddMemsetNode(&n, alloc_graph, &prev, 1, &ys, nullptr));
  CUgraphExec alloc_exec;
  CHECK(cuGraphInstantiate(&alloc_exec, alloc_graph, 0));
  CHECK(cuGraphLaunch(alloc_exec, stream));
  CHECK(cuStreamSynchronize(stream));
  print("alloc-node", b);

  // A captured graph: twelve kernels, then a copy.
  if (clear(b)) return 1;
  CHECK(cuMemsetD32(b.x, 4, 16));
  CHECK(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
  for (int i = 0; i < 12; ++i) {
    unsigned long long ns = 30'000;
    void* params[] = {&ns};
    CHECK(cuLaunchKernel(g_spin, 4, 1, 1, 128, 1, 1, 0, stream, params, nullptr));
  }
  CHECK(cuMemcpyDtoDAsync(b.y, b.x, 64, stream));
  CUgraph captured;
  CHECK(cuStreamEndCapture(stream, &captured));
  CUgraphExec captured_exec;
  CHECK(cuGraphInstantiate(&captured_exec, captured, 0));
  CHECK(cuGraphLaunch(captured_exec, stream));
  CHECK(cuStreamSynchronize(stream));
  print("captured", b);

  CHECK(cuGraphExecDestroy(exec));
  CHECK(cuGraphExecDestroy(alloc_exec));
  CHECK(cuGraphExecDestroy(captured_exec));
  for (CUgraph x : {g.graph, g2.graph, alloc_graph, captured}) CHECK(cuGraphDestroy(x));
  std::printf("done\n");
  return 0;
}
