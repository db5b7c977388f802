#include "cuda_check.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace fikit::examples {
namespace {
const char* g_program_name = "fikit-example";
}

void set_program_name(const char* argv0) noexcept {
  if (argv0 == nullptr || *argv0 == '\0') return;
  const char* slash = std::strrchr(argv0, '/');
  g_program_name = slash != nullptr ? slash + 1 : argv0;
}

const char* program_name() noexcept { return g_program_name; }

void die_cuda(CUresult result, const char* call, const char* file, int line) {
  // Looked up at run time: a driver that lacks the error-string calls (a minimal simulated one)
  // must still get a readable message rather than a symbol-lookup failure on the error path.
  using ErrorString = CUresult (*)(CUresult, const char**);
  const char* name = nullptr;
  const char* text = nullptr;
  if (auto get_name = reinterpret_cast<ErrorString>(dlsym(RTLD_DEFAULT, "cuGetErrorName")))
    if (get_name(result, &name) != CUDA_SUCCESS) name = nullptr;
  if (auto get_text = reinterpret_cast<ErrorString>(dlsym(RTLD_DEFAULT, "cuGetErrorString")))
    if (get_text(result, &text) != CUDA_SUCCESS) text = nullptr;
  std::fprintf(stderr, "%s: %s failed at %s:%d: %s (%d): %s\n", g_program_name, call, file, line,
               name != nullptr ? name : "CUDA error", static_cast<int>(result),
               text != nullptr ? text : "no description");
  std::exit(kExitCuda);
}

}  // namespace fikit::examples
