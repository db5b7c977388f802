#include "callsite.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string_view>
#include <unordered_map>

#include "fixed_map.h"
#include "hash.h"

namespace fikit::kernelid::detail {
namespace {

// ---- which modules' frames are not the user's call site ----

constexpr uint64_t kKeepModule = 1, kSkipModule = 2;
FixedMap<256> g_module_class;   // link_map address -> keep / skip

std::string_view basename_of(const char* path) noexcept {
  if (path == nullptr) return {};
  const char* slash = std::strrchr(path, '/');
  return slash ? std::string_view(slash + 1) : std::string_view(path);
}

bool is_skipped_module_name(std::string_view base) noexcept {
  // libcuda also covers libcudart; libcupti is the profiler the measure mode may load.
  for (std::string_view prefix : {"libfikit_hook", "libcuda", "libcupti"}) {
    if (base.substr(0, prefix.size()) == prefix) return true;
  }
  return false;
}

// Lock-free: _dl_find_object (glibc >= 2.35) does not take the loader lock, and l_name is constant
// for a loaded object.
bool in_skipped_module(uintptr_t pc) noexcept {
  dl_find_object found;
  if (_dl_find_object(reinterpret_cast<void*>(pc - 1), &found) != 0) return false;
  const auto map_key = nonzero(reinterpret_cast<uint64_t>(found.dlfo_link_map));
  uint64_t cls = g_module_class.find(map_key);
  if (cls == 0) {
    cls = is_skipped_module_name(basename_of(found.dlfo_link_map->l_name)) ? kSkipModule : kKeepModule;
    g_module_class.insert(map_key, cls);
  }
  return cls == kSkipModule;
}

// Collects kept frames; returns false once enough are kept (stop walking).
struct FrameFilter {
  RawStack& out;
  uintptr_t first_pc;
  unsigned depth;
  bool reached_caller = false;
  unsigned walked = 0;

  bool visit(uintptr_t pc) noexcept {
    // A stack that never shows first_pc (an unwinder that cannot see through a frame) keeps everything.
    if (!reached_caller && (pc == first_pc || ++walked > 8)) reached_caller = true;
    if (!reached_caller || pc == 0) return true;
    if (in_skipped_module(pc)) return true;
    out.pc[out.size++] = pc;
    return out.size < depth;
  }
};

// ---- the unwinder ----

// libgcc's _Unwind_Backtrace, found in libgcc_s.so.1 at run time (the hook carries libgcc_eh for its
// static libstdc++, but walks with the shared one every program already has loaded).
using GccTraceFn = int (*)(void* context, void* arg);
using GccBacktraceFn = int (*)(GccTraceFn trace, void* arg);
using GccGetIpFn = uintptr_t (*)(void* context);
constexpr int kGccContinue = 0;     // _URC_NO_REASON
constexpr int kGccStop = 4;         // _URC_NORMAL_STOP
std::atomic<GccBacktraceFn> g_gcc_backtrace{nullptr};
std::atomic<GccGetIpFn> g_gcc_get_ip{nullptr};

void walk_gcc(FrameFilter& filter) noexcept {
  GccBacktraceFn backtrace = g_gcc_backtrace.load(std::memory_order_relaxed);
  if (backtrace == nullptr) [[unlikely]] {
    if (!load_gcc_unwinder()) return;   // no libgcc_s.so.1: call sites stay empty, IDs still work
    backtrace = g_gcc_backtrace.load(std::memory_order_relaxed);
  }
  backtrace(
      [](void* context, void* arg) -> int {
        auto* f = static_cast<FrameFilter*>(arg);
        return f->visit(g_gcc_get_ip.load(std::memory_order_relaxed)(context)) ? kGccContinue : kGccStop;
      },
      &filter);
}

// ---- symbolization (slow path) ----

FixedMap<8192> g_stable_by_raw;   // hash of raw return addresses -> stable hash
std::atomic<uint64_t> g_symbolized{0};
std::mutex g_mutex;   // constant-initialised: usable before any constructor of this library ran
std::unordered_map<uint64_t, std::string>* g_readable = nullptr;   // stable hash -> readable form

uint64_t raw_hash(const RawStack& stack) noexcept {
  uint64_t h = kFnvOffsetBasis;
  for (unsigned i = 0; i < stack.size; ++i) h = combine(h, stack.pc[i]);
  return nonzero(h);
}

std::string executable_basename() {
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return "[exe]";
  path[n] = '\0';
  return std::string(basename_of(path));
}

// One frame: the stable text goes into the hash, the readable text into descriptions.
void symbolize(uintptr_t pc, std::string& stable, std::string& readable) {
  Dl_info info{};
  char offset[32];
  if (dladdr(reinterpret_cast<void*>(pc - 1), &info) == 0) {
    // Not in any module (JIT code): only the fact that it is unknown is stable.
    stable += "?";
    readable += "?";
    return;
  }
  std::string module(basename_of(info.dli_fname));
  if (module.empty()) module = executable_basename();
  if (info.dli_sname != nullptr && info.dli_saddr != nullptr) {
    std::snprintf(offset, sizeof offset, "+0x%" PRIxPTR, pc - reinterpret_cast<uintptr_t>(info.dli_saddr));
    stable += module + "!" + info.dli_sname + offset;
    readable += module + "!" + demangled(info.dli_sname) + offset;
  } else {
    std::snprintf(offset, sizeof offset, "+0x%" PRIxPTR, pc - reinterpret_cast<uintptr_t>(info.dli_fbase));
    stable += module + offset;
    readable += module + offset;
  }
}

}  // namespace

bool load_gcc_unwinder() noexcept {
  if (g_gcc_backtrace.load(std::memory_order_acquire) != nullptr) return true;
  // Looked for once: a process without libgcc_s would otherwise dlopen on every launch it identifies.
  static std::atomic<bool> g_missing{false};
  if (g_missing.load(std::memory_order_relaxed)) return false;
  void* libgcc = dlopen("libgcc_s.so.1", RTLD_NOW | RTLD_LOCAL);
  auto get_ip = libgcc ? reinterpret_cast<GccGetIpFn>(dlsym(libgcc, "_Unwind_GetIP")) : nullptr;
  auto backtrace = libgcc ? reinterpret_cast<GccBacktraceFn>(dlsym(libgcc, "_Unwind_Backtrace")) : nullptr;
  if (get_ip == nullptr || backtrace == nullptr) {
    g_missing.store(true, std::memory_order_relaxed);
    return false;
  }
  g_gcc_get_ip.store(get_ip, std::memory_order_release);
  g_gcc_backtrace.store(backtrace, std::memory_order_release);
  return true;
}

void capture(RawStack& out, uintptr_t first_pc, unsigned depth) noexcept {
  out.size = 0;
  FrameFilter filter{out, first_pc, depth < kMaxDepth ? depth : kMaxDepth};
  if (filter.depth == 0) return;
  walk_gcc(filter);
}

uint64_t stable_hash(const RawStack& stack) noexcept {
  const uint64_t raw = raw_hash(stack);
  if (const uint64_t cached = g_stable_by_raw.find(raw)) return cached;

  std::lock_guard lock(slow_path_mutex());
  g_symbolized.fetch_add(1, std::memory_order_relaxed);
  try {
    std::string stable, readable;
    for (unsigned i = 0; i < stack.size; ++i) {
      if (i > 0) {
        stable += '\n';
        readable += " <- ";
      }
      symbolize(stack.pc[i], stable, readable);
    }
    const uint64_t h = nonzero(fnv1a(stable));
    if (g_readable == nullptr) g_readable = new std::unordered_map<uint64_t, std::string>;
    g_readable->emplace(h, std::move(readable));
    g_stable_by_raw.insert(raw, h);   // a full cache only means this site is symbolized again
    return h;
  } catch (...) {
    return 1;   // out of memory: an anonymous call site, the launch goes on
  }
}

uint64_t symbolized_count() noexcept { return g_symbolized.load(std::memory_order_relaxed); }

const std::string& readable_call_site(uint64_t stable) noexcept {
  static const std::string unknown;
  if (g_readable == nullptr) return unknown;
  auto it = g_readable->find(stable);
  return it == g_readable->end() ? unknown : it->second;
}

std::mutex& slow_path_mutex() noexcept { return g_mutex; }

// The forked child has one thread; a mutex some other parent thread held stays locked forever.
void reset_slow_path_mutex() noexcept { new (&g_mutex) std::mutex; }

std::string demangled(const char* name) {
  int status = 0;
  char* out = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  if (status != 0 || out == nullptr) return name;
  std::string result(out);
  std::free(out);
  return result;
}

}  // namespace fikit::kernelid::detail
