#include "plugin.h"

#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <condition_variable>
#include <mutex>
#include <set>

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include "allocation.h"
#include "api.grpc.pb.h"
#include "gpus.h"
#include "shared_files.h"

namespace fikit::deviceplugin {
namespace {

using Clock = std::chrono::steady_clock;

bool exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

// One resource's DevicePlugin service.
class ResourceService final : public v1beta1::DevicePlugin::Service {
 public:
  ResourceService(const Config& cfg, const Resource& r, std::vector<Gpu> gpus, std::vector<std::string> control)
      : cfg_(cfg), r_(r), gpus_(std::move(gpus)), control_(std::move(control)) {
    for (const Gpu& g : gpus_) healthy_.insert(g.minor);
  }

  // Looks for each GPU's node again; a change goes to every ListAndWatch stream.
  void check_health() {
    std::set<unsigned> now;
    for (const Gpu& g : gpus_)
      if (gpu_present(cfg_.dev_dir, g.minor)) now.insert(g.minor);
    std::lock_guard lock(mutex_);
    if (now == healthy_) return;
    for (const Gpu& g : gpus_)
      if (now.count(g.minor) != healthy_.count(g.minor))
        spdlog::warn("{}: GPU {} ({}) is {}", r_.name, g.minor, g.uuid.empty() ? "no UUID" : g.uuid,
                     now.count(g.minor) ? "back" : "gone: its units are unhealthy");
    healthy_ = std::move(now);
    ++version_;
    changed_.notify_all();
  }

  void stop() {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    changed_.notify_all();
  }

  grpc::Status GetDevicePluginOptions(grpc::ServerContext*, const v1beta1::Empty*,
                                      v1beta1::DevicePluginOptions* out) override {
    out->set_pre_start_required(false);
    out->set_get_preferred_allocation_available(true);
    return grpc::Status::OK;
  }

  grpc::Status ListAndWatch(grpc::ServerContext* ctx, const v1beta1::Empty*,
                            grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) override {
    std::unique_lock lock(mutex_);
    uint64_t sent = ~uint64_t(0);
    for (;;) {
      if (stopping_) return grpc::Status::OK;
      if (ctx->IsCancelled()) return grpc::Status::CANCELLED;
      if (sent != version_) {
        const auto list = device_list(r_, gpus_, [&](unsigned m) { return healthy_.count(m) > 0; });
        sent = version_;
        lock.unlock();
        const bool written = writer->Write(list);
        lock.lock();
        if (!written) return grpc::Status::OK;   // the kubelet went away
        continue;
      }
      // Woken by a change or a stop; the timeout notices a kubelet that hung up.
      changed_.wait_for(lock, std::chrono::milliseconds(250));
    }
  }

  grpc::Status GetPreferredAllocation(grpc::ServerContext*, const v1beta1::PreferredAllocationRequest* req,
                                      v1beta1::PreferredAllocationResponse* out) override {
    for (const auto& c : req->container_requests()) {
      const std::vector<std::string> available(c.available_deviceids().begin(), c.available_deviceids().end());
      const std::vector<std::string> must(c.must_include_deviceids().begin(), c.must_include_deviceids().end());
      auto* answer = out->add_container_responses();
      for (std::string& id : preferred(available, must, c.allocation_size())) answer->add_deviceids(std::move(id));
    }
    return grpc::Status::OK;
  }

  grpc::Status Allocate(grpc::ServerContext*, const v1beta1::AllocateRequest* req,
                        v1beta1::AllocateResponse* out) override {
    for (const auto& c : req->container_requests()) {
      const std::vector<std::string> ids(c.devices_ids().begin(), c.devices_ids().end());
      std::string error;
      if (!allocate(cfg_, r_, gpus_, control_, ids, out->add_container_responses(), &error)) {
        spdlog::error("{}: Allocate: {}", r_.name, error);
        return {grpc::StatusCode::INVALID_ARGUMENT, error};
      }
      spdlog::info("{}: allocated {} units ({}) at priority {}", r_.name, ids.size(),
                   ids.empty() ? std::string() : ids.front() + (ids.size() > 1 ? ", ..." : ""), r_.priority);
    }
    return grpc::Status::OK;
  }

  grpc::Status PreStartContainer(grpc::ServerContext*, const v1beta1::PreStartContainerRequest*,
                                 v1beta1::PreStartContainerResponse*) override {
    return grpc::Status::OK;   // nothing to do before a container starts (pre_start_required is false)
  }

 private:
  const Config& cfg_;
  const Resource& r_;
  const std::vector<Gpu> gpus_;
  const std::vector<std::string> control_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::set<unsigned> healthy_;
  uint64_t version_ = 0;
  bool stopping_ = false;
};

struct Served {
  const Resource* resource;
  std::string socket;
  std::unique_ptr<ResourceService> service;
  std::unique_ptr<grpc::Server> server;
};

}  // namespace

struct Plugin::Impl {
  Config cfg;
  std::vector<Gpu> gpus;
  std::vector<std::string> control;
  std::vector<Served> served;

  std::string kubelet_path() const { return cfg.plugin_dir + "/" + cfg.kubelet_socket; }

  void stop_servers() {
    for (Served& s : served) {
      s.service->stop();
      // Streams end at once (stop()); a call still running gets a second.
      s.server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
      s.server->Wait();
      ::unlink(s.socket.c_str());
    }
    served.clear();
  }

  bool start_servers() {
    for (const Resource& r : cfg.resources) {
      Served s{&r, cfg.plugin_dir + "/" + r.endpoint(), nullptr, nullptr};
      ::unlink(s.socket.c_str());   // one of a plugin before this one: the kubelet would find no one there
      s.service = std::make_unique<ResourceService>(cfg, r, gpus, control);
      grpc::ServerBuilder builder;
      builder.AddListeningPort("unix://" + s.socket, grpc::InsecureServerCredentials());
      builder.RegisterService(s.service.get());
      s.server = builder.BuildAndStart();
      if (!s.server) {
        spdlog::error("{}: cannot serve on {}", r.name, s.socket);
        stop_servers();
        return false;
      }
      served.push_back(std::move(s));
    }
    return true;
  }

  bool register_all() {
    auto channel = grpc::CreateChannel("unix://" + kubelet_path(), grpc::InsecureChannelCredentials());
    auto stub = v1beta1::Registration::NewStub(channel);
    for (const Served& s : served) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + cfg.register_timeout);  // gRPC takes wall-clock deadlines
      v1beta1::RegisterRequest req;
      req.set_version(kApiVersion);
      req.set_endpoint(s.resource->endpoint());
      req.set_resource_name(s.resource->name);
      req.mutable_options()->set_get_preferred_allocation_available(true);
      v1beta1::Empty answer;
      const grpc::Status status = stub->Register(&ctx, req, &answer);
      if (!status.ok()) {
        spdlog::warn("{}: the kubelet ({}) did not register it: {}", s.resource->name, kubelet_path(),
                     status.error_message());
        return false;
      }
      spdlog::info("{}: registered with the kubelet: {} units on {} GPUs at priority {}{}", s.resource->name,
                   s.resource->per_gpu * gpus.size(), gpus.size(), s.resource->priority,
                   s.resource->key && !cfg.key_file.empty() ? ", with the key" : "");
    }
    return true;
  }
};

Plugin::Plugin(Config cfg) : impl_(std::make_unique<Impl>()) { impl_->cfg = std::move(cfg); }

Plugin::~Plugin() = default;

int Plugin::run(int stop_fd) {
  Impl& p = *impl_;
  const Config& cfg = p.cfg;
  std::string error;
  if (!prepare_profiles(cfg.db, &error)) {
    spdlog::error("the profile database: {}", error);
    return 1;
  }
  const bool any_key = std::any_of(cfg.resources.begin(), cfg.resources.end(), [](const Resource& r) { return r.key; });
  if (any_key && !cfg.key_file.empty()) {
    if (!copy_key(cfg.key_file, cfg.key_copy, cfg.key_uid, &error)) {
      spdlog::error("the key: {}", error);
      return 1;
    }
    spdlog::info("key copy for containers at {} (uid {}, mode 0400)", cfg.key_copy, cfg.key_uid);
  } else if (any_key) {
    spdlog::warn("no --key-file: containers at reserved priorities get no key (fine only if the daemon has none)");
  }
  p.gpus = find_gpus(cfg.dev_dir, cfg.driver_dir);
  p.control = control_nodes(cfg.dev_dir);
  if (p.gpus.empty()) spdlog::warn("no GPU found ({}/nvidia<N>): every resource advertises 0 units", cfg.dev_dir);
  for (const Gpu& g : p.gpus)
    spdlog::info("GPU {}: {}", g.minor, g.uuid.empty() ? "no UUID in " + cfg.driver_dir + " (handed by index)" : g.uuid);

  const int watch = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (watch < 0 || inotify_add_watch(watch, cfg.plugin_dir.c_str(), IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM) < 0) {
    spdlog::error("cannot watch {}: {}", cfg.plugin_dir, std::strerror(errno));
    if (watch >= 0) ::close(watch);
    return 1;
  }
  std::set<std::string> own;
  for (const Resource& r : cfg.resources) own.insert(r.endpoint());

  bool restart = true, registered = false;
  auto backoff = std::chrono::milliseconds(200);
  auto next_register = Clock::now(), next_health = Clock::now() + cfg.health_interval;
  int rc = 0;
  for (;;) {
    if (restart) {
      p.stop_servers();
      if (!p.start_servers()) {
        rc = 1;
        break;
      }
      restart = false;
      registered = false;
      backoff = std::chrono::milliseconds(200);
      next_register = Clock::now();
    }
    const auto now = Clock::now();
    if (!registered && now >= next_register) {
      if (exists(p.kubelet_path()) && p.register_all()) {
        registered = true;
        ++registrations_;
      } else {
        next_register = now + backoff;
        backoff = std::min(backoff * 2, std::chrono::milliseconds(5000));
      }
    }
    if (now >= next_health) {
      for (Served& s : p.served) s.service->check_health();
      // A socket gone without an event seen (the watch's queue overflowed): serve it again.
      for (Served& s : p.served)
        if (!exists(s.socket)) restart = true;
      next_health = now + cfg.health_interval;
    }
    if (restart) continue;
    auto until = registered ? next_health : std::min(next_health, next_register);
    const int timeout = int(std::clamp<int64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count() + 1, 0, 1000));
    pollfd fds[2] = {{stop_fd, POLLIN, 0}, {watch, POLLIN, 0}};
    if (::poll(fds, 2, timeout) < 0 && errno != EINTR) {
      spdlog::error("poll: {}", std::strerror(errno));
      rc = 1;
      break;
    }
    if (fds[0].revents != 0) break;
    if (fds[1].revents & POLLIN) {
      alignas(inotify_event) char buf[4096];
      ssize_t n;
      while ((n = ::read(watch, buf, sizeof buf)) > 0) {
        for (char* at = buf; at < buf + n;) {
          const auto* ev = reinterpret_cast<const inotify_event*>(at);
          at += sizeof(inotify_event) + ev->len;
          const std::string name = ev->len > 0 ? ev->name : "";
          if (ev->mask & IN_Q_OVERFLOW) next_health = Clock::now();
          if (name == cfg.kubelet_socket && (ev->mask & (IN_CREATE | IN_MOVED_TO))) {
            // A new kubelet: it knows no plugin until each registers again, on a fresh socket.
            spdlog::info("{} made anew (the kubelet restarted): registering again", p.kubelet_path());
            restart = true;
          } else if (own.count(name) && (ev->mask & (IN_DELETE | IN_MOVED_FROM)) &&
                     !exists(cfg.plugin_dir + "/" + name)) {
            // The kubelet removes every socket when it starts; ours are made again (our own
            // removal while restarting is followed by a new socket, which the check above sees).
            spdlog::info("{} was removed: serving it again", name);
            restart = true;
          }
        }
      }
    }
  }
  p.stop_servers();
  ::close(watch);
  if (rc == 0) spdlog::info("stopped");
  return rc;
}

}  // namespace fikit::deviceplugin
