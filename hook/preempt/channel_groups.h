#pragma once
// A job's own channel groups (TSGs) as NVIDIA's resource manager (RM) knows them, and their time
// slices. A CUDA context's work runs in channel groups the driver allocates through ioctls on
// /dev/nvidiactl; the GPU switches between the groups of different contexts when a slice ends.
// Watching the driver's allocations gives this process's own groups (its own RM client: nobody
// else's, and no privilege needed), whose slice RM lets their owner read and set
// (NVA06C_CTRL_CMD_GET/SET_TIMESLICE). The ABI is that of NVIDIA's open-gpu-kernel-modules
// (nvos.h, nv_escape.h, ctrla06c.h); bench/gpu/probes/timeslice_probe.c showed it on driver 580.
//
// observe() runs inside the driver's ioctl calls, on any thread: no locks, no allocation, errno kept.
// set_all() and restore_all() issue RM calls (140-320 us each on an H100): never on a launch path.
#include <cstddef>
#include <cstdint>

namespace fikit::hook::preempt {

using IoctlFn = int (*)(int fd, unsigned long request, ...);

// The RM's escapes and objects this file uses.
namespace rm {
inline constexpr unsigned kIoctlMagic = 'F';
inline constexpr unsigned kEscFree = 0x29, kEscControl = 0x2A, kEscAlloc = 0x2B, kEscXfer = 200 + 11;
inline constexpr uint32_t kChannelGroupClass = 0xA06C;   // KEPLER_CHANNEL_GROUP_A: a TSG
inline constexpr uint32_t kSetTimeslice = 0xa06c0103, kGetTimeslice = 0xa06c0104;
struct Alloc21 { uint32_t root, parent, object, klass; uint64_t params; uint32_t params_size, status; };                  // NVOS21
struct Alloc64 { uint32_t root, parent, object, klass; uint64_t params, rights; uint32_t params_size, flags, status, pad; };   // NVOS64
struct Free00 { uint32_t root, parent, object, status; };                                                                  // NVOS00
struct Control54 { uint32_t client, object, cmd, flags; uint64_t params; uint32_t params_size, status; };                // NVOS54
struct Xfer { uint32_t cmd, size; uint64_t ptr; };                                                                         // nv_ioctl_xfer_t
static_assert(sizeof(Alloc21) == 32 && sizeof(Alloc64) == 48 && sizeof(Free00) == 16 && sizeof(Control54) == 32 &&
              sizeof(Xfer) == 16);
}  // namespace rm

class ChannelGroups {
 public:
  static constexpr size_t kMax = 64;
  // `next`: the ioctl the driver's calls go on to (the C library's), which the RM calls use too.
  void set_next(IoctlFn next) noexcept { next_ = next; }
  IoctlFn next() const noexcept { return next_; }
  // One of the driver's ioctls returned `rc` for `request` with `arg`: a channel group allocated is
  // recorded, one freed (or its client freed) is forgotten.
  void observe(int fd, unsigned long request, void* arg, int rc) noexcept;
  // Every recorded group at `us` microseconds (each group's original read first). Returns how many
  // took it; a group RM no longer knows is forgotten.
  size_t set_all(uint64_t us) noexcept;
  // Every group back at the slice it had before set_all. Returns how many.
  size_t restore_all() noexcept;
  size_t live() const noexcept;
  // After fork, in the child: the groups and the descriptor are the parent's.
  void forget() noexcept;

 private:
  enum : uint32_t { kEmpty = 0, kWriting = 1, kLive = 2, kGone = 3 };
  struct Group {
    uint32_t state = kEmpty;   // atomically accessed
    int fd = -1;
    uint32_t client = 0, object = 0;
    uint64_t original_us = 0;  // read before the first set (0: not read yet)
  };
  void record(int fd, const void* params, uint32_t size) noexcept;
  void forget_freed(const rm::Free00& f) noexcept;
  uint32_t control(const Group& g, uint32_t cmd, uint64_t& value) noexcept;   // the RM status

  IoctlFn next_ = nullptr;
  Group groups_[kMax];
  uint32_t count_ = 0;         // slots handed out (atomically accessed)
};

}  // namespace fikit::hook::preempt
