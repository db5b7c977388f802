// CUPTI timing: kernel, memcpy and memset activity records carry exact GPU start/end timestamps.
// libcupti is loaded at run time (only in measure mode), its functions reached through dlsym. Each
// record is tied to the hook's op through an external correlation id (the op's sequence number)
// pushed around the launch: CUPTI emits an EXTERNAL_CORRELATION record mapping its own
// correlation id to ours, and the activity records carry CUPTI's id.
#include <cupti.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <type_traits>
#include <mutex>
#include <new>

#include "../log.h"
#include "timer.h"

namespace fikit::hook::measure {
namespace {

constexpr auto kExternalKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;
constexpr size_t kBufferBytes = 4u << 20;
constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                          CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION};

struct CuptiApi {
  decltype(&cuptiActivityEnable) enable;
  decltype(&cuptiActivityDisable) disable;
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks;
  decltype(&cuptiActivityPushExternalCorrelationId) push;
  decltype(&cuptiActivityPopExternalCorrelationId) pop;
  decltype(&cuptiActivityGetNextRecord) next_record;
  decltype(&cuptiActivityFlushAll) flush_all;
  decltype(&cuptiGetResultString) result_string;
};

class CuptiTimer;
CuptiTimer* g_timer = nullptr;   // CUPTI's buffer callbacks carry no user pointer

class CuptiTimer final : public Timer {
 public:
  CuptiTimer(OpRing& ring, const CuptiApi& api) : ring_(ring), api_(api) {}

  const char* name() const noexcept override { return "cupti"; }

  void before(OpSlot& slot, uint64_t seq, CUstream) noexcept override {
    slot.gpu_start.store(UINT64_MAX, std::memory_order_relaxed);
    slot.gpu_end.store(0, std::memory_order_relaxed);
    slot.timed = api_.push(kExternalKind, seq) == CUPTI_SUCCESS;
  }

  void after(OpSlot& slot, uint64_t, CUstream, bool launched) noexcept override {
    if (!slot.timed) return;
    uint64_t last = 0;
    api_.pop(kExternalKind, &last);
    slot.timed = launched;
  }

  Poll poll(OpSlot& slot, uint64_t, uint64_t& start_ns, uint64_t& end_ns) noexcept override {
    if (!slot.timed) return Poll::Lost;
    const uint64_t end = slot.gpu_end.load(std::memory_order_acquire);
    if (end == 0) return Poll::Pending;   // the measurement thread flushes, then gives up in time
    start_ns = slot.gpu_start.load(std::memory_order_acquire);
    end_ns = std::max(end, start_ns);
    return Poll::Ready;
  }

  uint64_t give_up_ms() const noexcept override { return 3000; }

  void flush() noexcept override { api_.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED); }

  void stop() noexcept override {
    for (auto kind : kKinds) api_.disable(kind);
    api_.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  }

  bool start(char* why, size_t why_len) noexcept {
    g_timer = this;
    CUptiResult r = api_.register_callbacks(&buffer_requested, &buffer_completed);
    for (size_t i = 0; r == CUPTI_SUCCESS && i < std::size(kKinds); ++i) r = api_.enable(kKinds[i]);
    if (r == CUPTI_SUCCESS) return true;
    const char* msg = "unknown error";
    api_.result_string(r, &msg);
    std::snprintf(why, why_len, "enabling activity records failed: %s", msg);
    for (auto kind : kKinds) api_.disable(kind);
    return false;
  }

 private:
  // Records of one launch and the correlation record naming its op can come in either order, in
  // different buffers; both sides wait in direct-mapped tables keyed by CUPTI's correlation id
  // (which increases by one per API call, so the tables act as rings).
  static constexpr uint32_t kPending = 1u << 16;
  struct Timing { uint32_t correlation = 0; uint64_t start = 0, end = 0; };
  struct Correlation { uint32_t correlation = 0; uint64_t seq = 0; bool valid = false; };

  static void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    // CUPTI's thread, not the launching one: allocating here is fine.
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
    *size = *buffer ? kBufferBytes : 0;
    *max_records = 0;
  }

  static void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
    if (g_timer && buffer) g_timer->consume(buffer, valid);
    std::free(buffer);
  }

  void consume(uint8_t* buffer, size_t valid) noexcept {
    std::lock_guard guard(mutex_);   // CUPTI's thread or a flushing one; never a launching thread
    CUpti_Activity* rec = nullptr;
    while (api_.next_record(buffer, valid, &rec) == CUPTI_SUCCESS) {
      switch (rec->kind) {
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
        case CUPTI_ACTIVITY_KIND_KERNEL: {
          const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
          timing(k->correlationId, k->start, k->end);
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
          timing(m->correlationId, m->start, m->end);
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
          timing(m->correlationId, m->start, m->end);
          break;
        }
        case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
          const auto* c = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(rec);
          if (c->externalKind != kExternalKind) break;
          correlations_[c->correlationId % kPending] = {c->correlationId, c->externalId, true};
          Timing& t = timings_[c->correlationId % kPending];
          if (t.correlation == c->correlationId && t.end) deliver(c->externalId, t.start, t.end);
          break;
        }
        default: break;
      }
    }
  }

  void timing(uint32_t correlation, uint64_t start, uint64_t end) noexcept {
    const Correlation& c = correlations_[correlation % kPending];
    if (c.valid && c.correlation == correlation) {
      deliver(c.seq, start, end);
      return;
    }
    Timing& t = timings_[correlation % kPending];   // a graph: several records for one correlation
    if (t.correlation != correlation) t = {correlation, start, end};
    t.start = std::min(t.start, start);
    t.end = std::max(t.end, end);
  }

  // The op's span grows to cover every record of it (a graph launch is one op of many kernels).
  void deliver(uint64_t seq, uint64_t start, uint64_t end) noexcept {
    OpSlot& slot = ring_.at(seq);
    if (slot.published.load(std::memory_order_acquire) != seq + 1) return;   // slot reused or not yet out
    if (start < slot.gpu_start.load(std::memory_order_relaxed)) slot.gpu_start.store(start, std::memory_order_release);
    if (end > slot.gpu_end.load(std::memory_order_relaxed)) slot.gpu_end.store(end, std::memory_order_release);
  }

  OpRing& ring_;
  CuptiApi api_;
  std::mutex mutex_;
  Correlation correlations_[kPending];
  Timing timings_[kPending];
};

void* open_cupti(char* why, size_t why_len) {
  const char* candidates[] = {std::getenv("FIKIT_CUPTI_PATH"), "libcupti.so.13", "libcupti.so",
                              "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so"};
  for (const char* path : candidates) {
    if (!path || !*path) continue;
    if (void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL)) return h;
  }
  const char* err = dlerror();
  std::snprintf(why, why_len, "cannot load libcupti.so.13 or libcupti.so (%s)", err ? err : "not found");
  return nullptr;
}

}  // namespace

Timer* make_cupti_timer(OpRing& ring, char* why, size_t why_len) noexcept {
  void* lib = open_cupti(why, why_len);
  if (!lib) return nullptr;
  CuptiApi api{};
  bool ok = true;
  const auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
    if (!fn && ok) std::snprintf(why, why_len, "libcupti lacks %s", name);
    ok = ok && fn;
  };
  sym(api.enable, "cuptiActivityEnable");
  sym(api.disable, "cuptiActivityDisable");
  sym(api.register_callbacks, "cuptiActivityRegisterCallbacks");
  sym(api.push, "cuptiActivityPushExternalCorrelationId");
  sym(api.pop, "cuptiActivityPopExternalCorrelationId");
  sym(api.next_record, "cuptiActivityGetNextRecord");
  sym(api.flush_all, "cuptiActivityFlushAll");
  sym(api.result_string, "cuptiGetResultString");
  if (!ok) return nullptr;   // the library stays loaded: unloading CUPTI is not supported
  auto* timer = new (std::nothrow) CuptiTimer(ring, api);
  if (!timer) return nullptr;
  if (!timer->start(why, why_len)) {
    g_timer = nullptr;
    delete timer;
    return nullptr;
  }
  return timer;
}

}  // namespace fikit::hook::measure
