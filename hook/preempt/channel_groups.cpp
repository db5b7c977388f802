#include "channel_groups.h"

#include <asm/ioctl.h>

#include <cerrno>

namespace fikit::hook::preempt {

void ChannelGroups::record(int fd, const void* params, uint32_t size) noexcept {
  uint32_t root, object, klass, status;
  if (size == sizeof(rm::Alloc21)) {
    const auto* a = static_cast<const rm::Alloc21*>(params);
    root = a->root, object = a->object, klass = a->klass, status = a->status;
  } else if (size == sizeof(rm::Alloc64)) {
    const auto* a = static_cast<const rm::Alloc64*>(params);
    root = a->root, object = a->object, klass = a->klass, status = a->status;
  } else {
    return;
  }
  if (status != 0 || klass != rm::kChannelGroupClass) return;
  // A slot of a group freed since is taken first (a program that makes and destroys contexts all
  // its life never runs out), else a new one.
  Group* slot = nullptr;
  const uint32_t n = __atomic_load_n(&count_, __ATOMIC_ACQUIRE);
  for (uint32_t i = 0; i < n && i < kMax && slot == nullptr; ++i) {
    uint32_t gone = kGone;
    if (__atomic_compare_exchange_n(&groups_[i].state, &gone, uint32_t(kWriting), false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_RELAXED))
      slot = &groups_[i];
  }
  if (slot == nullptr) {
    const uint32_t i = __atomic_fetch_add(&count_, 1, __ATOMIC_ACQ_REL);
    if (i >= kMax) return;   // more live groups than any program has: the rest keep their slice
    slot = &groups_[i];
  }
  Group& g = *slot;
  __atomic_store_n(&g.state, uint32_t(kWriting), __ATOMIC_RELAXED);
  g.fd = fd, g.client = root, g.object = object, g.original_us = 0;
  __atomic_store_n(&g.state, uint32_t(kLive), __ATOMIC_RELEASE);
}

void ChannelGroups::forget_freed(const rm::Free00& f) noexcept {
  if (f.status != 0) return;
  const uint32_t n = __atomic_load_n(&count_, __ATOMIC_ACQUIRE);
  for (uint32_t i = 0; i < n && i < kMax; ++i) {
    Group& g = groups_[i];
    if (__atomic_load_n(&g.state, __ATOMIC_ACQUIRE) != kLive || g.client != f.root) continue;
    // The group itself, or the client it belongs to (freeing a client frees all its objects).
    if (f.object == g.object || f.object == f.root) __atomic_store_n(&g.state, uint32_t(kGone), __ATOMIC_RELEASE);
  }
}

void ChannelGroups::observe(int fd, unsigned long request, void* arg, int rc) noexcept {
  if (rc != 0 || arg == nullptr || _IOC_TYPE(request) != rm::kIoctlMagic) return;
  unsigned escape = _IOC_NR(request);
  uint32_t size = _IOC_SIZE(request);
  const void* params = arg;
  if (escape == rm::kEscXfer) {   // the large form: the parameters elsewhere
    if (size != sizeof(rm::Xfer)) return;
    const auto* x = static_cast<const rm::Xfer*>(arg);
    escape = x->cmd, size = x->size, params = reinterpret_cast<const void*>(uintptr_t(x->ptr));
    if (params == nullptr) return;
  }
  if (escape == rm::kEscAlloc) record(fd, params, size);
  else if (escape == rm::kEscFree && size == sizeof(rm::Free00)) forget_freed(*static_cast<const rm::Free00*>(params));
}

uint32_t ChannelGroups::control(const Group& g, uint32_t cmd, uint64_t& value) noexcept {
  if (next_ == nullptr) return UINT32_MAX;
  uint64_t params[1] = {value};   // NVA06C_CTRL_TIMESLICE_PARAMS: NvU64 timesliceUs
  rm::Control54 c{g.client, g.object, cmd, 0, uint64_t(uintptr_t(params)), sizeof params, 0};
  const int saved = errno;
  const int rc = next_(g.fd, _IOWR(rm::kIoctlMagic, rm::kEscControl, rm::Control54), &c);
  errno = saved;
  if (rc != 0) return UINT32_MAX;
  value = params[0];
  return c.status;
}

size_t ChannelGroups::set_all(uint64_t us) noexcept {
  size_t applied = 0;
  const uint32_t n = __atomic_load_n(&count_, __ATOMIC_ACQUIRE);
  for (uint32_t i = 0; i < n && i < kMax; ++i) {
    Group& g = groups_[i];
    if (__atomic_load_n(&g.state, __ATOMIC_ACQUIRE) != kLive) continue;
    if (g.original_us == 0) {
      uint64_t original = 0;
      if (control(g, rm::kGetTimeslice, original) != 0 || original == 0) {
        __atomic_store_n(&g.state, uint32_t(kGone), __ATOMIC_RELEASE);   // RM does not know it (any more)
        continue;
      }
      g.original_us = original;
    }
    uint64_t v = us;
    if (control(g, rm::kSetTimeslice, v) == 0) ++applied;
  }
  return applied;
}

size_t ChannelGroups::restore_all() noexcept {
  size_t restored = 0;
  const uint32_t n = __atomic_load_n(&count_, __ATOMIC_ACQUIRE);
  for (uint32_t i = 0; i < n && i < kMax; ++i) {
    Group& g = groups_[i];
    if (__atomic_load_n(&g.state, __ATOMIC_ACQUIRE) != kLive || g.original_us == 0) continue;
    uint64_t v = g.original_us;
    if (control(g, rm::kSetTimeslice, v) == 0) ++restored;
  }
  return restored;
}

size_t ChannelGroups::live() const noexcept {
  size_t n = 0;
  const uint32_t count = __atomic_load_n(&count_, __ATOMIC_ACQUIRE);
  for (uint32_t i = 0; i < count && i < kMax; ++i) n += __atomic_load_n(&groups_[i].state, __ATOMIC_ACQUIRE) == kLive;
  return n;
}

void ChannelGroups::forget() noexcept {
  for (Group& g : groups_) __atomic_store_n(&g.state, uint32_t(kEmpty), __ATOMIC_RELAXED);
  __atomic_store_n(&count_, 0u, __ATOMIC_RELEASE);
}

}  // namespace fikit::hook::preempt
