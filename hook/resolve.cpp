// The resolution paths' shared lookups over the entry table, and the dlsym interposition through
// which libcudart (which dlopens libcuda.so.1) reaches the wrappers.
#include <dlfcn.h>

#include <cstring>

#include "driver.h"
#include "entry_table.h"
#include "log.h"
#include "preempt/own_slice.h"
#include "real_dlsym.h"

namespace fikit::hook {
namespace {

void* no_dlsym(void*, const char*) { return nullptr; }

bool has_per_thread_form(size_t default_index) noexcept {
  return default_index + 1 < kVariantCount && kVariants[default_index + 1].per_thread &&
         std::strcmp(kVariants[default_index + 1].name, kVariants[default_index].name) == 0;
}

}  // namespace

DlsymFn real_dlsym() noexcept {
  static std::atomic<DlsymFn> real{nullptr};
  DlsymFn fn = real.load(std::memory_order_relaxed);
  if (fn != nullptr) [[likely]] return fn;
  fn = reinterpret_cast<DlsymFn>(dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34"));
  if (fn == nullptr) fn = reinterpret_cast<DlsymFn>(dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5"));
  if (fn == nullptr) {
    log(LogLevel::Error, "the C library's dlsym was not found: every dlsym call now fails");
    fn = no_dlsym;
  }
  real.store(fn, std::memory_order_relaxed);
  return fn;
}

void* install_real(Variant v, void* real) noexcept {
  std::atomic<void*>& slot = g_real[index_of(v)];
  void* expected = nullptr;
  if (real != nullptr && real != kWrappers[index_of(v)]) {
    slot.compare_exchange_strong(expected, real, std::memory_order_relaxed);
  }
  return slot.load(std::memory_order_relaxed);
}

void* resolve_real(Variant v) noexcept {
  void* real = install_real(v, real_driver_symbol(kVariants[index_of(v)].symbol));
  if (real == nullptr) {
    log(LogLevel::Error, "%s was called but libcuda.so.1 does not provide it", kVariants[index_of(v)].symbol);
  }
  return real;
}

int find_by_symbol(const char* symbol) noexcept {
  for (size_t i = 0; i < kVariantCount; ++i) {
    if (std::strcmp(symbol, kVariants[i].symbol) == 0) return static_cast<int>(i);
  }
  return -1;
}

int find_for_proc_address(const char* name, int cuda_version, uint64_t flags) noexcept {
  const bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  int best = -1;
  for (size_t i = 0; i < kVariantCount; ++i) {
    const VariantInfo& v = kVariants[i];
    if (v.per_thread || v.version > cuda_version || std::strcmp(name, v.name) != 0) continue;
    if (best >= 0 && kVariants[best].version >= v.version) continue;
    best = static_cast<int>(i);
  }
  // A renamed entry point: from its version on, the name gets the ABI of another row.
  int best_version = best >= 0 ? kVariants[best].version : -1;
  for (const ProcAlias& a : kProcAliases) {
    if (a.version > cuda_version || a.version <= best_version || std::strcmp(name, a.name) != 0) continue;
    const int target = find_by_symbol(a.symbol);
    if (target < 0) continue;
    best = target;
    best_version = a.version;
  }
  // The per-thread form sits right after its default form; an entry point without one (no stream
  // argument) is the same function under both flags.
  if (best >= 0 && per_thread && has_per_thread_form(static_cast<size_t>(best))) ++best;
  return best;
}

}  // namespace fikit::hook

// glibc finds the caller of dlsym from its return address (for RTLD_NEXT). Every path that does not
// wrap the result ends in a tail call, so glibc sees the original caller; resolve.cpp is compiled
// with sibling-call optimisation on for that reason (hook/CMakeLists.txt).
extern "C" __attribute__((visibility("default"))) void* dlsym(void* handle, const char* symbol) noexcept {
  using namespace fikit::hook;
  const DlsymFn real = real_dlsym();
  if (handle == RTLD_NEXT || symbol[0] != 'c' || symbol[1] != 'u') return real(handle, symbol);
  // The driver is loaded by now (its entry points are being looked up), its contexts not yet made.
  preempt::watch_driver();
  const int v = find_by_symbol(symbol);
  if (v < 0) return real(handle, symbol);
  void* found = real(handle, symbol);
  if (found == nullptr) return nullptr;
  install_real(static_cast<Variant>(v), found);   // a global-scope lookup finds the wrapper: ignored
  return kWrappers[v];
}
