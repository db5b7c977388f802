#pragma once
// The one device function the examples launch: a kernel that busy-waits for a given time. Shipped
// as PTX text so the examples need no nvcc; the driver JIT-compiles it for whatever GPU is present.
// The simulated driver (tests/simgpu) recognises it by name ("spin") and runs it for `duration_ns`.

namespace fikit::examples {

// Entry point: fikit_spin(.param .u64 duration_ns, .param .u64 out).
// Every thread spins on %globaltimer until duration_ns have passed; if `out` is a device pointer
// (not 0), thread 0 of block 0 stores the nanoseconds it actually spun there.
inline constexpr const char* kSpinKernelName = "fikit_spin";
extern const char kSpinKernelPtx[];

}  // namespace fikit::examples
