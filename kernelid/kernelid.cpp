// Kernel IDs: function name hash (cached per CUfunction) + call site (callsite.cpp) + launch shape.
#include "kernelid.h"

#include <cxxabi.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <unordered_map>
#include <utility>

#include "callsite.h"
#include "fixed_map.h"
#include "hash.h"

namespace fikit::kernelid {
namespace {

std::atomic<unsigned> g_depth{4};
std::atomic<FuncGetNameFn> g_func_get_name{nullptr};
std::atomic<OccupancyFn> g_occupancy{nullptr};
std::atomic<int> g_trace_fd{-1};

FixedMap<8192> g_name_by_func;   // CUfunction -> hash of its (mangled) name
FixedMap<8192> g_readable_by_func;   // CUfunction -> hash of its readable (demangled) name: shape_id()
FixedMap<65536> g_seen_ids;      // IDs already described (value unused)

// Walking the launching thread's stack (~1 us, docs/performance-hook.md) dominates an ID's cost, so the
// walk is skipped where its answer can be predicted:
// - a launch shape (function, grid, block, shared memory) seen from one call site only reuses it;
// - a shape seen from several sites is looked up by (shape, stack pointer at the hook): one call
//   path reaches the hook at the same stack depth every time, so that pair nearly always names one
//   site; a pair caught with two sites is walked on every launch from then on.
// Each thread walks its first kExactLaunches launches, then one in verify_interval() to catch a
// site that a shortcut would hide; until that check, a new site can be counted under the old one.
// The interval follows what a walk costs in this process: ~1-2 us in a small program, ~23 us in a
// PyTorch training process on an H100 (libgcc's unwinder across hundreds of loaded libraries,
// docs/performance-hook.md), where one in 32 cost the job's launching thread ~0.9 us per launch.
constexpr uint64_t kManySites = 1;            // value in the maps below: walk every time
constexpr uint32_t kExactLaunches = 512;
FixedMap<65536> g_site_by_shape;             // shape hash -> its only call site, or kManySites
FixedMap<65536> g_site_by_path;              // hash(shape, stack pointer) -> call site, or kManySites
std::atomic<uint64_t> g_walks{0}, g_unpredictable{0}, g_walk_ns{0};   // only touched on the walk path
// Read by every launch, written rarely: on a cache line of their own (the struct's size is rounded
// up to its alignment), away from the counters that walks write.
struct alignas(64) LaunchShared {
  std::atomic<uint32_t> verify_mask{kMinVerifyInterval - 1};   // verify_interval() - 1
  std::atomic<uint32_t> epoch{0};   // +1 whenever an answer of the tables above changes, and by configure()
};
LaunchShared g_shared;

// Each thread's launch count and a memo of the IDs it launched. In a framework's process the
// tables above are out of the caches by the next launch (docs/performance-hook.md, "A kernel ID
// with cold caches"): the memo answers a repeated launch from one cache line of one small table,
// keyed by (function handle or label, grid, block, shared memory or bytes, stack pointer, epoch).
// An entry is written only where the tables now hold the answer (not where a full table left a
// shape or path to be walked every time); the epoch in the key retires every entry once any answer
// changes (a shape or a path gains a second call site).
struct MemoEntry {
  uint64_t key = 0, id = 0;
};
struct alignas(32) MemoSet {   // two ways, the more recently used first; never straddles a cache line
  MemoEntry way[2];
};
constexpr size_t kMemoSets = 512;   // 16 KiB a thread: a training step launches a few hundred shapes
struct ThreadIds {
  uint32_t launches = 0;
  MemoSet memo[kMemoSets];
};
// The default TLS model, not initial-exec as the hook's small thread-locals: 16 KiB would not fit the
// static TLS a library loaded with dlopen may take.
constinit thread_local ThreadIds t_ids;
// Descriptions, owned here for the life of the process (describe() hands out pointers).
std::unordered_map<uint64_t, std::unique_ptr<Description>>* g_descriptions = nullptr;

const char* function_name(CUfunction func) noexcept {
  const char* name = nullptr;
  const FuncGetNameFn get_name = g_func_get_name.load(std::memory_order_relaxed);
  if (get_name == nullptr || func == nullptr || get_name(&name, func) != CUDA_SUCCESS || name == nullptr) {
    return "?";
  }
  return name;
}

uint64_t function_name_hash(CUfunction func) noexcept {
  const auto key = nonzero(reinterpret_cast<uint64_t>(func));
  if (const uint64_t cached = g_name_by_func.find(key)) return cached;
  const uint64_t h = nonzero(fnv1a(function_name(func)));
  g_name_by_func.insert(key, h);
  return h;
}

void trace(const Description& d) noexcept {
  const int fd = g_trace_fd.load(std::memory_order_relaxed);
  if (fd < 0) return;
  char line[2048];
  const int n = std::snprintf(line, sizeof line, "%016" PRIx64 "\t%s\t%u,%u,%u\t%u,%u,%u\t%u\t%s\n", d.id,
                              d.name.c_str(), d.grid[0], d.grid[1], d.grid[2], d.block[0], d.block[1],
                              d.block[2], d.shared_mem, d.call_site.c_str());
  if (n > 0) (void)!write(fd, line, static_cast<size_t>(n) < sizeof line ? n : sizeof line - 1);
}

// First sight of an ID in this process: keep its readable form (slow path, once per ID).
void remember(uint64_t id, uint64_t site, const char* name, bool demangle, const uint32_t grid[3],
              const uint32_t block[3], uint32_t shared_mem, CUfunction func = nullptr) noexcept {
  if (g_seen_ids.insert(id, 1) != FixedMap<65536>::Insert::Added) return;
  std::lock_guard lock(detail::slow_path_mutex());
  try {
    auto d = std::make_unique<Description>();
    d->id = id;
    d->name = demangle ? detail::demangled(name) : name;
    d->call_site = detail::readable_call_site(site);
    for (int i = 0; i < 3; ++i) {
      d->grid[i] = grid[i];
      d->block[i] = block[i];
    }
    d->shared_mem = shared_mem;
    if (const OccupancyFn occupancy = g_occupancy.load(std::memory_order_relaxed); occupancy && func) {
      if (!occupancy(func, block[0] * block[1] * block[2], shared_mem, &d->blocks_per_sm, &d->sm_count))
        d->blocks_per_sm = d->sm_count = 0;
    }
    trace(*d);
    if (g_descriptions == nullptr) g_descriptions = new std::unordered_map<uint64_t, std::unique_ptr<Description>>;
    g_descriptions->emplace(id, std::move(d));
  } catch (...) {
    // Out of memory: the ID stays valid, it only has no description.
  }
}

// The call site's hash; *walk_ns (if given) gets the time of the walk alone, without the
// symbolization a stack seen for the first time costs once.
uint64_t site_hash(uintptr_t caller_pc, uint64_t* walk_ns = nullptr) noexcept {
  detail::RawStack stack;
  const auto start = std::chrono::steady_clock::now();
  detail::capture(stack, caller_pc, g_depth.load(std::memory_order_relaxed));
  if (walk_ns != nullptr)
    *walk_ns = uint64_t(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
  const uint64_t h = detail::stable_hash(stack);
  return h > kManySites ? h : h + 2;   // never collides with the map's "empty" or kManySites values
}

// After a walk that took `walk_ns`: the mean so far sets how often threads verify.
void account_walk(uint64_t walk_ns) noexcept {
  const uint64_t walks = g_walks.load(std::memory_order_relaxed);
  const uint64_t total_ns = g_walk_ns.fetch_add(walk_ns, std::memory_order_relaxed) + walk_ns;
  const uint32_t mask = verify_interval(total_ns / (walks ? walks : 1)) - 1;
  // Every launch reads the mask: written only when it changes.
  if (g_shared.verify_mask.load(std::memory_order_relaxed) != mask)
    g_shared.verify_mask.store(mask, std::memory_order_relaxed);
}

// Remember that `key` was seen with `site`: the first answer, or kManySites once there are two
// (an answer changed: the memos' entries made before are retired). Returns whether the map now
// answers `site` for `key` (not if it is full, or another thread's site got there first).
template <size_t N>
bool learn(FixedMap<N>& map, uint64_t key, uint64_t known, uint64_t site) noexcept {
  if (known == 0) {
    const auto added = map.insert(key, site);
    return added == FixedMap<N>::Insert::Added || (added == FixedMap<N>::Insert::Present && map.find(key) == site);
  }
  if (known == site) return true;
  if (known != kManySites) {
    map.assign(key, kManySites);
    g_shared.epoch.fetch_add(1, std::memory_order_release);
  }
  return false;
}

// Whether this launch checks its call site by walking: each thread's first kExactLaunches, then
// one in verify_interval().
bool verify_due(ThreadIds& t) noexcept {
  const uint32_t n = ++t.launches;
  return n <= kExactLaunches || (n & g_shared.verify_mask.load(std::memory_order_relaxed)) == 0;
}

struct Site {
  uint64_t hash;
  bool predictable;   // the tables now give this answer without a walk: a memo may keep it
};

// The call site of a launch of `shape` whose hook frames sit at stack address `sp`, walking the
// stack only when the rules above say so.
Site site_of_shape(uint64_t shape, uintptr_t sp, uintptr_t caller_pc, bool verify) noexcept {
  const uint64_t by_shape = g_site_by_shape.find(shape);
  if (!verify && by_shape > kManySites) return {by_shape, true};
  const uint64_t path = nonzero(combine(shape, sp));
  const uint64_t by_path = by_shape == kManySites ? g_site_by_path.find(path) : 0;
  if (!verify && by_path > kManySites) return {by_path, true};
  g_walks.fetch_add(1, std::memory_order_relaxed);
  if (!verify) g_unpredictable.fetch_add(1, std::memory_order_relaxed);
  uint64_t walk_ns = 0;
  const uint64_t site = site_hash(caller_pc, &walk_ns);
  account_walk(walk_ns);
  const bool by_shape_now = learn(g_site_by_shape, shape, by_shape, site);
  if (by_shape != kManySites && (by_shape == 0 || by_shape == site)) return {site, by_shape_now};
  // The shape has several sites (or just gained its second one, which changed the epoch: an entry
  // made now would be dead, so none is).
  const bool by_path_now = learn(g_site_by_path, path, by_path, site);
  return {site, by_shape == kManySites && by_path_now};
}

uint64_t shape_hash(uint64_t name, const uint32_t grid[3], const uint32_t block[3], uint32_t shared_mem) noexcept {
  uint64_t h = combine(kFnvOffsetBasis, name);
  for (int i = 0; i < 3; ++i) h = combine(h, grid[i]);
  for (int i = 0; i < 3; ++i) h = combine(h, block[i]);
  return nonzero(combine(h, shared_mem));
}

}  // namespace

void configure(const Settings& settings) noexcept {
  g_depth.store(settings.depth, std::memory_order_relaxed);
  g_func_get_name.store(settings.func_get_name, std::memory_order_relaxed);
  g_occupancy.store(settings.occupancy, std::memory_order_relaxed);
  g_trace_fd.store(settings.trace_fd, std::memory_order_relaxed);
  detail::load_gcc_unwinder();   // none (no libgcc_s.so.1): call sites stay empty, IDs still work
  // Before the first ID (see kernelid.h), so nothing in the tables predates the depth; a test
  // that configures again also starts every thread's memo afresh.
  g_shared.epoch.fetch_add(1, std::memory_order_release);
}

namespace {

// The ID of a launch whose shape, with the function handle or label in place of its name, hashes
// to `raw_shape`: from the thread's memo, else from the shape (`shape_of()`, which may look a name
// up) and the call site. `first_sight(id, site)` describes an ID this process has not produced.
template <class ShapeOf, class FirstSight>
__attribute__((always_inline)) inline uint64_t identify(uint64_t raw_shape, uintptr_t sp, uintptr_t caller_pc,
                                                        ShapeOf shape_of, FirstSight first_sight) noexcept {
  ThreadIds& t = t_ids;
  const bool verify = verify_due(t);
  // The epoch is read before the tables: an entry made from answers that have changed since
  // carries an older epoch than any later launch's key.
  const uint64_t key = nonzero(combine(combine(raw_shape, sp), g_shared.epoch.load(std::memory_order_acquire)));
  MemoSet& set = t.memo[key & (kMemoSets - 1)];
  if (!verify) {
    if (set.way[0].key == key) return set.way[0].id;
    if (set.way[1].key == key) {
      std::swap(set.way[0], set.way[1]);   // the more recently used first: a new key evicts the other
      return set.way[0].id;
    }
  }
  const uint64_t shape = shape_of();
  const Site site = site_of_shape(shape, sp, caller_pc, verify);
  const uint64_t id = nonzero(combine(shape, site.hash));
  if (g_seen_ids.find(id) == 0) [[unlikely]] first_sight(id, site.hash);
  if (site.predictable) {
    if (set.way[0].key != key) set.way[1] = set.way[0];
    set.way[0] = {key, id};
  }
  return id;
}

}  // namespace

// noinline + __builtin_return_address: the stack walk starts at our caller, whatever got inlined.
__attribute__((noinline)) uint64_t kernel_id(CUfunction func, const uint32_t grid[3], const uint32_t block[3],
                                             uint32_t shared_mem) noexcept {
  return identify(
      shape_hash(nonzero(reinterpret_cast<uint64_t>(func)), grid, block, shared_mem),
      reinterpret_cast<uintptr_t>(__builtin_frame_address(0)), reinterpret_cast<uintptr_t>(__builtin_return_address(0)),
      [&] { return shape_hash(function_name_hash(func), grid, block, shared_mem); },
      [&](uint64_t id, uint64_t site) { remember(id, site, function_name(func), true, grid, block, shared_mem, func); });
}

uint64_t shape_id(CUfunction func, const uint32_t grid[3], const uint32_t block[3], uint32_t shared_mem) noexcept {
  const auto key = nonzero(reinterpret_cast<uint64_t>(func));
  uint64_t name = g_readable_by_func.find(key);
  if (name == 0) {
    // First sight of this function here: its readable name, as the profile stores it (allocates).
    try {
      std::lock_guard lock(detail::slow_path_mutex());
      name = nonzero(readable_name_hash(detail::demangled(function_name(func))));
    } catch (...) {
      return 0;
    }
    g_readable_by_func.insert(key, name);
  }
  return shape_hash(name, grid, block, shared_mem);
}

uint64_t shape_id_of(std::string_view readable_name, const uint32_t grid[3], const uint32_t block[3],
                     uint32_t shared_mem) noexcept {
  return shape_hash(nonzero(readable_name_hash(readable_name)), grid, block, shared_mem);
}

__attribute__((noinline)) uint64_t op_id(const char* label, uint64_t bytes) noexcept {
  return identify(
      combine(reinterpret_cast<uint64_t>(label), bytes), reinterpret_cast<uintptr_t>(__builtin_frame_address(0)),
      reinterpret_cast<uintptr_t>(__builtin_return_address(0)),
      [&] { return nonzero(combine(combine(kFnvOffsetBasis, fnv1a(label)), bytes)); },
      [&](uint64_t id, uint64_t site) {
        const uint32_t none[3] = {0, 0, 0};
        remember(id, site, label, false, none, none, 0);
      });
}

__attribute__((noinline)) uint64_t call_site() noexcept {
  return site_hash(reinterpret_cast<uintptr_t>(__builtin_return_address(0)));
}

void describe_op(uint64_t id, const char* name) noexcept {
  const uint32_t none[3] = {0, 0, 0};
  remember(id, 0, name, false, none, none, 0);
}

const Description* describe(uint64_t id) noexcept {
  std::lock_guard lock(detail::slow_path_mutex());
  if (g_descriptions == nullptr) return nullptr;
  auto it = g_descriptions->find(id);
  return it == g_descriptions->end() ? nullptr : it->second.get();
}

uint64_t readable_name_hash(std::string_view readable) noexcept {
  return readable.empty() || readable == "?" ? 0 : nonzero(fnv1a(readable));
}

std::string readable_name(const char* mangled) { return mangled == nullptr ? std::string("?") : detail::demangled(mangled); }

uint64_t graph_node_id(uint64_t graph_op, uint64_t shape) noexcept {
  return nonzero(combine(combine(kFnvOffsetBasis, graph_op), shape));
}

WalkCounts walk_counts() noexcept {
  return {g_walks.load(std::memory_order_relaxed), g_unpredictable.load(std::memory_order_relaxed),
          detail::symbolized_count(), g_walk_ns.load(std::memory_order_relaxed)};
}

uint32_t verify_interval(uint64_t mean_walk_ns) noexcept {
  uint32_t interval = kMinVerifyInterval;
  while (interval < kMaxVerifyInterval && uint64_t(interval) * kWalkBudgetNs < mean_walk_ns) interval *= 2;
  return interval;
}

void reset_after_fork() noexcept { detail::reset_slow_path_mutex(); }

}  // namespace fikit::kernelid
