#pragma once
// Kernel identity: a 64-bit hash of (device function name, symbolized call site, grid, block,
// dynamic shared memory), equal across processes and runs of the same program. See docs/architecture.md.
//
// Cost model: the first sight of a call site, a CUfunction or an ID takes a mutex and allocates
// (symbolization, demangling, the description); a later launch costs one lookup in the launching
// thread's memo (16 KiB of thread-local storage), else lock-free table lookups, and allocates
// nothing. The stack walk (1-25 us) is skipped for launch shapes that have only ever come from one
// call site, except on each thread's first launches and one launch in verify_interval()
// (kernelid.cpp says why).
#include <cuda.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace fikit::kernelid {

// Readable form kept beside every ID this process has produced.
struct Description {
  uint64_t id = 0;
  std::string name;        // demangled device function name, or "[memcpy HtoD]" etc. for copies
  std::string call_site;   // "module!symbol+0xoff <- module!symbol+0xoff ..." innermost first
  uint32_t grid[3] = {0, 0, 0};
  uint32_t block[3] = {0, 0, 0};
  uint32_t shared_mem = 0;
  // Occupancy at first sight (Settings::occupancy): blocks of this launch one SM holds at once, and
  // the SMs of the launching context. 0: not known.
  uint32_t blocks_per_sm = 0, sm_count = 0;
};

// The description of an ID produced in this process, or nullptr. Thread-safe; pointers stay valid.
const Description* describe(uint64_t id) noexcept;
// Gives an ID made outside this module (a graph's segment, hook/graph/) the description `name`, with
// no call site and no shape, so that profiles and tools name it. The first description of an ID stays.
void describe_op(uint64_t id, const char* name) noexcept;

// Hash of a device function's readable name as Description::name holds it (0: "?", the driver
// gave none). With readable_name(), a mangled name from elsewhere (CUPTI's records) is compared
// with launches by name.
uint64_t readable_name_hash(std::string_view readable) noexcept;
// The readable (demangled) form of a mangled device function name, as Description::name holds it
// ("?" for none). Allocates: not for the launch path.
std::string readable_name(const char* mangled);

using FuncGetNameFn = CUresult (*)(const char** name, CUfunction func);
// Asked once per new kernel ID, on the launching thread: blocks of `func` with `threads` threads and
// `shared_mem` bytes of dynamic shared memory per SM, and the current context's SMs. False: unknown.
using OccupancyFn = bool (*)(CUfunction func, uint32_t threads, uint32_t shared_mem, uint32_t* blocks_per_sm,
                             uint32_t* sm_count);

struct Settings {
  unsigned depth = 4;                   // caller frames kept (after the skipped modules)
  FuncGetNameFn func_get_name = nullptr;// the real cuFuncGetName; nullptr: names unknown ("?")
  OccupancyFn occupancy = nullptr;      // nullptr: occupancy unknown
  int trace_fd = -1;                    // >= 0: one line per new ID, at first sight
};

// Set before the first ID is computed (the hook does it at mode start-up).
void configure(const Settings& settings) noexcept;

// The ID of a kernel launched by the calling thread. `func` is resolved to its name once.
uint64_t kernel_id(CUfunction func, const uint32_t grid[3], const uint32_t block[3],
                   uint32_t shared_mem) noexcept;
// A kernel's shape: its device function's readable name and the launch dimensions, without the
// call site (what stands in for a kernel whose ID the profile lacks: share/predictions.h). The
// first call for a function demangles its name (allocates); later ones are a lookup. 0: unknown.
uint64_t shape_id(CUfunction func, const uint32_t grid[3], const uint32_t block[3], uint32_t shared_mem) noexcept;
// The same from a profile's record (Description::name).
uint64_t shape_id_of(std::string_view readable_name, const uint32_t grid[3], const uint32_t block[3],
                     uint32_t shared_mem) noexcept;
// The profile's ID of a kernel node timed inside a launch of the graph op `graph_op` (a graph or a
// graph segment's op ID), from its shape (shape_id_of): one row per kernel shape of that op.
uint64_t graph_node_id(uint64_t graph_op, uint64_t shape) noexcept;
// The ID of a copy / set / graph launch: `label` ("[memcpy HtoD]") + call site + byte count.
uint64_t op_id(const char* label, uint64_t bytes) noexcept;

// The stable hash of the calling thread's call site (no absolute address inside). Frames in
// libfikit_hook.so, libcuda*, libcudart* and libcupti* are skipped.
uint64_t call_site() noexcept;

// Stack walks so far (FIKIT_STATS): all of them, and the unpredictable ones: outside a thread's
// first launches and its periodic checks (verify_interval()), a shape not seen before, or seen from
// several call sites on the same stack-pointer path.
struct WalkCounts {
  uint64_t walks = 0, unpredictable = 0;
  uint64_t symbolized = 0;   // walks whose stack was not cached yet (the slow path: dladdr, demangling)
  uint64_t walk_ns = 0;      // their time in all, without symbolizing
};
WalkCounts walk_counts() noexcept;

// How often a thread checks a predicted call site by walking anyway: one launch in this many, the
// smallest power of two in [kMinVerifyInterval, kMaxVerifyInterval] that keeps the walks' mean cost
// (`mean_walk_ns` each) within kWalkBudgetNs per launch.
inline constexpr uint32_t kMinVerifyInterval = 32, kMaxVerifyInterval = 1024;
inline constexpr uint64_t kWalkBudgetNs = 50;
uint32_t verify_interval(uint64_t mean_walk_ns) noexcept;

// A forked child may have inherited a held mutex: start the slow path's lock afresh.
void reset_after_fork() noexcept;

}  // namespace fikit::kernelid
