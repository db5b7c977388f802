#include "guard.h"

#include <algorithm>
#include <atomic>

#include "clock.h"
#include "driver.h"
#include "log.h"
#include "futex.h"

namespace fikit::hook::memory {
namespace {

constexpr int kMax = Ledger::kMaxDevices;

Ledger g_ledger;
std::atomic<bool> g_accounting{false};
std::atomic<uint64_t> g_scheduler_cap[kMax] = {};
// Bumped at every change of a scheduler cap: an allocation the daemon's cap refused waits on it.
std::atomic<uint32_t> g_cap_changes{0};
// How long such an allocation waits for a larger cap: the daemon gives a job its share once the
// other jobs' hooks have confirmed their lower caps, a round trip on loopback (microseconds; this
// covers a loaded host), never longer than a refusal would take a program to handle.
constexpr uint64_t kCapWaitNs = 200'000'000;
std::atomic<uint32_t> g_refusals[kMax] = {};
// FIKIT_MEMORY_LIMIT resolved on each device (a share needs the device's size): kUnknown until then.
constexpr uint64_t kUnknown = UINT64_MAX;
std::atomic<uint64_t> g_own_limit[kMax];
std::atomic<bool> g_refusal_logged{false};
std::atomic<bool> g_joined[kMax] = {};
std::atomic<bool> g_may_be_capped{false};

bool valid(int device) noexcept { return device >= 0 && device < kMax; }

uint64_t device_total(int device) noexcept {
  const auto total_mem = driver_calls().device_total_mem;
  size_t bytes = 0;
  return total_mem != nullptr && total_mem(&bytes, device) == CUDA_SUCCESS ? bytes : 0;
}

uint64_t effective_cap(int device) noexcept {
  const uint64_t own = own_limit(device);
  const uint64_t scheduler = g_scheduler_cap[device].load(std::memory_order_relaxed);
  if (own == 0) return scheduler;
  return scheduler == 0 ? own : std::min(own, scheduler);
}

void log_refusal(int device, uint64_t bytes) noexcept {
  if (g_refusal_logged.exchange(true, std::memory_order_relaxed)) return;
  char want[32], held[32], cap[32];
  const uint64_t own = own_limit(device), limit = effective_cap(device);
  values::format_bytes(bytes, want, sizeof want);
  values::format_bytes(g_ledger.used(device), held, sizeof held);
  values::format_bytes(limit, cap, sizeof cap);
  const bool own_binds = own != 0 && own == limit;
  log(LogLevel::Warn,
      "refused an allocation of %s on GPU %d: this process holds %s of the %s it may hold there (%s); the "
      "program gets CUDA_ERROR_OUT_OF_MEMORY, as from the driver. Later refusals are counted in "
      "'fikit-scheduler status', not logged",
      want, device, held, cap,
      own_binds ? "its memory limit, fikit-run --memory-limit" : "what fikit-scheduler --reserve-memory leaves to jobs");
}

}  // namespace

bool accounting() noexcept { return g_accounting.load(std::memory_order_relaxed); }

void start(const Config& cfg) noexcept {
  for (auto& limit : g_own_limit) limit.store(kUnknown, std::memory_order_relaxed);
  g_accounting.store(cfg.mode != ModeKind::Off || !cfg.memory_limit.is_zero(), std::memory_order_relaxed);
  g_may_be_capped.store(cfg.mode != ModeKind::Off && cfg.priority > 0, std::memory_order_relaxed);
}

bool first_on_device(int device) noexcept {
  return g_may_be_capped.load(std::memory_order_relaxed) && valid(device) &&
         !g_joined[device].load(std::memory_order_relaxed) && !g_joined[device].exchange(true);
}

int current_device() noexcept {
  const auto get_device = driver_calls().ctx_get_device;
  CUdevice device = 0;
  if (get_device == nullptr || get_device(&device) != CUDA_SUCCESS || !valid(device)) return -1;
  return device;
}

// Pools are few (one default a GPU, and what the program makes): a small table, lock-free.
constexpr int kMaxPools = 64;
std::atomic<uintptr_t> g_pools[kMaxPools] = {};
std::atomic<int> g_pool_devices[kMaxPools] = {};

void note_pool(CUmemoryPool pool, int device) noexcept {
  const auto key = reinterpret_cast<uintptr_t>(pool);
  if (key == 0 || !valid(device)) return;
  for (int i = 0; i < kMaxPools; ++i)
    if (g_pools[i].load(std::memory_order_acquire) == key) {
      g_pool_devices[i].store(device, std::memory_order_release);
      return;
    }
  for (int i = 0; i < kMaxPools; ++i) {
    uintptr_t empty = 0;
    g_pool_devices[i].store(device, std::memory_order_release);
    if (g_pools[i].compare_exchange_strong(empty, key, std::memory_order_acq_rel)) return;
  }
  // More pools than the table holds: their allocations count on the current context's GPU.
}

void forget_pool(CUmemoryPool pool) noexcept {
  const auto key = reinterpret_cast<uintptr_t>(pool);
  for (auto& p : g_pools) {
    uintptr_t expected = key;
    if (key != 0 && p.compare_exchange_strong(expected, 0, std::memory_order_acq_rel)) return;
  }
}

int pool_device(CUmemoryPool pool) noexcept {
  const auto key = reinterpret_cast<uintptr_t>(pool);
  for (int i = 0; i < kMaxPools && key != 0; ++i)
    if (g_pools[i].load(std::memory_order_acquire) == key) return g_pool_devices[i].load(std::memory_order_acquire);
  return -1;
}

int stream_device(CUstream stream) noexcept {
  if (stream == nullptr || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD) return -1;
  const auto stream_ctx = driver_calls().stream_get_ctx;
  const auto ctx_device = driver_calls().ctx_get_device_of;   // CUDA 12.8 on: no switch needed
  CUcontext ctx = nullptr;
  CUdevice device = 0;
  if (stream_ctx == nullptr || ctx_device == nullptr || stream_ctx(stream, &ctx) != CUDA_SUCCESS || ctx == nullptr ||
      ctx_device(&device, ctx) != CUDA_SUCCESS || !valid(device))
    return -1;
  return device;
}

uint64_t own_limit(int device) noexcept {
  if (!valid(device)) return 0;
  uint64_t limit = g_own_limit[device].load(std::memory_order_relaxed);
  if (limit != kUnknown) return limit;
  const Config& cfg = config();
  limit = 0;
  if (!cfg.memory_limit.is_zero()) {
    const uint64_t total = device_total(device);
    limit = cfg.memory_limit.on_device(total);
    if (total == 0 && cfg.memory_limit.is_share()) {
      log(LogLevel::Error, "FIKIT_MEMORY_LIMIT=%s: the driver does not say how large GPU %d is: no limit of its own there",
          cfg.memory_limit_text, device);
      limit = 0;
    } else if (total != 0 && limit > total) {
      char size[32];
      values::format_bytes(total, size, sizeof size);
      log(LogLevel::Error, "FIKIT_MEMORY_LIMIT=%s is more than GPU %d has (%s): no limit of its own there",
          cfg.memory_limit_text, device, size);
      limit = 0;
    } else if (limit == 0) {
      limit = 1;   // a share that rounds to nothing: refuse, do not ignore
    }
  }
  g_own_limit[device].store(limit, std::memory_order_relaxed);
  return limit;
}

CUresult claim(uint64_t bytes, int device, Claim& out) noexcept {
  out = Claim{};
  if (!accounting()) return CUDA_SUCCESS;
  if (device < 0) device = current_device();
  if (!valid(device)) return CUDA_SUCCESS;   // the driver will say what is wrong
  uint64_t deadline = 0;
  for (int attempt = 0;; ++attempt) {
    const uint32_t changes = g_cap_changes.load(std::memory_order_acquire);
    const uint64_t cap = effective_cap(device);
    if (g_ledger.claim(device, bytes, cap)) {
      // A claim under a cap that changed meanwhile is made again under the new one: the client
      // confirms a new cap with what the ledger holds, and a claim landing after that read, under
      // the old cap, would not be in it (jobs that started together passed the budget by a chunk).
      // Dekker's pattern with set_scheduler_cap(): one of the two sees the other.
      std::atomic_thread_fence(std::memory_order_seq_cst);
      if (g_cap_changes.load(std::memory_order_relaxed) == changes || attempt >= 100) break;
      g_ledger.unclaim(device, bytes);
      continue;
    }
    // Refused by the daemon's cap (not the process's own limit): a job that just joined waits for
    // the share the daemon gives it once the other jobs have confirmed theirs.
    const uint64_t own = own_limit(device), scheduler = g_scheduler_cap[device].load(std::memory_order_relaxed);
    const bool scheduler_binds = scheduler != 0 && (own == 0 || scheduler < own);
    const uint64_t now = monotonic_ns();
    if (deadline == 0) deadline = now + kCapWaitNs;
    if (!scheduler_binds || now >= deadline) {
      g_refusals[device].fetch_add(1, std::memory_order_relaxed);
      log_refusal(device, bytes);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    futex_wait(&g_cap_changes, changes, deadline - now);
  }
  out.device = device;
  out.bytes = bytes;
  out.context = current_context_key();
  return CUDA_SUCCESS;
}

CUresult settle(const Claim& claim, CUresult result, Kind kind, uint64_t key, uint64_t actual) noexcept {
  if (claim.device < 0) return CUDA_SUCCESS;
  if (result != CUDA_SUCCESS) {
    g_ledger.unclaim(claim.device, claim.bytes);
    return CUDA_SUCCESS;
  }
  if (actual > claim.bytes) {
    // (A pitch of 128 GiB for a narrow row was settled uncapped before: one call passed any limit.)
    if (!g_ledger.claim(claim.device, actual - claim.bytes, effective_cap(claim.device))) {
      g_ledger.unclaim(claim.device, claim.bytes);
      g_refusals[claim.device].fetch_add(1, std::memory_order_relaxed);
      log_refusal(claim.device, actual);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
  } else {
    actual = claim.bytes;
  }
  g_ledger.record(kind, key, claim.device, actual, kind == Kind::Handle ? 0 : claim.context);
  return CUDA_SUCCESS;
}

Ledger::Entry release(Kind kind, uint64_t key) noexcept {
  return accounting() ? g_ledger.take(kind, key) : Ledger::Entry{};
}

void restore(Kind kind, uint64_t key, const Ledger::Entry& entry) noexcept { g_ledger.restore(kind, key, entry); }

void forget_context(uint64_t context) noexcept {
  if (accounting()) g_ledger.forget_context(context);
}

void clamp_info(int device, size_t* free_bytes, size_t* total_bytes) noexcept {
  if (!accounting() || free_bytes == nullptr || total_bytes == nullptr || !valid(device)) return;
  const uint64_t cap = effective_cap(device);
  if (cap == 0) return;
  const uint64_t held = g_ledger.used(device);
  *total_bytes = std::min<uint64_t>(*total_bytes, cap);
  *free_bytes = std::min<uint64_t>(*free_bytes, cap > held ? cap - held : 0);
}

void clamp_total(int device, size_t* total_bytes) noexcept {
  if (!accounting() || total_bytes == nullptr || !valid(device)) return;
  const uint64_t cap = effective_cap(device);
  if (cap != 0) *total_bytes = std::min<uint64_t>(*total_bytes, cap);
}

bool set_scheduler_cap(int device, uint64_t cap) noexcept {
  if (!valid(device) || g_scheduler_cap[device].exchange(cap, std::memory_order_relaxed) == cap) return false;
  g_cap_changes.fetch_add(1, std::memory_order_seq_cst);
  // What the ledger holds is read after this (the confirming heartbeat): see claim().
  std::atomic_thread_fence(std::memory_order_seq_cst);
  futex_wake_all(&g_cap_changes);
  return true;
}

uint64_t scheduler_cap(int device) noexcept {
  return valid(device) ? g_scheduler_cap[device].load(std::memory_order_relaxed) : 0;
}

uint64_t used(int device) noexcept { return g_ledger.used(device); }

uint32_t refusals(int device) noexcept {
  return valid(device) ? g_refusals[device].load(std::memory_order_relaxed) : 0;
}

void reset_after_fork() noexcept {
  g_ledger.reset_after_fork();
  for (auto& r : g_refusals) r.store(0, std::memory_order_relaxed);
  for (auto& c : g_scheduler_cap) c.store(0, std::memory_order_relaxed);
  for (auto& j : g_joined) j.store(false, std::memory_order_relaxed);
  g_refusal_logged.store(false, std::memory_order_relaxed);
}

}  // namespace fikit::hook::memory
