/* What one cuMemAlloc_v2 + cuMemFree_v2 pair costs the calling thread against the real driver,
 * with or without FIKIT's hook preloaded (bench/gpu/memory_isolation.py alloc-cost runs it in
 * each setup). Resolves the driver with dlopen/dlsym, as frameworks do, so a preloaded hook sees
 * the calls. No CUDA headers: the handful of prototypes is declared here, so it builds with any C
 * compiler.
 *
 *   alloc_cost [PAIRS] [BYTES]     prints: {"pairs": N, "bytes": B, "median_ns": M, "p10_ns": .., "p90_ns": ..}
 *
 * Exit status: 0 ok, 1 the driver failed (its message on stderr), 2 bad usage. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef int CUresult;
typedef int CUdevice;
typedef void* CUcontext;
typedef unsigned long long CUdeviceptr;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void* a, const void* b) {
  uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
  long pairs = argc > 1 ? strtol(argv[1], NULL, 10) : 2000;
  long long bytes = argc > 2 ? strtoll(argv[2], NULL, 10) : (1 << 20);
  if (pairs < 10 || pairs > 10000000 || bytes < 1) {
    fprintf(stderr, "alloc_cost: usage: alloc_cost [PAIRS >= 10] [BYTES >= 1]\n");
    return 2;
  }
  void* lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (!lib) {
    fprintf(stderr, "alloc_cost: error: %s\n", dlerror());
    return 1;
  }
  CUresult (*init)(unsigned) = (CUresult(*)(unsigned))dlsym(lib, "cuInit");
  CUresult (*get)(CUdevice*, int) = (CUresult(*)(CUdevice*, int))dlsym(lib, "cuDeviceGet");
  CUresult (*retain)(CUcontext*, CUdevice) = (CUresult(*)(CUcontext*, CUdevice))dlsym(lib, "cuDevicePrimaryCtxRetain");
  CUresult (*set)(CUcontext) = (CUresult(*)(CUcontext))dlsym(lib, "cuCtxSetCurrent");
  CUresult (*alloc)(CUdeviceptr*, size_t) = (CUresult(*)(CUdeviceptr*, size_t))dlsym(lib, "cuMemAlloc_v2");
  CUresult (*release)(CUdeviceptr) = (CUresult(*)(CUdeviceptr))dlsym(lib, "cuMemFree_v2");
  if (!init || !get || !retain || !set || !alloc || !release) {
    fprintf(stderr, "alloc_cost: error: the driver lacks an entry point\n");
    return 1;
  }
  CUdevice dev;
  CUcontext ctx;
  CUresult rc;
  if ((rc = init(0)) || (rc = get(&dev, 0)) || (rc = retain(&ctx, dev)) || (rc = set(ctx))) {
    fprintf(stderr, "alloc_cost: error: driver set-up failed (CUresult %d)\n", rc);
    return 1;
  }
  uint64_t* t = malloc(sizeof(uint64_t) * (size_t)pairs);
  if (!t) return 1;
  for (long i = -pairs / 10; i < pairs; ++i) {  /* a tenth more as warm-up, not kept */
    CUdeviceptr p;
    uint64_t t0 = now_ns();
    if ((rc = alloc(&p, (size_t)bytes)) || (rc = release(p))) {
      fprintf(stderr, "alloc_cost: error: cuMemAlloc/cuMemFree failed (CUresult %d)\n", rc);
      return 1;
    }
    if (i >= 0) t[i] = now_ns() - t0;
  }
  qsort(t, (size_t)pairs, sizeof t[0], cmp_u64);
  printf("{\"pairs\": %ld, \"bytes\": %lld, \"median_ns\": %llu, \"p10_ns\": %llu, \"p90_ns\": %llu}\n", pairs, bytes,
         (unsigned long long)t[pairs / 2], (unsigned long long)t[pairs / 10], (unsigned long long)t[pairs * 9 / 10]);
  free(t);
  return 0;
}
