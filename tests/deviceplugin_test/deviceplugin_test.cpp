// fikit-device-plugin without a cluster. A fake kubelet serves Registration on kubelet.sock in a
// temporary plugin folder; the plugin (in-process, or the binary) registers there, and a gRPC client
// calls its DevicePlugin service as the kubelet would. The GPUs are files named as the driver names
// its device nodes, and information files as the driver writes them. Every wait is bounded: generous
// for a busy 2-core machine, and a test that runs out fails rather than hangs.
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <mutex>
#include <set>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "allocation.h"
#include "api.grpc.pb.h"
#include "auth.h"
#include "hook_settings.h"
#include "plugin.h"
#include "profiledb.h"
#include "shared_files.h"

namespace fs = std::filesystem;
using namespace fikit::deviceplugin;
using namespace std::chrono_literals;

namespace {

constexpr auto kWait = 60s;   // the most any one step may take on a busy machine

// A folder of its own under /tmp (unix socket paths must stay short), removed at the end. Mode 755:
// another user reaches what a test makes for it inside.
struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/fikit-dp-XXXXXX";
    path = mkdtemp(tmpl);
    chmod(path.c_str(), 0755);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

void write_file(const std::string& path, const std::string& text, mode_t mode = 0644) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
  chmod(path.c_str(), mode);
}

// A node with GPUs 0 and 1 (UUIDs in the driver's information files) and the driver's shared nodes.
struct FakeNode {
  std::string dev, driver;
  explicit FakeNode(const std::string& root) : dev(root + "/dev"), driver(root + "/driver/gpus") {
    for (const char* name : {"nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"})
      write_file(dev + "/" + name, "");
    for (int minor : {0, 1})
      write_file(driver + "/0000:0" + std::to_string(minor + 3) + ":00.0/information",
                 "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 42\nGPU UUID: \t GPU-0000000" +
                     std::to_string(minor) + "-aaaa-bbbb-cccc-dddddddddddd\nVideo BIOS: \t ??.??.??.??.??\n"
                     "Bus Type: \t PCIe\nBus Location: \t 0000:0" + std::to_string(minor + 3) +
                     ":00.0\nDevice Minor: \t " + std::to_string(minor) + "\nGPU Excluded:\t No\n");
  }
};

Config test_config(const TempDir& t, const FakeNode& node) {
  Config cfg;
  cfg.plugin_dir = t.path + "/plugins";
  fs::create_directories(cfg.plugin_dir);
  cfg.resources = default_resources();
  cfg.scheduler = "10.1.2.3:47800";
  cfg.hook_dir = t.path + "/opt/fikit";
  cfg.hook = cfg.hook_dir + "/current/lib/libfikit_hook.so";
  cfg.db = t.path + "/lib/profiles/profiles.db";
  cfg.bell = t.path + "/run/bell";
  cfg.key_copy = t.path + "/lib/keys/container.key";
  cfg.key_uid = getuid();   // readable by whoever runs the test
  cfg.dev_dir = node.dev;
  cfg.driver_dir = node.driver;
  cfg.health_interval = 100ms;
  cfg.register_timeout = 10s;
  return cfg;
}

std::string make_key(const std::string& path) {
  std::string error;
  if (!fikit::protocol::create_key_file(path, error)) ADD_FAILURE() << error;
  std::ifstream in(path);
  std::string text;
  std::getline(in, text);
  return text;
}

// The kubelet's Registration service, recording what it is asked.
class FakeKubelet final : public v1beta1::Registration::Service {
 public:
  explicit FakeKubelet(std::string socket) : socket_(std::move(socket)) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix://" + socket_, grpc::InsecureServerCredentials());
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
    EXPECT_NE(server_, nullptr) << "cannot serve " << socket_;
  }
  ~FakeKubelet() override { stop(); }

  // As a kubelet going away: stops serving and removes its socket.
  void stop() {
    if (!server_) return;
    server_->Shutdown(std::chrono::system_clock::now() + 2s);
    server_->Wait();
    server_.reset();
    unlink(socket_.c_str());
  }

  grpc::Status Register(grpc::ServerContext*, const v1beta1::RegisterRequest* req, v1beta1::Empty*) override {
    std::lock_guard lock(mutex_);
    requests_.push_back(*req);
    changed_.notify_all();
    return grpc::Status::OK;
  }

  // Waits (bounded) until `n` registrations came; what came by then.
  std::vector<v1beta1::RegisterRequest> wait_for(size_t n) {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, kWait, [&] { return requests_.size() >= n; });
    return requests_;
  }

 private:
  std::string socket_;
  std::unique_ptr<grpc::Server> server_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<v1beta1::RegisterRequest> requests_;
};

// The plugin in a thread of the test, stopped through an eventfd as SIGTERM stops the binary.
class RunningPlugin {
 public:
  explicit RunningPlugin(Config cfg) : plugin_(std::move(cfg)), stop_fd_(eventfd(0, EFD_CLOEXEC)) {
    thread_ = std::thread([this] { rc_ = plugin_.run(stop_fd_); });
  }
  ~RunningPlugin() { stop(); }
  int stop() {
    if (thread_.joinable()) {
      const uint64_t one = 1;
      EXPECT_EQ(write(stop_fd_, &one, sizeof one), ssize_t(sizeof one));
      thread_.join();
      close(stop_fd_);
    }
    return rc_;
  }
  const Plugin& plugin() const { return plugin_; }

 private:
  Plugin plugin_;
  int stop_fd_;
  int rc_ = -1;
  std::thread thread_;
};

std::unique_ptr<v1beta1::DevicePlugin::Stub> dial(const std::string& socket) {
  return v1beta1::DevicePlugin::NewStub(grpc::CreateChannel("unix://" + socket, grpc::InsecureChannelCredentials()));
}

template <typename Call>
grpc::Status call_with_deadline(Call call) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kWait);
  ctx.set_wait_for_ready(true);   // the plugin's socket may be in the making
  return call(ctx);
}

// The first list a ListAndWatch stream sends, if one comes (the plugin may stop serving meanwhile).
std::optional<v1beta1::ListAndWatchResponse> try_first_list(const std::string& socket) {
  auto stub = dial(socket);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kWait);
  ctx.set_wait_for_ready(true);
  v1beta1::Empty empty;
  auto reader = stub->ListAndWatch(&ctx, empty);
  v1beta1::ListAndWatchResponse list;
  const bool read = reader->Read(&list);
  ctx.TryCancel();
  reader->Finish();
  if (!read) return std::nullopt;
  return list;
}

v1beta1::ListAndWatchResponse first_list(const std::string& socket) {
  auto list = try_first_list(socket);
  EXPECT_TRUE(list.has_value()) << "no device list from " << socket;
  return list.value_or(v1beta1::ListAndWatchResponse{});
}

std::map<std::string, std::string> envs_of(const v1beta1::ContainerAllocateResponse& c) {
  return {c.envs().begin(), c.envs().end()};
}

std::map<std::string, std::pair<std::string, bool>> mounts_of(const v1beta1::ContainerAllocateResponse& c) {
  std::map<std::string, std::pair<std::string, bool>> out;
  for (const auto& m : c.mounts()) out[m.container_path()] = {m.host_path(), m.read_only()};
  return out;
}

std::set<std::string> devices_of(const v1beta1::ContainerAllocateResponse& c) {
  std::set<std::string> out;
  for (const auto& d : c.devices()) {
    EXPECT_EQ(d.container_path(), d.host_path());
    EXPECT_EQ(d.permissions(), "rw");
    out.insert(d.host_path());
  }
  return out;
}

const Resource& resource(const Config& cfg, const std::string& name) {
  for (const Resource& r : cfg.resources)
    if (r.name == name) return r;
  throw std::runtime_error("no resource " + name);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// What it answers, as functions

TEST(DevicePlugin, FindsEachGpuWithItsUuidAndTheDriversSharedNodes) {
  TempDir t;
  FakeNode node(t.path);
  const auto gpus = find_gpus(node.dev, node.driver);
  ASSERT_EQ(gpus.size(), 2u);   // nvidiactl, nvidia-uvm and nvidia-modeset are not GPUs
  EXPECT_EQ(gpus[0].minor, 0u);
  EXPECT_EQ(gpus[0].uuid, "GPU-00000000-aaaa-bbbb-cccc-dddddddddddd");
  EXPECT_EQ(gpus[1].uuid, "GPU-00000001-aaaa-bbbb-cccc-dddddddddddd");
  EXPECT_EQ(control_nodes(node.dev), (std::vector<std::string>{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"}));
}

TEST(DevicePlugin, AJobIsHandedTheHookItsSettingsTheFoldersAndItsGpuButNoKey) {
  TempDir t;
  FakeNode node(t.path);
  Config cfg = test_config(t, node);
  cfg.key_file = t.path + "/scheduler.key";
  ASSERT_EQ(check_config(cfg), "");
  const auto gpus = find_gpus(node.dev, node.driver);
  v1beta1::ContainerAllocateResponse c;
  std::string error;
  ASSERT_TRUE(allocate(cfg, resource(cfg, "fikit.io/job"), gpus, control_nodes(node.dev), {"gpu1-3"}, &c, &error))
      << error;
  const std::map<std::string, std::string> want = {
      {"LD_PRELOAD", cfg.hook},
      {"FIKIT_MODE", "auto"},
      {"FIKIT_PRIORITY", "5"},
      {"FIKIT_SCHEDULER", "10.1.2.3:47800"},
      {"FIKIT_DB", cfg.db},
      {"FIKIT_BELL", cfg.bell},
      {"NVIDIA_VISIBLE_DEVICES", "GPU-00000001-aaaa-bbbb-cccc-dddddddddddd"},
      {"NVIDIA_DRIVER_CAPABILITIES", "compute,utility"}};
  EXPECT_EQ(envs_of(c), want);   // no FIKIT_KEY_FILE: priority 5 is not reserved
  const std::map<std::string, std::pair<std::string, bool>> mounts = {
      {cfg.hook_dir, {cfg.hook_dir, true}},
      {t.path + "/lib/profiles", {t.path + "/lib/profiles", false}},
      {t.path + "/run", {t.path + "/run", false}}};
  EXPECT_EQ(mounts_of(c), mounts);
  EXPECT_EQ(devices_of(c), (std::set<std::string>{"/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm",
                                                  "/dev/nvidia-uvm-tools"}));
  // Whatever it hands the hook, the hook takes: its own settings table says so.
  for (const auto& [name, value] : c.envs()) {
    if (!name.starts_with("FIKIT_")) continue;
    const auto* s = fikit::settings::find(name.c_str());
    ASSERT_NE(s, nullptr) << name << " is no setting of the hook";
    fikit::settings::Value v;
    char why[192];
    EXPECT_TRUE(fikit::settings::check(*s, value.c_str(), &v, why, sizeof why)) << name << "=" << value << ": " << why;
  }
}

TEST(DevicePlugin, AServiceIsHandedTheKeyAsAFileAndMpsItsClientPriority) {
  TempDir t;
  FakeNode node(t.path);
  Config cfg = test_config(t, node);
  cfg.key_file = t.path + "/scheduler.key";
  cfg.mps_dir = t.path + "/run/mps";
  cfg.gpu_devices = false;
  ASSERT_EQ(check_config(cfg), "");
  v1beta1::ContainerAllocateResponse c;
  std::string error;
  ASSERT_TRUE(allocate(cfg, resource(cfg, "fikit.io/service"), find_gpus(node.dev, node.driver), {}, {"gpu0-0"}, &c,
                       &error))
      << error;
  const auto envs = envs_of(c);
  EXPECT_EQ(envs.at("FIKIT_PRIORITY"), "0");
  EXPECT_EQ(envs.at("FIKIT_KEY_FILE"), kContainerKeyPath);
  EXPECT_EQ(mounts_of(c).at(kContainerKeyPath), std::make_pair(cfg.key_copy, true));
  EXPECT_EQ(envs.at("CUDA_MPS_PIPE_DIRECTORY"), cfg.mps_dir + "/pipe");
  EXPECT_EQ(envs.at("CUDA_MPS_CLIENT_PRIORITY"), "0");
  // The MPS folder is inside the bell's, mounted already.
  EXPECT_EQ(mounts_of(c).count(cfg.mps_dir), 0u);
  // The GPU left to NVIDIA's device plugin: nothing of it here.
  EXPECT_EQ(c.devices_size(), 0);
  EXPECT_EQ(envs.count("NVIDIA_VISIBLE_DEVICES"), 0u);
}

TEST(DevicePlugin, AnIdItNeverAdvertisedIsRefused) {
  TempDir t;
  FakeNode node(t.path);
  Config cfg = test_config(t, node);
  ASSERT_EQ(check_config(cfg), "");
  const auto gpus = find_gpus(node.dev, node.driver);
  for (const char* id : {"gpu7-0", "gpu0", "gpu-1", "nvidia0", "gpu0-x", ""}) {
    v1beta1::ContainerAllocateResponse c;
    std::string error;
    EXPECT_FALSE(allocate(cfg, resource(cfg, "fikit.io/job"), gpus, {}, {"gpu0-1", id}, &c, &error)) << id;
  }
}

TEST(DevicePlugin, PreferredUnitsSpreadOverTheGpusWithTheMostFree) {
  const std::vector<std::string> available = {"gpu0-0", "gpu0-1", "gpu1-0", "gpu1-1", "gpu1-2", "gpu2-0"};
  EXPECT_EQ(preferred(available, {}, 1), (std::vector<std::string>{"gpu1-0"}));
  EXPECT_EQ(preferred(available, {}, 3), (std::vector<std::string>{"gpu1-0", "gpu0-0", "gpu2-0"}));
  EXPECT_EQ(preferred(available, {"gpu0-1"}, 2), (std::vector<std::string>{"gpu0-1", "gpu1-0"}));
  EXPECT_EQ(preferred({"gpu0-0"}, {}, 2), (std::vector<std::string>{"gpu0-0"}));   // no more to give
}

TEST(DevicePlugin, AConfigurationTheHookWouldNotTakeIsRefused) {
  TempDir t;
  FakeNode node(t.path);
  auto refusal = [&](std::function<void(Config&)> change) {
    Config cfg = test_config(t, node);
    change(cfg);
    return check_config(cfg);
  };
  EXPECT_EQ(refusal([](Config&) {}), "");
  EXPECT_NE(refusal([](Config& c) { c.scheduler = "node-a:47800"; }), "");
  EXPECT_NE(refusal([](Config& c) { c.scheduler = "10.0.0.1"; }), "");
  EXPECT_NE(refusal([](Config& c) { c.mode = "fast"; }), "");
  EXPECT_NE(refusal([](Config& c) { c.hook = "/usr/lib/libfikit_hook.so"; }), "");   // outside --hook-dir
  EXPECT_NE(refusal([](Config& c) { c.db = "profiles.db"; }), "");
  EXPECT_NE(refusal([](Config& c) { c.resources.push_back(c.resources[0]); }), "");
  Resource r;
  std::string error;
  EXPECT_TRUE(parse_resource("example.com/batch:7:16", &r, &error)) << error;
  EXPECT_EQ(r.name, "example.com/batch");
  EXPECT_EQ(r.priority, 7);
  EXPECT_EQ(r.per_gpu, 16);
  EXPECT_EQ(r.endpoint(), "fikit-batch.sock");
  for (const char* bad : {"fikit.io/job", "fikit.io/job:5", "fikit.io/job:10:1", "fikit.io/job:5:0", "job:5:1",
                          "kubernetes.io/job:5:1", "fikit.io/job:5:1:2", "fikit.io/-job:5:1"})
    EXPECT_FALSE(parse_resource(bad, &r, &error)) << bad;
}

// ---------------------------------------------------------------------------------------------
// Against a fake kubelet, through gRPC

TEST(DevicePlugin, RegistersEachResourceThenAnswersListAndWatchAndAllocate) {
  TempDir t;
  FakeNode node(t.path);
  Config cfg = test_config(t, node);
  cfg.key_file = t.path + "/scheduler.key";
  const std::string key = make_key(cfg.key_file);
  ASSERT_EQ(check_config(cfg), "");
  FakeKubelet kubelet(cfg.plugin_dir + "/kubelet.sock");
  RunningPlugin running(cfg);

  const auto requests = kubelet.wait_for(2);
  ASSERT_EQ(requests.size(), 2u);
  std::map<std::string, std::string> endpoints;
  for (const auto& r : requests) {
    EXPECT_EQ(r.version(), "v1beta1");
    EXPECT_TRUE(r.options().get_preferred_allocation_available());
    EXPECT_FALSE(r.options().pre_start_required());
    endpoints[r.resource_name()] = r.endpoint();
  }
  EXPECT_EQ(endpoints, (std::map<std::string, std::string>{{"fikit.io/service", "fikit-service.sock"},
                                                           {"fikit.io/job", "fikit-job.sock"}}));
  // Registered only once it serves: the kubelet dials the endpoint at once.
  const std::string job_socket = cfg.plugin_dir + "/fikit-job.sock";
  auto job = dial(job_socket);
  v1beta1::DevicePluginOptions options;
  ASSERT_TRUE(call_with_deadline([&](grpc::ClientContext& ctx) {
                return job->GetDevicePluginOptions(&ctx, v1beta1::Empty(), &options);
              }).ok());
  EXPECT_TRUE(options.get_preferred_allocation_available());

  // 8 job units per GPU, 1 service unit per GPU, all healthy.
  std::set<std::string> ids;
  const auto job_list = first_list(job_socket);
  for (const auto& d : job_list.devices()) {
    EXPECT_EQ(d.health(), "Healthy") << d.id();
    ids.insert(d.id());
  }
  EXPECT_EQ(ids.size(), 16u);
  EXPECT_TRUE(ids.count("gpu0-0") && ids.count("gpu1-7"));
  const auto service_list = first_list(cfg.plugin_dir + "/fikit-service.sock");
  ASSERT_EQ(service_list.devices_size(), 2);
  EXPECT_EQ(service_list.devices(0).id(), "gpu0-0");
  EXPECT_EQ(service_list.devices(1).id(), "gpu1-0");

  // Allocate for two containers of one pod: each its own answer.
  v1beta1::AllocateRequest req;
  req.add_container_requests()->add_devices_ids("gpu0-2");
  req.add_container_requests()->add_devices_ids("gpu1-5");
  v1beta1::AllocateResponse answer;
  ASSERT_TRUE(call_with_deadline([&](grpc::ClientContext& ctx) { return job->Allocate(&ctx, req, &answer); }).ok());
  ASSERT_EQ(answer.container_responses_size(), 2);
  EXPECT_EQ(envs_of(answer.container_responses(0)).at("NVIDIA_VISIBLE_DEVICES"),
            "GPU-00000000-aaaa-bbbb-cccc-dddddddddddd");
  EXPECT_EQ(envs_of(answer.container_responses(1)).at("NVIDIA_VISIBLE_DEVICES"),
            "GPU-00000001-aaaa-bbbb-cccc-dddddddddddd");
  EXPECT_EQ(envs_of(answer.container_responses(0)).at("FIKIT_PRIORITY"), "5");
  EXPECT_TRUE(devices_of(answer.container_responses(1)).count("/dev/nvidia1"));

  // A unit it never advertised: the kubelet is told, not given an empty answer.
  v1beta1::AllocateRequest bad;
  bad.add_container_requests()->add_devices_ids("gpu9-0");
  v1beta1::AllocateResponse none;
  EXPECT_EQ(call_with_deadline([&](grpc::ClientContext& ctx) { return job->Allocate(&ctx, bad, &none); }).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  // The service's answer carries the key, as a file the test's user reads, holding the daemon's key.
  auto service = dial(cfg.plugin_dir + "/fikit-service.sock");
  v1beta1::AllocateRequest sreq;
  sreq.add_container_requests()->add_devices_ids("gpu1-0");
  v1beta1::AllocateResponse sanswer;
  ASSERT_TRUE(
      call_with_deadline([&](grpc::ClientContext& ctx) { return service->Allocate(&ctx, sreq, &sanswer); }).ok());
  const auto key_mount = mounts_of(sanswer.container_responses(0)).at(kContainerKeyPath);
  EXPECT_TRUE(key_mount.second);
  fikit::protocol::Key loaded;
  std::string error;
  EXPECT_TRUE(fikit::protocol::load_key_file(key_mount.first, loaded, error)) << error;
  std::string copied;
  std::getline(std::ifstream(key_mount.first), copied);
  EXPECT_EQ(copied, key);

  // GetPreferredAllocation: from the GPU with more free units.
  v1beta1::PreferredAllocationRequest preq;
  auto* c = preq.add_container_requests();
  for (const char* id : {"gpu0-0", "gpu1-0", "gpu1-1"}) c->add_available_deviceids(id);
  c->set_allocation_size(1);
  v1beta1::PreferredAllocationResponse panswer;
  ASSERT_TRUE(call_with_deadline([&](grpc::ClientContext& ctx) {
                return job->GetPreferredAllocation(&ctx, preq, &panswer);
              }).ok());
  ASSERT_EQ(panswer.container_responses_size(), 1);
  EXPECT_EQ(panswer.container_responses(0).deviceids(0), "gpu1-0");

  EXPECT_EQ(running.stop(), 0);
  EXPECT_FALSE(fs::exists(job_socket));   // its sockets go with it
}

TEST(DevicePlugin, RegistersAgainWhenTheKubeletRestarts) {
  TempDir t;
  FakeNode node(t.path);
  Config cfg = test_config(t, node);
  ASSERT_EQ(check_config(cfg), "");
  const std::string kubelet_socket = cfg.plugin_dir + "/kubelet.sock";
  auto kubelet = std::make_unique<FakeKubelet>(kubelet_socket);
  RunningPlugin running(cfg);
  ASSERT_EQ(kubelet->wait_for(2).size(), 2u);
  const auto before = running.plugin().registrations();

  // A kubelet restarting: the old one goes with its socket; the new one removes every socket in
  // the folder (the plugins' too), then serves kubelet.sock again.
  kubelet->stop();
  kubelet.reset();
  for (const auto& entry : fs::directory_iterator(cfg.plugin_dir)) fs::remove(entry.path());
  kubelet = std::make_unique<FakeKubelet>(kubelet_socket);

  // (Two rounds may arrive by the time it looks: the plugin may register twice, below.)
  const auto again = kubelet->wait_for(2);
  ASSERT_GE(again.size(), 2u) << "the plugin did not register with the new kubelet";
  std::set<std::string> names;
  for (const auto& r : again) names.insert(r.resource_name());
  EXPECT_EQ(names, (std::set<std::string>{"fikit.io/service", "fikit.io/job"}));
  // The removals and the new kubelet.sock reach the plugin as separate events: it may serve and
  // register twice, and the new kubelet may hear a round before the plugin has counted it (a full
  // suite beside two busy loops caught both). So: a round counted, then a list from the sockets
  // made again, each within the wait.
  const auto until = std::chrono::steady_clock::now() + kWait;
  while (running.plugin().registrations() <= before && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(10ms);
  EXPECT_GT(running.plugin().registrations(), before);
  std::optional<v1beta1::ListAndWatchResponse> list;
  while (!(list = try_first_list(cfg.plugin_dir + "/" + again[0].endpoint())) && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(50ms);
  ASSERT_TRUE(list.has_value()) << "no device list from the sockets served again";
  EXPECT_GT(list->devices_size(), 0);
  EXPECT_EQ(running.stop(), 0);
}

TEST(DevicePlugin, RegistersOnceTheKubeletComesAndAgainWhenOnlyItsSocketIsMadeAnew) {
  TempDir t;
  FakeNode node(t.path);
  Config cfg = test_config(t, node);
  ASSERT_EQ(check_config(cfg), "");
  const std::string kubelet_socket = cfg.plugin_dir + "/kubelet.sock";
  RunningPlugin running(cfg);   // no kubelet yet: it waits for one
  std::this_thread::sleep_for(300ms);
  auto kubelet = std::make_unique<FakeKubelet>(kubelet_socket);
  ASSERT_EQ(kubelet->wait_for(2).size(), 2u);
  // The kubelet's socket removed and made again, the plugin's left in place.
  kubelet.reset();
  kubelet = std::make_unique<FakeKubelet>(kubelet_socket);
  EXPECT_EQ(kubelet->wait_for(2).size(), 2u);
  EXPECT_EQ(running.stop(), 0);
}

TEST(DevicePlugin, UnitsOfAGpuWhoseNodeIsGoneAreReportedUnhealthy) {
  TempDir t;
  FakeNode node(t.path);
  Config cfg = test_config(t, node);
  ASSERT_EQ(check_config(cfg), "");
  FakeKubelet kubelet(cfg.plugin_dir + "/kubelet.sock");
  RunningPlugin running(cfg);
  ASSERT_EQ(kubelet.wait_for(2).size(), 2u);
  auto stub = dial(cfg.plugin_dir + "/fikit-service.sock");
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kWait);
  auto reader = stub->ListAndWatch(&ctx, v1beta1::Empty());
  v1beta1::ListAndWatchResponse list;
  ASSERT_TRUE(reader->Read(&list));
  ASSERT_EQ(list.devices_size(), 2);
  fs::remove(node.dev + "/nvidia1");
  ASSERT_TRUE(reader->Read(&list)) << "no update after a GPU's node went";
  std::map<std::string, std::string> health;
  for (const auto& d : list.devices()) health[d.id()] = d.health();
  EXPECT_EQ(health, (std::map<std::string, std::string>{{"gpu0-0", "Healthy"}, {"gpu1-0", "Unhealthy"}}));
  ctx.TryCancel();
  reader->Finish();
  EXPECT_EQ(running.stop(), 0);
}

TEST(DevicePlugin, TheBinaryRegistersAndLeavesCleanlyOnSigterm) {
  TempDir t;
  FakeNode node(t.path);
  Config cfg = test_config(t, node);
  FakeKubelet kubelet(cfg.plugin_dir + "/kubelet.sock");
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::string uid = std::to_string(getuid());
    execl(FIKIT_DEVICE_PLUGIN_PATH, "fikit-device-plugin", "--scheduler", "10.1.2.3:47800", "--plugin-dir",
          cfg.plugin_dir.c_str(), "--hook-dir", cfg.hook_dir.c_str(), "--hook", cfg.hook.c_str(), "--db",
          cfg.db.c_str(), "--bell", cfg.bell.c_str(), "--dev-dir", cfg.dev_dir.c_str(), "--driver-dir",
          cfg.driver_dir.c_str(), "--resource", "fikit.io/job:5:2", "--log-level", "warn", nullptr);
    _exit(127);
  }
  const auto requests = kubelet.wait_for(1);
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].resource_name(), "fikit.io/job");
  EXPECT_EQ(first_list(cfg.plugin_dir + "/fikit-job.sock").devices_size(), 4);
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + kWait;
  pid_t done = 0;
  while ((done = waitpid(pid, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(20ms);
  if (done == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    FAIL() << "still running " << std::chrono::duration_cast<std::chrono::seconds>(kWait).count()
           << " s after SIGTERM";
  }
  ASSERT_TRUE(WIFEXITED(status)) << "ended by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_FALSE(fs::exists(cfg.plugin_dir + "/fikit-job.sock"));
}

// ---------------------------------------------------------------------------------------------
// The shared files, as a container's user other than root sees them

namespace {

// Runs `body` in a child process as `uid` (and its group); its exit status (0: all held).
int as_user(uid_t uid, const std::function<int()>& body) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (setgroups(0, nullptr) != 0 || setgid(uid) != 0 || setuid(uid) != 0) _exit(90);
    _exit(body());
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int store_run(const std::string& db, const std::string& key) {
  try {
    fikit::profiledb::Database d(db, fikit::profiledb::Database::Open::Create, 10000);
    fikit::profiledb::RunSummary run;
    run.gpu_ops = 1;
    d.add_run(key, "python3 train.py", run, {}, {}, 10);
    return 0;
  } catch (const std::exception& e) {
    fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}

}  // namespace

TEST(DevicePluginFiles, TwoOtherUsersStoreProfilesInTheDatabaseItPrepared) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: it makes the files as root and writes them as other users";
  TempDir t;
  const std::string db = t.path + "/lib/profiles/profiles.db";
  std::string error;
  ASSERT_TRUE(prepare_profiles(db, &error)) << error;
  struct stat st;
  ASSERT_EQ(stat((t.path + "/lib/profiles").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 01777u);
  ASSERT_EQ(stat(db.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0666u);
  EXPECT_EQ(st.st_uid, 0u);
  chmod((t.path + "/lib").c_str(), 0755);
  // Two containers' users, one after the other and then at once, as jobs on one node would.
  EXPECT_EQ(as_user(65534, [&] { return store_run(db, "job-a"); }), 0);
  EXPECT_EQ(as_user(65533, [&] { return store_run(db, "job-b"); }), 0);
  std::thread other([&] { EXPECT_EQ(as_user(65534, [&] { return store_run(db, "job-a"); }), 0); });
  EXPECT_EQ(as_user(65533, [&] { return store_run(db, "job-b"); }), 0);
  other.join();
  // The daemon (root) reads both.
  fikit::profiledb::Database reader(db, fikit::profiledb::Database::Open::ReadOnly);
  ASSERT_TRUE(reader.task("job-a").has_value());
  ASSERT_TRUE(reader.task("job-b").has_value());
  EXPECT_EQ(reader.task("job-a")->runs_measured, 2u);
  EXPECT_EQ(reader.task("job-b")->runs_measured, 2u);
  // Prepared again (the plugin restarting): still the same database, still theirs to write.
  ASSERT_TRUE(prepare_profiles(db, &error)) << error;
  EXPECT_EQ(as_user(65534, [&] { return store_run(db, "job-c"); }), 0);
}

TEST(DevicePluginFiles, ALinkInPlaceOfTheDatabaseIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root, as the plugin runs";
  TempDir t;
  fs::create_directories(t.path + "/profiles");
  write_file(t.path + "/victim", "x", 0600);
  fs::create_symlink(t.path + "/victim", t.path + "/profiles/profiles.db");
  std::string error;
  EXPECT_FALSE(prepare_profiles(t.path + "/profiles/profiles.db", &error));
  EXPECT_NE(error.find("link"), std::string::npos) << error;
  struct stat st;
  ASSERT_EQ(stat((t.path + "/victim").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);   // not made 0666 through the link
}

TEST(DevicePluginFiles, TheKeyCopyIsReadByItsUserOnly) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: it gives the copy to another user";
  TempDir t;
  const std::string original = t.path + "/scheduler.key", copy = t.path + "/keys/container.key";
  const std::string key = make_key(original);
  std::string error;
  ASSERT_TRUE(copy_key(original, copy, 65534, &error)) << error;
  struct stat st;
  ASSERT_EQ(stat(copy.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 65534u);
  EXPECT_EQ(st.st_mode & 07777, 0400u);
  ASSERT_EQ(stat((t.path + "/keys").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  // As a container would see it: bound in where its user reaches it.
  const std::string bound = t.path + "/bound.key";
  ASSERT_EQ(link(copy.c_str(), bound.c_str()), 0);
  auto loads = [&] {
    fikit::protocol::Key k;
    std::string why;
    return fikit::protocol::load_key_file(bound, k, why) ? 0 : 1;
  };
  EXPECT_EQ(as_user(65534, loads), 0);
  EXPECT_EQ(as_user(65533, loads), 1);
  std::string copied;
  std::getline(std::ifstream(copy), copied);
  EXPECT_EQ(copied, key);
  // A key the hook would refuse is not copied.
  chmod(original.c_str(), 0644);
  EXPECT_FALSE(copy_key(original, copy, 65534, &error));
}
