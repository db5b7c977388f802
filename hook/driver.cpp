#include "driver.h"

#include <dlfcn.h>

#include <atomic>

#include "real_dlsym.h"

namespace fikit::hook {

void* real_driver_symbol(const char* name) noexcept {
  // RTLD_NOLOAD: the hook never loads the driver itself; a program that has not loaded it has no
  // CUDA work for us to see. The handle's lookup scope is libcuda and its dependencies, which never
  // include the preloaded hook, so the wrappers cannot come back from here.
  static std::atomic<void*> handle{nullptr};
  void* h = handle.load(std::memory_order_acquire);
  if (h == nullptr) {
    h = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY);
    if (h == nullptr) return nullptr;
    handle.store(h, std::memory_order_release);
  }
  return real_dlsym()(h, name);
}

}  // namespace fikit::hook
