#pragma once
// The process's device memory, as the allocation wrappers see it (docs/memory.md): every allocation
// is claimed against the process's cap on its GPU before the driver is asked, so that an
// allocation over the cap fails with CUDA_ERROR_OUT_OF_MEMORY as the driver's own would, and frees
// give their bytes back. The cap on a GPU is the lower of the process's own limit
// (FIKIT_MEMORY_LIMIT) and what fikit-scheduler leaves the task beside the reserve of its
// priority-0 tasks (the directive's memory_cap). cuMemGetInfo and cuDeviceTotalMem answer within it.
#include <cuda.h>

#include <cstdint>

#include "config.h"
#include "ledger.h"

namespace fikit::hook::memory {

// Whether allocations are accounted: a limit is set or a mode is on (fixed when the hook loads, so
// that no allocation is missed). When not, the wrappers call the driver straight away.
bool accounting() noexcept;
void start(const Config& cfg) noexcept;

// Whether the process should join the scheduler for `device` before its allocation there (true
// once per device and process, in a mode that schedules, below priority 0: only those get a cap).
bool first_on_device(int device) noexcept;

struct Claim {
  int device = -1;      // -1: not accounted (no context, or accounting is off)
  uint64_t bytes = 0;
  uint64_t context = 0; // the current context's key (its teardown frees the allocation)
};
// Before the driver call: claims `bytes` on `device` (-1: the current context's). CUDA_SUCCESS, or
// CUDA_ERROR_OUT_OF_MEMORY when the cap refuses it (counted; logged once per process).
CUresult claim(uint64_t bytes, int device, Claim& out) noexcept;
// After it: a failed call gives the claim back; a successful one records `key` with `actual`
// bytes. More than the claim (the driver chose a wider pitch) must fit the cap as well: when it
// does not, CUDA_ERROR_OUT_OF_MEMORY says the caller must free the allocation (nothing recorded).
CUresult settle(const Claim& claim, CUresult result, Kind kind, uint64_t key, uint64_t actual) noexcept;
// A free: the entry leaves the ledger before the driver call (another thread may be given the
// address at once); put it back with restore() when the driver refused the free.
Ledger::Entry release(Kind kind, uint64_t key) noexcept;
void restore(Kind kind, uint64_t key, const Ledger::Entry& entry) noexcept;
// A context destroyed or reset (driver.h context_key): what was allocated in it is gone.
void forget_context(uint64_t context) noexcept;

// cuMemGetInfo (on `device`, the current context's) and cuDeviceTotalMem answered within the cap.
void clamp_info(int device, size_t* free_bytes, size_t* total_bytes) noexcept;
void clamp_total(int device, size_t* total_bytes) noexcept;

// The share client, per GPU: the cap of the daemon's last directive (0: none), and what it reports.
// Returns whether the cap changed (the client then confirms it to the daemon at once).
bool set_scheduler_cap(int device, uint64_t cap) noexcept;
uint64_t scheduler_cap(int device) noexcept;
uint64_t used(int device) noexcept;
uint32_t refusals(int device) noexcept;
uint64_t own_limit(int device) noexcept;   // FIKIT_MEMORY_LIMIT on that device (0: none)

int current_device() noexcept;              // the current context's device ordinal, -1 if none
// Memory pools' GPUs, as the program made or asked for them (a pool not seen: -1).
void note_pool(CUmemoryPool pool, int device) noexcept;
void forget_pool(CUmemoryPool pool) noexcept;
int pool_device(CUmemoryPool pool) noexcept;
// The GPU of a stream's context (-1: the null stream's, i.e. the current context's, or not known).
int stream_device(CUstream stream) noexcept;
void reset_after_fork() noexcept;

}  // namespace fikit::hook::memory
