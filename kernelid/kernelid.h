#pragma once
// Kernel identity: a 64-bit hash of (device function name, symbolized call site, grid, block,
// dynamic shared memory), equal across processes and runs of the same program. See DESIGN §4.
#include <cstdint>
#include <string>

namespace fikit::kernelid {

// Readable form kept beside every ID this process has produced.
struct Description {
  uint64_t id = 0;
  std::string name;        // demangled device function name, or "[memcpy HtoD]" etc. for copies
  std::string call_site;   // "module!symbol+0xoff <- module!symbol+0xoff ..." innermost first
  uint32_t grid[3] = {0, 0, 0};
  uint32_t block[3] = {0, 0, 0};
  uint32_t shared_mem = 0;
};

// The description of an ID produced in this process, or nullptr. Thread-safe; pointers stay valid.
const Description* describe(uint64_t id) noexcept;

}  // namespace fikit::kernelid
