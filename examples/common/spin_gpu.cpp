#include "spin_gpu.h"

#include <dlfcn.h>
#include <limits.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "cuda_check.h"
#include "spin_kernel.h"

namespace fikit::examples {
namespace {

// The driver, opened at run time as libcudart opens it (so `--help` works on a machine without
// one, and FIKIT's hook sees the examples through its dlsym path, as it sees PyTorch).
struct Driver {
  CUresult (*init)(unsigned);
  CUresult (*device_get)(CUdevice*, int);
  CUresult (*primary_retain)(CUcontext*, CUdevice);
  CUresult (*primary_release)(CUdevice);
  CUresult (*ctx_set_current)(CUcontext);
  CUresult (*module_load_data)(CUmodule*, const void*);
  CUresult (*module_get_function)(CUfunction*, CUmodule, const char*);
  CUresult (*module_unload)(CUmodule);
  CUresult (*stream_create)(CUstream*, unsigned);
  CUresult (*stream_destroy)(CUstream);
  CUresult (*stream_synchronize)(CUstream);
  CUresult (*launch_kernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                            CUstream, void**, void**);
  CUresult (*launch_kernel_ex)(const CUlaunchConfig*, CUfunction, void**, void**);
  CUresult (*begin_capture)(CUstream, CUstreamCaptureMode);
  CUresult (*end_capture)(CUstream, CUgraph*);
  CUresult (*graph_instantiate)(CUgraphExec*, CUgraph, unsigned long long);
  CUresult (*graph_launch)(CUgraphExec, CUstream);
  CUresult (*graph_exec_destroy)(CUgraphExec);
  CUresult (*graph_destroy)(CUgraph);
  CUresult (*graph_get_nodes)(CUgraph, CUgraphNode*, size_t*);
  CUresult (*graph_exec_kernel_node_set_params)(CUgraphExec, CUgraphNode, const CUDA_KERNEL_NODE_PARAMS*);
  CUresult (*graph_add_mem_alloc_node)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, CUDA_MEM_ALLOC_NODE_PARAMS*);
  CUresult (*graph_add_mem_free_node)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, CUdeviceptr);
};

// Where the simulated driver is, for the message of a machine without a GPU: installed next to
// this program (PREFIX/lib/fikit/sim), else in the build tree.
std::string simulated_driver_dir() {
  char exe[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    std::string dir(exe, size_t(n));
    dir = dir.substr(0, dir.rfind('/'));           // PREFIX/bin
    dir = dir.substr(0, dir.rfind('/')) + "/lib/fikit/sim";
    if (access((dir + "/libcuda.so.1").c_str(), R_OK) == 0) return dir;
  }
  return FIKIT_BUILD_TREE_SIM;
}

template <class Fn>
void resolve(void* lib, const char* symbol, Fn& out) {
  out = reinterpret_cast<Fn>(dlsym(lib, symbol));
  if (out == nullptr) {
    std::fprintf(stderr, "%s: the CUDA driver lacks %s\n", program_name(), symbol);
    std::exit(kExitCuda);
  }
}

const Driver& driver() {
  static const Driver d = [] {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (lib == nullptr) {
      std::fprintf(stderr,
                   "%s: no CUDA driver (%s). Without a GPU, run it on FIKIT's simulated GPU:\n"
                   "  LD_LIBRARY_PATH=%s %s ...\n",
                   program_name(), dlerror(), simulated_driver_dir().c_str(), program_name());
      std::exit(kExitCuda);
    }
    Driver r{};
    resolve(lib, "cuInit", r.init);
    resolve(lib, "cuDeviceGet", r.device_get);
    resolve(lib, "cuDevicePrimaryCtxRetain", r.primary_retain);
    resolve(lib, "cuDevicePrimaryCtxRelease_v2", r.primary_release);
    resolve(lib, "cuCtxSetCurrent", r.ctx_set_current);
    resolve(lib, "cuModuleLoadData", r.module_load_data);
    resolve(lib, "cuModuleGetFunction", r.module_get_function);
    resolve(lib, "cuModuleUnload", r.module_unload);
    resolve(lib, "cuStreamCreate", r.stream_create);
    resolve(lib, "cuStreamDestroy_v2", r.stream_destroy);
    resolve(lib, "cuStreamSynchronize", r.stream_synchronize);
    resolve(lib, "cuLaunchKernel", r.launch_kernel);
    resolve(lib, "cuLaunchKernelEx", r.launch_kernel_ex);
    resolve(lib, "cuStreamBeginCapture_v2", r.begin_capture);
    resolve(lib, "cuStreamEndCapture", r.end_capture);
    resolve(lib, "cuGraphInstantiateWithFlags", r.graph_instantiate);
    resolve(lib, "cuGraphLaunch", r.graph_launch);
    resolve(lib, "cuGraphExecDestroy", r.graph_exec_destroy);
    resolve(lib, "cuGraphDestroy", r.graph_destroy);
    resolve(lib, "cuGraphGetNodes", r.graph_get_nodes);
    resolve(lib, "cuGraphExecKernelNodeSetParams_v2", r.graph_exec_kernel_node_set_params);
    resolve(lib, "cuGraphAddMemAllocNode", r.graph_add_mem_alloc_node);
    resolve(lib, "cuGraphAddMemFreeNode", r.graph_add_mem_free_node);
    return r;
  }();
  return d;
}

}  // namespace

SpinGpu::SpinGpu(LaunchShape shape) : shape_(shape) {
  const Driver& cu = driver();
  FIKIT_CU(cu.init(0));
  FIKIT_CU(cu.device_get(&device_, 0));
  // The primary context is the one PyTorch and the CUDA runtime use, so the examples behave like
  // real framework processes as far as the driver (and FIKIT's hook) can tell.
  FIKIT_CU(cu.primary_retain(&context_, device_));
  FIKIT_CU(cu.ctx_set_current(context_));
  FIKIT_CU(cu.module_load_data(&module_, kSpinKernelPtx));
  FIKIT_CU(cu.module_get_function(&spin_, module_, kSpinKernelName));
  FIKIT_CU(cu.stream_create(&stream_, CU_STREAM_NON_BLOCKING));
}

SpinGpu::~SpinGpu() {
  const Driver& cu = driver();
  // Teardown errors are not worth failing an example that already produced its result.
  if (graph_exec_ != nullptr) cu.graph_exec_destroy(graph_exec_);
  if (graph_ != nullptr) cu.graph_destroy(graph_);
  if (stream_ != nullptr) {
    cu.stream_synchronize(stream_);
    cu.stream_destroy(stream_);
  }
  if (module_ != nullptr) cu.module_unload(module_);
  if (context_ != nullptr) cu.primary_release(device_);
}

void SpinGpu::launch(uint64_t duration_ns) {
  uint64_t out = 0;   // no device buffer: the examples time requests on the host
  void* params[] = {&duration_ns, &out};
  if (shape_.cluster <= 1) {
    FIKIT_CU(driver().launch_kernel(spin_, shape_.blocks, 1, 1, shape_.threads, 1, 1, 0, stream_, params, nullptr));
    return;
  }
  // Thread-block clusters, as cuBLAS's Hopper GEMMs launch them.
  CUlaunchAttribute cluster{};
  cluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  cluster.value.clusterDim.x = shape_.cluster, cluster.value.clusterDim.y = 1, cluster.value.clusterDim.z = 1;
  CUlaunchConfig config{};
  config.gridDimX = shape_.blocks, config.gridDimY = 1, config.gridDimZ = 1;
  config.blockDimX = shape_.threads, config.blockDimY = 1, config.blockDimZ = 1;
  config.hStream = stream_;
  config.attrs = &cluster;
  config.numAttrs = 1;
  FIKIT_CU(driver().launch_kernel_ex(&config, spin_, params, nullptr));
}

void SpinGpu::synchronize() { FIKIT_CU(driver().stream_synchronize(stream_)); }

void SpinGpu::capture_graph(uint64_t kernels, uint64_t duration_ns, bool uncuttable) {
  const Driver& cu = driver();
  // Relaxed: the capture must not make other threads' calls (there are none here) fail.
  FIKIT_CU(cu.begin_capture(stream_, CU_STREAM_CAPTURE_MODE_RELAXED));
  for (uint64_t k = 0; k < kernels; ++k) launch(duration_ns);
  FIKIT_CU(cu.end_capture(stream_, &graph_));
  if (uncuttable) {
    // A memory allocation and its free beside the kernels: the driver clones neither, so a graph
    // holding them cannot be cut into segments (as a framework's graph with allocations).
    CUDA_MEM_ALLOC_NODE_PARAMS a{};
    a.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    a.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.bytesize = 256;
    CUgraphNode alloc = nullptr, freed = nullptr;
    FIKIT_CU(cu.graph_add_mem_alloc_node(&alloc, graph_, nullptr, 0, &a));
    FIKIT_CU(cu.graph_add_mem_free_node(&freed, graph_, &alloc, 1, a.dptr));
  }
  FIKIT_CU(cu.graph_instantiate(&graph_exec_, graph_, 0));
}

void SpinGpu::launch_graph() { FIKIT_CU(driver().graph_launch(graph_exec_, stream_)); }

void SpinGpu::set_graph_nodes(uint64_t duration_ns) {
  const Driver& cu = driver();
  if (graph_nodes_.empty()) {
    size_t n = 0;
    FIKIT_CU(cu.graph_get_nodes(graph_, nullptr, &n));
    graph_nodes_.resize(n);
    FIKIT_CU(cu.graph_get_nodes(graph_, graph_nodes_.data(), &n));
  }
  uint64_t out = 0;
  void* params[] = {&duration_ns, &out};
  CUDA_KERNEL_NODE_PARAMS k{};
  k.func = spin_;
  k.gridDimX = shape_.blocks, k.gridDimY = 1, k.gridDimZ = 1;
  k.blockDimX = shape_.threads, k.blockDimY = 1, k.blockDimZ = 1;
  k.kernelParams = params;
  for (CUgraphNode node : graph_nodes_) FIKIT_CU(cu.graph_exec_kernel_node_set_params(graph_exec_, node, &k));
}

}  // namespace fikit::examples
