#pragma once
// Points one loaded library's imports of one function at another function: its GOT entries (the
// slots its calls through the PLT, or through a global-data relocation, read the address from).
// Only that library's calls change, and nothing is exported: the hook watches the driver's ioctls
// this way without interposing ioctl for the whole process. Linux ELF, x86-64 and AArch64.
#include <cstddef>

namespace fikit::hook::preempt {

// In the first loaded object whose path contains `library` (e.g. "libcuda.so"), every GOT entry of
// `symbol` now holds `replacement`. Returns how many entries were changed (0: the library is not
// loaded, does not import it, or a page could not be made writable). Not thread-safe against
// itself; the caller runs it once. Calls already resolved into the old target are not affected.
size_t patch_imports(const char* library, const char* symbol, void* replacement) noexcept;

}  // namespace fikit::hook::preempt
