#include "cupti_api.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "../config.h"
#include "../real_dlsym.h"

namespace fikit::hook::measure {
namespace {

void* open_cupti(char* why, size_t why_len) noexcept {
  const char* candidates[] = {config().cupti_path, "libcupti.so.13", "libcupti.so",
                              "/usr/local/cuda/lib64/libcupti.so.13", "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so"};
  for (const char* path : candidates) {
    if (!path || !*path) continue;
    if (void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL)) return h;
  }
  const char* err = dlerror();
  std::snprintf(why, why_len, "cannot load libcupti.so.13 or libcupti.so (%s)", err ? err : "not found");
  return nullptr;
}

}  // namespace

bool load_cupti(CuptiApi& api, char* why, size_t why_len) noexcept {
  void* lib = open_cupti(why, why_len);
  if (!lib) return false;
  // The C library's dlsym: the hook's own (resolve.cpp) looks at every name starting with "cu".
  const DlsymFn find = real_dlsym();
  bool ok = true;
  const auto sym = [&](auto& fn, const char* name, bool required = true) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(find(lib, name));
    if (!fn && required && ok) std::snprintf(why, why_len, "libcupti lacks %s", name);
    ok = ok && (fn || !required);
  };
  sym(api.enable, "cuptiActivityEnable");
  sym(api.disable, "cuptiActivityDisable");
  sym(api.register_callbacks, "cuptiActivityRegisterCallbacks");
  sym(api.next_record, "cuptiActivityGetNextRecord");
  sym(api.flush_all, "cuptiActivityFlushAll");
  sym(api.result_string, "cuptiGetResultString");
  sym(api.context_id, "cuptiGetContextId");
  sym(api.stream_id_ex, "cuptiGetStreamIdEx", false);
  sym(api.stream_id, "cuptiGetStreamId", false);
  if (ok && !api.stream_id_ex && !api.stream_id) {
    std::snprintf(why, why_len, "libcupti lacks cuptiGetStreamIdEx and cuptiGetStreamId");
    ok = false;
  }
  return ok;
}

}  // namespace fikit::hook::measure
