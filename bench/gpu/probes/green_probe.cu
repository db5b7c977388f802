// Green-context facts FIKIT's long-hold mechanism relies on, measured with the driver API alone:
//  1. a kernel from a module loaded in the primary context (CUfunction) and a context-independent
//     CUkernel launch onto a green-context stream, and run only on that partition's SMs;
//  2. an event hop (app stream -> green stream -> app stream) keeps the application's stream order;
//  3. what the device attribute and occupancy queries say with a green context current;
//  4. the CPU cost of a redirected launch against a plain one;
//  5. whether a CUDA graph made in the primary context (captured there, or built of kernel nodes) and
//     launched onto a green-context stream runs on that partition's SMs or on all of them, and whether
//     instantiating it with the green context current changes that.
// Build: nvcc -O2 -o green_probe green_probe.cu -lcuda   Run: ./green_probe [N_SMS...]
#include <cuda.h>
#include <chrono>
#include <cstdio>
#include <string>
#include <cstdlib>
#include <set>
#include <vector>

#include "smid_ptx.h"

#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { const char* s_ = nullptr; cuGetErrorString(r_, &s_); \
  std::printf("FAIL %s:%d %s -> %d %s\n", __FILE__, __LINE__, #x, int(r_), s_ ? s_ : "?"); return 1; } } while (0)

static const std::string kPtxText = std::string(kProbePtxHeader) + kSmidKernelPtx + R"(
.visible .entry add_one(.param .u64 x, .param .u64 spin) {
  .reg .u32 %r<3>; .reg .u64 %rd<8>; .reg .pred %p;
  ld.param.u64 %rd1, [x]; ld.param.u64 %rd5, [spin];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %ctaid.x; or.b32 %r1, %r1, %r2; setp.ne.u32 %p, %r1, 0; @%p bra DONE;
  mov.u64 %rd6, %clock64;
LOOP: mov.u64 %rd7, %clock64; sub.u64 %rd7, %rd7, %rd6; setp.lt.u64 %p, %rd7, %rd5; @%p bra LOOP;
  ld.volatile.global.u32 %r2, [%rd1]; add.u32 %r2, %r2, 1; st.volatile.global.u32 [%rd1], %r2;
DONE: ret;
}
)";
static const char* kPtx = kPtxText.c_str();

static double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int main(int argc, char** argv) {
  CK(cuInit(0));
  CUdevice dev; CK(cuDeviceGet(&dev, 0));
  CUcontext primary; CK(cuDevicePrimaryCtxRetain(&primary, dev)); CK(cuCtxSetCurrent(primary));
  int sms = 0, mps = 0; CK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
  CK(cuDeviceGetAttribute(&mps, CU_DEVICE_ATTRIBUTE_MPS_ENABLED, dev));
  CUdevResource all; CK(cuDeviceGetDevResource(dev, &all, CU_DEV_RESOURCE_TYPE_SM));
  std::printf("device SMs %d, MPS %d, resource smCount %u minPartition %u alignment %u\n", sms, mps,
              all.sm.smCount, all.sm.minSmPartitionSize, all.sm.smCoscheduledAlignment);
  CUmodule mod; CK(cuModuleLoadData(&mod, kPtx));
  CUfunction f_smid, f_add; CK(cuModuleGetFunction(&f_smid, mod, "smid_kernel")); CK(cuModuleGetFunction(&f_add, mod, "add_one"));
  CUlibrary lib; CK(cuLibraryLoadData(&lib, kPtx, nullptr, nullptr, 0, nullptr, nullptr, 0));
  CUkernel k_smid; CK(cuLibraryGetKernel(&k_smid, lib, "smid_kernel"));
  const int blocks = 4 * sms;
  CUdeviceptr out, x; CK(cuMemAlloc(&out, blocks * 4)); CK(cuMemAlloc(&x, 4));
  CUstream app; CK(cuStreamCreate(&app, CU_STREAM_NON_BLOCKING));
  int occ = 0; CK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&occ, f_smid, 128, 0));
  std::printf("occupancy smid_kernel 128 threads: %d blocks/SM (primary)\n", occ);

  std::vector<unsigned> wants;
  for (int i = 1; i < argc; ++i) wants.push_back(unsigned(std::atoi(argv[i])));
  if (wants.empty()) wants = {8, 16, 32, 64, 100, 128};
  for (unsigned want : wants) {
    CUdevResource part[1], rest; unsigned n = 1;
    CUresult r = cuDevSmResourceSplitByCount(part, &n, &all, &rest, 0, want);
    if (r != CUDA_SUCCESS || n == 0) { std::printf("split %u: error %d\n", want, int(r)); continue; }
    CUdevResourceDesc desc; CK(cuDevResourceGenerateDesc(&desc, part, 1));
    CUgreenCtx g; CK(cuGreenCtxCreate(&g, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
    CUstream gs; CK(cuGreenCtxStreamCreate(&gs, g, CU_STREAM_NON_BLOCKING, 0));
    // 1. a module CUfunction and a CUkernel on the green stream: which SMs ran the blocks?
    for (int variant = 0; variant < 2; ++variant) {
      CK(cuMemsetD32(out, 0xFFFFFFFF, blocks));
      unsigned long long spin = 20000;
      void* args[] = {&out, &spin};
      CUfunction fn = variant == 0 ? f_smid : reinterpret_cast<CUfunction>(k_smid);
      r = cuLaunchKernel(fn, blocks, 1, 1, 128, 1, 1, 0, gs, args, nullptr);
      if (r != CUDA_SUCCESS) { std::printf("  N=%u %s launch on green stream: error %d\n", want, variant ? "CUkernel" : "CUfunction", int(r)); continue; }
      CK(cuStreamSynchronize(gs));
      std::vector<unsigned> ids(blocks); CK(cuMemcpyDtoH(ids.data(), out, blocks * 4));
      std::set<unsigned> used(ids.begin(), ids.end());
      std::printf("  N=%u (got %u SMs, rest %u): %s on green stream ran on %zu distinct SMs (max id %u)\n", want,
                  part[0].sm.smCount, rest.sm.smCount, variant ? "CUkernel" : "CUfunction", used.size(), *used.rbegin());
    }
    // 3. queries with the green context current
    CUcontext gc; CK(cuCtxFromGreenCtx(&gc, g)); CK(cuCtxPushCurrent(gc));
    int gsms = 0, gocc = 0; CK(cuDeviceGetAttribute(&gsms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    CK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&gocc, f_smid, 128, 0));
    CUdevResource cur; CK(cuCtxGetDevResource(gc, &cur, CU_DEV_RESOURCE_TYPE_SM));
    CUcontext popped; CK(cuCtxPopCurrent(&popped));
    std::printf("  green current: device attribute SMs %d, occupancy %d, ctx resource %u SMs\n", gsms, gocc, cur.sm.smCount);
    // 2. event hop keeps order: app: add_one(spin long) ; green: add_one ; app: add_one -> x == 3
    CK(cuMemsetD32(x, 0, 1));
    CUevent e1, e2; CK(cuEventCreate(&e1, CU_EVENT_DISABLE_TIMING)); CK(cuEventCreate(&e2, CU_EVENT_DISABLE_TIMING));
    unsigned long long slow = 50'000'000, fast = 0;
    void* a_slow[] = {&x, &slow}; void* a_fast[] = {&x, &fast};
    CK(cuLaunchKernel(f_add, 1, 1, 1, 32, 1, 1, 0, app, a_slow, nullptr));
    CK(cuEventRecord(e1, app)); CK(cuStreamWaitEvent(gs, e1, 0));
    CK(cuLaunchKernel(f_add, 1, 1, 1, 32, 1, 1, 0, gs, a_slow, nullptr));
    CK(cuEventRecord(e2, gs)); CK(cuStreamWaitEvent(app, e2, 0));
    CK(cuLaunchKernel(f_add, 1, 1, 1, 32, 1, 1, 0, app, a_fast, nullptr));
    CK(cuStreamSynchronize(app));
    unsigned xv = 0; CK(cuMemcpyDtoH(&xv, x, 4));
    std::printf("  event hop order: x = %u (3 = in order)\n", xv);
    // 4. CPU cost: plain launches vs redirected launches (record, wait, launch, record, wait)
    void* a_none[] = {&x, &fast};
    const int iters = 2000;
    double t0 = now_us();
    for (int i = 0; i < iters; ++i) CK(cuLaunchKernel(f_add, 1, 1, 1, 32, 1, 1, 0, app, a_none, nullptr));
    double t1 = now_us(); CK(cuStreamSynchronize(app));
    double t2 = now_us();
    for (int i = 0; i < iters; ++i) {
      CK(cuEventRecord(e1, app)); CK(cuStreamWaitEvent(gs, e1, 0));
      CK(cuLaunchKernel(f_add, 1, 1, 1, 32, 1, 1, 0, gs, a_none, nullptr));
      CK(cuEventRecord(e2, gs)); CK(cuStreamWaitEvent(app, e2, 0));
    }
    double t3 = now_us(); CK(cuStreamSynchronize(app));
    double t4 = now_us();
    std::printf("  CPU per launch: plain %.2f us, redirected %.2f us (drain %.0f / %.0f us)\n", (t1 - t0) / iters,
                (t3 - t2) / iters, t2 - t1, now_us() - t3);
    (void)t4;
    // 5. graphs: one captured on the application's stream (primary context), one built of a kernel
    //    node, each launched onto the green stream; which SMs ran their blocks?
    const char* kGraphVariant[] = {"captured", "kernel node", "captured, instantiated in the green context",
                                   "kernel node, instantiated in the green context"};
    for (int variant = 0; variant < 4; ++variant) {
      CK(cuMemsetD32(out, 0xFFFFFFFF, blocks));
      unsigned long long spin = 20000;
      void* args[] = {&out, &spin};
      CUgraph graph = nullptr;
      if (variant % 2 == 0) {
        CK(cuStreamBeginCapture(app, CU_STREAM_CAPTURE_MODE_RELAXED));
        CK(cuLaunchKernel(f_smid, blocks, 1, 1, 128, 1, 1, 0, app, args, nullptr));
        CK(cuStreamEndCapture(app, &graph));
      } else {
        CK(cuGraphCreate(&graph, 0));
        CUDA_KERNEL_NODE_PARAMS kp{};
        kp.func = f_smid; kp.gridDimX = blocks; kp.gridDimY = kp.gridDimZ = 1;
        kp.blockDimX = 128; kp.blockDimY = kp.blockDimZ = 1; kp.kernelParams = args;
        CUgraphNode node; CK(cuGraphAddKernelNode(&node, graph, nullptr, 0, &kp));
      }
      CUgraphExec exec = nullptr;
      if (variant >= 2) CK(cuCtxPushCurrent(gc));
      r = cuGraphInstantiate(&exec, graph, 0);
      if (variant >= 2) CK(cuCtxPopCurrent(&popped));
      if (r == CUDA_SUCCESS) r = cuGraphLaunch(exec, gs);
      if (r != CUDA_SUCCESS) {
        std::printf("  N=%u graph (%s) launched on green stream: error %d\n", want, kGraphVariant[variant], int(r));
      } else {
        CK(cuStreamSynchronize(gs));
        std::vector<unsigned> ids(blocks); CK(cuMemcpyDtoH(ids.data(), out, blocks * 4));
        std::set<unsigned> used(ids.begin(), ids.end());
        std::printf("  N=%u graph (%s) on green stream ran on %zu distinct SMs (max id %u)\n", want,
                    kGraphVariant[variant], used.size(), *used.rbegin());
      }
      if (exec != nullptr) CK(cuGraphExecDestroy(exec));
      CK(cuGraphDestroy(graph));
    }
    CK(cuEventDestroy(e1)); CK(cuEventDestroy(e2)); CK(cuStreamDestroy(gs)); CK(cuGreenCtxDestroy(g));
  }
  std::printf("done\n");
  return 0;
}
