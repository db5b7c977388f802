#pragma once
// A program's own time slice (the regime preempt, docs/scheduling.md): its contexts' channel groups
// run at the slice the daemon's directive asks: a job's short, so that the GPU switches it out
// within about that when the service above has work, instead of at its default slice of 1-2 ms;
// the service's long, so that it keeps the GPU through its request. Only this
// process's own contexts, through its own driver client; the slice dies with them, so a crash
// leaves nothing behind. On the simulated GPU, its own call (fikit_sim_set_timeslice) instead.
#include <cstdint>

namespace fikit::hook::preempt {

// Once the driver is loaded and before its first context: a scheduled program (a mode on) starts
// watching the driver's channel groups. Called from the hook's load, its dlsym and its
// first driver lookup; the first call that finds the driver loaded does it. Cheap after that.
void watch_driver() noexcept;
// The receiver thread: run this process's contexts at `us` (0: the slice each had). Returns what
// a heartbeat reports (protocol::Heartbeat::slice_us): `us`, 0, or kSliceRefused when none of
// its channel groups took it (none seen: the context came before the watch; or the driver
// refused), which the daemon reads as "hold it instead". Takes about 0.2-1 ms of RM calls.
uint16_t set_own_slice(uint16_t us) noexcept;
// After fork, in the child: the parent's groups and driver descriptor are not its to change.
void reset_after_fork() noexcept;

}  // namespace fikit::hook::preempt
