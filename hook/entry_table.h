#pragma once
// The wrapped entry points (entry_points.def) as C++ data: one Variant per wrapper, i.e. per entry
// point and per-thread-default-stream form, each with its own real-function slot.
#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

// Expands FIKIT_VARIANT(id, name, symbol, per_thread, version, handler, params, args) once per
// wrapper: the default form, then the _ptsz / _ptds form where the table has one. `id` is a C++
// identifier (fikit_<symbol>) that no cuda.h macro can rename; name and symbol are string literals.
#define FIKIT_ENTRY(name, symbol, per_thread, version, handler, params, args)                 \
  FIKIT_VARIANT(fikit_##symbol, #name, #symbol, false, version, handler, params, args)       \
  FIKIT_PER_THREAD_##per_thread(fikit_##symbol, #name, #symbol, version, handler, params, args)
#define FIKIT_PER_THREAD_none(...)
#define FIKIT_PER_THREAD_ptsz(id, name, symbol, version, handler, params, args) \
  FIKIT_VARIANT(id##_ptsz, name, symbol "_ptsz", true, version, handler, params, args)
#define FIKIT_PER_THREAD_ptds(id, name, symbol, version, handler, params, args) \
  FIKIT_VARIANT(id##_ptds, name, symbol "_ptds", true, version, handler, params, args)

namespace fikit::hook {

enum class Variant : uint16_t {
#define FIKIT_VARIANT(id, ...) id,
#include "entry_points.def"
#undef FIKIT_VARIANT
};

struct VariantInfo {
  const char* name;      // asked of cuGetProcAddress
  const char* symbol;    // exported by libcuda and by the hook
  bool per_thread;       // the _ptsz / _ptds form (the default stream is the per-thread one)
  int version;           // first cudaVersion for which cuGetProcAddress(name) returns this ABI
};

inline constexpr VariantInfo kVariants[] = {
#define FIKIT_VARIANT(id, name, symbol, per_thread, version, ...) {name, symbol, per_thread, version},
#include "entry_points.def"
#undef FIKIT_VARIANT
};
inline constexpr size_t kVariantCount = sizeof kVariants / sizeof kVariants[0];

// Names cuGetProcAddress answers with another row's ABI from some version on (entry_points.def).
struct ProcAlias {
  const char* name;
  int version;
  const char* symbol;   // the row whose wrapper it gets
};
inline constexpr ProcAlias kProcAliases[] = {
#define FIKIT_VARIANT(...)
#define FIKIT_PROC_ALIAS(name, version, symbol) {#name, version, #symbol},
#include "entry_points.def"
#undef FIKIT_PROC_ALIAS
#undef FIKIT_VARIANT
};

constexpr size_t index_of(Variant v) noexcept { return static_cast<size_t>(v); }

// The real driver function behind each wrapper, filled by whichever path resolved it first
// (cuGetProcAddress's result, the real dlsym on libcuda, or an exported wrapper's first call).
extern std::atomic<void*> g_real[kVariantCount];
// The wrapper of each variant (what the resolution paths hand out).
extern void* const kWrappers[kVariantCount];

// Records `real` as the variant's real function unless it is the wrapper itself (a lookup in the
// global scope finds the hook first) or a slot is already filled. Returns the slot's content.
void* install_real(Variant v, void* real) noexcept;
// The exported-symbol path: fills the slot from libcuda (nullptr when the driver is not loaded).
void* resolve_real(Variant v) noexcept;

// The variant dlsym(handle, symbol) should return the wrapper of, or -1.
int find_by_symbol(const char* symbol) noexcept;
// The variant cuGetProcAddress(name, cudaVersion, flags) should return the wrapper of, or -1: the
// highest ABI version not above cudaVersion, the per-thread form when flags ask for it.
int find_for_proc_address(const char* name, int cuda_version, uint64_t flags) noexcept;

}  // namespace fikit::hook
