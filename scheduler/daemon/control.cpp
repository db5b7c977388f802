#include "control.h"

#include "one_request.h"
#include "owned_files.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace fikit::scheduler {

namespace asio = boost::asio;
using local = asio::local::stream_protocol;

namespace {

constexpr size_t kMaxCommand = 256;

std::string parent_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash == 0 ? 1 : slash);
}

}  // namespace

std::string default_control_path(uint16_t port) {
  // Root's in /run, where only root creates folders: a folder planted in /tmp under root's name
  // kept the daemon from starting. A user's in their runtime folder (no one else's either); only
  // without one in /tmp, where a planted folder is refused with what to do (owned_files.h).
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  const std::string dir = geteuid() == 0                                   ? std::string("/run/fikit")
                          : runtime != nullptr && *runtime == '/'          ? std::string(runtime) + "/fikit"
                                                                           : "/tmp/fikit-" + std::to_string(geteuid());
  return dir + "/scheduler-" + std::to_string(port) + ".sock";
}

ControlServer::ControlServer(asio::io_context& io, const std::string& path, Handler handler)
    : path_(path), handler_(std::move(handler)), acceptor_(io), limiter_(io.get_executor(), kMaxConnections) {
  if (path_.size() >= sizeof(sockaddr_un{}.sun_path))
    throw std::runtime_error("control socket path too long: " + path_);
  // A folder it makes, or one of this user's; a sticky one such as /tmp too (--control /tmp/x.sock),
  // where no other user can replace the socket once made.
  std::string why;
  const std::string folder = parent_of(path_);
  struct stat folder_st;
  const bool sticky = lstat(folder.c_str(), &folder_st) == 0 && S_ISDIR(folder_st.st_mode) &&
                      (folder_st.st_mode & S_ISVTX) != 0 && protocol::trusted_folder(folder);
  if (!sticky && !protocol::make_private_folder(folder, why))
    throw std::runtime_error("the control socket's folder: " + why + " (or give --control a path in a folder of this user)");
  struct stat st;
  // A socket file left by a daemon that died; the UDP port was free, so no live daemon owns it.
  if (lstat(path_.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) unlink(path_.c_str());
  const mode_t old = umask(0177);   // the socket file: owner only
  boost::system::error_code ec;
  acceptor_.open(local(), ec);
  if (!ec) acceptor_.bind(local::endpoint(path_), ec);
  umask(old);
  if (!ec) acceptor_.listen(16, ec);
  if (ec) throw std::runtime_error("cannot listen on the control socket " + path_ + ": " + ec.message());
  limiter_.set_accept([this] { accept(); });
  accept();
}

ControlServer::~ControlServer() {
  boost::system::error_code ec;
  acceptor_.close(ec);
  unlink(path_.c_str());
}

void ControlServer::accept() {
  acceptor_.async_accept([this](boost::system::error_code ec, local::socket socket) {
    auto slot = limiter_.after_accept(ec);
    // A command is one line.
    if (slot) std::make_shared<OneRequest<local::socket>>(std::move(socket), "\n", kMaxCommand, handler_, std::move(slot))->start();
  });
}

std::optional<std::string> control_request(const std::string& path, const std::string& command, int timeout_ms,
                                           std::string& error) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) {
    error = "control socket path too long: " + path;
    return std::nullopt;
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    error = "no fikit-scheduler answers on " + path + " (" + std::strerror(errno) + ")";
    if (fd >= 0) close(fd);
    return std::nullopt;
  }
  // Only this user's daemon, or root's, is believed: another user who planted the folder (a
  // /tmp/fikit-UID made before this user's daemon ever ran) could serve any status there.
  ucred peer{};
  socklen_t peer_len = sizeof peer;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &peer_len) != 0 || (peer.uid != geteuid() && peer.uid != 0)) {
    error = "the control socket " + path + " is served by uid " + std::to_string(peer.uid) +
            ", neither this user nor root: not a fikit-scheduler of yours (remove its folder, or give --control)";
    close(fd);
    return std::nullopt;
  }
  const std::string line = command + "\n";
  std::string out;
  if (send(fd, line.data(), line.size(), MSG_NOSIGNAL) != ssize_t(line.size())) {
    error = "cannot send to " + path;
    close(fd);
    return std::nullopt;
  }
  char buf[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) {
      error = "fikit-scheduler on " + path + " did not answer within " + std::to_string(timeout_ms) + " ms";
      close(fd);
      return std::nullopt;
    }
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, size_t(n));
  }
  close(fd);
  return out;
}

}  // namespace fikit::scheduler
