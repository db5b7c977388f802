#pragma once
// NVIDIA MPS as fikit-run sees it: is a control daemon running for this user's clients, and which
// client priority a FIKIT priority maps to (docs/scheduling.md).
#include <optional>
#include <string>

namespace fikit::run {

// The MPS pipe folder clients use: $CUDA_MPS_PIPE_DIRECTORY, else /tmp/nvidia-mps.
std::string mps_pipe_directory(const char* env_value);
// Whether an MPS control daemon runs for `pipe_dir`: the process in its pid file
// (nvidia-cuda-mps-control.pid) is alive; without one, its `control` socket or pipe answers.
// Files left by a daemon that died do not count.
bool mps_daemon_running(const std::string& pipe_dir);
// CUDA_MPS_CLIENT_PRIORITY for a FIKIT priority: 0 (normal) for priority 0, 1 (below normal) for
// 1-9. nullopt when the user already set it (theirs is kept).
std::optional<std::string> mps_client_priority(int priority, const char* existing);

}  // namespace fikit::run
