#include "driver_state.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "segment.h"

namespace fikit::simgpu::driver {

std::mutex g_mutex;
Pool<Context, 64, true> g_contexts;
Pool<Stream, 4096> g_streams;
Pool<Event, 16384> g_events;
Pool<Module, 1024> g_modules;
Pool<Function, 16384> g_functions;
Pool<Graph, 8192> g_graphs;
Pool<GraphExec, 8192> g_graph_execs;
Settings g_settings;
DeviceState* g_device = nullptr;

namespace {

constexpr uint64_t kWaitCapNs = 100'000;

std::mutex g_alloc_mutex;
std::map<uintptr_t, Allocation>& allocations() {
  static auto* m = new std::map<uintptr_t, Allocation>();  // never destroyed: usable from atexit paths
  return *m;
}

uint64_t g_submits = 0;  // for the test-only die-in-lock hook

// Short sleeps must be short: the simulated completions are microseconds apart.
__attribute__((constructor)) void set_timer_slack() { prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0); }

// FIKIT_SIMGPU_STATS: what this context did on the device and how long it waited for others, one
// JSON line appended per context when it is released (tests read it after the process exits).
void write_stats(const CtxSlot& s) {
  if (g_settings.stats_path[0] == '\0') return;
  char line[512];
  const int n = std::snprintf(
      line, sizeof line,
      "{\"pid\":%d,\"device\":%u,\"priority\":%u,\"ops\":%llu,\"busy_ns\":%llu,\"wait_ns\":%llu,"
      "\"max_wait_ns\":%llu,\"overlap_ns\":%llu,\"slice_ns\":%llu,\"preemptions\":%llu}\n",
      s.pid, s.device, s.priority, static_cast<unsigned long long>(s.stats.ops_done),
      static_cast<unsigned long long>(s.stats.busy_ns), static_cast<unsigned long long>(s.stats.wait_ns),
      static_cast<unsigned long long>(s.stats.max_wait_ns), static_cast<unsigned long long>(s.stats.overlap_ns),
      static_cast<unsigned long long>(s.slice_ns), static_cast<unsigned long long>(s.stats.preemptions));
  const int fd = open(g_settings.stats_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  ssize_t ignored = write(fd, line, static_cast<size_t>(n));   // O_APPEND: one line, one write
  (void)ignored;
  close(fd);
}

void release(Context& ctx) {
  if (ctx.parent != nullptr) return;   // a green context's slot is its primary context's
  // A forked child inherits its parent's handles, not its contexts: those stay the parent's.
  if (g_device->ctx[ctx.slot].gen != ctx.gen || g_device->ctx[ctx.slot].pid != getpid()) return;
  write_stats(g_device->ctx[ctx.slot]);
  release_slot(*g_device, ctx.slot);
}

// A process that exits without destroying its contexts drops their pending work, as a real
// driver tears a process's contexts down at exit.
__attribute__((destructor)) void release_contexts_at_exit() {
  if (!g_device) return;
  DeviceLock lock(*g_device);
  if (!lock.ok()) return;
  g_contexts.for_each_live([](Context& ctx) { release(ctx); });
}

}  // namespace

Context*& current_context() {
  thread_local Context* current = nullptr;
  return current;
}

void log_error(const char* fmt, ...) {
  char line[512];
  int n = std::snprintf(line, sizeof line, "[fikit-simgpu pid %d] ", static_cast<int>(getpid()));
  va_list ap;
  va_start(ap, fmt);
  n += std::vsnprintf(line + n, sizeof line - static_cast<size_t>(n), fmt, ap);
  va_end(ap);
  if (n >= static_cast<int>(sizeof line) - 1) n = sizeof line - 2;
  line[n++] = '\n';
  ssize_t ignored = write(STDERR_FILENO, line, static_cast<size_t>(n));
  (void)ignored;
}

void bad_handle(const char* call, const void* handle) {
  if (!g_settings.strict_handles) return;
  log_error("%s: handle %p is not live (destroyed, or its context is); FIKIT_SIMGPU_STRICT aborts", call, handle);
  std::abort();
}

Context* stream_context(CUstream handle, Stream** stream, CUresult* err) {
  *stream = nullptr;
  Context* ctx = nullptr;
  if (handle == nullptr || handle == CU_STREAM_LEGACY || handle == CU_STREAM_PER_THREAD) {
    ctx = current_context();
    if (!ctx || !ctx->live) {
      *err = CUDA_ERROR_INVALID_CONTEXT;
      return nullptr;
    }
    return ctx;
  }
  Stream* s = g_streams.find(handle);
  if (!s || !s->ctx || !s->ctx->live) {
    bad_handle("a stream's call", handle);
    *err = CUDA_ERROR_INVALID_HANDLE;
    return nullptr;
  }
  *stream = s;
  return s->ctx;
}

// Context objects are pooled (a new context may get a destroyed one's address), their IDs never.
uint64_t next_context_id() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

CUresult create_context(int device, bool primary, Context** out) {
  if (!g_device) return CUDA_ERROR_NOT_INITIALIZED;
  std::lock_guard guard(g_mutex);
  Context* ctx = g_contexts.allocate();
  if (!ctx) return CUDA_ERROR_OUT_OF_MEMORY;
  DeviceLock lock(*g_device);
  const int slot =
      lock.ok() ? claim_slot(*g_device, getpid(), 0, lock.now(), uint32_t(device), g_settings.mps_priority) : -1;
  if (slot < 0) {
    g_contexts.release(ctx);
    log_error("the simulated device has no free context slot (%d in use)", kMaxContexts);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  g_device->ctx[slot].local_id = static_cast<uint32_t>(g_contexts.index_of(ctx));
  g_device->ctx[slot].slice_ns = g_settings.slice_ns.load(std::memory_order_relaxed);
  ctx->slot = slot;
  ctx->gen = g_device->ctx[slot].gen;
  ctx->device = device;
  ctx->id = next_context_id();
  ctx->primary = primary;
  *out = ctx;
  return CUDA_SUCCESS;
}

CUresult create_green_context(int device, uint32_t sms, Context** out) {
  if (!g_device) return CUDA_ERROR_NOT_INITIALIZED;
  CUcontext primary_handle = nullptr;
  CUresult r = cuDevicePrimaryCtxRetain(&primary_handle, device);
  if (r != CUDA_SUCCESS) return r;
  auto* primary = reinterpret_cast<Context*>(primary_handle);
  std::lock_guard guard(g_mutex);
  Context* ctx = g_contexts.allocate();
  if (!ctx) return CUDA_ERROR_OUT_OF_MEMORY;
  ctx->slot = primary->slot;
  ctx->gen = primary->gen;
  ctx->device = device;
  ctx->id = next_context_id();
  ctx->parent = primary;
  ctx->sm_limit = sms;
  *out = ctx;
  return CUDA_SUCCESS;
}

CUresult destroy_context(Context* ctx) {
  std::lock_guard guard(g_mutex);
  {
    DeviceLock lock(*g_device);
    if (lock.ok()) release(*ctx);
  }
  g_streams.for_each_live([ctx](Stream& s) { if (s.ctx == ctx) g_streams.release(&s); });
  g_events.for_each_live([ctx](Event& e) { if (e.ctx == ctx) g_events.release(&e); });
  if (current_context() == ctx) current_context() = nullptr;
  g_contexts.release(ctx);
  return CUDA_SUCCESS;
}

CUresult enqueue(Context* ctx, Stream* stream, OpKind kind, uint64_t duration_ns, uint32_t event, uint32_t threads,
                 uint32_t block_threads) {
  for (;;) {
    uint64_t wake;
    {
      DeviceLock lock(*g_device);
      if (!lock.ok()) return CUDA_ERROR_UNKNOWN;
      if (g_device->ctx[ctx->slot].gen != ctx->gen) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
      if (g_settings.die_in_lock_at && ++g_submits == g_settings.die_in_lock_at) raise(SIGKILL);
      Op op{lock.now(), duration_ns, event, threads, kind, block_threads};
      const uint64_t seq = submit(*g_device, ctx->slot, op);
      if (seq != UINT64_MAX) {
        // A green context's work is its primary context's as far as synchronising goes.
        (ctx->parent != nullptr ? ctx->parent : ctx)->tail.store(seq + 1, std::memory_order_release);
        if (stream) stream->tail.store(seq + 1, std::memory_order_release);
        return CUDA_SUCCESS;
      }
      wake = next_progress_ns(*g_device, lock.now());  // ring full: wait like a full pushbuffer
    }
    wait_until(wake, kWaitCapNs);
  }
}

CUresult query(Context* ctx, uint64_t target) {
  DeviceLock lock(*g_device);
  if (!lock.ok()) return CUDA_ERROR_UNKNOWN;
  const CtxSlot& slot = g_device->ctx[ctx->slot];
  if (slot.gen != ctx->gen) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  return slot.head >= target ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult wait_for(Context* ctx, uint64_t target) {
  for (;;) {
    uint64_t wake;
    {
      DeviceLock lock(*g_device);
      if (!lock.ok()) return CUDA_ERROR_UNKNOWN;
      const CtxSlot& slot = g_device->ctx[ctx->slot];
      if (slot.gen != ctx->gen) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
      if (slot.head >= target) return CUDA_SUCCESS;
      wake = next_progress_ns(*g_device, lock.now());
    }
    wait_until(wake, kWaitCapNs);
  }
}

uint64_t copy_duration_ns(size_t bytes) {
  return 1000 + static_cast<uint64_t>(static_cast<double>(bytes) / g_settings.copy_gbps);
}

uint64_t set_duration_ns(size_t bytes) { return 1000 + bytes / 500; }

bool register_allocation(void* base, const Allocation& a) {
  std::lock_guard guard(g_alloc_mutex);
  return allocations().emplace(reinterpret_cast<uintptr_t>(base), a).second;
}

bool unregister_allocation(CUdeviceptr base, Allocation* out) {
  std::lock_guard guard(g_alloc_mutex);
  auto it = allocations().find(static_cast<uintptr_t>(base));
  if (it == allocations().end()) return false;
  *out = it->second;
  allocations().erase(it);
  return true;
}

bool is_device_range(CUdeviceptr ptr, size_t bytes) {
  std::lock_guard guard(g_alloc_mutex);
  auto& m = allocations();
  auto it = m.upper_bound(static_cast<uintptr_t>(ptr));
  if (it == m.begin()) return false;
  --it;
  const uintptr_t offset = static_cast<uintptr_t>(ptr) - it->first;
  return offset <= it->second.bytes && bytes <= it->second.bytes - offset;
}

}  // namespace fikit::simgpu::driver
