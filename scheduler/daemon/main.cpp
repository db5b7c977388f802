// fikit-scheduler: the FIKIT scheduling daemon; `fikit-scheduler status` asks a running one,
// `fikit-scheduler keygen PATH` writes a key file for authenticated clients.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "address.h"
#include "auth.h"
#include "bell.h"
#include "cli.h"
#include "control.h"
#include "db_profiles.h"
#include "mps.h"
#include "options.h"
#include "profiledb.h"
#include "server.h"
#include "service_notify.h"

namespace {

// Exit codes.
constexpr int kOk = 0;
constexpr int kNoDaemon = 1;     // status: nobody answered
constexpr int kUsage = 2;        // bad command line, config or key file
constexpr int kCannotListen = 3;
constexpr int kNoMps = 4;        // --mps: no MPS control daemon could be started

// The commands besides running the daemon: each one's usage (its line in fikit-scheduler --help and
// the first of its own --help), what it does in a few words (beside that line: "" when it has no
// room), the rest of its own --help, and what runs it, with its app made of those.
struct Command {
  const char* name;
  const char* usage;   // after "fikit-scheduler "
  const char* what;
  const char* help;
  int (*run)(CLI::App& app, int argc, char** argv);
};
int status_command(CLI::App& app, int argc, char** argv);
int keygen_command(CLI::App& app, int argc, char** argv);

const Command kCommands[] = {
    {"status", "status [--scheduler HOST:PORT | --control PATH] [--verbose | --json]", "",
     "Says, per GPU, how each service and each job is doing, read from the running daemon's control\n"
     "socket (the daemon's user only): by default this user's daemon of that port, else the systemd\n"
     "unit's (" FIKIT_SYSTEM_CONTROL_PATH ").\n"
     "\n"
     "A service (priority 0, or the highest with jobs below it) is active or idle, and:\n"
     "  being measured          its first runs are timed; the jobs below it wait until it shares\n"
     "  its requests at Nx of alone at the same arrivals (median, queueing included), objective Mx\n"
     "                          its controller's last window: its requests' responses, estimated\n"
     "                          from its periods of GPU work, against the same with the jobs held;\n"
     "                          kept, its jobs get more; missed, they are stepped back\n"
     "  its jobs ...            what the jobs below may do while it is active: wait, run on an SM\n"
     "                          partition, run short kernels or everything beside it (under MPS),\n"
     "                          or run as without FIKIT (time-sliced too)\n"
     "A job is, at this instant: held (a service above is measured), waiting while the service is\n"
     "active and running in its gaps (gap fills: how many gaps it was given), beside it, or running\n"
     "(nothing above is active); its memory is what it holds of its cap (docs/memory.md).\n"
     "--verbose adds every task's directive (state, in-flight bound, roles, partition, regime) and the\n"
     "daemon's counters; --json gives all of it as one JSON object (docs/user-guide.md, \"status\").\n"
     "Exit 0, or 1 when no daemon answers, 2 on bad usage.\n",
     status_command},
    {"keygen", "keygen PATH", "write a new key file (mode 600)",
     "Writes 32 random bytes as 64 hex digits to a new file PATH (mode 600; never overwrites), making\n"
     "the folders above it that are missing (mode 700).\n"
     "Give it to the daemon (--key-file) and the programs (fikit-run --key-file).\n",
     keygen_command},
};

// "fikit-scheduler USAGE" in a column of --help, with what it does beside it when it has a few words.
std::string synopsis(const std::string& usage, const std::string& what) {
  std::string line = "fikit-scheduler " + usage;
  if (!what.empty()) line += std::string(line.size() < 40 ? 41 - line.size() : 2, ' ') + what;
  return line + "\n";
}

std::string usage_text() {
  std::string synopses = "Usage: " + synopsis("[OPTIONS]", "run the daemon");
  for (const Command& c : kCommands) synopses += "       " + synopsis(c.usage, c.what);
  const char* format =
               "%s"
               "\n"
               "Schedules the GPU kernels of programs run under FIKIT's hook in share mode: ten priority\n"
               "levels; the highest-priority active program launches freely, lower ones run while it is\n"
               "idle (keeping a bounded amount of work in flight) and fill its predicted idle gaps\n"
               "(BestPrioFit) until it launches again (early stop). See docs/scheduling.md.\n"
               "\n"
               "What you set:\n%s"
               "  --config FILE\n      'key = value' settings (keys as the flags, without --)\n"
               "  -h, --help\n      this help\n"
               "  --version\n      the version\n"
               "\n"
               "Tuning (change these to experiment; durations take ns, us, ms or s, plain numbers are us):\n%s"
               "\n"
               "Exit codes: 0 ok, 1 status: no daemon answered, 2 usage, config or key error,\n"
               "3 cannot listen, 4 --mps: no MPS control daemon could be started.\n";
  const std::string set = fikit::scheduler::settings_help(false), tuning = fikit::scheduler::settings_help(true);
  std::string text(std::strlen(format) + synopses.size() + set.size() + tuning.size(), '\0');
  text.resize(std::snprintf(text.data(), text.size() + 1, format, synopses.c_str(), set.c_str(), tuning.c_str()));
  return text;
}

int status_command(CLI::App& app, int argc, char** argv) {
  std::string scheduler, control;
  bool json = false, verbose = false;
  app.add_option("--scheduler", scheduler);
  app.add_option("--control", control);
  app.add_flag("--json", json);
  app.add_flag("--verbose,-v", verbose);
  if (const int rc = fikit::cli::parse(app, argc - 1, argv + 1); rc != fikit::cli::kGoOn) return rc;
  std::string host = "127.0.0.1";
  uint16_t port = fikit::protocol::kDefaultPort;
  if (app.count("--scheduler") > 0 && !fikit::scheduler::parse_host_port(scheduler, host, port))
    return fikit::cli::usage_error(app.get_name(), "--scheduler: '" + scheduler + "' is not HOST:PORT (port 1 to 65535; " +
                                                            fikit::values::kAddressForm + ")");
  // Without --control: this user's daemon of that port, else the one the shipped systemd unit runs.
  std::vector<std::string> paths{control};
  if (control.empty()) paths = {fikit::scheduler::default_control_path(port), FIKIT_SYSTEM_CONTROL_PATH};
  std::string error, tried;
  std::optional<std::string> reply;
  for (const std::string& path : paths) {
    reply = fikit::scheduler::control_request(path, json ? "status-json" : verbose ? "status-verbose" : "status", 2000,
                                              error);
    if (reply) break;
    tried += (tried.empty() ? "" : "; ") + error;
  }
  if (!reply) {
    std::fprintf(stderr, "fikit-scheduler status: error: %s%s\n", tried.c_str(),
                 control.empty() ? " (is fikit-scheduler running? --control PATH names its socket)" : "");
    return kNoDaemon;
  }
  std::fputs(reply->c_str(), stdout);
  return kOk;
}

int keygen_command(CLI::App& app, int argc, char** argv) {
  std::string path;
  app.add_option("path", path);
  if (const int rc = fikit::cli::parse(app, argc - 1, argv + 1); rc != fikit::cli::kGoOn) return rc;
  if (path.empty()) return fikit::cli::usage_error(app.get_name(), "give the PATH of the new key file");
  std::string error;
  if (!fikit::protocol::create_key_file(path, error)) {
    std::fprintf(stderr, "fikit-scheduler keygen: error: %s\n", error.c_str());
    return kUsage;
  }
  return kOk;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> commands;
  for (const Command& c : kCommands) commands.push_back(c.name);
  fikit::cli::declare_commands("fikit-scheduler", commands);
  if (argc >= 2 && argv[1][0] != '-') {
    const std::string command = argv[1];
    for (const Command& c : kCommands)
      if (command == c.name) {
        auto app = fikit::cli::make_app(std::string("fikit-scheduler ") + c.name,
                                        std::string("Usage: fikit-scheduler ") + c.usage + "\n" + c.help);
        return c.run(*app, argc, argv);
      }
    const std::string near = fikit::cli::nearest(command, commands);
    return fikit::cli::usage_error("fikit-scheduler", "unknown command '" + command + "'" +
                                                          (near.empty() ? "" : "; did you mean " + near + "?"));
  }

  auto app = fikit::cli::make_app("fikit-scheduler", usage_text());
  const std::vector<std::string> names = fikit::scheduler::setting_names();
  std::vector<std::string> values(names.size());
  for (size_t i = 0; i < names.size(); ++i) app->add_option("--" + names[i], values[i]);
  std::vector<std::string> configs;
  app->add_option("--config", configs)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  if (const int rc = fikit::cli::parse(*app, argc, argv); rc != fikit::cli::kGoOn) return rc;
  fikit::scheduler::Options opts;
  // Settings apply in order: defaults, each --config in turn, then the other flags, whatever their
  // position.
  std::string why;
  for (const std::string& config : configs)
    if (!fikit::scheduler::load_config_file(opts, config, why)) return fikit::cli::usage_error("fikit-scheduler", why);
  for (size_t i = 0; i < names.size(); ++i)
    if (app->count("--" + names[i]) > 0 && !fikit::scheduler::apply_setting(opts, names[i], values[i], why))
      return fikit::cli::usage_error("fikit-scheduler", why);
  std::string error;
  if (!fikit::scheduler::check_options(opts, error)) return fikit::cli::usage_error("fikit-scheduler", error);
  fikit::scheduler::ServerOptions server;
  server.host = opts.listen_host;
  server.port = opts.listen_port;
  server.settings = opts.policy;
  server.quotas.tasks_per_user = server.quotas.tasks_per_source = opts.user_tasks;
  server.quotas.gpus_per_user = opts.user_gpus;
  server.metrics_host = opts.metrics_host;
  server.metrics_port = opts.metrics_port;
  server.control_path = opts.control_path.empty() ? fikit::scheduler::default_control_path(opts.listen_port)
                                                  : opts.control_path;
  server.bell_path = opts.bell_path.empty() ? fikit::protocol::default_bell_path(opts.listen_port)
                     : opts.bell_path == "off" ? std::string() : opts.bell_path;
  if (!opts.key_file.empty()) {
    fikit::protocol::Key key;
    if (!fikit::protocol::load_key_file(opts.key_file, key, error)) {
      std::fprintf(stderr, "fikit-scheduler: error: %s\n", error.c_str());
      return kUsage;
    }
    server.key = key;
  }
  if (opts.db_path.empty()) opts.db_path = fikit::profiledb::Database::default_path();

  auto logger = spdlog::stderr_color_mt("fikit-scheduler");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(opts.log_level));

  // The recommended setup in one service: an MPS control daemon of its own, stopped with it (the
  // destructor runs on every way out of main below, the signals' too: run() returns on them).
  fikit::mps::OwnedDaemon mps;
  if (!opts.mps_dir.empty()) {
    bool adopted = false;
    if (!mps.start(opts.mps_dir, opts.mps_control, &adopted, error)) {
      spdlog::error("--mps: {}", error);
      return kNoMps;
    }
    server.outcomes_dir = opts.mps_dir;
    server.mps = fmt::format("control daemon at {} ({})", fikit::mps::pipe_dir_of(opts.mps_dir),
                             adopted ? "already running: left running at exit" : "started by fikit-scheduler");
    spdlog::info("MPS {}: fikit-run makes programs its clients", server.mps);
  }
  // The reserve, for fikit-run: jobs it starts as MPS clients get a pinned-memory limit that keeps
  // it, which the MPS server enforces whether or not the job's program goes through the hook.
  struct Published {
    std::string dir;
    ~Published() {
      if (!dir.empty()) fikit::mps::unpublish(dir, fikit::mps::kReserveFile);
    }
  } published;
  if (!opts.mps_dir.empty() && !opts.policy.reserve_memory.is_zero()) {
    const auto& r = opts.policy.reserve_memory;
    const std::string text = r.is_share() ? fmt::format("{:.4f}%", r.ppm / 10'000.0) : fmt::format("{}B", r.bytes);
    if (fikit::mps::publish(opts.mps_dir, fikit::mps::kReserveFile, text, error)) published.dir = opts.mps_dir;
    else spdlog::warn("--reserve-memory: {}: jobs get no MPS pinned-memory limit from it", error);
  }
  // Profiles are read off the event loop; a read reaches the daemon through it (Server::profile_ready).
  std::atomic<fikit::scheduler::Server*> ready_to{nullptr};
  fikit::scheduler::AsyncProfiles profiles(opts.db_path, [&ready_to](const std::string& key, auto profile) {
    if (auto* s = ready_to.load()) s->profile_ready(key, std::move(profile));
  });
  try {
    fikit::scheduler::Server daemon(server, profiles);
    ready_to = &daemon;
    spdlog::info("listening on {}:{} ({}), control socket {}, bell {}, profiles from {}", opts.listen_host,
                 daemon.port(), server.key ? "datagrams authenticated with " + opts.key_file : std::string("no key"),
                 server.control_path, server.bell_path.empty() ? "off" : server.bell_path, opts.db_path);
    if (daemon.metrics_port() != 0)
      spdlog::info("metrics at http://{}:{}/metrics", opts.metrics_host, daemon.metrics_port());
    // Every socket is bound: programs can reach it now (systemd's Type=notify waits for this).
    if (!fikit::scheduler::notify_service_manager("READY=1", error)) spdlog::warn("{}", error);
    daemon.run(/*handle_signals=*/true);
    fikit::scheduler::notify_service_manager("STOPPING=1", error);
    ready_to = nullptr;
    const auto s = daemon.snapshot();
    spdlog::info("stopped ({} malformed, {} bad MAC, {} refused by session datagrams dropped)", s.malformed,
                 s.bad_mac, s.sessions.total());
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return kCannotListen;
  }
  return kOk;
}
