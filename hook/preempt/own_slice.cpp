#include "own_slice.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdarg>

#include "channel_groups.h"
#include "config.h"
#include "got_patch.h"
#include "log.h"

namespace fikit::hook::preempt {
namespace {

enum : int { kNotTried = 0, kWatching = 1, kSimulated = 2, kUnwatched = 3 };
std::atomic<int> g_watch{kNotTried};
ChannelGroups g_groups;
using SimSetFn = int (*)(unsigned long long us);
SimSetFn g_sim_set = nullptr;
std::atomic<bool> g_said_refused{false};

// The driver's ioctls come here (got_patch.h): on to the C library's, then observed.
int observed_ioctl(int fd, unsigned long request, ...) {
  va_list ap;
  va_start(ap, request);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  const int rc = g_groups.next()(fd, request, arg);
  g_groups.observe(fd, request, arg, rc);
  return rc;
}

bool scheduled(const Config& cfg) { return cfg.mode != ModeKind::Off; }

}  // namespace

void watch_driver() noexcept {
  if (g_watch.load(std::memory_order_acquire) != kNotTried || !scheduled(config())) return;
  void* driver = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY);
  if (driver == nullptr) return;   // not loaded yet: a later call
  int expected = kNotTried;
  if (!g_watch.compare_exchange_strong(expected, kUnwatched, std::memory_order_acq_rel)) return;
  if (void* sim = dlsym(driver, "fikit_sim_set_timeslice"); sim != nullptr) {
    g_sim_set = reinterpret_cast<SimSetFn>(sim);
    g_watch.store(kSimulated, std::memory_order_release);
    return;
  }
  auto next = reinterpret_cast<IoctlFn>(dlsym(RTLD_DEFAULT, "ioctl"));
  if (next == nullptr) return;
  g_groups.set_next(next);
  const size_t patched = patch_imports("libcuda.so", "ioctl", reinterpret_cast<void*>(observed_ioctl));
  if (patched == 0) {
    log(LogLevel::Debug, "preempt: the driver's ioctl imports were not found: this job's time slice stays its own");
    return;
  }
  g_watch.store(kWatching, std::memory_order_release);
}

uint16_t set_own_slice(uint16_t us) noexcept {
  constexpr uint16_t kRefused = protocol::kSliceRefused;
  watch_driver();
  const int watch = g_watch.load(std::memory_order_acquire);
  bool ok = false;
  const char* why = "";
  if (watch == kSimulated) {
    ok = g_sim_set(us) == 0;
    why = "the simulated GPU refused it";
  } else if (watch == kWatching) {
    if (us == 0) {
      g_groups.restore_all();
      return 0;
    }
    ok = g_groups.set_all(us) != 0;
    why = g_groups.live() == 0 ? "no channel group of its contexts was seen (made before the hook watched the driver)"
                               : "the driver refused every channel group";
  } else {
    if (us == 0) return 0;
    why = "the driver's channel groups are not watched";
  }
  if (ok) return us;
  if (us == 0) return 0;
  if (!g_said_refused.exchange(true))
    log(LogLevel::Warn, "preempt: this program's time slice could not be set to %u us (%s)%s", unsigned(us), why,
        config().priority > 0 ? ": it waits while the service above is active instead" : "");
  return kRefused;
}

void reset_after_fork() noexcept { g_groups.forget(); }

}  // namespace fikit::hook::preempt
