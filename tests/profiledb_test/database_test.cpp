// Database: schema creation, merging runs, concurrent and killed writers, the error kinds.
#include <gtest/gtest.h>

#include <map>
#include <sqlite3.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "db_fixture.h"

using namespace fikit::profiledb;
using fikit::testing::DbTest;
using fikit::testing::sample;

TEST_F(DbTest, CreatesSchemaInAnEmptyFileAndItsDirectory) {
  std::ofstream(dir_ / "empty.db").close();   // zero bytes: SQLite treats it as a new database
  {
    Database db((dir_ / "empty.db").string(), Database::Open::Create);
    EXPECT_EQ(db.schema_version(), Database::kSchemaVersion);
    EXPECT_TRUE(db.tasks().empty());
  }
  Database nested((dir_ / "a" / "b" / "profiles.db").string(), Database::Open::Create);
  EXPECT_EQ(nested.schema_version(), Database::kSchemaVersion);
  Database reopened((dir_ / "empty.db").string(), Database::Open::ReadOnly);
  EXPECT_EQ(reopened.schema_version(), Database::kSchemaVersion);
}

TEST_F(DbTest, AGraphsKernelNodesKeepTheirGraphOpAcrossMerges) {
  Database db(path_, Database::Open::Create);
  auto node = sample(9, 4000, 2, 300);
  node.graph_op = 0x77;
  node.call_site.clear();
  db.add_run("job", "prog", {.gpu_ops = 2}, {sample(0x77, 10000, 2, 0, 2), node}, {}, 3);
  auto again = sample(9, 6000, 1, 0);
  again.graph_op = 0;   // a sample that lacks it (none is written so today) keeps the stored one
  db.add_run("job", "prog", {.gpu_ops = 1}, {again}, {}, 3);
  std::map<uint64_t, KernelProfile> ks;
  for (const auto& k : db.kernels("job")) ks[k.kernel_id] = k;
  ASSERT_EQ(ks.size(), 2u);
  EXPECT_EQ(ks[0x77].graph_op, 0u);
  EXPECT_EQ(ks[9].graph_op, 0x77u);
  EXPECT_EQ(ks[9].count, 3u);
  EXPECT_EQ(ks[9].gap_count, 2u);
}

TEST_F(DbTest, ReadOnlyOpenOfAnUnmigratedFileShowsNoTasks) {
  std::ofstream(dir_ / "empty.db").close();
  Database db((dir_ / "empty.db").string(), Database::Open::ReadOnly);
  EXPECT_TRUE(db.tasks().empty());
  EXPECT_FALSE(db.task("x").has_value());
  EXPECT_THROW(db.kernels("x"), DbError);
}

TEST_F(DbTest, RunsMergeIntoPerKernelStatistics) {
  Database db(path_, Database::Open::Create);
  RunSummary run{.gpu_ops = 6, .busy_ns = 100, .wall_ns = 200, .iterations = 1};
  std::vector<TraceOp> trace1{{1, 7, 0, 10}, {2, 7, 20, 30}};
  EXPECT_EQ(db.add_run("task", "prog --a", run, {sample(1, 1000, 3, 50), sample(2, 9000, 2, 0, 1)}, trace1, 3), 1u);
  EXPECT_EQ(db.add_run("task", "prog --a", run, {sample(1, 3000, 3, 150)}, {{1, 8, 5, 6}}, 3), 2u);

  const auto t = db.task("task");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->runs_measured, 2u);
  EXPECT_EQ(t->runs_wanted, 3u);
  EXPECT_EQ(t->state, "measuring");
  EXPECT_EQ(t->command_line, "prog --a");

  const auto ks = db.kernels("task");
  ASSERT_EQ(ks.size(), 2u);
  // Kernel 1: 6 calls, 12 us in all; kernel 2: 2 calls, 18 us: kernel 2 first by total time.
  EXPECT_EQ(ks[0].kernel_id, 2u);
  EXPECT_EQ(ks[0].count, 2u);
  EXPECT_EQ(ks[0].boundary_count, 1u);
  EXPECT_EQ(ks[0].gap_count, 0u);
  EXPECT_EQ(ks[1].kernel_id, 1u);
  EXPECT_EQ(ks[1].count, 6u);
  EXPECT_DOUBLE_EQ(ks[1].dur_mean, 2000.0);
  EXPECT_EQ(ks[1].dur_min, 1000u);
  EXPECT_EQ(ks[1].dur_max, 3000u);
  EXPECT_EQ(ks[1].gap_count, 6u);
  EXPECT_DOUBLE_EQ(ks[1].gap_mean, 100.0);
  EXPECT_EQ(ks[1].name, "kernel_1");

  // The trace is the last run's only.
  const auto tr = db.last_trace("task");
  ASSERT_EQ(tr.size(), 1u);
  EXPECT_EQ(tr[0].stream, 8u);
  EXPECT_EQ(db.runs("task").size(), 2u);
  EXPECT_EQ(db.gap_histogram("task").total(), 6u);

  db.add_run("task", "prog --a", run, {}, {}, 3);
  EXPECT_EQ(db.task("task")->state, "ready");
}

TEST_F(DbTest, KernelIdsUseAll64Bits) {
  Database db(path_, Database::Open::Create);
  const uint64_t id = 0xfedcba9876543210ull;
  db.add_run("t", "", {}, {sample(id, 10, 1, 0)}, {{id, ~0ull, 1, 2}});
  EXPECT_EQ(db.kernels("t").at(0).kernel_id, id);
  EXPECT_EQ(db.last_trace("t").at(0).stream, ~0ull);
}

TEST_F(DbTest, TraceIsBounded) {
  Database db(path_, Database::Open::Create);
  std::vector<TraceOp> trace(TraceOp::kMaxPerRun + 10, TraceOp{1, 1, 0, 1});
  db.add_run("t", "", {}, {}, trace);
  EXPECT_EQ(db.last_trace("t").size(), TraceOp::kMaxPerRun);
}

// Trust v4, N6: a profile of 400 002 kernel rows, written by anyone who can write the database,
// grew the service that read it to 2.84 GB. Reads stop at a bound and say so; what is under the
// bound reads in full, and another task's profile is not affected.
TEST_F(DbTest, AHugeProfileIsReadUpToItsBoundAndSaysSo) {
  Database db(path_, Database::Open::Create);
  std::vector<KernelSample> many;
  for (uint64_t id = 1; id <= Database::kMaxKernelsRead + 100; ++id) many.push_back(sample(id, 10, 1, 0));
  db.merge_kernels("huge", "", many);
  db.add_run("small", "", {}, {sample(7, 10, 1, 0)}, {});
  EXPECT_EQ(db.kernels("huge").size(), Database::kMaxKernelsRead);
  EXPECT_TRUE(db.truncated());
  EXPECT_EQ(db.kernels("small").size(), 1u);
  EXPECT_FALSE(db.truncated()) << "the flag is the last read's";
  for (int i = 0; i < 5; ++i) db.add_run("small", "", {}, {sample(7, 10, 1, 0)}, {});
  EXPECT_EQ(db.runs("small").size(), 6u);
  EXPECT_FALSE(db.truncated());
}

// Trust v4, N5: in a folder others may write (the device plugin's shared database), a link planted
// at the database's path made a root process create its database at the link's target; one planted
// at its log made every open fail with SQLite's "unable to open database file". Both are refused,
// saying which link, and nothing is written where a link points.
TEST_F(DbTest, ALinkAtTheDatabaseOrItsLogIsRefusedAndNothingIsWrittenThrough) {
  const std::string target = (dir_ / "elsewhere.db").string();
  const std::string planted = (dir_ / "planted.db").string();
  ASSERT_EQ(::symlink(target.c_str(), planted.c_str()), 0);
  for (const Database::Open how : {Database::Open::Create, Database::Open::ReadWrite, Database::Open::ReadOnly}) {
    try {
      Database db(planted, how);
      ADD_FAILURE() << "a link at the database's path was opened";
    } catch (const DbError& e) {
      EXPECT_NE(std::string(e.what()).find("is a symbolic link: refused"), std::string::npos) << e.what();
    }
  }
  EXPECT_FALSE(std::filesystem::exists(target)) << "nothing was created where the link points";

  { Database db(path_, Database::Open::Create); db.add_run("t", "", {}, {sample(1, 10, 1, 0)}, {}); }
  std::filesystem::remove(path_ + "-wal");
  ASSERT_EQ(::symlink(target.c_str(), (path_ + "-wal").c_str()), 0);
  try {
    Database db(path_, Database::Open::Create);
    ADD_FAILURE() << "a link at the log was opened";
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("-wal is a symbolic link: refused"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(target));
}

// Found by an independent review: a FIFO planted at the database's path blocked every hooked
// program in open() at its first launch, deaf to SIGTERM, and the daemon's profile reader with it.
// Whatever is there but a plain file is refused at once, in every mode, saying what to do.
TEST_F(DbTest, AFifoAtTheDatabaseOrItsLogIsRefusedAtOnce) {
  const std::string fifo = (dir_ / "fifo.db").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0666), 0);
  for (const Database::Open how : {Database::Open::Create, Database::Open::ReadWrite, Database::Open::ReadOnly}) {
    try {
      Database db(fifo, how);   // before the fix: blocked here for good
      ADD_FAILURE() << "a FIFO at the database's path was opened";
    } catch (const DbError& e) {
      EXPECT_NE(std::string(e.what()).find("is not a plain file"), std::string::npos) << e.what();
    }
  }
  { Database db(path_, Database::Open::Create); db.add_run("t", "", {}, {sample(1, 10, 1, 0)}, {}); }
  std::filesystem::remove(path_ + "-wal");
  ASSERT_EQ(::mkfifo((path_ + "-wal").c_str(), 0666), 0);
  try {
    Database db(path_, Database::Open::ReadOnly);
    ADD_FAILURE() << "a FIFO at the log was opened";
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("-wal is not a plain file"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("remove it (SQLite makes it again)"), std::string::npos) << e.what();
  }
}

TEST_F(DbTest, DeleteRemovesEverythingOfTheTaskOnly) {
  Database db(path_, Database::Open::Create);
  db.add_run("a", "", {}, {sample(1, 10, 1, 1)}, {{1, 1, 0, 1}});
  db.add_run("b", "", {}, {sample(1, 10, 1, 1)}, {{1, 1, 0, 1}});
  EXPECT_TRUE(db.delete_task("a"));
  EXPECT_FALSE(db.delete_task("a"));
  EXPECT_FALSE(db.task("a").has_value());
  EXPECT_EQ(db.tasks().size(), 1u);
  EXPECT_EQ(db.kernels("b").size(), 1u);
  db.add_run("a", "", {}, {}, {});   // the key starts afresh
  EXPECT_TRUE(db.kernels("a").empty());
  EXPECT_EQ(db.task("a")->runs_measured, 1u);
}

TEST_F(DbTest, FourConcurrentWritersLoseNothing) {
  constexpr int kProcs = 4, kRuns = 15;
  std::vector<pid_t> kids;
  for (int p = 0; p < kProcs; ++p) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // Each child opens its own connection (as separate programs would) and hammers one key.
      int rc = 0;
      try {
        Database db(path_, Database::Open::Create, 30000);
        for (int r = 0; r < kRuns; ++r)
          db.add_run("shared", "cmd", {.gpu_ops = 3}, {sample(1, 1000 + p, 2, 10), sample(100 + p, 500, 1, 5)},
                     {{1, 1, 0, 1}});
      } catch (const std::exception& e) {
        fprintf(stderr, "child %d: %s\n", p, e.what());
        rc = 1;
      }
      _exit(rc);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  Database db(path_);
  EXPECT_EQ(db.task("shared")->runs_measured, uint64_t{kProcs * kRuns});
  EXPECT_EQ(db.runs("shared").size(), size_t{kProcs * kRuns});
  uint64_t shared_count = 0, private_count = 0;
  for (const auto& k : db.kernels("shared")) (k.kernel_id == 1 ? shared_count : private_count) += k.count;
  EXPECT_EQ(shared_count, uint64_t{kProcs * kRuns * 2});
  EXPECT_EQ(private_count, uint64_t{kProcs * kRuns});
  EXPECT_EQ(db.kernels("shared").size(), size_t{1 + kProcs});
}

TEST_F(DbTest, WriterKilledMidTransactionLeavesTheDatabaseUsable) {
  { Database db(path_, Database::Open::Create); db.add_run("t", "", {}, {sample(1, 10, 1, 1)}, {}); }
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // A writer that has written half a run when it dies: rows inside an open write transaction.
    sqlite3* raw = nullptr;
    sqlite3_open(path_.c_str(), &raw);
    sqlite3_exec(raw, "BEGIN IMMEDIATE; UPDATE tasks SET runs_measured = 999; DELETE FROM kernels;", nullptr, nullptr,
                 nullptr);
    (void)!write(ready[1], "x", 1);
    pause();
    _exit(0);
  }
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  close(ready[0]);
  close(ready[1]);

  Database db(path_, Database::Open::ReadWrite, 2000);
  EXPECT_EQ(db.add_run("t", "", {}, {sample(1, 10, 1, 1)}, {}), 2u);   // not 1000: the kill rolled back
  EXPECT_EQ(db.kernels("t").at(0).count, 2u);
  EXPECT_EQ(db.integrity_check(), "ok");
}

TEST_F(DbTest, MissingFileIsMissing) {
  try {
    Database db((dir_ / "nope.db").string(), Database::Open::ReadOnly);
    FAIL() << "opened a missing file";
  } catch (const DbError& e) {
    EXPECT_EQ(e.kind(), DbError::Kind::Missing);
  }
  EXPECT_FALSE(std::filesystem::exists(dir_ / "nope.db"));
}

TEST_F(DbTest, JunkFileIsCorruptForReadersAndWriters) {
  std::ofstream(path_) << std::string(8192, 'J');
  for (auto how : {Database::Open::ReadOnly, Database::Open::ReadWrite, Database::Open::Create}) {
    try {
      Database db(path_, how);
      db.tasks();
      FAIL() << "junk accepted";
    } catch (const DbError& e) {
      EXPECT_EQ(e.kind(), DbError::Kind::Corrupt) << e.what();
    }
  }
}

TEST_F(DbTest, BusyWriterGivesLockedAfterTheTimeout) {
  Database db(path_, Database::Open::Create, 50);
  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  try {
    db.add_run("t", "", {}, {}, {});
    FAIL() << "wrote while another writer held the lock";
  } catch (const DbError& e) {
    EXPECT_EQ(e.kind(), DbError::Kind::Locked) << e.what();
  }
  EXPECT_EQ(db.tasks().size(), 0u);   // readers are not blocked (WAL)
  sqlite3_exec(other, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close(other);
  EXPECT_EQ(db.add_run("t", "", {}, {}, {}), 1u);
}

TEST_F(DbTest, UnknownKeyIsNotFound) {
  Database db(path_, Database::Open::Create);
  for (auto call : {+[](Database& d) { d.kernels("x"); }, +[](Database& d) { d.last_trace("x"); },
                    +[](Database& d) { d.runs("x"); }, +[](Database& d) { d.gap_histogram("x"); }}) {
    try {
      call(db);
      FAIL() << "no error for an unknown key";
    } catch (const DbError& e) {
      EXPECT_EQ(e.kind(), DbError::Kind::NotFound);
    }
  }
}

TEST_F(DbTest, VersionOneFilesAreReadAsIsAndMigratedByAWriter) {
  {
    Database db(path_, Database::Open::Create);
    db.add_run("task", "prog", RunSummary{.gpu_ops = 3, .iterations = 1}, {sample(1, 1000, 3, 50)}, {}, 3);
  }
  // Back to what FIKIT wrote before coverage was recorded.
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &raw), SQLITE_OK);
  for (const char* sql : {"ALTER TABLE runs DROP COLUMN backend", "ALTER TABLE runs DROP COLUMN request_p50_ns",
                          "ALTER TABLE runs DROP COLUMN requests", "ALTER TABLE runs DROP COLUMN sample_unit", "ALTER TABLE runs DROP COLUMN timer", "ALTER TABLE runs DROP COLUMN timing_bias_ns",
                          "ALTER TABLE runs DROP COLUMN timing_uncertainty_ns",
                          "ALTER TABLE kernels DROP COLUMN dur_unresolved", "ALTER TABLE kernels DROP COLUMN graph_op",
                          "ALTER TABLE runs DROP COLUMN request_busy_pct", "ALTER TABLE kernels DROP COLUMN blocks_per_sm",
                          "ALTER TABLE kernels DROP COLUMN sm_count", "ALTER TABLE runs DROP COLUMN ops_launched",
                          "ALTER TABLE runs DROP COLUMN ops_timed", "ALTER TABLE runs DROP COLUMN sample_every",
                          "PRAGMA user_version = 1"})
    ASSERT_EQ(sqlite3_exec(raw, sql, nullptr, nullptr, nullptr), SQLITE_OK) << sql << ": " << sqlite3_errmsg(raw);
  sqlite3_close(raw);

  {
    Database reader(path_, Database::Open::ReadOnly);
    EXPECT_EQ(reader.schema_version(), 1);
    const auto runs = reader.runs("task");
    ASSERT_EQ(runs.size(), 1u);
    EXPECT_EQ(runs[0].gpu_ops, 3u);
    EXPECT_EQ(coverage(runs), -1.0) << "coverage unknown";
    EXPECT_EQ(request_busy_percent(runs), -1) << "what requests keep the GPU busy: unknown";
    const auto kernels = reader.kernels("task");
    ASSERT_EQ(kernels.size(), 1u);
    EXPECT_EQ(kernels[0].blocks_per_sm, 0u) << "occupancy unknown";
  }
  Database writer(path_, Database::Open::Create);
  EXPECT_EQ(writer.schema_version(), Database::kSchemaVersion);
  writer.add_run("task", "prog", RunSummary{.gpu_ops = 3, .iterations = 1, .ops_launched = 4, .ops_timed = 3,
                                            .sample_every = 4, .sample_unit = "window"},
                 {sample(1, 1000, 3, 50)}, {}, 3);
  const auto runs = writer.runs("task");
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].ops_launched, 0u);
  EXPECT_EQ(runs[0].sample_unit, "iteration") << "every run before version 5 measured whole iterations";
  EXPECT_EQ(runs[0].backend, "") << "the backend of a run before version 6: unknown";
  EXPECT_EQ(runs[0].request_p50_ns, 0u);
  EXPECT_EQ(runs[1].ops_launched, 4u);
  EXPECT_EQ(runs[1].sample_every, 4u);
  EXPECT_EQ(runs[1].sample_unit, "window");
  EXPECT_DOUBLE_EQ(coverage(runs), 0.75) << "runs that do not say are left out";
}

TEST_F(DbTest, EachRunKeepsItsBackendAndItsRequestsMedian) {
  Database db(path_, Database::Open::Create);
  db.add_run("svc", "prog", RunSummary{.gpu_ops = 3, .iterations = 1, .backend = "mps", .request_p50_ns = 1'750'000,
                                       .requests = 300},
             {sample(1, 1000, 3, 50)}, {}, 10);
  db.add_run("svc", "prog", RunSummary{.gpu_ops = 3, .iterations = 1, .backend = "plain", .request_p50_ns = 1'610'000,
                                       .requests = 280},
             {sample(1, 1000, 3, 50)}, {}, 10);
  const auto runs = Database(path_, Database::Open::ReadOnly).runs("svc");
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].backend, "mps");
  EXPECT_EQ(runs[0].request_p50_ns, 1'750'000u);
  EXPECT_EQ(runs[0].requests, 300u);
  EXPECT_EQ(runs[1].backend, "plain");
  EXPECT_EQ(runs[1].request_p50_ns, 1'610'000u);
  EXPECT_EQ(runs[1].requests, 280u);
}

TEST_F(DbTest, OccupancyAndRequestBusyShareAreStoredAndKeptWhenALaterSampleLacksThem) {
  Database db(path_, Database::Open::Create);
  KernelSample k = sample(1, 1000, 3, 50);
  k.blocks_per_sm = 1;
  k.sm_count = 132;
  db.add_run("task", "prog", RunSummary{.gpu_ops = 3, .iterations = 1, .request_busy_pct = 97}, {k}, {}, 3);
  KernelSample later = sample(1, 1000, 3, 50);   // share mode's re-profiling knows no occupancy
  db.merge_kernels("task", "prog", {later});
  db.add_run("task", "prog", RunSummary{.gpu_ops = 3, .iterations = 1, .request_busy_pct = 40}, {later}, {}, 3);
  db.add_run("task", "prog", RunSummary{.gpu_ops = 3, .iterations = 1, .request_busy_pct = 95}, {later}, {}, 3);
  const auto kernels = db.kernels("task");
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_EQ(kernels[0].blocks_per_sm, 1u);
  EXPECT_EQ(kernels[0].sm_count, 132u);
  EXPECT_EQ(request_busy_percent(db.runs("task")), 95) << "the median of the runs";
}

TEST_F(DbTest, NewerSchemaIsRefused) {
  { Database db(path_, Database::Open::Create); }
  sqlite3* raw = nullptr;
  sqlite3_open(path_.c_str(), &raw);
  sqlite3_exec(raw, "PRAGMA user_version = 99", nullptr, nullptr, nullptr);
  sqlite3_close(raw);
  EXPECT_THROW(Database(path_, Database::Open::ReadOnly), DbError);
}
