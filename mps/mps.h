#pragma once
// NVIDIA MPS as FIKIT's tools see it (docs/scheduling.md, "MPS"): where a control daemon runs for
// a program's clients, which client priority a FIKIT priority maps to, and a control daemon that
// fikit-scheduler owns (started with its own pipe and log folders, always stopped with it), so one
// service gives a user the recommended setup.
#include <cstdint>
#include <optional>
#include <string>

namespace fikit::mps {

// Where fikit-scheduler --mps on runs its control daemon (DIR/pipe, DIR/log), and where fikit-run
// looks for it: $FIKIT_MPS_DIR, else /tmp/fikit-mps.
std::string default_directory();
inline std::string pipe_dir_of(const std::string& dir) { return dir + "/pipe"; }
inline std::string log_dir_of(const std::string& dir) { return dir + "/log"; }

// Whether an MPS control daemon runs for `pipe_dir`: the process in its pid file
// (nvidia-cuda-mps-control.pid) is alive; without one, its `control` socket or pipe answers.
// Files left by a daemon that died do not count, nor does a folder or pid file of another user than
// this one or root, or one others may write (it may be planted: owned_files.h).
bool daemon_running(const std::string& pipe_dir);

// The control daemon a program started now would be a client of: its pipe folder is
// $CUDA_MPS_PIPE_DIRECTORY when set (the user's choice, found or not); else FIKIT's (fikit-scheduler
// --mps on) when one runs there, then NVIDIA's default /tmp/nvidia-mps. `fikit_owned`: it is
// FIKIT's folder (found, or named in the variable), whose variables the program must be given.
struct Found {
  std::string pipe_dir;
  bool running = false;
  bool fikit_owned = false;
};
Found find_daemon(const char* env_pipe_dir);

// CUDA_MPS_CLIENT_PRIORITY for a FIKIT priority: 0 (normal) for priority 0, 1 (below normal) for
// 1-9. nullopt when the user already set it (theirs is kept).
std::optional<std::string> client_priority(int priority, const char* existing);

// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT for a limit of `bytes` on each GPU the program may see: "0=20480M,1=20480M"
// (MiB, rounded down, at least 1). The GPUs: as many as CUDA_VISIBLE_DEVICES lists (`visible`,
// nullptr when unset), else the /dev/nvidiaN nodes in `dev_dir`. nullopt when the user already set
// it (`existing`), or no GPU is found.
std::optional<std::string> pinned_memory_limit(uint64_t bytes, const char* existing, const char* visible,
                                               const std::string& dev_dir = "/dev");

// What fikit-scheduler --mps tells the fikit-run of each program it starts, published as a file in
// its MPS folder (mode 644, one line: words separated by spaces), read back only from a folder and
// file this user or root owns and no one else may write (owned_files.h).
//   reserve       the reserve it keeps for priority-0 tasks (--reserve-memory): "3221225472B" or
//                 "25%"; fikit-run gives the jobs it starts an MPS pinned-memory limit that keeps it,
//                 so the MPS server holds a job to it even when the job's program escapes the hook
//                 (docs/memory.md).
//   jobs-backend  "timeslice P": a job below priority P starts outside MPS (Policy::job_backend),
//                 where the regime preempt can switch it out; absent: jobs are MPS clients.
inline constexpr const char* kReserveFile = "reserve";
inline constexpr const char* kJobsBackendFile = "jobs-backend";
inline std::string published_file_of(const std::string& dir, const char* name) { return dir + "/" + name; }
bool publish(const std::string& dir, const char* name, const std::string& text, std::string& error);
void unpublish(const std::string& dir, const char* name) noexcept;
// The words of DIR/name, if the file is there, trusted and not empty.
std::optional<std::string> published(const std::string& dir, const char* name);
// The smallest GPU on this machine, in bytes, as NVML tells (nullopt without NVML: the simulated
// GPU, a machine without NVIDIA's driver).
std::optional<uint64_t> smallest_gpu_memory();

// An MPS control daemon fikit-scheduler starts and always stops. Not copyable; stop() runs from the
// destructor too.
class OwnedDaemon {
 public:
  OwnedDaemon() = default;
  OwnedDaemon(const OwnedDaemon&) = delete;
  OwnedDaemon& operator=(const OwnedDaemon&) = delete;
  ~OwnedDaemon() { stop(); }

  // Starts `control` (nvidia-cuda-mps-control, found on PATH unless a path) with -d and the pipe
  // and log folders under `dir` (made mode 700 if missing; refused if another user's). A daemon
  // already running there is used and left alone at exit (`*adopted`). False with `error` set when none could be started.
  bool start(const std::string& dir, const std::string& control, bool* adopted, std::string& error);
  // Asks the daemon it started to quit (echo quit | nvidia-cuda-mps-control), bounded in time.
  void stop() noexcept;
  bool owned() const { return owned_; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_, control_;
  bool owned_ = false;
};

}  // namespace fikit::mps
