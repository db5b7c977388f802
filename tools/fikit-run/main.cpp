// fikit-run: puts libfikit_hook.so in front of LD_PRELOAD, passes the settings to the hook through
// FIKIT_* environment variables, and replaces itself with the program (exec), so the program's
// exit status, signals and process id are its own.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "address.h"
#include "auth.h"
#include "backend_choice.h"
#include "cli.h"
#include "memory_size.h"
#include "mps.h"
#include "owned_files.h"
#include "measure_progress.h"
#include "run_options.h"
#include "run_settings.h"

namespace {

constexpr int kExitNoHook = 3;
constexpr int kExitNotExecutable = 126;
constexpr int kExitNotFound = 127;

bool readable_file(const std::string& path) { return access(path.c_str(), R_OK) == 0; }

std::string absolute(const std::string& path) {
  char resolved[PATH_MAX];
  return realpath(path.c_str(), resolved) != nullptr ? resolved : path;
}

std::string own_directory() {
  char exe[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return {};
  std::string path(exe, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/'));
}

// --hook, then $FIKIT_HOOK: an explicit choice that is missing is an error, not a reason to fall
// back to another copy. Then the installed layout, then the build tree.
std::string find_hook(const std::optional<std::string>& flag, std::string* error) {
  if (flag) {
    if (readable_file(*flag)) return absolute(*flag);
    *error = "hook library not found: " + *flag + " (from --hook)";
    return {};
  }
  if (const char* env = std::getenv("FIKIT_HOOK"); env != nullptr && *env != '\0') {
    if (readable_file(env)) return absolute(env);
    *error = std::string("hook library not found: ") + env + " (from FIKIT_HOOK)";
    return {};
  }
  const std::string installed = own_directory() + "/../lib/libfikit_hook.so";
  if (readable_file(installed)) return absolute(installed);
  if (readable_file(FIKIT_BUILD_TREE_HOOK)) return FIKIT_BUILD_TREE_HOOK;
  *error = "hook library not found (looked in " + installed + " and " FIKIT_BUILD_TREE_HOOK
           "); build it or pass --hook PATH";
  return {};
}

// LD_PRELOAD entries are separated by colons or spaces; the hook goes first so its dlsym and
// cu* symbols win, and is not added twice when fikit-run is nested.
std::string prepend_preload(const std::string& hook, const char* existing) {
  if (existing == nullptr || *existing == '\0') return hook;
  std::string list = existing;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t end = list.find_first_of(": ", start);
    const std::string entry = list.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (entry == hook) return list;
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return hook + ":" + list;
}

void set_env(const char* name, const std::string& value) { setenv(name, value.c_str(), 1); }

// The scheduler's address as the hook needs it: numeric (the hook never resolves names inside a
// program). Empty with `error` set when the name does not resolve.
std::string numeric_scheduler(const std::string& text, std::string* error) {
  fikit::settings::Value address;   // checked with the environment already: this only takes it apart
  char why[192];
  if (!fikit::settings::check(*fikit::settings::find("FIKIT_SCHEDULER"), text.c_str(), &address, why, sizeof why)) {
    *error = std::string("FIKIT_SCHEDULER: ") + why;
    return {};
  }
  const std::string host(address.host);
  const uint16_t port = address.port;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc != 0 || found == nullptr) {
    *error = "cannot resolve the scheduler's host '" + host + "': " + gai_strerror(rc);
    return {};
  }
  char numeric[INET6_ADDRSTRLEN] = {};
  const bool v6 = found->ai_family == AF_INET6;
  const void* where = v6 ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(found->ai_addr)->sin6_addr)
                         : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr);
  inet_ntop(found->ai_family, where, numeric, sizeof numeric);
  freeaddrinfo(found);
  return (v6 ? "[" + std::string(numeric) + "]" : std::string(numeric)) + ":" + std::to_string(port);
}

// FIKIT_LOG_LEVEL info or debug: say what was chosen (as the hook does at those levels).
bool log_info(const fikit::run::RunSettings& settings) {
  const std::string& level = settings.text("FIKIT_LOG_LEVEL");
  return level == "info" || level == "debug";
}

}  // namespace

int main(int argc, char** argv) {
  fikit::run::RunOptions opts;
  if (const int rc = fikit::run::parse_run_options(argc, argv, &opts); rc != fikit::cli::kGoOn) return rc;
  std::string error;
  const std::string hook = find_hook(opts.hook, &error);
  if (hook.empty()) {
    std::fprintf(stderr, "fikit-run: error: %s\n", error.c_str());
    return kExitNoHook;
  }

  set_env("LD_PRELOAD", prepend_preload(hook, std::getenv("LD_PRELOAD")));
  // Every setting once, typed: a flag, else what the user exported (it counts as its flag, as the
  // help says), else fikit-run's default. What the hook could not use is refused here, where it can
  // still say so, by the hook's own rules: it would log it and carry on with a default inside the
  // program.
  auto resolved = fikit::run::RunSettings::resolve(opts, &error);
  if (!resolved) return fikit::cli::usage_error("fikit-run", error);
  fikit::run::RunSettings& settings = *resolved;
  // A scheduler host it cannot reach: the hook never resolves names inside a program, and would run
  // it unscheduled for its whole life.
  if (settings.is_set("FIKIT_SCHEDULER")) {
    const std::string numeric = numeric_scheduler(settings.text("FIKIT_SCHEDULER"), &error);
    if (numeric.empty() || !settings.set("FIKIT_SCHEDULER", numeric, &error)) return fikit::cli::usage_error("fikit-run", error);
  }
  const std::string& memory_limit = settings.text("FIKIT_MEMORY_LIMIT");
  if (settings.is_set("FIKIT_KEY_FILE")) {
    // Checked here, where a bad key can still stop the start with a clear message; the hook,
    // inside the program, could only run it unscheduled.
    fikit::protocol::Key key;
    if (!fikit::protocol::load_key_file(settings.text("FIKIT_KEY_FILE"), key, error))
      return fikit::cli::usage_error("fikit-run", error);
  }
  const int priority = int(settings.number("FIKIT_PRIORITY"));
  const std::string_view backend = settings.is_set("FIKIT_BACKEND") ? std::string_view(settings.text("FIKIT_BACKEND")) : "auto";
  // The backend: MPS when a control daemon runs for this program (fikit-scheduler --mps on starts
  // one in a folder of its own, whose variables the program then needs), else time-sliced. An MPS
  // client's priority comes from its environment at start: make it FIKIT's.
  const fikit::mps::Found mps = fikit::mps::find_daemon(std::getenv("CUDA_MPS_PIPE_DIRECTORY"));
  const bool verbose = log_info(settings);
  bool outside_mps = mps.running && backend == "timeslice";
  std::string outside_why = "--backend timeslice";
  // A service left to choose (--backend auto) is an MPS client unless its measured runs say that
  // costs it more than --mps-cost-limit; while it measures, its runs alternate between the two
  // (rules/backend_rule.h). Jobs are MPS clients here, unless the daemon says a job started now can
  // be preempted beside a time-sliced service (Policy::job_backend).
  const std::string mode = settings.text("FIKIT_MODE");
  // Before that, what being an MPS client bought its jobs in its last run as one: nothing (its
  // controller could only hold them) sends it outside MPS.
  const bool by_outcome = mps.running && mps.fikit_owned && priority == 0 && backend == "auto" && mode != "off";
  if (const auto line = by_outcome ? fikit::run::outcome_says_outside(settings, opts.command,
                                                                      fikit::mps::default_directory())
                                   : std::nullopt) {
    outside_mps = true;
    outside_why = "what MPS bought its jobs";
    std::fprintf(stderr, "%s\n", line->c_str());
  } else if (mps.running && priority == 0 && backend == "auto" && mode != "off") {
    if (const auto service = fikit::run::service_backend(settings, opts.command);
        service && (!service->choice.trial || mode != "share")) {
      outside_mps = !service->choice.mps;
      outside_why = service->choice.trial ? "measured outside MPS this start" : "its measured MPS cost";
      if (service->choice.measure_more != 0 && mode == "auto" &&
          !settings.set("FIKIT_MEASURE_RUNS", std::to_string(service->runs_stored + service->choice.measure_more), &error))
        return fikit::cli::usage_error("fikit-run", error);
      if (service->choice.trial || verbose) std::fprintf(stderr, "%s\n", fikit::run::backend_line(*service).c_str());
    }
  } else if (mps.running && mps.fikit_owned && priority > 0 && backend == "auto" && mode != "off") {
    const auto key = fikit::run::expected_task_key(settings, opts.command);
    if (const auto line = fikit::run::jobs_backend_says_outside(priority, key.value_or(""),
                                                                fikit::mps::default_directory())) {
      outside_mps = true;
      outside_why = "to be preempted beside a time-sliced service";
      std::fprintf(stderr, "%s\n", line->c_str());
    }
  }
  if (outside_mps) {
    // Not an MPS client although a control daemon runs: a folder where none ever runs, so CUDA
    // finds no pipe and the program gets a context of its own (a service that pays more for being
    // an MPS client than its objective leaves: docs/scheduling.md, "A service outside MPS").
    const std::string none = "/tmp/fikit-no-mps-" + std::to_string(geteuid());
    if (!fikit::protocol::make_private_folder(none, error)) return fikit::cli::usage_error("fikit-run", error);
    set_env("CUDA_MPS_PIPE_DIRECTORY", none);
    if (verbose) std::fprintf(stderr, "fikit-run: backend time-sliced (%s; the MPS control daemon at %s "
                                      "is not used)\n", outside_why.c_str(), mps.pipe_dir.c_str());
  } else if (mps.running) {
    if (mps.fikit_owned) {
      set_env("CUDA_MPS_PIPE_DIRECTORY", mps.pipe_dir);
      set_env("CUDA_MPS_LOG_DIRECTORY", fikit::mps::log_dir_of(fikit::mps::default_directory()));
    }
    if (auto prio = fikit::mps::client_priority(priority, std::getenv("CUDA_MPS_CLIENT_PRIORITY")))
      set_env("CUDA_MPS_CLIENT_PRIORITY", *prio);
    // MPS's own cap as well, where a size is given (a share needs the GPU's size, which only the hook
    // learns): the driver then enforces it whatever path the program allocates by.
    fikit::settings::Value limit;
    char why[192];
    uint64_t pinned_bytes = 0;
    if (!memory_limit.empty() &&
        fikit::settings::check(*fikit::settings::find("FIKIT_MEMORY_LIMIT"), memory_limit.c_str(), &limit, why, sizeof why) &&
        !limit.memory.is_share())
      pinned_bytes = limit.memory.bytes;
    // A job below a service of fikit-scheduler --mps --reserve-memory: at most what the reserve
    // leaves of the smallest GPU, so that a program that escapes the hook still cannot take it.
    std::string pinned_why = "its --memory-limit";
    if (priority > 0 && mps.fikit_owned)
      if (auto reserve_text = fikit::mps::published(fikit::mps::default_directory(), fikit::mps::kReserveFile)) {
        fikit::values::MemorySize reserve;
        const auto total = fikit::mps::smallest_gpu_memory();
        if (fikit::values::parse_memory_size(*reserve_text, reserve) == nullptr && total &&
            reserve.on_device(*total) < *total) {
          const uint64_t left = *total - reserve.on_device(*total);
          if (pinned_bytes == 0 || left < pinned_bytes) pinned_bytes = left, pinned_why = "what the reserve leaves";
        }
      }
    if (pinned_bytes != 0)
      if (auto pinned = fikit::mps::pinned_memory_limit(pinned_bytes, std::getenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"),
                                                        std::getenv("CUDA_VISIBLE_DEVICES"))) {
        set_env("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", *pinned);
        if (verbose) std::fprintf(stderr, "fikit-run: MPS pinned-memory limit %s (%s)\n", pinned->c_str(), pinned_why.c_str());
      }
    if (verbose)
      std::fprintf(stderr, "fikit-run: backend MPS (control daemon at %s), client priority %s\n", mps.pipe_dir.c_str(),
                   std::getenv("CUDA_MPS_CLIENT_PRIORITY"));
  } else if (backend == "mps") {
    std::fprintf(stderr, "fikit-run: warning: --backend mps, but no MPS control daemon runs at %s: the program will "
                 "not be an MPS client (start fikit-scheduler --mps on)\n", mps.pipe_dir.c_str());
  } else if (verbose) {
    std::fprintf(stderr, "fikit-run: backend time-sliced (no MPS control daemon at %s; fikit-scheduler --mps on "
                 "gives the recommended setup)\n", mps.pipe_dir.c_str());
  }

  if (const std::string line = fikit::run::measure_progress_line(settings, opts.command); !line.empty())
    std::fprintf(stderr, "%s\n", line.c_str());

  // The program's environment, once: every setting as resolved above.
  settings.export_to_environment();

  std::vector<char*> args;
  for (const std::string& a : opts.command) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execvp(args[0], args.data());

  // Only reached when exec failed; same codes as a POSIX shell.
  const int exec_errno = errno;
  const std::string& program = opts.command[0];
  if (exec_errno == ENOENT) {
    std::fprintf(stderr, "fikit-run: error: %s: %s\n", program.c_str(),
                 program.find('/') == std::string::npos ? "command not found" : "no such file");
    return kExitNotFound;
  }
  std::fprintf(stderr, "fikit-run: error: cannot run %s: %s\n", program.c_str(), std::strerror(exec_errno));
  return kExitNotExecutable;
}
