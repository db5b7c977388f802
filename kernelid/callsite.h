#pragma once
// Call-site capture for kernel IDs (internal to kernelid/): walk the launching thread's stack, drop
// the frames of the hook, the driver and the CUDA runtime, keep a few caller frames, and map their
// raw return addresses to a stable hash through a lock-free cache.
#include <cstdint>
#include <mutex>
#include <string>

#include "kernelid.h"

namespace fikit::kernelid::detail {

inline constexpr unsigned kMaxDepth = 16;

struct RawStack {
  uintptr_t pc[kMaxDepth];
  unsigned size = 0;
};

// Walks the calling thread's stack. Frames up to (excluding) the one whose return address is
// `first_pc` are the caller's own (kernelid internals) and dropped; so are frames in skipped modules.
void capture(RawStack& out, uintptr_t first_pc, unsigned depth) noexcept;

// Stable hash of a captured stack: symbol names and offsets, never absolute addresses. Cached by the
// raw addresses; a miss symbolizes under slow_path_mutex().
uint64_t stable_hash(const RawStack& stack) noexcept;
// Misses so far (stacks symbolized).
uint64_t symbolized_count() noexcept;

// "module!symbol+0xoff <- ..." for a stable hash produced in this process ("" if unknown).
// Caller holds slow_path_mutex().
const std::string& readable_call_site(uint64_t stable) noexcept;

// Guards every allocation in kernelid/ (symbolization, descriptions). Never taken on a cache hit.
std::mutex& slow_path_mutex() noexcept;

// The demangled form of a C++ symbol name, or the name itself.
std::string demangled(const char* name);
void reset_slow_path_mutex() noexcept;

// libgcc_s.so.1's unwinder, looked up once (nullptr if not available: the LLVM one is used).
bool load_gcc_unwinder() noexcept;

}  // namespace fikit::kernelid::detail
