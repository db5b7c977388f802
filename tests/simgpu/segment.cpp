#include "segment.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace fikit::simgpu {
namespace {

constexpr uint64_t kReapIntervalNs = 1'000'000;
constexpr uint64_t kSpinNs = 5'000;
constexpr int kLockSpins = 256;   // tries of the device lock before sleeping on it: 6 us on the 2-core VM's EPYC

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

void shm_path(const char* name, char* out, size_t size) {
  std::snprintf(out, size, "/dev/shm/%s", name);
}

DeviceState* map_fd(int fd) {
  void* p = mmap(nullptr, sizeof(DeviceState), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? nullptr : static_cast<DeviceState*>(p);
}

bool init_mutex(pthread_mutex_t* m) {
  pthread_mutexattr_t attr;
  if (pthread_mutexattr_init(&attr) != 0) return false;
  bool ok = pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED) == 0 &&
            pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST) == 0 &&
            pthread_mutex_init(m, &attr) == 0;
  pthread_mutexattr_destroy(&attr);
  return ok;
}

// Builds a complete segment under a private name; linking it into place is the atomic publish.
bool create_segment(const char* path, const SegmentConfig& config) {
  char tmp[300];
  std::snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, static_cast<int>(getpid()));
  int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  bool ok = ftruncate(fd, sizeof(DeviceState)) == 0;
  DeviceState* dev = ok ? map_fd(fd) : nullptr;
  close(fd);
  if (dev) {
    ok = init_mutex(&dev->mutex);
    init_state(*dev, config.switch_ns, now_ns(), config.devices, config.sharing, config.memory_bytes);
    munmap(dev, sizeof(DeviceState));
  } else {
    ok = false;
  }
  // EEXIST: another process published first, which is just as good.
  if (ok && link(tmp, path) != 0 && errno != EEXIST) ok = false;
  unlink(tmp);
  return ok;
}

bool layout_matches(const DeviceState* dev) {
  return dev->magic == kMagic && dev->version == kLayoutVersion && dev->slot_size == sizeof(CtxSlot);
}

bool process_is_dead(int32_t pid) { return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH; }

void reap_dead(DeviceState& dev, uint64_t now) {
  if (now - dev.last_reap_ns < kReapIntervalNs) return;
  dev.last_reap_ns = now;
  for (int i = 0; i < kMaxContexts; ++i) {
    if (dev.ctx[i].state == SlotState::Live && process_is_dead(dev.ctx[i].pid)) {
      release_slot(dev, i);
      ++dev.dropped_contexts;
    }
  }
}

// A holder that died mid-update can only have left a counter out of range (ops are published by
// bumping tail last): clamp what the timeline relies on.
void repair(DeviceState& dev) {
  for (CtxSlot& s : dev.ctx) {
    if (s.tail < s.head || s.tail - s.head > kRingOps) s.tail = s.head;
  }
  for (DeviceSim& d : dev.dev)
    if (d.resident >= kMaxContexts || d.resident < -1) d.resident = -1;
  if (dev.device_count == 0 || dev.device_count > kMaxDevices) dev.device_count = 1;
  // The running counts are derived data: recompute them from the contexts.
  for (DeviceSim& d : dev.dev) {
    d.running_count = 0;
    d.free_threads = kDeviceThreads;
  }
  for (CtxSlot& s : dev.ctx) {
    if (!s.running) continue;
    if (s.device >= dev.device_count || s.running_threads > kDeviceThreads) {
      s.running = 0;
      continue;
    }
    DeviceSim& d = dev.dev[s.device];
    if (s.running_threads > d.free_threads) s.running_threads = uint32_t(d.free_threads);
    ++d.running_count;
    d.free_threads -= s.running_threads;
  }
  dev.last_reap_ns = 0;  // the dead holder's context goes at once
}

}  // namespace

uint64_t now_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void segment_name(char* out, size_t size) noexcept {
  const char* env = std::getenv("FIKIT_SIMGPU_NAME");
  if (env && *env && !std::strchr(env, '/'))
    std::snprintf(out, size, "%s", env);
  else
    std::snprintf(out, size, "fikit-simgpu-%u", static_cast<unsigned>(getuid()));
}

OpenResult open_segment(const char* name, const SegmentConfig& config, DeviceState** out) noexcept {
  char path[256];
  shm_path(name, path, sizeof path);
  for (int attempt = 0; attempt < 3; ++attempt) {
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
      if (errno != ENOENT || !create_segment(path, config)) return OpenResult::SystemError;
      continue;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
      close(fd);
      return OpenResult::SystemError;
    }
    DeviceState* dev = static_cast<size_t>(st.st_size) == sizeof(DeviceState) ? map_fd(fd) : nullptr;
    close(fd);
    if (dev == nullptr || !layout_matches(dev)) {
      // A segment another build of the simulator made (its layout differs): left behind by a run of
      // that build, since its processes see only their own. Replaced, unless another process of
      // this build replaced it meanwhile (the path then names a new file).
      if (dev != nullptr) munmap(dev, sizeof(DeviceState));
      struct stat now;
      if (attempt < 2 && stat(path, &now) == 0 && now.st_ino == st.st_ino && now.st_dev == st.st_dev &&
          (unlink(path) == 0 || errno == ENOENT)) {
        std::fprintf(stderr, "fikit-simgpu: replaced %s, made by another build of the simulator\n", path);
        continue;
      }
      return OpenResult::LayoutMismatch;
    }
    *out = dev;
    return OpenResult::Ok;
  }
  return OpenResult::SystemError;
}

DeviceState* attach_segment(const char* name) noexcept {
  DeviceState* dev = nullptr;
  char path[256];
  shm_path(name, path, sizeof path);
  if (access(path, F_OK) != 0) return nullptr;
  return open_segment(name, SegmentConfig{}, &dev) == OpenResult::Ok ? dev : nullptr;
}

bool remove_segment(const char* name) noexcept {
  char path[256];
  shm_path(name, path, sizeof path);
  return unlink(path) == 0;
}

DeviceLock::DeviceLock(DeviceState& dev) noexcept : dev_(dev) {
  // Every driver call of every process takes this one lock, for a fraction of a microsecond. A
  // contended pthread lock sleeps in the kernel and is woken on another CPU microseconds later: a
  // job making millions of calls (a launch on an SM partition is five) then charged a service about
  // 1 us a call it made, a cost no GPU has (a real driver call of one process never waits for
  // another's). So spin briefly first: the holder is almost always done within a few microseconds.
  int rc = pthread_mutex_trylock(&dev_.mutex);
  for (int i = 0; rc == EBUSY && i < kLockSpins; ++i) {
    cpu_relax();
    rc = pthread_mutex_trylock(&dev_.mutex);
  }
  if (rc == EBUSY) rc = pthread_mutex_lock(&dev_.mutex);
  if (rc == EOWNERDEAD) {
    pthread_mutex_consistent(&dev_.mutex);
    repair(dev_);
    rc = 0;
  }
  if (rc != 0) return;
  ok_ = true;
  now_ = now_ns();  // read under the lock: submissions reach the timeline in time order
  if (now_ < dev_.sim_ns) now_ = dev_.sim_ns;
  reap_dead(dev_, now_);
  advance(dev_, now_);
}

DeviceLock::~DeviceLock() {
  if (ok_) pthread_mutex_unlock(&dev_.mutex);
}

void wait_until(uint64_t deadline_ns, uint64_t cap_ns) noexcept {
  const uint64_t now = now_ns();
  if (deadline_ns <= now) return;
  const uint64_t target = deadline_ns - now > cap_ns ? now + cap_ns : deadline_ns;
  if (target - now > kSpinNs) {
    const uint64_t sleep_to = target - kSpinNs;
    timespec ts{static_cast<time_t>(sleep_to / 1'000'000'000ull), static_cast<long>(sleep_to % 1'000'000'000ull)};
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr);
  }
  while (now_ns() < target) sched_yield();
}

}  // namespace fikit::simgpu
