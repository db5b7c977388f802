// A driver-API program that allocates device memory every way a program can, for the tests of the
// hook's memory accounting (tests/hook_test/sim_test.cpp, tests/e2e_test). It prints what it saw,
// one "name value..." line each; the tests decide what is right.
//   memory_probe info                      "info TOTAL FREE" as cuMemGetInfo answers
//   memory_probe fill CHUNK_MIB [HOLD_MS]  "before TOTAL FREE" as cuMemGetInfo answers first, then
//                                          cuMemAlloc chunks until one fails: "fill CHUNKS RESULT",
//                                          "info ...", then frees one and takes it again: "again RESULT";
//                                          stays HOLD_MS with the memory held
//   memory_probe grow CHUNK_MIB COUNT MS   takes COUNT chunks, one every MS: "grow TAKEN FAILED"
//   memory_probe paths BYTES               each path once with BYTES (past the limit) and once with
//                                          4096: "path NAME OVER_RESULT FIT_RESULT USED_AFTER"
//   memory_probe random SEED OPS THREADS   threads allocate and free at random through every path:
//                                          "random REFERENCE ACCOUNTED REFUSED", then "after ACCOUNTED"
//                                          once everything is freed
//   memory_probe fork MIB                  holds MIB, forks; the child makes its own context:
//                                          "child FREE RESULT" (it allocates MIB); "parent FREE"
//   memory_probe narrow ROWS               cuMemAllocPitch of 4-byte rows (the driver pads each to
//                                          512): "narrow RESULT HELD"
//   memory_probe teardown MIB              fills the limit in a context of its own in MIB chunks and
//                                          destroys it, then in the device's primary context and
//                                          resets the device; after each, six allocations of MIB/2
//                                          in the first context: "destroy SUCCEEDED", "reset SUCCEEDED"
//   memory_probe pool MIB                  (two devices) from device 1's default pool, with device 0's
//                                          context current: three allocations of MIB, and one on a
//                                          stream of device 1's context; "pool OK FREE0 FREE1 RESULT":
//                                          how many of the three succeeded, what cuMemGetInfo says is
//                                          free on each device with its context current, the fourth's
//   memory_probe badfree MIB               cuMemFreeAsync on a stream that does not exist (refused),
//                                          then cuMemFree: "badfree RESULT HELD_AFTER HELD_AT_END"
#include <cuda.h>

#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

CUcontext g_ctx = nullptr;
CUdevice g_dev = 0;

bool setup() {
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&g_dev, 0) != CUDA_SUCCESS ||
      cuCtxCreate(&g_ctx, nullptr, 0, g_dev) != CUDA_SUCCESS) {
    std::fprintf(stderr, "memory_probe: no CUDA context\n");
    return false;
  }
  return true;
}

void sleep_ms(long ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1'000'000};
  nanosleep(&ts, nullptr);
}

void info(const char* label = "info") {
  size_t free_bytes = 0, total = 0;
  const CUresult r = cuMemGetInfo(&free_bytes, &total);
  std::printf("%s %zu %zu %d\n", label, total, free_bytes, int(r));
}

// What cuMemGetInfo says is held within the limit: total - free.
size_t used() {
  size_t free_bytes = 0, total = 0;
  cuMemGetInfo(&free_bytes, &total);
  return total - free_bytes;
}

// One allocation through one path, and its free.
struct Held {
  int path = 0;
  uint64_t key = 0;
  size_t bytes = 0;   // as the driver reports it (the pitch times the rows)
};
const char* const kPaths[] = {"alloc", "pitch", "managed", "async", "pool", "create", "array", "array3d", "mipmap"};
constexpr int kPathCount = sizeof kPaths / sizeof kPaths[0];

CUresult allocate(int path, size_t bytes, CUstream stream, Held& out) {
  out = Held{path, 0, bytes};
  CUdeviceptr p = 0;
  CUresult r = CUDA_ERROR_INVALID_VALUE;
  switch (path) {
    case 0: r = cuMemAlloc(&p, bytes); break;
    case 1: {
      size_t pitch = 0;
      r = cuMemAllocPitch(&p, &pitch, bytes / 4, 4, 4);
      out.bytes = pitch * 4;
      break;
    }
    case 2: r = cuMemAllocManaged(&p, bytes, CU_MEM_ATTACH_GLOBAL); break;
    case 3: r = cuMemAllocAsync(&p, bytes, stream); break;
    case 4: r = cuMemAllocFromPoolAsync(&p, bytes, nullptr, stream); break;
    case 5: {
      CUmemAllocationProp prop = {};
      prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
      prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      prop.location.id = g_dev;
      CUmemGenericAllocationHandle h = 0;
      r = cuMemCreate(&h, bytes, &prop, 0);
      out.key = h;
      return r;
    }
    case 6: {
      CUDA_ARRAY_DESCRIPTOR d = {};
      d.Width = bytes / 4, d.Height = 1, d.Format = CU_AD_FORMAT_FLOAT, d.NumChannels = 1;
      CUarray a = nullptr;
      r = cuArrayCreate(&a, &d);
      out.key = reinterpret_cast<uintptr_t>(a);
      out.bytes = d.Width * 4;
      return r;
    }
    case 7: {
      CUDA_ARRAY3D_DESCRIPTOR d = {};
      d.Width = bytes / 16, d.Height = 2, d.Depth = 2, d.Format = CU_AD_FORMAT_UNSIGNED_INT8, d.NumChannels = 4;
      CUarray a = nullptr;
      r = cuArray3DCreate(&a, &d);
      out.key = reinterpret_cast<uintptr_t>(a);
      out.bytes = d.Width * 16;
      return r;
    }
    case 8: {   // two levels: the base and a half (a 1-D array halves its width)
      CUDA_ARRAY3D_DESCRIPTOR d = {};
      d.Width = bytes / 2, d.Format = CU_AD_FORMAT_UNSIGNED_INT8, d.NumChannels = 1;
      CUmipmappedArray a = nullptr;
      r = cuMipmappedArrayCreate(&a, &d, 2);
      out.key = reinterpret_cast<uintptr_t>(a);
      out.bytes = d.Width + d.Width / 2;
      return r;
    }
  }
  out.key = p;
  return r;
}

CUresult release(const Held& h, CUstream stream) {
  switch (h.path) {
    case 3: case 4: return cuMemFreeAsync(h.key, stream);
    case 5: return cuMemRelease(h.key);
    case 6: case 7: return cuArrayDestroy(reinterpret_cast<CUarray>(h.key));
    case 8: return cuMipmappedArrayDestroy(reinterpret_cast<CUmipmappedArray>(h.key));
    default: return cuMemFree(h.key);
  }
}

int fill(size_t chunk, long hold_ms) {
  std::vector<CUdeviceptr> chunks;
  CUdeviceptr p = 0;
  CUresult r;
  info("before");
  while ((r = cuMemAlloc(&p, chunk)) == CUDA_SUCCESS && chunks.size() < 100000) chunks.push_back(p);
  std::printf("fill %zu %d\n", chunks.size(), int(r));
  info();
  if (!chunks.empty()) {
    cuMemFree(chunks.back());
    std::printf("again %d\n", int(cuMemAlloc(&chunks.back(), chunk)));
  }
  std::fflush(stdout);
  sleep_ms(hold_ms);
  return 0;
}

int grow(size_t chunk, int count, long every_ms) {
  int taken = 0, failed = 0;
  std::vector<CUdeviceptr> chunks;
  for (int i = 0; i < count; ++i) {
    CUdeviceptr p = 0;
    if (cuMemAlloc(&p, chunk) == CUDA_SUCCESS) ++taken, chunks.push_back(p);
    else ++failed;
    sleep_ms(every_ms);
  }
  std::printf("grow %d %d\n", taken, failed);
  return 0;
}

int paths(size_t over) {
  CUstream stream = nullptr;
  cuStreamCreate(&stream, 0);
  for (int path = 0; path < kPathCount; ++path) {
    Held big, small;
    const CUresult r_over = allocate(path, over, stream, big);
    if (r_over == CUDA_SUCCESS) release(big, stream);
    const CUresult r_fit = allocate(path, 4096, stream, small);
    const size_t held = used();
    if (r_fit == CUDA_SUCCESS) release(small, stream);
    std::printf("path %s %d %d %zu %zu\n", kPaths[path], int(r_over), int(r_fit), held, small.bytes);
  }
  info();
  return 0;
}

int random_ops(unsigned seed, int ops, int threads) {
  std::mutex mutex;
  std::vector<Held> live;   // every thread's, guarded
  std::atomic<int> refused{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      cuCtxSetCurrent(g_ctx);
      CUstream stream = nullptr;
      cuStreamCreate(&stream, 0);
      std::mt19937 rng(seed * 1000 + unsigned(t));
      std::vector<Held> mine;
      for (int i = 0; i < ops; ++i) {
        if (!mine.empty() && rng() % 3 == 0) {
          const size_t k = rng() % mine.size();
          release(mine[k], stream);
          mine[k] = mine.back();
          mine.pop_back();
          continue;
        }
        Held h;
        const size_t bytes = 4096 * (1 + rng() % 256);
        const CUresult r = allocate(int(rng() % kPathCount), bytes, stream, h);
        if (r == CUDA_SUCCESS) mine.push_back(h);
        else if (r == CUDA_ERROR_OUT_OF_MEMORY) ++refused;
      }
      cuStreamSynchronize(stream);
      std::lock_guard guard(mutex);
      live.insert(live.end(), mine.begin(), mine.end());
    });
  }
  for (auto& w : workers) w.join();
  size_t reference = 0;
  for (const Held& h : live) reference += h.bytes;
  std::printf("random %zu %zu %d\n", reference, used(), refused.load());
  for (const Held& h : live) release(h, nullptr);
  std::printf("after %zu\n", used());
  return 0;
}

int fork_child(size_t bytes) {
  CUdeviceptr p = 0;
  if (cuMemAlloc(&p, bytes) != CUDA_SUCCESS) return 1;
  std::fflush(stdout);
  const pid_t child = fork();
  if (child == 0) {
    // A child starts from its own usage: the parent's allocations are not its own.
    CUcontext ctx = nullptr;
    if (cuCtxCreate(&ctx, nullptr, 0, g_dev) != CUDA_SUCCESS) _exit(3);
    size_t free_bytes = 0, total = 0;
    cuMemGetInfo(&free_bytes, &total);
    CUdeviceptr q = 0;
    std::printf("child %zu %d\n", free_bytes, int(cuMemAlloc(&q, bytes)));
    std::fflush(stdout);
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  size_t free_bytes = 0, total = 0;
  cuMemGetInfo(&free_bytes, &total);
  std::printf("parent %zu\n", free_bytes);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 4;
}

int narrow(size_t rows) {
  CUdeviceptr p = 0;
  size_t pitch = 0;
  const CUresult r = cuMemAllocPitch(&p, &pitch, 4, rows, 4);
  std::printf("narrow %d %zu\n", int(r), used());
  if (r == CUDA_SUCCESS) cuMemFree(p);
  return 0;
}

// Allocates `chunk`s in `ctx` until one fails; returns them (the context's teardown frees them).
void fill_context(CUcontext ctx, size_t chunk) {
  cuCtxSetCurrent(ctx);
  CUdeviceptr p = 0;
  for (int i = 0; i < 1000 && cuMemAlloc(&p, chunk) == CUDA_SUCCESS; ++i) {
  }
}

// Six allocations of `bytes` in the probe's own context, freed again: how many succeeded.
int six_in_own_context(size_t bytes) {
  cuCtxSetCurrent(g_ctx);
  int ok = 0;
  CUdeviceptr held[6] = {};
  for (auto& p : held) ok += cuMemAlloc(&p, bytes) == CUDA_SUCCESS;
  for (CUdeviceptr p : held)
    if (p != 0) cuMemFree(p);
  return ok;
}

int teardown(size_t chunk) {
  CUcontext other = nullptr;
  if (cuCtxCreate(&other, nullptr, 0, g_dev) != CUDA_SUCCESS) return 3;
  fill_context(other, chunk);
  cuCtxDestroy(other);
  std::printf("destroy %d\n", six_in_own_context(chunk / 2));
  CUcontext primary = nullptr;
  if (cuDevicePrimaryCtxRetain(&primary, g_dev) != CUDA_SUCCESS) return 3;
  fill_context(primary, chunk);
  cuDevicePrimaryCtxReset(g_dev);
  std::printf("reset %d\n", six_in_own_context(chunk / 2));
  return 0;
}

int pool(size_t bytes) {
  CUdevice dev1 = 0;
  CUcontext ctx1 = nullptr;
  if (cuDeviceGet(&dev1, 1) != CUDA_SUCCESS || cuCtxCreate(&ctx1, nullptr, 0, dev1) != CUDA_SUCCESS) return 3;
  cuCtxSetCurrent(g_ctx);
  CUmemoryPool pool1 = nullptr;
  if (cuDeviceGetDefaultMemPool(&pool1, dev1) != CUDA_SUCCESS) return 3;
  int ok = 0;
  for (int i = 0; i < 3; ++i) {
    CUdeviceptr p = 0;
    ok += cuMemAllocFromPoolAsync(&p, bytes, pool1, nullptr) == CUDA_SUCCESS;
  }
  // And on a stream of device 1's context, still with device 0's context current.
  cuCtxSetCurrent(ctx1);
  CUstream stream1 = nullptr;
  cuStreamCreate(&stream1, 0);
  cuCtxSetCurrent(g_ctx);
  CUdeviceptr p = 0;
  const CUresult on_stream = cuMemAllocAsync(&p, bytes, stream1);
  size_t free0 = 0, free1 = 0, total = 0;
  cuMemGetInfo(&free0, &total);
  cuCtxSetCurrent(ctx1);
  cuMemGetInfo(&free1, &total);
  std::printf("pool %d %zu %zu %d\n", ok, free0, free1, int(on_stream));
  return 0;
}

int badfree(size_t bytes) {
  CUdeviceptr p = 0;
  if (cuMemAlloc(&p, bytes) != CUDA_SUCCESS) return 3;
  const CUresult r = cuMemFreeAsync(p, reinterpret_cast<CUstream>(uintptr_t{0x5eed0}));
  const size_t after = used();
  cuMemFree(p);
  std::printf("badfree %d %zu %zu\n", int(r), after, used());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !setup()) return 2;
  const std::string cmd = argv[1];
  auto arg = [&](int i, long fallback) { return argc > i ? std::atol(argv[i]) : fallback; };
  int rc = 2;
  if (cmd == "info") info(), rc = 0;
  else if (cmd == "fill") rc = fill(size_t(arg(2, 1)) << 20, arg(3, 0));
  else if (cmd == "grow") rc = grow(size_t(arg(2, 1)) << 20, int(arg(3, 1)), arg(4, 0));
  else if (cmd == "paths") rc = paths(size_t(arg(2, 1 << 20)));
  else if (cmd == "random") rc = random_ops(unsigned(arg(2, 1)), int(arg(3, 100)), int(arg(4, 2)));
  else if (cmd == "fork") rc = fork_child(size_t(arg(2, 1)) << 20);
  else if (cmd == "narrow") rc = narrow(size_t(arg(2, 1)));
  else if (cmd == "teardown") rc = teardown(size_t(arg(2, 1)) << 20);
  else if (cmd == "badfree") rc = badfree(size_t(arg(2, 1)) << 20);
  else if (cmd == "pool") rc = pool(size_t(arg(2, 1)) << 20);
  std::fflush(stdout);
  return rc;
}
