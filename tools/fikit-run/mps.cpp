#include "mps.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

namespace fikit::run {

std::string mps_pipe_directory(const char* env_value) {
  return env_value != nullptr && *env_value != '\0' ? env_value : "/tmp/nvidia-mps";
}

bool mps_daemon_running(const std::string& pipe_dir) {
  // The pid file NVIDIA's control daemon keeps in its pipe folder: no need to talk to the daemon.
  std::ifstream pid_file(pipe_dir + "/nvidia-cuda-mps-control.pid");
  long pid = 0;
  if (pid_file >> pid) return pid > 0 && (kill(pid_t(pid), 0) == 0 || errno == EPERM);
  const std::string path = pipe_dir + "/control";
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return false;
  if (S_ISSOCK(st.st_mode)) {
    // A socket answers while its daemon lives; a file left by one that died refuses the connection.
    // (Whatever its type: a live one of another type says so with EPROTOTYPE.)
    sockaddr_un addr{};
    if (path.size() >= sizeof addr.sun_path) return false;
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    for (int type : {SOCK_STREAM, SOCK_SEQPACKET}) {
      const int fd = socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
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

std::optional<std::string> mps_client_priority(int priority, const char* existing) {
  if (existing != nullptr && *existing != '\0') return std::nullopt;
  return priority == 0 ? "0" : "1";
}

}  // namespace fikit::run
