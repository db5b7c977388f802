/* Issue 53 probe: can a process read and shorten the time slice of ITS OWN CUDA context's channel
 * groups (TSGs), and what does a shorter slice buy a second process waiting on the GPU?
 *
 * Mechanism (the one XSched's level 3 and GPreempt use; written here from NVIDIA's open-gpu-kernel-modules
 * headers, nothing copied): this executable defines ioctl() itself, so libcuda's ioctls reach it first
 * (link with -rdynamic). It records every successful NV_ESC_RM_ALLOC (NVOS21 or NVOS64 parameters,
 * also when wrapped in NV_ESC_IOCTL_XFER_CMD) while the CUDA context is created; the objects of class
 * KEPLER_CHANNEL_GROUP_A (0xA06C) are the context's TSGs. It then issues NV_ESC_RM_CONTROL (NVOS54) with
 * NVA06C_CTRL_CMD_GET_TIMESLICE / _SET_TIMESLICE on those handles, on the same /dev/nvidiactl fd.
 * Only this process's own client and objects are touched; every change is put back before exit.
 *
 * Modes:
 *   probe                      GET on each TSG, SET to 1000 500 200 100 50 20 10 5 1 us with read-back,
 *                              restore and verify, then check a kernel still runs; also GET via a fresh fd
 *   calib MS                   print the burn-kernel iteration count for a kernel of about MS ms
 *   job SLICE_US ITERS SECONDS [START_EPOCH]
 *                              busy job: set own slice (0 = leave default), launch burn kernels (full
 *                              occupancy, ITERS iterations each) back to back for SECONDS (from the
 *                              CLOCK_REALTIME instant START_EPOCH if given), report the kernel rate,
 *                              restore the slice
 *   service N PERIOD_US [RAW] [ITERS] [SLICE_US]
 *                              a tiny kernel (or, ITERS > 0, a burn kernel of ITERS iterations) every
 *                              PERIOD_US, N times; host launch-to-completion latency; SLICE_US > 0 sets
 *                              the service's own slice first (restored at the end)
 *   raise                      SET to 2000 4000 8000 16000 32000 65535 us on each TSG, read back, restore
 *
 * Build: nvcc -O2 -o timeslice_probe timeslice_probe.c -lcuda -ldl -Xlinker -export-dynamic
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

/* ---- RM ABI (open-gpu-kernel-modules: nvos.h, nv_escape.h, nv-ioctl-numbers.h, nv-ioctl.h, ctrla06c.h) */
#define NV_IOCTL_MAGIC 'F'
#define NV_ESC_RM_CONTROL 0x2A
#define NV_ESC_RM_ALLOC 0x2B
#define NV_ESC_IOCTL_XFER_CMD (200 + 11)
#define KEPLER_CHANNEL_GROUP_A 0xA06Cu
#define NVA06C_CTRL_CMD_SET_TIMESLICE 0xa06c0103u
#define NVA06C_CTRL_CMD_GET_TIMESLICE 0xa06c0104u
#define NVA06C_CTRL_CMD_GET_INFO 0xa06c0106u

typedef struct { /* NVOS21_PARAMETERS, 32 bytes */
  uint32_t hRoot, hObjectParent, hObjectNew, hClass;
  uint64_t pAllocParms;
  uint32_t paramsSize, status;
} nvos21_t;
typedef struct { /* NVOS64_PARAMETERS, 48 bytes */
  uint32_t hRoot, hObjectParent, hObjectNew, hClass;
  uint64_t pAllocParms, pRightsRequested;
  uint32_t paramsSize, flags, status, pad_;
} nvos64_t;
typedef struct { /* NVOS54_PARAMETERS, 32 bytes */
  uint32_t hClient, hObject, cmd, flags;
  uint64_t params;
  uint32_t paramsSize, status;
} nvos54_t;
typedef struct { /* nv_ioctl_xfer_t */
  uint32_t cmd, size;
  uint64_t ptr;
} nv_xfer_t;
_Static_assert(sizeof(nvos21_t) == 32, "NVOS21");
_Static_assert(sizeof(nvos64_t) == 48, "NVOS64");
_Static_assert(sizeof(nvos54_t) == 32, "NVOS54");

static const char* nv_status_name(uint32_t s) {
  switch (s) {
    case 0x00: return "NV_OK";
    case 0x1B: return "NV_ERR_INSUFFICIENT_PERMISSIONS";
    case 0x1F: return "NV_ERR_INVALID_ARGUMENT";
    case 0x23: return "NV_ERR_INVALID_CLIENT";
    case 0x24: return "NV_ERR_INVALID_COMMAND";
    case 0x31: return "NV_ERR_INVALID_OBJECT";
    case 0x33: return "NV_ERR_INVALID_OBJECT_HANDLE";
    case 0x36: return "NV_ERR_INVALID_OBJECT_PARENT";
    case 0x3A: return "NV_ERR_INVALID_PARAM_STRUCT";
    case 0x3B: return "NV_ERR_INVALID_PARAMETER";
    case 0x3F: return "NV_ERR_INVALID_REQUEST";
    case 0x40: return "NV_ERR_INVALID_STATE";
    case 0x55: return "NV_ERR_NOT_READY";
    case 0x56: return "NV_ERR_NOT_SUPPORTED";
    case 0x57: return "NV_ERR_OBJECT_NOT_FOUND";
    case 0x59: return "NV_ERR_OPERATING_SYSTEM";
    case 0x65: return "NV_ERR_TIMEOUT";
    case 0xFFFF: return "NV_ERR_GENERIC";
    default: return "?";
  }
}

/* ---- ioctl interposition ---------------------------------------------------------------------- */
typedef int (*ioctl_fn)(int, unsigned long, ...);
static ioctl_fn real_ioctl_;
static pthread_mutex_t rec_mu = PTHREAD_MUTEX_INITIALIZER;
typedef struct { int fd; uint32_t hClient, hParent, hObject, hClass; } alloc_rec;
#define MAX_RECS 8192
static alloc_rec recs[MAX_RECS];
static int n_recs, n_allocs_seen, n_nv_ioctls, recording = 1;

static int real_ioctl(int fd, unsigned long req, void* arg) {
  if (!real_ioctl_) real_ioctl_ = (ioctl_fn)dlsym(RTLD_NEXT, "ioctl");
  return real_ioctl_(fd, req, arg);
}

static void note_alloc(int fd, void* p, uint32_t size) {
  uint32_t status;
  const uint32_t* h = (const uint32_t*)p;
  if (size == sizeof(nvos21_t)) status = ((nvos21_t*)p)->status;
  else if (size == sizeof(nvos64_t)) status = ((nvos64_t*)p)->status;
  else return;
  if (status != 0) return;
  pthread_mutex_lock(&rec_mu);
  ++n_allocs_seen;
  if (recording && n_recs < MAX_RECS) {
    alloc_rec r = {fd, h[0], h[1], h[2], h[3]};
    recs[n_recs++] = r;
  }
  pthread_mutex_unlock(&rec_mu);
}

int ioctl(int fd, unsigned long req, ...) {
  va_list ap;
  va_start(ap, req);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  int rc = real_ioctl(fd, req, arg);
  if (_IOC_TYPE(req) == NV_IOCTL_MAGIC) __atomic_add_fetch(&n_nv_ioctls, 1, __ATOMIC_RELAXED);
  if (rc == 0 && arg && _IOC_TYPE(req) == NV_IOCTL_MAGIC) {
    if (_IOC_NR(req) == NV_ESC_RM_ALLOC) {
      note_alloc(fd, arg, _IOC_SIZE(req));
    } else if (_IOC_NR(req) == NV_ESC_IOCTL_XFER_CMD && _IOC_SIZE(req) == sizeof(nv_xfer_t)) {
      nv_xfer_t* x = (nv_xfer_t*)arg;
      if (x->cmd == NV_ESC_RM_ALLOC) note_alloc(fd, (void*)(uintptr_t)x->ptr, x->size);
    }
  }
  return rc;
}

/* ---- RM control on a recorded TSG --------------------------------------------------------------- */
typedef struct { int fd; uint32_t hClient, hObject; } tsg_t;
static tsg_t tsgs[64];
static int n_tsgs;

static void collect_tsgs(void) {
  pthread_mutex_lock(&rec_mu);
  recording = 0;
  n_tsgs = 0;
  for (int i = 0; i < n_recs && n_tsgs < 64; ++i)
    if (recs[i].hClass == KEPLER_CHANNEL_GROUP_A) {
      tsg_t t = {recs[i].fd, recs[i].hClient, recs[i].hObject};
      tsgs[n_tsgs++] = t;
    }
  pthread_mutex_unlock(&rec_mu);
}

/* returns the NV status (or 0x10000|errno when the ioctl itself failed) */
static uint32_t rm_control(int fd, uint32_t hClient, uint32_t hObject, uint32_t cmd, void* params, uint32_t size) {
  nvos54_t p;
  memset(&p, 0, sizeof p);
  p.hClient = hClient, p.hObject = hObject, p.cmd = cmd;
  p.params = (uint64_t)(uintptr_t)params, p.paramsSize = size;
  int rc = real_ioctl(fd, _IOWR(NV_IOCTL_MAGIC, NV_ESC_RM_CONTROL, nvos54_t), &p);
  if (rc != 0) return 0x10000u | (uint32_t)errno;
  return p.status;
}
static uint32_t get_slice(const tsg_t* t, uint64_t* us) {
  uint64_t v[1] = {0};
  uint32_t s = rm_control(t->fd, t->hClient, t->hObject, NVA06C_CTRL_CMD_GET_TIMESLICE, v, sizeof v);
  *us = v[0];
  return s;
}
static uint32_t set_slice(const tsg_t* t, uint64_t us) {
  uint64_t v[1] = {us};
  return rm_control(t->fd, t->hClient, t->hObject, NVA06C_CTRL_CMD_SET_TIMESLICE, v, sizeof v);
}

/* ---- CUDA side ------------------------------------------------------------------------------------ */
#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { const char* s_ = 0; cuGetErrorString(r_, &s_); \
  printf("FAIL %s:%d %s -> %d %s\n", __FILE__, __LINE__, #x, (int)r_, s_ ? s_ : "?"); exit(1); } } while (0)

static const char kPtx[] =
  ".version 8.0\n.target sm_90\n.address_size 64\n"
  ".visible .entry burn(.param .u64 out, .param .u32 iters) {\n"
  "  .reg .u32 %r<5>; .reg .f32 %f<6>; .reg .pred %p; .reg .u64 %rd<2>;\n"
  "  ld.param.u32 %r1, [iters]; mov.u32 %r2, %tid.x; cvt.rn.f32.u32 %f1, %r2; add.f32 %f3, %f1, 0f3F800000;\n"
  "  mov.u32 %r3, 0;\n"
  "LOOP:\n"
  "  fma.rn.f32 %f1, %f1, 0f3F7FFFF0, 0f3C23D70A; fma.rn.f32 %f3, %f3, 0f3F7FFFF0, 0f3C23D70A;\n"
  "  add.u32 %r3, %r3, 1; setp.lt.u32 %p, %r3, %r1; @%p bra LOOP;\n"
  "  add.f32 %f4, %f1, %f3; setp.neu.f32 %p, %f4, 0f00000000; @%p bra DONE;\n"
  "  ld.param.u64 %rd1, [out]; st.global.f32 [%rd1], %f4;\n"
  "DONE: ret;\n}\n"
  ".visible .entry tiny(.param .u64 out) {\n"
  "  .reg .u32 %r<2>; .reg .u64 %rd<2>;\n"
  "  mov.u32 %r1, %tid.x; ld.param.u64 %rd1, [out]; st.global.u32 [%rd1], %r1; ret;\n}\n";

static CUdevice dev;
static CUcontext ctx;
static CUmodule mod;
static CUfunction f_burn, f_tiny;
static CUdeviceptr dbuf;
static int n_sms;

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static void cuda_up(void) {
  double t0 = now_us();
  CK(cuInit(0));
  CK(cuDeviceGet(&dev, 0));
  CK(cuDevicePrimaryCtxSetFlags(dev, CU_CTX_SCHED_SPIN));
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  CK(cuModuleLoadData(&mod, kPtx));
  CK(cuModuleGetFunction(&f_burn, mod, "burn"));
  CK(cuModuleGetFunction(&f_tiny, mod, "tiny"));
  CK(cuMemAlloc(&dbuf, 256));
  CK(cuDeviceGetAttribute(&n_sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
  CK(cuCtxSynchronize());
  collect_tsgs();
  fprintf(stderr, "[pid %d] context up in %.0f ms: %d NV ioctls, %d RM allocs seen, %d TSG(s)\n", (int)getpid(),
          (now_us() - t0) / 1e3, n_nv_ioctls, n_allocs_seen, n_tsgs);
}

static void launch_burn(CUstream s, unsigned iters) {
  void* args[] = {&dbuf, &iters};
  CK(cuLaunchKernel(f_burn, n_sms * 8, 1, 1, 256, 1, 1, 0, s, args, NULL));
}

static void print_tree(void) {
  /* each TSG, the classes of its children (channels) and grandchildren (engine objects) */
  for (int t = 0; t < n_tsgs; ++t) {
    printf("TSG %d: fd %d hClient 0x%08x hObject 0x%08x; children:", t, tsgs[t].fd, tsgs[t].hClient, tsgs[t].hObject);
    for (int i = 0; i < n_recs; ++i) {
      if (recs[i].hClient != tsgs[t].hClient || recs[i].hParent != tsgs[t].hObject) continue;
      printf(" 0x%04x[", recs[i].hClass);
      for (int j = 0; j < n_recs; ++j)
        if (recs[j].hClient == recs[i].hClient && recs[j].hParent == recs[i].hObject) printf(" 0x%04x", recs[j].hClass);
      printf(" ]");
    }
    printf("\n");
    uint32_t info[1] = {0};
    uint32_t s = rm_control(tsgs[t].fd, tsgs[t].hClient, tsgs[t].hObject, NVA06C_CTRL_CMD_GET_INFO, info, sizeof info);
    printf("TSG %d: GET_INFO status 0x%x %s tsgID %u\n", t, s, nv_status_name(s), info[0]);
  }
}

static int mode_probe(void) {
  cuda_up();
  printf("uid %d euid %d; RM allocs recorded %d; TSGs (class 0xA06C) %d\n", (int)getuid(), (int)geteuid(), n_recs, n_tsgs);
  if (n_tsgs == 0) { printf("RESULT no TSG allocation seen: interposition failed or another path is used\n"); return 2; }
  print_tree();
  uint64_t orig[64];
  static const uint64_t tries[] = {1000, 500, 200, 100, 50, 20, 10, 5, 1};
  const int n_tries = (int)(sizeof tries / sizeof tries[0]);
  int all_ok = 1;
  uint64_t smallest_ok = 0;
  for (int t = 0; t < n_tsgs; ++t) {
    uint32_t s = get_slice(&tsgs[t], &orig[t]);
    printf("TSG %d: GET_TIMESLICE status 0x%x %s -> %llu us\n", t, s, nv_status_name(s), (unsigned long long)orig[t]);
    if (s != 0) { all_ok = 0; continue; }
    for (int i = 0; i < n_tries; ++i) {
      double t0 = now_us();
      uint32_t ss = set_slice(&tsgs[t], tries[i]);
      double t1 = now_us();
      uint64_t back = 0;
      uint32_t gs = get_slice(&tsgs[t], &back);
      printf("TSG %d: SET_TIMESLICE %llu us -> status 0x%x %s (%.1f us in the ioctl); GET -> 0x%x %llu us\n", t,
             (unsigned long long)tries[i], ss, nv_status_name(ss), t1 - t0, gs, (unsigned long long)back);
      if (ss == 0 && (smallest_ok == 0 || tries[i] < smallest_ok)) smallest_ok = tries[i];
      if (ss != 0) all_ok = 0;
    }
    uint32_t rs = set_slice(&tsgs[t], orig[t]);
    uint64_t back = 0;
    uint32_t gs = get_slice(&tsgs[t], &back);
    printf("TSG %d: restore %llu us -> status 0x%x %s; GET -> 0x%x %llu us (%s)\n", t, (unsigned long long)orig[t], rs,
           nv_status_name(rs), gs, (unsigned long long)back, back == orig[t] ? "restored" : "NOT RESTORED");
  }
  /* the context still runs work */
  CUstream s;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  double t0 = now_us();
  launch_burn(s, 1000);
  CK(cuStreamSynchronize(s));
  printf("kernel after the sweep: ran, %.0f us\n", now_us() - t0);
  /* is the client handle usable from another fd of the same process? */
  int fd2 = open("/dev/nvidiactl", O_RDWR);
  if (fd2 >= 0) {
    tsg_t t2 = tsgs[0];
    t2.fd = fd2;
    uint64_t v = 0;
    uint32_t st = get_slice(&t2, &v);
    printf("GET_TIMESLICE via a fresh /dev/nvidiactl fd: status 0x%x %s -> %llu us\n", st, nv_status_name(st), (unsigned long long)v);
    close(fd2);
  } else {
    printf("fresh /dev/nvidiactl fd: open failed errno %d\n", errno);
  }
  printf("RESULT probe uid=%d tsgs=%d default_us=%llu set_all_ok=%d smallest_accepted_us=%llu\n", (int)geteuid(), n_tsgs,
         (unsigned long long)orig[0], all_ok, (unsigned long long)smallest_ok);
  return 0;
}

static int mode_calib(double ms) {
  cuda_up();
  CUstream s;
  CUevent a, b;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CK(cuEventCreate(&a, 0));
  CK(cuEventCreate(&b, 0));
  unsigned iters = 20000;
  float el = 0;
  for (int k = 0; k < 4; ++k) {
    CK(cuEventRecord(a, s));
    launch_burn(s, iters);
    CK(cuEventRecord(b, s));
    CK(cuEventSynchronize(b));
    CK(cuEventElapsedTime(&el, a, b));
    if (k < 3) iters = (unsigned)(iters * (ms / el));
  }
  printf("CALIB iters=%u ms=%.3f\n", iters, el);
  return 0;
}

static int mode_job(uint64_t slice, unsigned iters, double seconds, double start_epoch) {
  cuda_up();
  uint64_t orig[64];
  for (int t = 0; t < n_tsgs; ++t) {
    uint32_t s = get_slice(&tsgs[t], &orig[t]);
    if (s != 0) { fprintf(stderr, "job: GET failed 0x%x\n", s); orig[t] = 0; }
  }
  if (slice > 0)
    for (int t = 0; t < n_tsgs; ++t) {
      uint32_t s = set_slice(&tsgs[t], slice);
      uint64_t back = 0;
      get_slice(&tsgs[t], &back);
      fprintf(stderr, "[job] TSG %d slice %llu -> %llu us (status 0x%x)\n", t, (unsigned long long)orig[t],
              (unsigned long long)back, s);
    }
  CUstream s;
  CUevent ev[2];
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CK(cuEventCreate(&ev[0], CU_EVENT_DISABLE_TIMING));
  CK(cuEventCreate(&ev[1], CU_EVENT_DISABLE_TIMING));
  if (start_epoch > 0) { /* start together with another process */
    struct timespec ts;
    ts.tv_sec = (time_t)start_epoch;
    ts.tv_nsec = (long)((start_epoch - (double)ts.tv_sec) * 1e9);
    clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &ts, NULL);
  }
  double t0 = now_us(), end = t0 + seconds * 1e6;
  long launched = 0;
  while (1) { /* two kernels in flight: wait for the one before the last */
    launch_burn(s, iters);
    CK(cuEventRecord(ev[launched & 1], s));
    ++launched;
    if (launched >= 2) CK(cuEventSynchronize(ev[launched & 1]));
    if (now_us() >= end) break;
  }
  CK(cuStreamSynchronize(s));
  long done = launched;
  double el = (now_us() - t0) / 1e6;
  for (int t = 0; t < n_tsgs; ++t) {
    if (slice > 0 && orig[t] > 0) set_slice(&tsgs[t], orig[t]);
    uint64_t back = 0;
    get_slice(&tsgs[t], &back);
    if (slice > 0) fprintf(stderr, "[job] TSG %d restored to %llu us\n", t, (unsigned long long)back);
  }
  printf("RESULT job slice_us=%llu default_us=%llu kernels=%ld seconds=%.3f kernels_per_s=%.2f\n",
         (unsigned long long)slice, (unsigned long long)(n_tsgs ? orig[0] : 0), done, el, done / el);
  return 0;
}

static int cmp_d(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static int mode_raise(void) {
  cuda_up();
  static const uint64_t tries[] = {2000, 4000, 8000, 16000, 32000, 65535};
  for (int t = 0; t < n_tsgs; ++t) {
    uint64_t orig = 0;
    uint32_t s = get_slice(&tsgs[t], &orig);
    printf("TSG %d: GET -> 0x%x %s %llu us\n", t, s, nv_status_name(s), (unsigned long long)orig);
    if (s != 0) continue;
    for (unsigned i = 0; i < sizeof tries / sizeof tries[0]; ++i) {
      uint32_t ss = set_slice(&tsgs[t], tries[i]);
      uint64_t back = 0;
      uint32_t gs = get_slice(&tsgs[t], &back);
      printf("TSG %d: SET %llu us -> 0x%x %s; GET -> 0x%x %llu us\n", t, (unsigned long long)tries[i], ss,
             nv_status_name(ss), gs, (unsigned long long)back);
    }
    uint32_t rs = set_slice(&tsgs[t], orig);
    uint64_t back = 0;
    get_slice(&tsgs[t], &back);
    printf("TSG %d: restore %llu -> 0x%x; GET %llu (%s)\n", t, (unsigned long long)orig, rs, (unsigned long long)back,
           back == orig ? "restored" : "NOT RESTORED");
  }
  printf("RESULT raise done\n");
  return 0;
}

static int mode_service(int n, double period_us, const char* raw_path, unsigned iters, uint64_t slice) {
  cuda_up();
  uint64_t mine = 0;
  uint64_t orig[64];
  for (int t = 0; t < n_tsgs; ++t) {
    if (get_slice(&tsgs[t], &orig[t]) != 0) orig[t] = 0;
    if (slice > 0 && orig[t] > 0) set_slice(&tsgs[t], slice);
  }
  if (n_tsgs) get_slice(&tsgs[0], &mine);
  CUstream s;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  void* args[] = {&dbuf};
  for (int i = 0; i < 20; ++i) { /* warm-up */
    if (iters > 0) launch_burn(s, iters);
    else CK(cuLaunchKernel(f_tiny, 1, 1, 1, 32, 1, 1, 0, s, args, NULL));
    CK(cuStreamSynchronize(s));
  }
  double* lat = (double*)malloc(sizeof(double) * n);
  struct timespec next;
  clock_gettime(CLOCK_MONOTONIC, &next);
  for (int i = 0; i < n; ++i) {
    next.tv_nsec += (long)(period_us * 1e3);
    while (next.tv_nsec >= 1000000000L) { next.tv_nsec -= 1000000000L; ++next.tv_sec; }
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
    double t0 = now_us();
    if (iters > 0) launch_burn(s, iters);
    else CK(cuLaunchKernel(f_tiny, 1, 1, 1, 32, 1, 1, 0, s, args, NULL));
    CK(cuStreamSynchronize(s));
    lat[i] = now_us() - t0;
  }
  for (int t = 0; t < n_tsgs; ++t)
    if (slice > 0 && orig[t] > 0) set_slice(&tsgs[t], orig[t]);
  if (raw_path) {
    FILE* f = fopen(raw_path, "w");
    if (f) { for (int i = 0; i < n; ++i) fprintf(f, "%.1f\n", lat[i]); fclose(f); }
  }
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += lat[i];
  qsort(lat, n, sizeof(double), cmp_d);
  printf("RESULT service own_slice_us=%llu n=%d p50_us=%.1f p90_us=%.1f p99_us=%.1f max_us=%.1f mean_us=%.1f\n",
         (unsigned long long)mine, n, lat[n / 2], lat[(int)(n * 0.9)], lat[(int)(n * 0.99)], lat[n - 1], sum / n);
  free(lat);
  return 0;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char* m = argc > 1 ? argv[1] : "probe";
  if (!strcmp(m, "probe")) return mode_probe();
  if (!strcmp(m, "calib")) return mode_calib(argc > 2 ? atof(argv[2]) : 10.0);
  if (!strcmp(m, "job") && argc > 4) return mode_job(strtoull(argv[2], 0, 10), (unsigned)atol(argv[3]), atof(argv[4]), argc > 5 ? atof(argv[5]) : 0);
  if (!strcmp(m, "raise")) return mode_raise();
  if (!strcmp(m, "service") && argc > 3)
    return mode_service(atoi(argv[2]), atof(argv[3]), argc > 4 && strcmp(argv[4], "-") ? argv[4] : NULL,
                        argc > 5 ? (unsigned)atol(argv[5]) : 0, argc > 6 ? strtoull(argv[6], 0, 10) : 0);
  fprintf(stderr, "usage: %s probe | raise | calib MS | job SLICE_US ITERS SECONDS [START_EPOCH] | "
          "service N PERIOD_US [RAW|-] [ITERS] [SLICE_US]\n", argv[0]);
  return 1;
}
