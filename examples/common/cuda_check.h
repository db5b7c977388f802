#pragma once
// Driver-API error checking for the examples: a failing call is reported with its text and the
// program exits with kExitCuda. The examples have nothing to recover, so failing loudly is right.
#include <cuda.h>

namespace fikit::examples {

inline constexpr int kExitUsage = 2;   // bad command line
inline constexpr int kExitCuda = 3;    // a CUDA driver call failed

// Name used in messages ("fikit-example-infer: ..."); set by Flags::parse.
void set_program_name(const char* argv0) noexcept;
const char* program_name() noexcept;

// Prints "<program>: <call> failed at <file>:<line>: CUDA_ERROR_X (description)" and exits.
[[noreturn]] void die_cuda(CUresult result, const char* call, const char* file, int line);

}  // namespace fikit::examples

#define FIKIT_CU(call)                                                                  \
  do {                                                                                  \
    const CUresult fikit_cu_result_ = (call);                                           \
    if (fikit_cu_result_ != CUDA_SUCCESS)                                               \
      ::fikit::examples::die_cuda(fikit_cu_result_, #call, __FILE__, __LINE__);         \
  } while (0)
