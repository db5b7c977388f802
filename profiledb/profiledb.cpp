// SQLite implementation of the profile store. Schema and its history: docs/schema.md.
#include "profiledb.h"

#include <sqlite3.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <system_error>
#include <thread>
#include <unistd.h>

namespace fikit::profiledb {

// ---------------------------------------------------------------------------------------------
// Accumulator

void Accumulator::add(uint64_t ns) {
  ++count;
  const double v = static_cast<double>(ns);
  sum += v;
  sum_sq += v * v;
  min = std::min(min, ns);
  max = std::max(max, ns);
  hist.add(ns);
}

void Accumulator::merge(const Accumulator& o) {
  count += o.count;
  sum += o.sum;
  sum_sq += o.sum_sq;
  min = std::min(min, o.min);
  max = std::max(max, o.max);
  hist.merge(o.hist);
}

double Accumulator::mean() const { return count ? sum / static_cast<double>(count) : 0.0; }

double Accumulator::stddev() const {
  if (count < 2) return 0.0;
  const double m = mean();
  return std::sqrt(std::max(0.0, sum_sq / static_cast<double>(count) - m * m));
}

namespace {

// ---------------------------------------------------------------------------------------------
// SQLite plumbing: every failure becomes a DbError of the kind the CLI maps to an exit code.

[[noreturn]] void fail(sqlite3* db, int rc, const std::string& what) {
  const std::string msg = what + ": " + (db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED: throw DbError(DbError::Kind::Locked, msg + " (another process holds the database)");
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT: throw DbError(DbError::Kind::Corrupt, msg);
    default: throw DbError(DbError::Kind::Io, msg);
  }
}

class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : db_(db) {
    const int rc = sqlite3_prepare_v2(db, sql, -1, &st_, nullptr);
    if (rc != SQLITE_OK) fail(db, rc, std::string("preparing \"") + sql + "\"");
  }
  ~Stmt() { sqlite3_finalize(st_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  Stmt& bind(int i, int64_t v) { return check(sqlite3_bind_int64(st_, i, v)); }
  Stmt& bind_u(int i, uint64_t v) { return bind(i, static_cast<int64_t>(v)); }   // IDs: bit pattern kept
  Stmt& bind(int i, double v) { return check(sqlite3_bind_double(st_, i, v)); }
  Stmt& bind(int i, const std::string& v) {
    return check(sqlite3_bind_text(st_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
  }
  Stmt& bind_blob(int i, const std::string& v) {
    return check(sqlite3_bind_blob(st_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
  }
  // Parameters first, first + 1, ... bound to `values`, each as its type says (the mirror of columns()).
  template <class... Value>
  Stmt& bind_all(int first, const Value&... values) {
    int i = first;
    (bind_value(i++, values), ...);
    return *this;
  }
  // true: a row is available.
  bool step() {
    const int rc = sqlite3_step(st_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    fail(db_, rc, "executing \"" + std::string(sqlite3_sql(st_)) + "\"");
  }
  void run() {
    step();
    reset();
  }
  void reset() {
    sqlite3_reset(st_);
    sqlite3_clear_bindings(st_);
  }
  int64_t i64(int c) const { return sqlite3_column_int64(st_, c); }
  uint64_t u64(int c) const { return static_cast<uint64_t>(sqlite3_column_int64(st_, c)); }
  double dbl(int c) const { return sqlite3_column_double(st_, c); }
  std::string text(int c) const {
    const auto* p = sqlite3_column_text(st_, c);
    return p ? std::string(reinterpret_cast<const char*>(p), sqlite3_column_bytes(st_, c)) : std::string();
  }
  // Columns first, first + 1, ... into `fields`, each read as its type says.
  template <class... Field>
  void columns(int first, Field&... fields) const {
    int c = first;
    (column(c++, fields), ...);
  }
  Histogram hist(int c) const {
    const void* p = sqlite3_column_blob(st_, c);
    auto h = Histogram::deserialize(p, p ? sqlite3_column_bytes(st_, c) : 0);
    if (!h) throw DbError(DbError::Kind::Corrupt, "a stored histogram is malformed");
    return *h;
  }

 private:
  void bind_value(int i, uint64_t v) { bind_u(i, v); }
  void bind_value(int i, int64_t v) { bind(i, v); }
  void bind_value(int i, uint32_t v) { bind(i, static_cast<int64_t>(v)); }
  void bind_value(int i, int32_t v) { bind(i, static_cast<int64_t>(v)); }
  void bind_value(int i, const std::string& v) { bind(i, v); }
  void column(int c, uint64_t& v) const { v = u64(c); }
  void column(int c, int64_t& v) const { v = i64(c); }
  void column(int c, uint32_t& v) const { v = static_cast<uint32_t>(i64(c)); }
  void column(int c, std::string& v) const { v = text(c); }
  Stmt& check(int rc) {
    if (rc != SQLITE_OK) fail(db_, rc, "binding a parameter");
    return *this;
  }
  sqlite3* db_;
  sqlite3_stmt* st_ = nullptr;
};

void exec(sqlite3* db, const char* sql) {
  char* err = nullptr;
  const int rc = sqlite3_exec(db, sql, nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    const std::string msg = err ? err : sqlite3_errstr(rc);
    sqlite3_free(err);
    fail(nullptr, rc, std::string("\"") + sql + "\": " + msg);
  }
}

// BEGIN IMMEDIATE takes the write lock up front, so the read-modify-write merges of concurrent
// writers serialise instead of failing at commit. Rolled back unless committed (e.g. on a throw).
class WriteTxn {
 public:
  explicit WriteTxn(sqlite3* db) : db_(db) { exec(db_, "BEGIN IMMEDIATE"); }
  ~WriteTxn() {
    if (!done_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  void commit() {
    exec(db_, "COMMIT");
    done_ = true;
  }

 private:
  sqlite3* db_;
  bool done_ = false;
};

// ---------------------------------------------------------------------------------------------
// Schema. Migration i takes user_version i to i + 1; append new steps, never edit old ones.

const char* const kMigrations[] = {
    // 0 -> 1
    R"sql(
CREATE TABLE tasks (
  key           TEXT PRIMARY KEY,
  command_line  TEXT NOT NULL DEFAULT '',
  created_unix  INTEGER NOT NULL,
  runs_measured INTEGER NOT NULL DEFAULT 0,
  runs_wanted   INTEGER NOT NULL DEFAULT 10
);
CREATE TABLE kernels (
  task_key       TEXT NOT NULL,
  kernel_id      INTEGER NOT NULL,
  name           TEXT NOT NULL DEFAULT '',
  call_site      TEXT NOT NULL DEFAULT '',
  grid_x INTEGER NOT NULL DEFAULT 0, grid_y INTEGER NOT NULL DEFAULT 0, grid_z INTEGER NOT NULL DEFAULT 0,
  block_x INTEGER NOT NULL DEFAULT 0, block_y INTEGER NOT NULL DEFAULT 0, block_z INTEGER NOT NULL DEFAULT 0,
  shared_mem     INTEGER NOT NULL DEFAULT 0,
  dur_count INTEGER NOT NULL, dur_sum REAL NOT NULL, dur_sum_sq REAL NOT NULL,
  dur_min INTEGER NOT NULL, dur_max INTEGER NOT NULL, dur_hist BLOB,
  gap_count INTEGER NOT NULL, gap_sum REAL NOT NULL, gap_sum_sq REAL NOT NULL,
  gap_min INTEGER NOT NULL, gap_max INTEGER NOT NULL, gap_hist BLOB,
  boundary_count INTEGER NOT NULL,
  PRIMARY KEY (task_key, kernel_id)
) WITHOUT ROWID;
CREATE TABLE runs (
  task_key      TEXT NOT NULL,
  run_no        INTEGER NOT NULL,
  finished_unix INTEGER NOT NULL,
  pid           INTEGER NOT NULL,
  gpu_ops       INTEGER NOT NULL,
  busy_ns       INTEGER NOT NULL,
  wall_ns       INTEGER NOT NULL,
  iterations    INTEGER NOT NULL,
  PRIMARY KEY (task_key, run_no)
) WITHOUT ROWID;
CREATE TABLE trace (
  task_key  TEXT NOT NULL,
  seq       INTEGER NOT NULL,
  kernel_id INTEGER NOT NULL,
  stream    INTEGER NOT NULL,
  start_ns  INTEGER NOT NULL,
  end_ns    INTEGER NOT NULL,
  PRIMARY KEY (task_key, seq)
) WITHOUT ROWID;
)sql",
    // 1 -> 2: coverage of each run (issue 12)
    R"sql(
ALTER TABLE runs ADD COLUMN ops_launched INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN ops_timed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN sample_every INTEGER NOT NULL DEFAULT 1;
)sql",
    // 2 -> 3: occupancy (SM hold time) of each kernel, what requests keep the GPU busy (issue 22)
    R"sql(
ALTER TABLE kernels ADD COLUMN blocks_per_sm INTEGER NOT NULL DEFAULT 0;
ALTER TABLE kernels ADD COLUMN sm_count INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN request_busy_pct INTEGER NOT NULL DEFAULT -1;
)sql",
    // 3 -> 4: how each run was timed, with its uncertainty; durations too short to resolve (issue 23)
    R"sql(
ALTER TABLE runs ADD COLUMN timer TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN timing_bias_ns INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN timing_uncertainty_ns INTEGER NOT NULL DEFAULT 0;
ALTER TABLE kernels ADD COLUMN dur_unresolved INTEGER NOT NULL DEFAULT 0;
)sql",
    // 4 -> 5: what one in sample_every measured was: whole iterations, or windows of ops (issue 23)
    R"sql(
ALTER TABLE runs ADD COLUMN sample_unit TEXT NOT NULL DEFAULT 'iteration';
)sql",
    // 5 -> 6: the backend of each run and its requests' median as the host saw them (issue 36:
    // what being an MPS client costs a service)
    R"sql(
ALTER TABLE runs ADD COLUMN backend TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN request_p50_ns INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN requests INTEGER NOT NULL DEFAULT 0;
)sql",
    // 6 -> 7: kernels timed one by one inside a graph launch, under the graph's op (issue 37)
    R"sql(
ALTER TABLE kernels ADD COLUMN graph_op INTEGER NOT NULL DEFAULT 0;
)sql",
};
static_assert(std::size(kMigrations) == Database::kSchemaVersion);

int read_user_version(sqlite3* db) {
  Stmt s(db, "PRAGMA user_version");
  return s.step() ? static_cast<int>(s.i64(0)) : 0;
}

void bind_acc(Stmt& s, int first, const Accumulator& a) {
  s.bind_u(first, a.count)
      .bind(first + 1, a.sum)
      .bind(first + 2, a.sum_sq)
      .bind_u(first + 3, a.count ? a.min : 0)
      .bind_u(first + 4, a.max)
      .bind_blob(first + 5, a.hist.serialize());
}

Accumulator read_acc(const Stmt& s, int first) {
  Accumulator a;
  a.count = s.u64(first);
  a.sum = s.dbl(first + 1);
  a.sum_sq = s.dbl(first + 2);
  a.min = a.count ? s.u64(first + 3) : UINT64_MAX;
  a.max = s.u64(first + 4);
  a.hist = s.hist(first + 5);
  return a;
}

// The kernels' columns; a database older than version 3 (read as it is) has no occupancy columns.
std::string sample_columns(int version) {
  std::string c =
      "kernel_id, name, call_site, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_mem, "
      "dur_count, dur_sum, dur_sum_sq, dur_min, dur_max, dur_hist, "
      "gap_count, gap_sum, gap_sum_sq, gap_min, gap_max, gap_hist, boundary_count";
  if (version >= 3) c += ", blocks_per_sm, sm_count";
  if (version >= 4) c += ", dur_unresolved";
  if (version >= 7) c += ", graph_op";
  return c;
}
constexpr int kSampleColumnCount = 27;   // at the current version

KernelSample read_sample(const Stmt& s, int version) {
  KernelSample k;
  s.columns(0, k.kernel_id, k.name, k.call_site, k.grid[0], k.grid[1], k.grid[2], k.block[0], k.block[1], k.block[2],
            k.shared_mem);
  k.duration = read_acc(s, 10);
  k.gap = read_acc(s, 16);
  k.boundary_count = s.u64(22);
  if (version >= 3) s.columns(23, k.blocks_per_sm, k.sm_count);
  if (version >= 4) k.dur_unresolved = s.u64(25);
  if (version >= 7) k.graph_op = s.u64(26);
  return k;
}

// Percentiles from the histogram, pulled into [min, max] (exact there, tighter than a bucket).
uint64_t quantile_of(const Accumulator& a, double q) {
  if (a.count == 0) return 0;
  return std::clamp(a.hist.quantile(q), a.min, a.max);
}

TaskInfo read_task(const Stmt& s) {
  TaskInfo t;
  s.columns(0, t.key, t.command_line, t.created_unix, t.runs_measured, t.runs_wanted);
  t.state = t.runs_measured >= t.runs_wanted ? "ready" : "measuring";
  return t;
}

// Merges samples into the task's kernel rows, under the caller's write transaction: read the
// stored row, add, write it back.
// Writers have migrated to the current version first.
void merge_samples(sqlite3* db, const std::string& task_key, const std::vector<KernelSample>& kernels) {
  const std::string columns = sample_columns(Database::kSchemaVersion);
  std::string values = "?";
  for (int i = 0; i < kSampleColumnCount; ++i) values += ",?";
  Stmt get(db, ("SELECT " + columns + " FROM kernels WHERE task_key = ? AND kernel_id = ?").c_str());
  Stmt put(db, ("INSERT OR REPLACE INTO kernels (task_key, " + columns + ") VALUES (" + values + ")").c_str());
  for (const KernelSample& k : kernels) {
    KernelSample merged = k;
    get.bind(1, task_key).bind_u(2, k.kernel_id);
    if (get.step()) {
      KernelSample stored = read_sample(get, Database::kSchemaVersion);
      merged.duration.merge(stored.duration);
      // Occupancy is a property of the launch: keep what was measured when this sample lacks it.
      if (merged.blocks_per_sm == 0) merged.blocks_per_sm = stored.blocks_per_sm;
      if (merged.sm_count == 0) merged.sm_count = stored.sm_count;
      merged.gap.merge(stored.gap);
      merged.boundary_count += stored.boundary_count;
      merged.dur_unresolved += stored.dur_unresolved;
      if (merged.name.empty()) merged.name = stored.name;
      if (merged.call_site.empty()) merged.call_site = stored.call_site;
      if (merged.graph_op == 0) merged.graph_op = stored.graph_op;
    }
    get.reset();
    put.bind_all(1, task_key, merged.kernel_id, merged.name, merged.call_site, merged.grid[0], merged.grid[1],
                 merged.grid[2], merged.block[0], merged.block[1], merged.block[2], merged.shared_mem);
    bind_acc(put, 12, merged.duration);
    bind_acc(put, 18, merged.gap);
    put.bind_all(24, merged.boundary_count, merged.blocks_per_sm, merged.sm_count, merged.dur_unresolved,
                 merged.graph_op);
    put.run();
  }
}

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// A database, its log or its index that is a symbolic link is refused: a link lets whoever could
// make it choose which file FIKIT's processes write (a root process created its database at a
// dangling link's target), or, at the log, keeps every process from opening the database.
// Anything there but a plain file is refused too: opening a FIFO blocks until someone writes to it,
// which would hang every program that reads its profile (the hook does, at its first launch).
void refuse_links(const std::string& path) {
  for (const char* suffix : {"", "-wal", "-shm"}) {
    const std::string file = path + suffix;
    const std::string mend = *suffix == '\0' ? "remove it, or give the real path" : "remove it (SQLite makes it again)";
    struct stat st;
    if (::lstat(file.c_str(), &st) != 0) continue;
    if (S_ISLNK(st.st_mode))
      throw DbError(DbError::Kind::Io, file + " is a symbolic link: refused (a link lets whoever made it choose the "
                                       "file FIKIT writes); " + mend);
    if (!S_ISREG(st.st_mode))
      throw DbError(DbError::Kind::Io, file + " is not a plain file (a FIFO, a device or a folder): refused (opening "
                                       "it could block every program that reads it); " + mend);
  }
}

// Creates the database file itself, not following a link, before SQLite opens it: in a folder others
// may write (sticky, as a node's shared folder is), a file that exists and is this user's cannot be
// replaced by a link afterwards.
void create_without_following(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0644);
  if (fd >= 0) {
    ::close(fd);
    return;
  }
  if (errno == ELOOP) refuse_links(path);
  // Anything else (a folder that cannot be written) SQLite's own open says better.
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Database

struct Database::Impl {
  sqlite3* db = nullptr;
  std::string path;
  bool empty = false;   // opened read-only before any writer created the schema: no tasks

  void require_task(const std::string& key) {
    if (!empty) {
      Stmt s(db, "SELECT 1 FROM tasks WHERE key = ?");
      s.bind(1, key);
      if (s.step()) return;
    }
    throw DbError(DbError::Kind::NotFound, "no task with key \"" + key + "\" in " + path);
  }

  ~Impl() { sqlite3_close_v2(db); }

  void open(int flags, Open how, int busy_timeout_ms) {
    sqlite3_close_v2(db);
    db = nullptr;
    const int rc = sqlite3_open_v2(path.c_str(), &db, flags, nullptr);
    if (rc != SQLITE_OK) fail(db, rc, "opening " + path);
    sqlite3_busy_timeout(db, busy_timeout_ms);

    // Reading the header first turns a file of junk into Corrupt before anything else happens.
    const int version = read_user_version(db);
    if (version > kSchemaVersion)
      throw DbError(DbError::Kind::Io, path + " has schema version " + std::to_string(version) +
                                           ", newer than this FIKIT's " + std::to_string(kSchemaVersion));
    if (how == Open::ReadOnly) {
      empty = version == 0;
      return;
    }
    // WAL: readers never block the writer; NORMAL sync: a killed process cannot lose committed
    // runs (only a power cut can lose the last ones), and the file is never corrupted.
    exec(db, "PRAGMA journal_mode = WAL");
    exec(db, "PRAGMA synchronous = NORMAL");
    // The log and its index stay when the last connection closes. In a folder several users write
    // (a node's database shared by containers of other users: docs/deploy.md) a process making
    // them anew creates them under its umask before SQLite widens their mode to the database's,
    // and another user's process opening them in between was left read-only ("attempt to write a
    // readonly database", a suite beside two busy loops caught it); kept, they are made once.
    int persist = 1;
    sqlite3_file_control(db, "main", SQLITE_FCNTL_PERSIST_WAL, &persist);
    migrate();
  }

  void migrate() {
    if (read_user_version(db) >= kSchemaVersion) return;
    WriteTxn txn(db);
    // Re-read under the write lock: another process may have migrated meanwhile.
    for (int v = read_user_version(db); v < kSchemaVersion; ++v) exec(db, kMigrations[v]);
    exec(db, ("PRAGMA user_version = " + std::to_string(kSchemaVersion)).c_str());
    txn.commit();
  }
};

Database::Database(const std::string& path, Open how, int busy_timeout_ms) : impl_(new Impl) {
  impl_->path = path;
  try {
    int flags = SQLITE_OPEN_NOMUTEX;
    if (how == Open::Create) {
      const auto dir = std::filesystem::path(path).parent_path();
      std::error_code ec;
      if (!dir.empty()) std::filesystem::create_directories(dir, ec);
      if (ec) throw DbError(DbError::Kind::Io, "cannot create directory " + dir.string() + ": " + ec.message());
      refuse_links(path);
      create_without_following(path);
      flags |= SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
    } else {
      refuse_links(path);
      if (!file_exists(path)) throw DbError(DbError::Kind::Missing, "no profile database at " + path);
      flags |= how == Open::ReadWrite ? SQLITE_OPEN_READWRITE : SQLITE_OPEN_READONLY;
    }
    // Several processes creating one database at once race on the switch to WAL, which SQLite
    // reports as BUSY (its busy handler is not consulted there) or as an I/O error while the -wal
    // and -shm files appear. Both pass: retry the whole open, on a fresh connection, within the timeout.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(busy_timeout_ms);
    for (;;) {
      try {
        impl_->open(flags, how, busy_timeout_ms);
        break;
      } catch (const DbError& e) {
        const bool transient = how != Open::ReadOnly &&
                               (e.kind() == DbError::Kind::Locked || e.kind() == DbError::Kind::Io);
        if (!transient || std::chrono::steady_clock::now() >= deadline) throw;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
  } catch (...) {
    delete impl_;
    throw;
  }
}

Database::~Database() { delete impl_; }

int Database::schema_version() { return read_user_version(impl_->db); }

std::string Database::integrity_check() {
  Stmt s(impl_->db, "PRAGMA integrity_check");
  return s.step() ? s.text(0) : "no answer";
}

uint64_t Database::add_run(const std::string& task_key, const std::string& command_line, const RunSummary& run,
                           const std::vector<KernelSample>& kernels, const std::vector<TraceOp>& trace,
                           uint32_t runs_wanted) {
  if (impl_->empty) throw DbError(DbError::Kind::Io, "database opened read-only");
  sqlite3* db = impl_->db;
  WriteTxn txn(db);
  const int64_t now = static_cast<int64_t>(std::time(nullptr));

  Stmt(db, "INSERT INTO tasks (key, command_line, created_unix) VALUES (?, ?, ?) ON CONFLICT (key) DO NOTHING")
      .bind(1, task_key)
      .bind(2, command_line)
      .bind(3, now)
      .run();
  Stmt upd(db,
           "UPDATE tasks SET runs_measured = runs_measured + 1, command_line = ?2, "
           "runs_wanted = CASE WHEN ?3 > 0 THEN ?3 ELSE runs_wanted END WHERE key = ?1 RETURNING runs_measured");
  upd.bind(1, task_key).bind(2, command_line).bind(3, static_cast<int64_t>(runs_wanted));
  const uint64_t run_no = upd.step() ? upd.u64(0) : 0;
  upd.reset();

  merge_samples(db, task_key, kernels);

  Stmt(db,
       "INSERT OR REPLACE INTO runs (task_key, run_no, finished_unix, pid, gpu_ops, busy_ns, wall_ns, iterations, "
       "ops_launched, ops_timed, sample_every, request_busy_pct, timer, timing_bias_ns, timing_uncertainty_ns, "
       "sample_unit, backend, request_p50_ns, requests) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
      .bind_all(1, task_key, run_no, now, static_cast<int64_t>(::getpid()), run.gpu_ops, run.busy_ns, run.wall_ns,
                run.iterations, run.ops_launched, run.ops_timed, run.sample_every, run.request_busy_pct, run.timer,
                run.timing_bias_ns, run.timing_uncertainty_ns, run.sample_unit, run.backend, run.request_p50_ns,
                run.requests)
      .run();

  Stmt(db, "DELETE FROM trace WHERE task_key = ?").bind(1, task_key).run();
  Stmt ins(db, "INSERT INTO trace VALUES (?, ?, ?, ?, ?, ?)");
  const size_t n = std::min(trace.size(), TraceOp::kMaxPerRun);
  for (size_t i = 0; i < n; ++i) {
    ins.bind(1, task_key).bind_u(2, i).bind_u(3, trace[i].kernel_id).bind_u(4, trace[i].stream);
    ins.bind_u(5, trace[i].start_ns).bind_u(6, trace[i].end_ns).run();
  }
  txn.commit();
  return run_no;
}

std::vector<TaskInfo> Database::tasks() {
  std::vector<TaskInfo> out;
  if (impl_->empty) return out;
  truncated_ = false;
  Stmt s(impl_->db, ("SELECT key, command_line, created_unix, runs_measured, runs_wanted FROM tasks ORDER BY key LIMIT " +
                     std::to_string(kMaxTasksRead + 1)).c_str());
  while (s.step()) out.push_back(read_task(s));
  if (out.size() > kMaxTasksRead) out.pop_back(), truncated_ = true;
  return out;
}

std::optional<TaskInfo> Database::task(const std::string& key) {
  if (impl_->empty) return std::nullopt;
  Stmt s(impl_->db, "SELECT key, command_line, created_unix, runs_measured, runs_wanted FROM tasks WHERE key = ?");
  s.bind(1, key);
  if (!s.step()) return std::nullopt;
  return read_task(s);
}

std::vector<KernelSample> Database::kernel_samples(const std::string& key) {
  impl_->require_task(key);
  std::vector<KernelSample> out;
  truncated_ = false;
  const int version = schema_version();
  // In the primary key's order, so that SQLite stops reading at the bound (no sort of every row).
  Stmt s(impl_->db, ("SELECT " + sample_columns(version) + " FROM kernels WHERE task_key = ? ORDER BY kernel_id LIMIT " +
                     std::to_string(kMaxKernelsRead + 1)).c_str());
  s.bind(1, key);
  while (s.step()) out.push_back(read_sample(s, version));
  if (out.size() > kMaxKernelsRead) out.pop_back(), truncated_ = true;
  return out;
}

std::vector<KernelProfile> Database::kernels(const std::string& key) {
  std::vector<KernelSample> samples = kernel_samples(key);
  std::sort(samples.begin(), samples.end(),
            [](const KernelSample& a, const KernelSample& b) { return a.duration.sum > b.duration.sum; });
  std::vector<KernelProfile> out;
  out.reserve(samples.size());
  for (const KernelSample& k : samples) {
    KernelProfile p;
    p.kernel_id = k.kernel_id;
    p.name = k.name;
    p.call_site = k.call_site;
    p.grid = k.grid;
    p.block = k.block;
    p.shared_mem = k.shared_mem;
    p.blocks_per_sm = k.blocks_per_sm;
    p.sm_count = k.sm_count;
    p.count = k.duration.count;
    p.dur_mean = k.duration.mean();
    p.dur_stddev = k.duration.stddev();
    p.dur_min = k.duration.count ? k.duration.min : 0;
    p.dur_p50 = quantile_of(k.duration, 0.5);
    p.dur_p90 = quantile_of(k.duration, 0.9);
    p.dur_max = k.duration.max;
    p.gap_count = k.gap.count;
    p.gap_mean = k.gap.mean();
    p.gap_p10 = quantile_of(k.gap, 0.1);
    p.gap_p50 = quantile_of(k.gap, 0.5);
    p.gap_p90 = quantile_of(k.gap, 0.9);
    p.boundary_count = k.boundary_count;
    p.hold_p50 = policy::sm_hold_ns(p.dur_p50, policy::waves_of(uint64_t(k.grid[0]) * k.grid[1] * k.grid[2],
                                                                k.blocks_per_sm, k.sm_count));
    p.dur_unresolved = k.dur_unresolved;
    p.graph_op = k.graph_op;
    out.push_back(std::move(p));
  }
  return out;
}

void Database::merge_kernels(const std::string& task_key, const std::string& command_line,
                             const std::vector<KernelSample>& kernels) {
  if (impl_->empty) throw DbError(DbError::Kind::Io, "database opened read-only");
  WriteTxn txn(impl_->db);
  Stmt(impl_->db, "INSERT INTO tasks (key, command_line, created_unix) VALUES (?, ?, ?) ON CONFLICT (key) DO NOTHING")
      .bind(1, task_key)
      .bind(2, command_line)
      .bind(3, static_cast<int64_t>(std::time(nullptr)))
      .run();
  merge_samples(impl_->db, task_key, kernels);
  txn.commit();
}

std::vector<RunSummary> Database::runs(const std::string& key) {
  impl_->require_task(key);
  std::vector<RunSummary> out;
  // A database of schema version 1 opened read-only has no coverage columns: they read as unknown.
  const int version = schema_version();
  const bool covered = version >= 2;
  // The columns each version added, in the order read below.
  std::string columns = "gpu_ops, busy_ns, wall_ns, iterations, finished_unix";
  if (covered) columns += ", ops_launched, ops_timed, sample_every";
  if (version >= 3) columns += ", request_busy_pct";
  if (version >= 4) columns += ", timer, timing_bias_ns, timing_uncertainty_ns";
  if (version >= 5) columns += ", sample_unit";
  if (version >= 6) columns += ", backend, request_p50_ns, requests";
  // The latest runs, read newest first up to the bound, then put back in order.
  truncated_ = false;
  Stmt s(impl_->db, ("SELECT " + columns + " FROM runs WHERE task_key = ? ORDER BY run_no DESC LIMIT " +
                     std::to_string(kMaxRunsRead + 1)).c_str());
  s.bind(1, key);
  while (s.step()) {
    RunSummary r;
    s.columns(0, r.gpu_ops, r.busy_ns, r.wall_ns, r.iterations, r.finished_unix);
    if (covered) {
      s.columns(5, r.ops_launched, r.ops_timed);
      r.sample_every = uint32_t(std::max<int64_t>(1, s.i64(7)));
    }
    if (version >= 3) r.request_busy_pct = int32_t(s.i64(8));
    if (version >= 4) s.columns(9, r.timer, r.timing_bias_ns, r.timing_uncertainty_ns);
    if (version >= 5) r.sample_unit = s.text(12);
    if (version >= 6) s.columns(13, r.backend, r.request_p50_ns, r.requests);
    out.push_back(r);
  }
  if (out.size() > kMaxRunsRead) out.pop_back(), truncated_ = true;
  std::reverse(out.begin(), out.end());
  return out;
}

double coverage(const std::vector<RunSummary>& runs) {
  uint64_t launched = 0, timed = 0;
  for (const RunSummary& r : runs) {
    launched += r.ops_launched;
    timed += r.ops_timed;
  }
  return launched == 0 ? -1.0 : double(timed) / double(launched);
}

int request_busy_percent(const std::vector<RunSummary>& runs) {
  std::vector<int32_t> known;
  for (const RunSummary& r : runs)
    if (r.request_busy_pct >= 0) known.push_back(r.request_busy_pct);
  if (known.empty()) return -1;
  std::nth_element(known.begin(), known.begin() + known.size() / 2, known.end());
  return known[known.size() / 2];
}

uint64_t timing_uncertainty(const std::vector<RunSummary>& runs) {
  uint64_t u = 0;
  for (const RunSummary& r : runs) u = std::max(u, r.timing_uncertainty_ns);
  return u;
}

std::vector<TraceOp> Database::last_trace(const std::string& key) {
  impl_->require_task(key);
  std::vector<TraceOp> out;
  Stmt s(impl_->db, ("SELECT kernel_id, stream, start_ns, end_ns FROM trace WHERE task_key = ? ORDER BY seq LIMIT " +
                     std::to_string(TraceOp::kMaxPerRun)).c_str());
  s.bind(1, key);
  while (s.step()) out.push_back(TraceOp{s.u64(0), s.u64(1), s.u64(2), s.u64(3)});
  return out;
}

Histogram Database::gap_histogram(const std::string& key) {
  impl_->require_task(key);
  Histogram h;
  // The gaps between the task's ops: a graph's kernels (graph_op, version 7) are inside its op.
  Stmt s(impl_->db, schema_version() >= 7 ? "SELECT gap_hist FROM kernels WHERE task_key = ? AND graph_op = 0"
                                          : "SELECT gap_hist FROM kernels WHERE task_key = ?");
  s.bind(1, key);
  while (s.step()) h.merge(s.hist(0));
  return h;
}

bool Database::delete_task(const std::string& key) {
  if (impl_->empty) return false;
  sqlite3* db = impl_->db;
  WriteTxn txn(db);
  for (const char* sql : {"DELETE FROM kernels WHERE task_key = ?", "DELETE FROM runs WHERE task_key = ?",
                          "DELETE FROM trace WHERE task_key = ?"})
    Stmt(db, sql).bind(1, key).run();
  Stmt del(db, "DELETE FROM tasks WHERE key = ?");
  del.bind(1, key).run();
  const bool existed = sqlite3_changes(db) > 0;
  txn.commit();
  return existed;
}

std::string Database::default_path() {
  if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg && *xdg) return std::string(xdg) + "/fikit/profiles.db";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.local/share/fikit/profiles.db";
}

}  // namespace fikit::profiledb
