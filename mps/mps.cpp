#include "mps.h"

#include "nvml.h"
#include "owned_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string_view>
#include <thread>
#include <vector>

extern char** environ;

namespace fikit::mps {
namespace {

// Runs `argv` with the MPS folders of `dir` in its environment, `input` on its stdin, and waits up to
// `timeout_ms` (then kills it). Returns its exit status, or -1 when it could not run or was killed.
int run_control(const std::vector<std::string>& argv, const std::string& dir, const std::string& input,
                int timeout_ms) {
  int in[2];
  if (pipe2(in, O_CLOEXEC) != 0) return -1;
  const std::string pipe_env = "CUDA_MPS_PIPE_DIRECTORY=" + pipe_dir_of(dir);
  const std::string log_env = "CUDA_MPS_LOG_DIRECTORY=" + log_dir_of(dir);
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e)
    if (std::strncmp(*e, "CUDA_MPS_PIPE_DIRECTORY=", 24) != 0 && std::strncmp(*e, "CUDA_MPS_LOG_DIRECTORY=", 23) != 0)
      envp.push_back(*e);
  envp.push_back(const_cast<char*>(pipe_env.c_str()));
  envp.push_back(const_cast<char*>(log_env.c_str()));
  envp.push_back(nullptr);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    close(in[0]);
    close(in[1]);
    return -1;
  }
  if (pid == 0) {
    dup2(in[0], STDIN_FILENO);
    // The control daemon keeps its stdout open: it must not hold the scheduler's log.
    const int null = open("/dev/null", O_WRONLY);
    if (null >= 0) dup2(null, STDOUT_FILENO);
    execvpe(args[0], args.data(), envp.data());
    _exit(127);
  }
  close(in[0]);
  if (!input.empty()) (void)!write(in[1], input.data(), input.size());
  close(in[1]);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (r < 0 && errno != EINTR) return -1;
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

std::string default_directory() {
  const char* dir = std::getenv("FIKIT_MPS_DIR");
  return dir != nullptr && *dir != '\0' ? dir : "/tmp/fikit-mps";
}

bool daemon_running(const std::string& pipe_dir) {
  // A folder another user could write (or planted, with a pid file naming any live process) would
  // point programs at that user's pipes: only this user's or root's count (owned_files.h).
  if (!protocol::trusted_folder(pipe_dir)) return false;
  // The pid file NVIDIA's control daemon keeps in its pipe folder: no need to talk to the daemon.
  const std::string pid_path = pipe_dir + "/nvidia-cuda-mps-control.pid";
  struct stat pid_st;
  if (lstat(pid_path.c_str(), &pid_st) == 0) {
    if (!S_ISREG(pid_st.st_mode) || !protocol::trusted_owner(pid_st)) return false;
    std::ifstream pid_file(pid_path);
    long pid = 0;
    if (pid_file >> pid) return pid > 0 && (kill(pid_t(pid), 0) == 0 || errno == EPERM);
  }
  const std::string path = pipe_dir + "/control";
  struct stat st;
  if (lstat(path.c_str(), &st) != 0 || !protocol::trusted_owner(st)) return false;
  if (S_ISSOCK(st.st_mode)) {
    // A socket answers while its daemon lives; a file left by one that died refuses the connection.
    // (Whatever its type: a live one of another type says so with EPROTOTYPE.)
    sockaddr_un addr{};
    if (path.size() >= sizeof addr.sun_path) return false;
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    // Non-blocking: a control daemon that stopped accepting (its backlog full: stuck, or an impostor)
    // answers EAGAIN at once where a blocking connect would wait for good.
    for (int type : {SOCK_STREAM, SOCK_SEQPACKET}) {
      const int fd = socket(AF_UNIX, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      if (fd < 0) continue;
      const int rc = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
      const int err = errno;
      close(fd);   // connecting and hanging up costs the control daemon nothing
      if (rc == 0 || err == EPROTOTYPE || err == EAGAIN) return true;
      if (err == ECONNREFUSED) return false;
    }
    return false;
  }
  if (S_ISFIFO(st.st_mode)) {
    // A named pipe opens for writing without blocking only while someone reads it (else ENXIO).
    const int fd = open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return false;
    close(fd);
    return true;
  }
  return false;
}

Found find_daemon(const char* env_pipe_dir) {
  Found f;
  if (env_pipe_dir != nullptr && *env_pipe_dir != '\0') {
    f.pipe_dir = env_pipe_dir;
    f.running = daemon_running(f.pipe_dir);
    f.fikit_owned = f.pipe_dir == pipe_dir_of(default_directory());   // FIKIT's, named by hand
    return f;
  }
  const std::string fikit = pipe_dir_of(default_directory());
  if (daemon_running(fikit)) return {fikit, true, true};
  f.pipe_dir = "/tmp/nvidia-mps";
  f.running = daemon_running(f.pipe_dir);
  return f;
}

std::optional<std::string> client_priority(int priority, const char* existing) {
  if (existing != nullptr && *existing != '\0') return std::nullopt;
  return priority == 0 ? "0" : "1";
}

std::optional<std::string> pinned_memory_limit(uint64_t bytes, const char* existing, const char* visible,
                                               const std::string& dev_dir) {
  if (existing != nullptr && *existing != '\0') return std::nullopt;
  size_t gpus = 0;
  if (visible != nullptr) {
    // A list of indices or UUIDs; an empty one hides every GPU.
    std::string_view v(visible);
    while (!v.empty()) {
      const size_t comma = v.find(',');
      if (!v.substr(0, comma).empty()) ++gpus;
      if (comma == std::string_view::npos) break;
      v.remove_prefix(comma + 1);
    }
  } else if (DIR* d = opendir(dev_dir.c_str())) {
    while (const dirent* e = readdir(d)) {
      const std::string_view name(e->d_name);
      if (name.size() > 6 && name.substr(0, 6) == "nvidia" &&
          name.find_first_not_of("0123456789", 6) == std::string_view::npos)
        ++gpus;
    }
    closedir(d);
  }
  if (gpus == 0) return std::nullopt;
  const uint64_t mib = std::max<uint64_t>(bytes >> 20, 1);
  std::string out;
  for (size_t i = 0; i < gpus; ++i) {   // appended piece by piece: GCC 12 warns falsely (-Wrestrict) of "," + string
    if (i) out += ',';
    out.append(std::to_string(i)).append("=").append(std::to_string(mib)).append("M");
  }
  return out;
}

bool publish(const std::string& dir, const char* name, const std::string& text, std::string& error) {
  const std::string path = published_file_of(dir, name), tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text << "\n";
    if (!out) {
      error = "cannot write " + tmp + ": " + std::strerror(errno);
      return false;
    }
  }
  if (chmod(tmp.c_str(), 0644) != 0 || rename(tmp.c_str(), path.c_str()) != 0) {
    error = "cannot put " + path + " in place: " + std::strerror(errno);
    unlink(tmp.c_str());
    return false;
  }
  return true;
}

void unpublish(const std::string& dir, const char* name) noexcept { unlink(published_file_of(dir, name).c_str()); }

std::optional<std::string> published(const std::string& dir, const char* name) {
  const std::string path = published_file_of(dir, name);
  struct stat st;
  // Bounded: a line of a few words is all any of these files holds.
  if (!protocol::trusted_folder(dir) || lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || !protocol::trusted(st) ||
      st.st_size > 4096)
    return std::nullopt;
  std::ifstream in(path);
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  const size_t first = line.find_first_not_of(" \t"), last = line.find_last_not_of(" \t\r");
  if (first == std::string::npos) return std::nullopt;
  return line.substr(first, last - first + 1);
}

std::optional<uint64_t> smallest_gpu_memory() { return nvml::Nvml::get().smallest_gpu_memory(); }

bool OwnedDaemon::start(const std::string& dir, const std::string& control, bool* adopted, std::string& error) {
  *adopted = false;
  // The folders first: a daemon "running" in a folder another user made is not adopted.
  std::string why;
  if (!protocol::make_private_folder(dir, why) || !protocol::make_private_folder(pipe_dir_of(dir), why) ||
      !protocol::make_private_folder(log_dir_of(dir), why)) {
    error = "the MPS folders under " + dir + ": " + why;
    return false;
  }
  if (daemon_running(pipe_dir_of(dir))) {
    dir_ = dir;
    *adopted = true;
    return true;
  }
  const int rc = run_control({control, "-d"}, dir, "", 10'000);
  if (rc != 0) {
    error = rc == 127 || rc == -1 ? control + " could not be run (is the NVIDIA driver's MPS installed? it is not "
                                              "needed without --mps)"
                                  : control + " -d failed with exit status " + std::to_string(rc) + " (see " +
                                        log_dir_of(dir) + "/control.log)";
    return false;
  }
  // -d returns once it has forked the daemon; wait for it to take its pipe folder.
  for (int i = 0; i < 200 && !daemon_running(pipe_dir_of(dir)); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (!daemon_running(pipe_dir_of(dir))) {
    error = control + " -d returned, but no control daemon answers in " + pipe_dir_of(dir);
    return false;
  }
  dir_ = dir;
  control_ = control;
  owned_ = true;
  return true;
}

void OwnedDaemon::stop() noexcept {
  if (!owned_) return;
  owned_ = false;
  try {
    (void)run_control({control_, }, dir_, "quit\n", 10'000);
  } catch (...) {
  }
}

}  // namespace fikit::mps
