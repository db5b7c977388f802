// The simulated driver through the real driver API (this binary links the toolkit's stub libcuda
// and runs on the simulator's libcuda.so.1), and several processes sharing one simulated device.
#include <cuda.h>
#include <dlfcn.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "segment.h"
#include "spin_ptx.h"

extern char** environ;

namespace fikit::simgpu {
namespace {

constexpr uint64_t kSwitchNs = 2000;  // the default FIKIT_SIMGPU_SWITCH_NS
constexpr double kTolMs = 1e-6;       // float rounding of event times; the timeline is exact

class DriverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    ASSERT_EQ(cuDeviceGet(&dev_, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxCreate(&ctx_, nullptr, 0, dev_), CUDA_SUCCESS);
    ASSERT_EQ(cuModuleLoadData(&mod_, kSpinPtx), CUDA_SUCCESS);
    ASSERT_EQ(cuModuleGetFunction(&spin_, mod_, "spin_ns"), CUDA_SUCCESS);
    ASSERT_EQ(cuModuleGetFunction(&plain_, mod_, "add_one"), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamCreate(&stream_, 0), CUDA_SUCCESS);
  }
  void TearDown() override { EXPECT_EQ(cuCtxDestroy(ctx_), CUDA_SUCCESS); }

  CUresult launch_spin(uint64_t ns, CUstream s) {
    void* out = nullptr;
    void* params[] = {&ns, &out};
    return cuLaunchKernel(spin_, 1, 1, 1, 32, 1, 1, 0, s, params, nullptr);
  }
  CUresult launch_plain(CUstream s) {
    uint64_t a = 0;
    uint32_t b = 0;
    char c[16] = {};
    void* params[] = {&a, &b, c};
    return cuLaunchKernel(plain_, 1, 1, 1, 32, 1, 1, 0, s, params, nullptr);
  }
  float elapsed_ms(CUevent a, CUevent b) {
    float ms = -1;
    EXPECT_EQ(cuEventElapsedTime(&ms, a, b), CUDA_SUCCESS);
    return ms;
  }

  CUdevice dev_ = 0;
  CUcontext ctx_ = nullptr;
  CUmodule mod_ = nullptr;
  CUfunction spin_ = nullptr, plain_ = nullptr;
  CUstream stream_ = nullptr;
};

TEST_F(DriverTest, DeviceLooksLikeTheDocumentedGpu) {
  int count = 0, sms = 0, version = 0;
  char name[64];
  EXPECT_EQ(cuDeviceGetCount(&count), CUDA_SUCCESS);
  EXPECT_EQ(count, 1);
  EXPECT_EQ(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev_), CUDA_SUCCESS);
  EXPECT_EQ(sms, 132);
  EXPECT_EQ(cuDriverGetVersion(&version), CUDA_SUCCESS);
  EXPECT_EQ(version, 13000);
  EXPECT_EQ(cuDeviceGetName(name, sizeof name, dev_), CUDA_SUCCESS);
  EXPECT_STREQ(name, "FIKIT simulated GPU");
  const char* fname = nullptr;
  EXPECT_EQ(cuFuncGetName(&fname, spin_), CUDA_SUCCESS);
  EXPECT_STREQ(fname, "spin_ns");
}

TEST_F(DriverTest, SpinKernelRunsForItsArgumentAndOthersForTheDefault) {
  CUevent e[4];
  for (CUevent& ev : e) ASSERT_EQ(cuEventCreate(&ev, 0), CUDA_SUCCESS);
  const size_t bytes = 1 << 20;
  std::vector<char> host(bytes, 7);
  CUdeviceptr d = 0;
  ASSERT_EQ(cuMemAlloc(&d, bytes), CUDA_SUCCESS);
  // Queued behind a first kernel, every op starts when the previous one ends: exact times. That
  // holds only if this thread queued everything before the first kernel ended (e[0] still pending
  // afterwards); on a loaded machine it may not have, so the lead kernel grows until it did.
  bool queued_in_time = false;
  for (uint64_t lead_ns = 2'000'000; lead_ns <= 2'000'000'000 && !queued_in_time; lead_ns *= 10) {
    ASSERT_EQ(launch_spin(lead_ns, stream_), CUDA_SUCCESS);
    ASSERT_EQ(cuEventRecord(e[0], stream_), CUDA_SUCCESS);
    ASSERT_EQ(launch_spin(250'000, stream_), CUDA_SUCCESS);
    ASSERT_EQ(cuEventRecord(e[1], stream_), CUDA_SUCCESS);
    ASSERT_EQ(launch_plain(stream_), CUDA_SUCCESS);
    ASSERT_EQ(cuEventRecord(e[2], stream_), CUDA_SUCCESS);
    ASSERT_EQ(cuMemcpyHtoDAsync(d, host.data(), bytes, stream_), CUDA_SUCCESS);
    ASSERT_EQ(cuEventRecord(e[3], stream_), CUDA_SUCCESS);
    queued_in_time = cuEventQuery(e[0]) == CUDA_ERROR_NOT_READY;
    ASSERT_EQ(cuEventSynchronize(e[3]), CUDA_SUCCESS);
  }
  ASSERT_TRUE(queued_in_time) << "could not queue 7 ops within 2 s";
  EXPECT_NEAR(elapsed_ms(e[0], e[1]), 0.250, kTolMs);
  EXPECT_NEAR(elapsed_ms(e[1], e[2]), 0.005, kTolMs);
  EXPECT_NEAR(elapsed_ms(e[2], e[3]), (1000 + bytes / 25.0) / 1e6, 1e-5);
  EXPECT_EQ(cuMemFree(d), CUDA_SUCCESS);
}

TEST_F(DriverTest, SynchronizeReturnsWhenTheWorkHasRun) {
  CUevent e;
  ASSERT_EQ(cuEventCreate(&e, 0), CUDA_SUCCESS);
  const uint64_t start = now_ns();
  for (int i = 0; i < 10; ++i) ASSERT_EQ(launch_spin(200'000, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(e, stream_), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(stream_), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(cuEventQuery(e), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(cuStreamSynchronize(stream_), CUDA_SUCCESS);
  EXPECT_GE(now_ns() - start, 2'000'000u);  // never early: 10 x 200 us had to pass
  EXPECT_EQ(cuStreamQuery(stream_), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(e), CUDA_SUCCESS);
}

TEST_F(DriverTest, MemoryRoundTripsThroughCopiesAndMemset) {
  CUdeviceptr a = 0, b = 0;
  ASSERT_EQ(cuMemAlloc(&a, 64), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAlloc(&b, 64), CUDA_SUCCESS);
  uint32_t in[16], out[16] = {};
  for (uint32_t i = 0; i < 16; ++i) in[i] = i * 3;
  ASSERT_EQ(cuMemcpyHtoD(a, in, sizeof in), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoD(b, a, sizeof in), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH(out, b, sizeof out), CUDA_SUCCESS);
  EXPECT_EQ(std::memcmp(in, out, sizeof in), 0);
  ASSERT_EQ(cuMemsetD32(b, 0xabcdef01u, 16), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH(out, b, sizeof out), CUDA_SUCCESS);
  EXPECT_EQ(out[15], 0xabcdef01u);
  EXPECT_EQ(cuMemcpyHtoD(a, in, 65), CUDA_ERROR_INVALID_VALUE);  // past the allocation
  EXPECT_EQ(cuMemFree(a), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree(a), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFree(b), CUDA_SUCCESS);
}

// The device's memory is shared and finite: allocations beyond it fail as on a real GPU, and
// cuMemGetInfo says what is left (FIKIT_SIMGPU_MEMORY_MIB is unset: an H200's 141 GiB).
TEST_F(DriverTest, DeviceMemoryRunsOutAndEveryAllocationPathCounts) {
  size_t free0 = 0, total = 0;
  ASSERT_EQ(cuMemGetInfo(&free0, &total), CUDA_SUCCESS);
  EXPECT_EQ(total, 141ull << 30);
  std::vector<CUdeviceptr> chunks;
  CUdeviceptr p = 0;
  CUresult r;
  while ((r = cuMemAlloc(&p, 8ull << 30)) == CUDA_SUCCESS) chunks.push_back(p);
  EXPECT_EQ(r, CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(chunks.size(), free0 / (8ull << 30));
  size_t free1 = 0;
  ASSERT_EQ(cuMemGetInfo(&free1, &total), CUDA_SUCCESS);
  EXPECT_EQ(free1, free0 - chunks.size() * (8ull << 30));
  for (CUdeviceptr c : chunks) EXPECT_EQ(cuMemFree(c), CUDA_SUCCESS);

  // Each path takes what it says from the same device.
  size_t pitch = 0;
  CUdeviceptr pitched = 0, managed = 0, async = 0;
  ASSERT_EQ(cuMemAllocPitch(&pitched, &pitch, 1000, 10, 4), CUDA_SUCCESS);
  EXPECT_EQ(pitch, 1024u);
  ASSERT_EQ(cuMemAllocManaged(&managed, 4096, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocAsync(&async, 8192, stream_), CUDA_SUCCESS);
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev_;
  CUmemGenericAllocationHandle handle = 0;
  ASSERT_EQ(cuMemCreate(&handle, 2 << 20, &prop, 0), CUDA_SUCCESS);
  CUDA_ARRAY3D_DESCRIPTOR d = {};
  d.Width = 64, d.Height = 32, d.Depth = 2, d.Format = CU_AD_FORMAT_FLOAT, d.NumChannels = 2;
  CUarray array = nullptr;
  ASSERT_EQ(cuArray3DCreate(&array, &d), CUDA_SUCCESS);
  size_t free2 = 0;
  ASSERT_EQ(cuMemGetInfo(&free2, &total), CUDA_SUCCESS);
  EXPECT_EQ(free0 - free2, 1024u * 10 + 4096 + 8192 + (2 << 20) + 64 * 32 * 2 * 2 * 4);
  EXPECT_EQ(cuMemFree(pitched), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree(managed), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeAsync(async, stream_), CUDA_SUCCESS);
  EXPECT_EQ(cuMemRelease(handle), CUDA_SUCCESS);
  EXPECT_EQ(cuArrayDestroy(array), CUDA_SUCCESS);
  EXPECT_EQ(cuMemRelease(handle), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemGetInfo(&free2, &total), CUDA_SUCCESS);
  EXPECT_EQ(free2, free0);
}

TEST_F(DriverTest, CapturedGraphReplaysItsOps) {
  ASSERT_EQ(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  CUstreamCaptureStatus status;
  ASSERT_EQ(cuStreamIsCapturing(stream_, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  for (uint64_t ns : {100'000, 200'000, 300'000}) ASSERT_EQ(launch_spin(ns, stream_), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(stream_), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CUgraph graph;
  ASSERT_EQ(cuStreamEndCapture(stream_, &graph), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(stream_), CUDA_SUCCESS);  // nothing ran during the capture
  CUgraphExec exec;
  ASSERT_EQ(cuGraphInstantiate(&exec, graph, 0), CUDA_SUCCESS);
  CUevent a, b;
  ASSERT_EQ(cuEventCreate(&a, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&b, 0), CUDA_SUCCESS);
  // a and the graphs queue behind a lead kernel, which a loaded host may need longer to outpace.
  bool queued_in_time = false;
  for (uint64_t lead_ns = 2'000'000; lead_ns <= 2'000'000'000 && !queued_in_time; lead_ns *= 10) {
    ASSERT_EQ(launch_spin(lead_ns, stream_), CUDA_SUCCESS);
    ASSERT_EQ(cuEventRecord(a, stream_), CUDA_SUCCESS);
    ASSERT_EQ(cuGraphLaunch(exec, stream_), CUDA_SUCCESS);
    ASSERT_EQ(cuGraphLaunch(exec, stream_), CUDA_SUCCESS);
    ASSERT_EQ(cuEventRecord(b, stream_), CUDA_SUCCESS);
    queued_in_time = cuEventQuery(a) == CUDA_ERROR_NOT_READY;
    ASSERT_EQ(cuEventSynchronize(b), CUDA_SUCCESS);
  }
  ASSERT_TRUE(queued_in_time);
  EXPECT_NEAR(elapsed_ms(a, b), 1.2, kTolMs);
  EXPECT_EQ(cuGraphExecDestroy(exec), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(graph), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphLaunch(exec, stream_), CUDA_ERROR_INVALID_HANDLE);
}

using ProcV2 = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

void* own_symbol(const char* name) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  return lib ? dlsym(lib, name) : nullptr;
}

// A segment left by another build of the simulator (another layout: a test run of an older
// checkout) is replaced, not refused: cuInit failed on it before, for every test that named it.
TEST(SegmentTest, ASegmentOfAnotherLayoutIsReplaced) {
  const std::string name = "fikit-test-layout-" + std::to_string(getpid());
  for (size_t size : {size_t(100), sizeof(DeviceState)}) {
    FILE* f = std::fopen(("/dev/shm/" + name).c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::vector<char> junk(size, 7);   // the right size, but not this layout's magic and version
    std::fwrite(junk.data(), 1, junk.size(), f);
    std::fclose(f);
    DeviceState* dev = nullptr;
    EXPECT_EQ(open_segment(name.c_str(), SegmentConfig{}, &dev), OpenResult::Ok) << size;
    ASSERT_NE(dev, nullptr);
    EXPECT_EQ(dev->version, kLayoutVersion);
    EXPECT_TRUE(remove_segment(name.c_str()));
  }
}

TEST(ProcAddressTest, HonoursPerThreadFlagAndVersions) {
  ASSERT_NE(own_symbol("cuLaunchKernel_ptsz"), nullptr);
  void* fn = nullptr;
  CUdriverProcAddressQueryResult st;
  ASSERT_EQ(cuGetProcAddress("cuLaunchKernel", &fn, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st),
            CUDA_SUCCESS);
  EXPECT_EQ(fn, own_symbol("cuLaunchKernel_ptsz"));
  EXPECT_EQ(st, CU_GET_PROC_ADDRESS_SUCCESS);
  ASSERT_EQ(cuGetProcAddress("cuLaunchKernel", &fn, 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(fn, own_symbol("cuLaunchKernel"));
  ASSERT_EQ(cuGetProcAddress("cuMemcpyHtoD", &fn, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, nullptr),
            CUDA_SUCCESS);
  EXPECT_EQ(fn, own_symbol("cuMemcpyHtoD_v2_ptds"));
  ASSERT_EQ(cuGetProcAddress("cuMemAlloc", &fn, 3020, 0, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(fn, own_symbol("cuMemAlloc_v2"));
  EXPECT_EQ(cuGetProcAddress("cuMemAlloc", &fn, 3010, 0, &st), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  ASSERT_EQ(cuGetProcAddress("cuStreamDestroy", &fn, 3020, 0, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(fn, own_symbol("cuStreamDestroy"));
  ASSERT_EQ(cuGetProcAddress("cuStreamDestroy", &fn, 4000, 0, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(fn, own_symbol("cuStreamDestroy_v2"));
  ASSERT_EQ(cuGetProcAddress("cuGraphInstantiate", &fn, 12000, 0, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(fn, own_symbol("cuGraphInstantiateWithFlags"));
  // libcudart asks for cuGetProcAddress itself with 11030 and 12000 and calls what it gets.
  ASSERT_EQ(cuGetProcAddress("cuGetProcAddress", &fn, 11030, 0, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(fn, own_symbol("cuGetProcAddress"));
  ASSERT_EQ(cuGetProcAddress("cuGetProcAddress", &fn, 12000, 0, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(fn, own_symbol("cuGetProcAddress_v2"));
  void* again = nullptr;
  ASSERT_EQ(reinterpret_cast<ProcV2>(fn)("cuInit", &again, 12000, 0, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(again, own_symbol("cuInit"));
}

TEST(ProcAddressTest, UnknownNamesGetDistinctNotSupportedStubs) {
  void *a = nullptr, *b = nullptr, *a2 = nullptr;
  ASSERT_EQ(cuGetProcAddress("cuMemPoolTrimTo", &a, 12000, 0, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuGetProcAddress("cuDeviceGetUuid", &b, 12000, 0, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuGetProcAddress("cuMemPoolTrimTo", &a2, 12000, 0, nullptr), CUDA_SUCCESS);
  ASSERT_NE(a, nullptr);
  EXPECT_NE(a, b);
  EXPECT_EQ(a, a2);
  using Fn = CUresult (*)(int, int, int);
  EXPECT_EQ(reinterpret_cast<Fn>(a)(1, 2, 3), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(reinterpret_cast<Fn>(a)(4, 5, 6), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(cuGetProcAddress(nullptr, &a, 12000, 0, nullptr), CUDA_ERROR_INVALID_VALUE);
}

// As in CUDA: an event belongs to its context. Recorded on another context's stream it is refused,
// and two events of different contexts have no elapsed time (no common clock).
TEST_F(DriverTest, EventsOfAnotherContextAreRefused) {
  CUevent mine = nullptr, theirs = nullptr;
  ASSERT_EQ(cuEventCreate(&mine, CU_EVENT_DEFAULT), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(mine, stream_), CUDA_SUCCESS);
  CUcontext other = nullptr;
  ASSERT_EQ(cuCtxCreate(&other, nullptr, 0, dev_), CUDA_SUCCESS);   // current now
  CUstream other_stream = nullptr;
  ASSERT_EQ(cuStreamCreate(&other_stream, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&theirs, CU_EVENT_DEFAULT), CUDA_SUCCESS);
  EXPECT_EQ(cuEventRecord(mine, other_stream), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_EQ(cuEventRecord(theirs, other_stream), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  float ms = 0;
  EXPECT_EQ(cuEventElapsedTime(&ms, mine, theirs), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventElapsedTime(&ms, theirs, theirs), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxDestroy(other), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy(mine), CUDA_SUCCESS);
}

TEST_F(DriverTest, BadHandlesAndNullArgumentsGiveErrors) {
  auto bogus_stream = reinterpret_cast<CUstream>(0xdeadbeef);
  EXPECT_EQ(cuStreamSynchronize(bogus_stream), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamQuery(reinterpret_cast<CUstream>(&dev_)), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuLaunchKernel(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuLaunchKernel(spin_, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuEventRecord(reinterpret_cast<CUevent>(0x10), stream_), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventSynchronize(nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventElapsedTime(nullptr, nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuModuleGetFunction(nullptr, mod_, "spin_ns"), CUDA_ERROR_INVALID_VALUE);
  CUfunction f;
  EXPECT_EQ(cuModuleGetFunction(&f, mod_, "missing"), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(cuModuleGetFunction(&f, reinterpret_cast<CUmodule>(0x1234), "spin_ns"), CUDA_ERROR_INVALID_HANDLE);
  CUmodule m;
  EXPECT_EQ(cuModuleLoadData(&m, "\x7f" "ELF binary"), CUDA_ERROR_INVALID_IMAGE);
  EXPECT_EQ(cuCtxDestroy(reinterpret_cast<CUcontext>(0x99)), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuGraphLaunch(nullptr, stream_), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamBeginCapture(nullptr, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(cuMemcpyHtoD(0x1000, &dev_, 4), CUDA_ERROR_INVALID_VALUE);
  const char* s = nullptr;
  EXPECT_EQ(cuGetErrorName(CUDA_ERROR_INVALID_HANDLE, &s), CUDA_SUCCESS);
  EXPECT_STREQ(s, "CUDA_ERROR_INVALID_HANDLE");
  EXPECT_EQ(cuGetErrorName(static_cast<CUresult>(123456), &s), CUDA_ERROR_INVALID_VALUE);
}

// ---- several processes on one simulated device ---------------------------------------------

struct Child {
  pid_t pid = -1;
  int out = -1;  // read end of its stdout
};

Child spawn_probe(const std::vector<std::string>& args, const std::vector<std::string>& extra_env = {}) {
  std::vector<std::string> env_store;
  auto overridden = [&](const char* var) {   // extra_env replaces a variable of the same name
    for (const std::string& e : extra_env)
      if (std::strncmp(var, e.c_str(), e.find('=') + 1) == 0) return true;
    return false;
  };
  for (char** e = environ; *e; ++e)
    if (!overridden(*e)) env_store.emplace_back(*e);
  for (const std::string& e : extra_env) env_store.push_back(e);
  std::vector<char*> envp, argv;
  for (std::string& e : env_store) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_store{SIMGPU_PROBE};
  argv_store.insert(argv_store.end(), args.begin(), args.end());
  for (std::string& a : argv_store) argv.push_back(a.data());
  argv.push_back(nullptr);
  int fds[2];
  Child c;
  if (pipe(fds) != 0) return c;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  if (posix_spawn(&c.pid, SIMGPU_PROBE, &fa, nullptr, argv.data(), envp.data()) != 0) c.pid = -1;
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  c.out = fds[0];
  return c;
}

std::string read_line(int fd) {
  std::string line;
  char ch;
  while (read(fd, &ch, 1) == 1 && ch != '\n') line += ch;
  return line;
}

// Runs to the end; returns its stdout, or "" when it did not exit 0 (*signal: what killed it).
std::string finish(Child c, int* signal = nullptr) {
  std::string all, line;
  char buf[4096];
  ssize_t n;
  while ((n = read(c.out, buf, sizeof buf)) > 0) all.append(buf, static_cast<size_t>(n));
  close(c.out);
  int status = 0;
  waitpid(c.pid, &status, 0);
  if (signal) *signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? all : "";
}

struct SpinResult {
  std::vector<long long> intervals;
  uint64_t start = 0, end = 0, late = 0;
  bool queued = false;   // everything was queued behind the lead kernel: intervals are the device's
};

SpinResult parse_spin(const std::string& out) {
  SpinResult r;
  std::istringstream in(out);
  std::string word;
  in >> word;
  long long v;
  while (in >> v) r.intervals.push_back(v);
  in.clear();
  int queued = 0;
  in >> word >> r.start >> r.end >> word >> r.late >> word >> queued;
  r.queued = queued == 1;
  return r;
}

TEST(SharedDeviceTest, TwoProcessesSerialiseRoundRobin) {
  constexpr int kCount = 20;
  constexpr uint64_t kNs = 500'000, kLeadNs = 20'000'000;
  // Both start at one instant and queue everything behind a lead kernel. A loaded host may start
  // one of them late (more than a lead kernel): then the run says nothing and is repeated later.
  SpinResult ra, rb;
  for (uint64_t margin = 300'000'000; margin <= 4'800'000'000; margin *= 2) {
    const uint64_t start_at = now_ns() + margin;
    const std::string count = std::to_string(kCount), ns = std::to_string(kNs), at = std::to_string(start_at),
                      lead = std::to_string(kLeadNs);
    Child a = spawn_probe({"spin", count, ns, at, lead});
    Child b = spawn_probe({"spin", count, ns, at, lead});
    ra = parse_spin(finish(a));
    rb = parse_spin(finish(b));
    if (ra.queued && rb.queued && ra.late < kLeadNs / 2 && rb.late < kLeadNs / 2) break;
  }
  ASSERT_EQ(ra.intervals.size(), static_cast<size_t>(kCount));
  ASSERT_EQ(rb.intervals.size(), static_cast<size_t>(kCount));
  ASSERT_TRUE(ra.queued && rb.queued && ra.late < kLeadNs / 2 && rb.late < kLeadNs / 2)
      << "the probes could not start together in 5 attempts";
  // One device: together they took at least both busy times.
  EXPECT_GE(std::max(ra.end, rb.end) - std::min(ra.start, rb.start), 2 * kCount * kNs);
  // While both are backlogged, each waits exactly one op of the other between two of its own.
  const long long alternating = 2 * static_cast<long long>(kNs + kSwitchNs);
  for (const SpinResult* r : {&ra, &rb}) {
    int alternated = 0;
    for (int i = 2; i < kCount - 2; ++i) alternated += r->intervals[static_cast<size_t>(i)] == alternating;
    EXPECT_GE(alternated, kCount - 6) << "intervals must be " << alternating << " ns while both queue work";
  }
}

// The test process keeps the device lock for a moment so that dead contexts get reaped.
void reap_now() {
  char name[200];
  segment_name(name, sizeof name);
  DeviceState* dev = attach_segment(name);
  ASSERT_NE(dev, nullptr);
  usleep(2000);  // past the reaping interval
  DeviceLock lock(*dev);
  ASSERT_TRUE(lock.ok());
}

TEST(SharedDeviceTest, KilledProcessDoesNotBlockTheNext) {
  Child victim = spawn_probe({"backlog", "2000", "1000000"});  // 2 s of queued work
  ASSERT_EQ(read_line(victim.out), "submitted");
  kill(victim.pid, SIGKILL);
  finish(victim);
  reap_now();
  Child next = spawn_probe({"spin", "5", "100000", "0", "200000000"});
  SpinResult r = parse_spin(finish(next));
  ASSERT_EQ(r.intervals.size(), 5u);
  ASSERT_TRUE(r.queued) << "5 launches took longer than the 200 ms lead kernel";
  for (size_t i = 0; i < r.intervals.size(); ++i) EXPECT_EQ(r.intervals[i], 100'000) << i;
  EXPECT_LT(r.end - r.start, 1'000'000'000u) << "the dead process's backlog must be dropped";
}

TEST(SharedDeviceTest, ProcessKilledHoldingTheLockDoesNotBlockTheNext) {
  Child victim = spawn_probe({"spin", "3", "1000", "0", "0"}, {"FIKIT_SIMGPU_TEST_DIE_IN_LOCK=2"});
  int signal = 0;
  finish(victim, &signal);
  ASSERT_EQ(signal, SIGKILL);  // the test hook killed it inside the device lock
  Child next = spawn_probe({"spin", "3", "100000", "0", "200000000"});
  SpinResult r = parse_spin(finish(next));
  ASSERT_EQ(r.intervals.size(), 3u);
  ASSERT_TRUE(r.queued);
  EXPECT_EQ(r.intervals[2], 100'000);
}

// An MPS-like device (its own segment, created with FIKIT_SIMGPU_MPS=1): two processes whose small
// kernels fit side by side run concurrently instead of alternating.
TEST(SharedDeviceTest, MpsDeviceRunsTwoProcessesSideBySide) {
  const std::string name = std::string(std::getenv("FIKIT_SIMGPU_NAME")) + "-mps";
  const std::vector<std::string> env{"FIKIT_SIMGPU_NAME=" + name, "FIKIT_SIMGPU_MPS=1"};
  constexpr int kCount = 10;
  constexpr uint64_t kNs = 500'000, kLeadNs = 20'000'000;
  SpinResult ra, rb;
  for (uint64_t margin = 300'000'000; margin <= 4'800'000'000; margin *= 2) {
    const std::string at = std::to_string(now_ns() + margin);
    Child a = spawn_probe({"spin", std::to_string(kCount), std::to_string(kNs), at, std::to_string(kLeadNs)}, env);
    Child b = spawn_probe({"spin", std::to_string(kCount), std::to_string(kNs), at, std::to_string(kLeadNs)}, env);
    ra = parse_spin(finish(a));
    rb = parse_spin(finish(b));
    if (ra.queued && rb.queued && ra.late < kLeadNs / 2 && rb.late < kLeadNs / 2) break;
  }
  remove_segment(name.c_str());
  ASSERT_EQ(ra.intervals.size(), static_cast<size_t>(kCount));
  ASSERT_EQ(rb.intervals.size(), static_cast<size_t>(kCount));
  ASSERT_TRUE(ra.queued && rb.queued && ra.late < kLeadNs / 2 && rb.late < kLeadNs / 2);
  for (const SpinResult* r : {&ra, &rb})
    for (size_t i = 0; i < r->intervals.size(); ++i) EXPECT_EQ(r->intervals[i], static_cast<long long>(kNs)) << i;
}

TEST(SharedDeviceTest, SeveralDevicesHaveTheirOwnUuidsAndTheMpsAttribute) {
  const std::string name = std::string(std::getenv("FIKIT_SIMGPU_NAME")) + "-multi";
  Child c = spawn_probe({"info"}, {"FIKIT_SIMGPU_NAME=" + name, "FIKIT_SIMGPU_DEVICES=2", "FIKIT_SIMGPU_MPS=1"});
  std::istringstream out(finish(c));
  remove_segment(name.c_str());
  std::string word, uuid0, uuid1;
  int count = 0, mps = 0;
  out >> word >> count >> word >> mps >> word >> uuid0 >> word >> uuid1;
  EXPECT_EQ(count, 2);
  EXPECT_EQ(mps, 1);
  EXPECT_EQ(uuid0.size(), 32u);
  EXPECT_NE(uuid0, uuid1);

  // CUDA_VISIBLE_DEVICES renumbers: the second device is ordinal 0 now, and the only one.
  Child v = spawn_probe({"info"}, {"FIKIT_SIMGPU_NAME=" + name, "FIKIT_SIMGPU_DEVICES=2", "FIKIT_SIMGPU_MPS=1",
                                   "CUDA_VISIBLE_DEVICES=1"});
  std::istringstream visible(finish(v));
  remove_segment(name.c_str());
  std::string only;
  visible >> word >> count >> word >> mps >> word >> only;
  EXPECT_EQ(count, 1);
  EXPECT_EQ(only, uuid1);
}

}  // namespace
}  // namespace fikit::simgpu

// Each run gets a private simulated device, so test processes that ctest runs side by side do not
// interleave on one timeline; it is removed at the end.
int main(int argc, char** argv) {
  const char* base = std::getenv("FIKIT_SIMGPU_NAME");
  std::string name = std::string(base ? base : "fikit-test-simgpu") + "-" + std::to_string(getpid());
  setenv("FIKIT_SIMGPU_NAME", name.c_str(), 1);
  ::testing::InitGoogleTest(&argc, argv);
  int rc = RUN_ALL_TESTS();
  fikit::simgpu::remove_segment(name.c_str());
  return rc;
}
