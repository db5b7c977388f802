// fikit-profile: look at what measure mode recorded. Argument parsing, dispatch and exit codes;
// the renderings live in report.cpp.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "cli.h"
#include "profiledb.h"
#include "report.h"

namespace {

using fikit::profiledb::Database;
using fikit::profiledb::DbError;
namespace report = fikit::profile_cli;

enum Exit : int {
  kOk = 0, kOther = 1, kUsage = 2, kUnknownKey = 3, kMissing = 4, kLocked = 5, kCorrupt = 6, kDisagree = 7
};

constexpr const char* kUsageText = R"(usage: fikit-profile [--db PATH] COMMAND [ARGS]

Inspect the per-kernel statistics that FIKIT's measure mode stored.

commands:
  list                                 tasks with their measured run counts
  show KEY                             kernels of task KEY by total GPU time: duration and gap statistics;
                                       the kernels timed inside a graph launch listed under its op
  export KEY --format csv|json [-o FILE]
                                       the same statistics, machine-readable (stdout unless -o)
  trace KEY -o FILE                    the last measured run as Chrome/Perfetto trace-event JSON
                                       (open in ui.perfetto.dev or chrome://tracing), one track per stream
  gaps KEY                             histogram of the gaps between the task's GPU ops
  compare KEY_A KEY_B                  two profiles of one program side by side (e.g. measured with
                                       CUPTI and with CUDA events): duration means, gap medians and
                                       SM hold classes per kernel both have; exit 7 when some disagree
                                       beyond --dur-tolerance (default 0.05) or --gap-tolerance (0.10,
                                       or the timers' stated uncertainty), or differ in hold class
  delete KEY                           remove task KEY and all its statistics

options:
  --db PATH     the profile database (default: $FIKIT_DB, else $XDG_DATA_HOME/fikit/profiles.db)
  --wait-ms MS  how long to wait for a measuring process's write to finish (default 5000)
  --dur-tolerance F, --gap-tolerance F
                compare: the relative differences that still agree (default 0.05 and 0.10)
  --min-dur D   compare: durations only of kernels at least D long in KEY_A (e.g. 20us; default 0)
  --short-hold D
                compare: SM hold class boundary, as fikit-scheduler's (default 1ms)
  -h, --help    this text (also after a command)
  --version     the version

show warns on stderr when the task's runs timed under 99 % of the ops they launched.

exit codes: 0 ok, 1 other error, 2 usage, 3 unknown task key, 4 database missing,
            5 database locked, 6 database corrupt, 7 profiles disagree (compare)
)";

struct UsageError {
  std::string message;
};

struct Args {
  std::string db;
  int wait_ms = 5000;
  std::string command;
  std::vector<std::string> positional;
  std::optional<std::string> format, output;
  report::CompareRules rules;
};

constexpr const char* kCommands[] = {"list", "show", "export", "trace", "gaps", "compare", "delete"};

// Parses the command line (cli.h's conventions); throws UsageError, or exits after --help/--version.
Args parse(int argc, char** argv) {
  Args a;
  auto app = fikit::cli::make_app("fikit-profile", kUsageText);
  std::string wait_ms, dur_tolerance, gap_tolerance, min_dur, short_hold, format, output;
  app->add_option("--db", a.db);
  app->add_option("--wait-ms", wait_ms);
  app->add_option("--dur-tolerance", dur_tolerance);
  app->add_option("--gap-tolerance", gap_tolerance);
  app->add_option("--min-dur", min_dur);
  app->add_option("--short-hold", short_hold);
  app->add_option("--format", format);
  app->add_option("-o,--output", output);
  app->add_option("command", a.command);
  app->add_option("arguments", a.positional);
  if (const int rc = fikit::cli::parse(*app, argc, argv); rc != fikit::cli::kGoOn) std::exit(rc);
  if (a.command.empty()) throw UsageError{"no command given"};
  if (std::find(std::begin(kCommands), std::end(kCommands), a.command) == std::end(kCommands)) {
    const std::string near = fikit::cli::nearest(a.command, {std::begin(kCommands), std::end(kCommands)});
    throw UsageError{"unknown command '" + a.command + "'" + (near.empty() ? "" : "; did you mean " + near + "?")};
  }
  if (app->count("--wait-ms") > 0) {
    char* end = nullptr;
    const long ms = std::strtol(wait_ms.c_str(), &end, 10);
    if (wait_ms.empty() || *end || ms < 0 || ms > 3600000)
      throw UsageError{"--wait-ms: '" + wait_ms + "' is not a number of milliseconds from 0 to 3600000"};
    a.wait_ms = static_cast<int>(ms);
  }
  const auto fraction = [](const char* opt, const std::string& v) {
    char* end = nullptr;
    const double f = std::strtod(v.c_str(), &end);
    if (v.empty() || *end || !(f >= 0 && f <= 10))
      throw UsageError{std::string(opt) + ": '" + v + "' is not a fraction from 0 to 10 (0.05 is 5 %)"};
    return f;
  };
  if (app->count("--dur-tolerance") > 0) a.rules.dur_tolerance = fraction("--dur-tolerance", dur_tolerance);
  if (app->count("--gap-tolerance") > 0) a.rules.gap_tolerance = fraction("--gap-tolerance", gap_tolerance);
  const auto duration = [](const char* opt, const std::string& v) {
    uint64_t ns = 0;
    if (!fikit::cli::parse_duration_ns(v, ns) || ns > 3'600'000'000'000)
      throw UsageError{std::string(opt) + ": '" + v + "' is not a duration up to 3600 s (e.g. 20us, 1ms)"};
    return ns;
  };
  if (app->count("--min-dur") > 0) a.rules.min_dur_ns = duration("--min-dur", min_dur);
  if (app->count("--short-hold") > 0) a.rules.short_hold_ns = duration("--short-hold", short_hold);
  if (app->count("--format") > 0) a.format = format;
  if (app->count("--output") > 0) a.output = output;
  if (a.db.empty()) {
    const char* env = std::getenv("FIKIT_DB");
    a.db = env && *env ? env : Database::default_path();
  }
  return a;
}

const std::string& key_of(const Args& a) {
  if (a.positional.size() != 1) throw UsageError{a.command + " takes exactly one task key"};
  return a.positional[0];
}

// A key the database lacks: say which it has (the nearest first, as a likely typo), so the user
// need not run `list` to find out.
DbError no_such_task(Database& db, const std::string& key) {
  std::vector<std::string> keys;
  for (const auto& t : db.tasks()) keys.push_back(t.key);
  std::string what = "no task with key \"" + key + "\"";
  if (keys.empty()) return DbError(DbError::Kind::NotFound, what + " (the database has none)");
  if (const std::string near = fikit::cli::nearest(key, keys); !near.empty())
    return DbError(DbError::Kind::NotFound, what + "; did you mean \"" + near + "\"?");
  what += "; it has " + std::to_string(keys.size()) + ": ";
  for (size_t i = 0; i < keys.size() && i < 10; ++i) what += (i ? ", " : "") + keys[i];
  if (keys.size() > 10) what += ", ... (fikit-profile list)";
  return DbError(DbError::Kind::NotFound, what);
}

fikit::profiledb::TaskInfo require_task(Database& db, const std::string& key) {
  auto t = db.task(key);
  if (!t) throw no_such_task(db, key);
  return *t;
}

// Writes through `write` to FILE, or to stdout when no file was named.
template <class Fn>
void emit(const std::optional<std::string>& path, Fn&& write) {
  if (!path) {
    write(std::cout);
    std::cout.flush();
    return;
  }
  std::ofstream f(*path, std::ios::binary | std::ios::trunc);
  if (!f) throw DbError(DbError::Kind::Io, "cannot write " + *path + ": " + std::strerror(errno));
  write(f);
  f.close();
  if (!f) throw DbError(DbError::Kind::Io, "error writing " + *path);
}

int run(const Args& a) {
  const auto& cmd = a.command;
  if (cmd == "list") {
    if (!a.positional.empty()) throw UsageError{"list takes no arguments"};
    // Nothing measured yet is an answer, not an error (the database appears with the first measurement).
    try {
      Database db(a.db, Database::Open::ReadOnly, a.wait_ms);
      report::write_task_list(std::cout, db.tasks());
      if (db.truncated())
        std::fprintf(stderr, "fikit-profile: warning: the database holds more than %zu tasks: the rest are not listed\n",
                     Database::kMaxTasksRead);
    } catch (const DbError& e) {
      if (e.kind() != DbError::Kind::Missing) throw;
      std::printf("no task measured yet (no profile database at %s: the first run under fikit-run makes it)\n",
                  a.db.c_str());
    }
  } else if (cmd == "show") {
    Database db(a.db, Database::Open::ReadOnly, a.wait_ms);
    const auto task = require_task(db, key_of(a));
    const auto kernels = db.kernels(task.key);
    if (db.truncated())
      std::fprintf(stderr, "fikit-profile: warning: task \"%s\" has more than %zu kernels: only those are shown (a "
                   "profile this large was not written by FIKIT's measurement)\n", task.key.c_str(),
                   Database::kMaxKernelsRead);
    const auto runs = db.runs(task.key);
    report::write_kernel_table(std::cout, task, kernels);
    report::write_timing(std::cout, runs, kernels);
    report::write_backend(std::cout, runs, uint32_t(task.runs_wanted));
    if (!report::write_coverage(std::cout, runs))
      std::fprintf(stderr,
                   "fikit-profile: warning: task \"%s\" timed under 99 %% of its ops: kernels missing from the "
                   "profile fill no gaps until share mode has timed them in place (FIKIT_RELEARN_SAMPLE); the "
                   "measured program's log says why ops went untimed (FIKIT_LOG_LEVEL=info)\n", task.key.c_str());
  } else if (cmd == "export") {
    const auto& key = key_of(a);
    if (!a.format) throw UsageError{"export needs --format csv|json"};
    if (*a.format != "csv" && *a.format != "json")
      throw UsageError{"--format '" + *a.format + "' is not csv or json"};
    Database db(a.db, Database::Open::ReadOnly, a.wait_ms);
    const auto task = require_task(db, key);
    const auto kernels = db.kernels(key);
    const uint64_t uncertainty = fikit::profiledb::timing_uncertainty(db.runs(key));
    emit(a.output, [&](std::ostream& out) {
      if (*a.format == "csv") report::write_kernels_csv(out, kernels, uncertainty);
      else report::write_kernels_json(out, task, kernels, uncertainty);
    });
  } else if (cmd == "trace") {
    const auto& key = key_of(a);
    if (!a.output) throw UsageError{"trace needs -o FILE"};
    Database db(a.db, Database::Open::ReadOnly, a.wait_ms);
    require_task(db, key);
    const auto ops = db.last_trace(key);
    const auto kernels = db.kernels(key);
    emit(a.output, [&](std::ostream& out) { report::write_trace_json(out, key, ops, kernels); });
    std::fprintf(stderr, "wrote %zu ops to %s\n", ops.size(), a.output->c_str());
  } else if (cmd == "gaps") {
    Database db(a.db, Database::Open::ReadOnly, a.wait_ms);
    const auto& key = key_of(a);
    require_task(db, key);
    uint64_t boundaries = 0;
    for (const auto& k : db.kernels(key)) boundaries += k.boundary_count;
    report::write_gap_histogram(std::cout, db.gap_histogram(key), boundaries);
  } else if (cmd == "compare") {
    if (a.positional.size() != 2) throw UsageError{"compare takes two task keys"};
    Database db(a.db, Database::Open::ReadOnly, a.wait_ms);
    const std::string ka = require_task(db, a.positional[0]).key;
    const std::string kb = require_task(db, a.positional[1]).key;
    const auto pa = db.kernels(ka), pb = db.kernels(kb);
    auto rules = a.rules;
    rules.gap_slack_ns = std::max(fikit::profiledb::timing_uncertainty(db.runs(ka)),
                                  fikit::profiledb::timing_uncertainty(db.runs(kb)));
    report::write_comparison(std::cout, ka, kb, pa, pb, rules);
    const auto g = report::compare_profiles(pa, pb, rules);
    if (g.common == 0 || g.dur_within < g.dur_compared || g.gap_within < g.gap_compared ||
        g.hold_same < g.hold_compared)
      return kDisagree;
  } else if (cmd == "delete") {
    const auto& key = key_of(a);
    Database db(a.db, Database::Open::ReadWrite, a.wait_ms);
    if (!db.delete_task(key)) throw no_such_task(db, key);
  }
  return kOk;
}

}  // namespace

int main(int argc, char** argv) {
  fikit::cli::declare_commands("fikit-profile", {std::begin(kCommands), std::end(kCommands)});
  try {
    return run(parse(argc, argv));
  } catch (const UsageError& e) {
    return fikit::cli::usage_error("fikit-profile", e.message);
  } catch (const DbError& e) {
    std::fprintf(stderr, "fikit-profile: error: %s\n", e.what());
    switch (e.kind()) {
      case DbError::Kind::NotFound: return kUnknownKey;
      case DbError::Kind::Missing: return kMissing;
      case DbError::Kind::Locked: return kLocked;
      case DbError::Kind::Corrupt: return kCorrupt;
      case DbError::Kind::Io: return kOther;
    }
    return kOther;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fikit-profile: error: %s\n", e.what());
    return kOther;
  }
}
