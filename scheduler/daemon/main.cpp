// fikit-scheduler: the FIKIT scheduling daemon, and `fikit-scheduler status` to ask a running one.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "db_profiles.h"
#include "options.h"
#include "profiledb.h"
#include "server.h"
#include "status_client.h"

namespace {

// Exit codes.
constexpr int kOk = 0;
constexpr int kNoDaemon = 1;     // status: nobody answered
constexpr int kUsage = 2;        // bad command line or config
constexpr int kCannotListen = 3;

void usage(FILE* to) {
  std::fprintf(to,
               "Usage: fikit-scheduler [OPTIONS]            run the daemon\n"
               "       fikit-scheduler status [--scheduler HOST:PORT]\n"
               "\n"
               "Schedules the GPU kernels of programs run under FIKIT's hook in share mode: ten priority\n"
               "queues, the highest-priority active program launches freely and lower ones fill its\n"
               "predicted idle gaps (BestPrioFit) until it launches again (early stop). See docs/scheduling.md.\n"
               "\n"
               "Options:\n"
               "  --listen HOST:PORT   UDP address to serve (default 127.0.0.1:47800)\n"
               "  --db PATH            profile database (default %s)\n"
               "  --config FILE        'key = value' settings (keys as the flags below, without --)\n"
               "  --log-level LEVEL    error|warn|info|debug|trace (default info)\n"
               "  -h, --help           this help\n"
               "Scheduling settings (durations take ns, us, ms or s; plain numbers are us):\n%s"
               "\n"
               "Exit codes: 0 ok, 1 status: no daemon answered, 2 usage or config error, 3 cannot listen.\n",
               fikit::profiledb::Database::default_path().c_str(), fikit::scheduler::settings_help().c_str());
}

int status_command(int argc, char** argv) {
  std::string host = "127.0.0.1";
  uint16_t port = 47800;
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::printf("Usage: fikit-scheduler status [--scheduler HOST:PORT]\n"
                  "Prints the running daemon's tasks, priorities, queue lengths, holder, grants, gap fills,\n"
                  "early stops and dropped datagrams. Exit 1 when no daemon answers.\n");
      return kOk;
    }
    if (arg == "--scheduler" && i + 1 < argc) {
      if (!fikit::scheduler::parse_host_port(argv[++i], host, port)) {
        std::fprintf(stderr, "fikit-scheduler status: --scheduler: '%s' is not HOST:PORT\n", argv[i]);
        return kUsage;
      }
      continue;
    }
    std::fprintf(stderr, "fikit-scheduler status: unexpected argument '%s' (try --help)\n", arg.c_str());
    return kUsage;
  }
  std::string error;
  auto reply = fikit::scheduler::query_status(host, port, 1000, error);
  if (!reply) {
    std::fprintf(stderr, "fikit-scheduler status: %s\n", error.c_str());
    return kNoDaemon;
  }
  std::fputs(fikit::scheduler::format_status(*reply).c_str(), stdout);
  return kOk;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "status") == 0) return status_command(argc, argv);

  fikit::scheduler::Options opts;
  // Settings apply in order: defaults, --config, then the other flags, whatever their position.
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") { usage(stdout); return kOk; }
    if (arg == "--config") {
      if (i + 1 >= argc) { std::fprintf(stderr, "fikit-scheduler: --config needs a FILE\n"); return kUsage; }
      std::string error;
      if (!fikit::scheduler::load_config_file(opts, argv[i + 1], error)) {
        std::fprintf(stderr, "fikit-scheduler: %s\n", error.c_str());
        return kUsage;
      }
    }
  }
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0 || i + 1 >= argc) {
      std::fprintf(stderr, "fikit-scheduler: unexpected argument '%s' (try --help)\n", arg.c_str());
      return kUsage;
    }
    std::string value = argv[++i];
    if (arg == "--config") continue;
    std::string error;
    if (!fikit::scheduler::apply_setting(opts, arg.substr(2), value, error)) {
      std::fprintf(stderr, "fikit-scheduler: %s\n", error.c_str());
      return kUsage;
    }
  }
  if (opts.db_path.empty()) opts.db_path = fikit::profiledb::Database::default_path();

  auto logger = spdlog::stderr_color_mt("fikit-scheduler");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(opts.log_level));

  fikit::scheduler::DbProfileSource profiles(opts.db_path);
  try {
    fikit::scheduler::Server server(opts.listen_host, opts.listen_port, opts.policy, profiles);
    spdlog::info("listening on {}:{}, profiles from {}", opts.listen_host, server.port(), opts.db_path);
    server.run(/*handle_signals=*/true);
    spdlog::info("stopped ({} malformed datagrams dropped)", server.dropped_datagrams());
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return kCannotListen;
  }
  return kOk;
}
