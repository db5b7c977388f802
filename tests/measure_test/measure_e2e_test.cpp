// Measure mode end to end: measure_probe runs on the simulated GPU with libfikit_hook.so preloaded,
// and what lands in the profile database is compared with what the probe says it did.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "profiledb.h"

using fikit::profiledb::Database;
using fikit::profiledb::KernelProfile;

extern char** environ;

namespace {

// Bounds on the medians the hook should find (see measure_probe.cpp).
struct Expected {
  uint64_t dur_lo = 0, dur_hi = 0, gap_lo = 0, gap_hi = 0, count = 0;
  // Over the iterations' 10th and 90th percentiles: bounds for the median of a sample of them.
  uint64_t dur_hi_p90 = 0, gap_lo_p10 = 0, gap_hi_p90 = 0;
};

class MeasureE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    name_ = std::string("fikit-measure-") + std::to_string(getpid()) + "-" + info->name();
    dir_ = std::filesystem::temp_directory_path() / name_;
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    db_ = (dir_ / "sub" / "profiles.db").string();   // the hook creates the directory
  }
  void TearDown() override {
    std::filesystem::remove_all(dir_);
    std::filesystem::remove("/dev/shm/" + name_);   // the test's simulated device
  }

  // The probe on two simulated GPUs, a kernel on each in turn, checked op by op (below); `stall`:
  // FIKIT_SIMGPU_RECORD_STALL, or none.
  void two_devices_alternating(const std::string& stall);

  // Starts the probe under the hook; `extra` adds or overrides FIKIT_* settings.
  pid_t spawn(const std::vector<std::string>& args, const std::map<std::string, std::string>& extra, int index = 0) {
    std::map<std::string, std::string> env;
    for (char** e = environ; *e; ++e) {
      const std::string kv = *e;
      const auto eq = kv.find('=');
      if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    env["LD_PRELOAD"] = FIKIT_HOOK_LIB;
    env["FIKIT_MODE"] = "measure";
    env["FIKIT_TASK_KEY"] = "probe";
    env["FIKIT_DB"] = db_;
    env["FIKIT_TIMING"] = "events";
    env["FIKIT_MEASURE_SAMPLE"] = "1";   // every iteration: the counts below are exact
    env["FIKIT_SIMGPU_NAME"] = name_;   // one simulated device per test, shared by its processes
    for (const auto& [k, v] : extra) env[k] = v;
    std::vector<std::string> kv;
    for (const auto& [k, v] : env) kv.push_back(k + "=" + v);
    const std::string out = (dir_ / ("out" + std::to_string(index))).string();
    const std::string err = (dir_ / ("err" + std::to_string(index))).string();

    const pid_t pid = fork();
    if (pid == 0) {
      freopen(out.c_str(), "w", stdout);
      freopen(err.c_str(), "w", stderr);
      std::vector<char*> argv{const_cast<char*>(FIKIT_MEASURE_PROBE)}, envp;
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      for (auto& s : kv) envp.push_back(s.data());
      envp.push_back(nullptr);
      execve(FIKIT_MEASURE_PROBE, argv.data(), envp.data());
      _exit(127);
    }
    return pid;
  }

  int wait_exit(pid_t pid) {
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  }

  int run(const std::vector<std::string>& args, const std::map<std::string, std::string>& extra = {}, int index = 0) {
    return wait_exit(spawn(args, extra, index));
  }

  std::string slurp(const std::string& file) {
    std::ifstream f(dir_ / file);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }

  std::vector<Expected> expected(int index = 0) {
    std::vector<Expected> out;
    std::istringstream in(slurp("out" + std::to_string(index)));
    std::string word;
    size_t pos;
    Expected e;
    while (in >> word >> pos >> word >> e.dur_lo >> word >> e.dur_hi >> word >> e.gap_lo >> word >> e.gap_hi >> word >>
           e.count >> word >> e.dur_hi_p90 >> word >> e.gap_lo_p10 >> word >> e.gap_hi_p90)
      out.push_back(e);
    return out;
  }

  // Kernels of the task by probe position (grid x = position + 1).
  std::map<uint32_t, KernelProfile> by_position(const std::string& key = "probe") {
    std::map<uint32_t, KernelProfile> m;
    for (const auto& k : Database(db_).kernels(key)) m[k.grid[0] - 1] = k;
    return m;
  }

  uint64_t runs_of(const std::string& key = "probe") {
    try {
      auto t = Database(db_).task(key);
      return t ? t->runs_measured : 0;
    } catch (const fikit::profiledb::DbError&) {
      return 0;
    }
  }

  // The probe's single run, with every one of its `ops` launched and timed.
  fikit::profiledb::RunSummary one_run_all_timed(uint64_t ops) {
    const auto runs = Database(db_).runs("probe");
    EXPECT_EQ(runs.size(), 1u);
    if (runs.empty()) return {};
    EXPECT_EQ(runs[0].ops_launched, ops);
    EXPECT_EQ(runs[0].ops_timed, ops);
    return runs[0];
  }
  std::string name_;
  std::filesystem::path dir_;
  std::string db_;
};

// got within [lo, hi], give or take 2 % (the histogram's bucket error is 1.6 % at most).
void expect_between(uint64_t got, uint64_t lo, uint64_t hi, const char* what) {
  EXPECT_GE(static_cast<double>(got), static_cast<double>(lo) * 0.98) << what << " below [" << lo << ", " << hi << "]";
  EXPECT_LE(static_cast<double>(got), static_cast<double>(hi) * 1.02) << what << " above [" << lo << ", " << hi << "]";
}

// Launches of a kernel the profile counts: timed, or with an unknown start (a launch call that its
// thread spent off the CPU, on a loaded host: the hook drops its duration and the gap before it and
// counts it unresolved). These kernels are far too long to be unresolved otherwise.
uint64_t launches(const KernelProfile& k) { return k.count + k.dur_unresolved; }

}  // namespace

// Spins long enough that the few microseconds between the start event and the kernel's submission
// (inherent to events timing on an idle GPU) stay well under 2 %.
const std::vector<std::string> kRhythm{"--spin-us", "300,1000,150", "--period-us", "700,1500,400"};

TEST_F(MeasureE2E, DurationsAndGapsMatchTheProgramsRhythm) {
  auto args = kRhythm;
  args.insert(args.end(), {"--iterations", "30"});
  ASSERT_EQ(run(args), 0) << slurp("err0");
  const auto want = expected();
  ASSERT_EQ(want.size(), 3u) << slurp("out0");
  // Events, calibrated in the process: the run says by what, and a duration may read short by at
  // most that much (the bias taken off an idle-start op is a median of the host's latency).
  const auto timing = Database(db_).runs("probe");
  ASSERT_EQ(timing.size(), 1u);
  EXPECT_EQ(timing[0].timer, "events");
  EXPECT_GT(timing[0].timing_uncertainty_ns, 0u) << "calibrated on the simulated GPU too";
  const uint64_t uncertainty = timing[0].timing_uncertainty_ns;
  const auto got = by_position();
  ASSERT_EQ(got.size(), 3u) << "one kernel ID per position";
  for (uint32_t p = 0; p < 3; ++p) {
    const KernelProfile& k = got.at(p);
    EXPECT_EQ(launches(k), 30u);
    EXPECT_EQ(k.name, "spin_kernel");
    expect_between(k.dur_p50, want[p].dur_lo, want[p].dur_hi, "duration p50");
    EXPECT_GE(k.dur_p50 + uncertainty, want[p].dur_lo) << "not timed shorter than the kernel, beyond the "
                                                         "uncertainty the run states";
    if (p < 2) {
      EXPECT_EQ(k.gap_count + got.at(p + 1).dur_unresolved, 30u);
      EXPECT_EQ(k.boundary_count, 0u);
      expect_between(k.gap_p50, want[p].gap_lo, want[p].gap_hi, "gap p50");
    } else {
      // The last kernel of each iteration is followed by a sync: a boundary, never a gap.
      EXPECT_EQ(k.gap_count, 0u);
      EXPECT_EQ(k.boundary_count, 29u);
    }
  }
  Database db(db_);
  EXPECT_EQ(db.task("probe")->runs_measured, 1u);
  const auto runs = db.runs("probe");
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].gpu_ops, 90u);
  EXPECT_EQ(runs[0].iterations, 29u);
  EXPECT_EQ(runs[0].ops_launched, 90u);
  EXPECT_EQ(runs[0].ops_timed, 90u);
  EXPECT_EQ(runs[0].sample_every, 1u);
  EXPECT_DOUBLE_EQ(fikit::profiledb::coverage(runs), 1.0);
  EXPECT_EQ(db.last_trace("probe").size(), 90u);
  EXPECT_EQ(slurp("err0"), "") << "measure mode prints nothing when all is well";
}

TEST_F(MeasureE2E, SampledIterationsAreMeasuredWhole) {
  // One iteration in four measured (0, then one of each four at an offset: sampling.h); the probe
  // prints its bounds over those same ones.
  auto args = kRhythm;
  args.insert(args.end(), {"--iterations", "40", "--bounds-every", "4"});
  ASSERT_EQ(run(args, {{"FIKIT_MEASURE_SAMPLE", "4"}, {"FIKIT_MEASURE_UNIT", "iteration"}}), 0) << slurp("err0");
  const auto want = expected();
  ASSERT_EQ(want.size(), 3u) << slurp("out0");
  const auto got = by_position();
  ASSERT_EQ(got.size(), 3u);
  for (uint32_t p = 0; p < 3; ++p) {
    const KernelProfile& k = got.at(p);
    EXPECT_EQ(launches(k), 10u) << p;
    EXPECT_EQ(want[p].count, 10u);
    expect_between(k.dur_p50, want[p].dur_lo, want[p].dur_hi, "duration p50");
    if (p < 2) {
      // A measured iteration's gaps stay gaps; none spans the iterations left out.
      const uint64_t lost = got.at(p + 1).dur_unresolved;
      EXPECT_EQ(k.gap_count + lost, 10u) << p;
      // Every gap lies within its own iteration's bounds, so with all 10 timed their median lies
      // within the bounds' medians. A gap the hook could not time (its launch call taken off the
      // CPU) moves the median of the rest by a rank, and on a loaded host the gaps are two groups
      // (a launch on time, or one that waited for the CPU: 500 against 720 us), so a rank can be a
      // group: then the bounds are the bounds' 10th and 90th percentiles.
      if (lost == 0)
        expect_between(k.gap_p50, want[p].gap_lo, want[p].gap_hi, "gap p50");
      else
        expect_between(k.gap_p50, want[p].gap_lo_p10, want[p].gap_hi_p90, "gap p50 (a gap untimed)");
    } else {
      EXPECT_EQ(k.gap_count, 0u);
      EXPECT_EQ(k.boundary_count, 9u);
    }
  }
  const auto runs = Database(db_).runs("probe");
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].sample_every, 4u);
  EXPECT_EQ(runs[0].ops_launched, 30u) << "coverage counts the ops of measured iterations";
  EXPECT_EQ(runs[0].ops_timed, 30u);
}

// Timed with events, one in N is by default windows of a few ops in every iteration, so that no
// iteration pays for being measured whole: every kernel still gets its durations and gaps.
TEST_F(MeasureE2E, WindowsSpreadTheMeasuringOverEveryIteration) {
  auto args = kRhythm;
  args.insert(args.end(), {"--iterations", "240"});
  ASSERT_EQ(run(args, {{"FIKIT_MEASURE_SAMPLE", "4"}}), 0) << slurp("err0");
  const auto want = expected();
  ASSERT_EQ(want.size(), 3u) << slurp("out0");
  const auto got = by_position();
  ASSERT_EQ(got.size(), 3u);
  for (uint32_t p = 0; p < 3; ++p) {
    const KernelProfile& k = got.at(p);
    // 720 ops, one in 4 measured in windows of 8: about 60 a position, less the windows' first ops.
    // The windows are a sample of the iterations: their medians lie within the iterations' bounds'
    // 10th and 90th percentiles (on an idle host the two are the medians' bounds).
    EXPECT_GE(launches(k), 20u) << p;
    EXPECT_LE(launches(k), 120u) << p;
    expect_between(k.dur_p50, want[p].dur_lo, want[p].dur_hi_p90, "duration p50");
    if (p < 2) {
      EXPECT_GE(k.gap_count, 10u) << p;
      expect_between(k.gap_p50, want[p].gap_lo_p10, want[p].gap_hi_p90, "gap p50");
    } else {
      EXPECT_EQ(k.gap_count, 0u) << "the last kernel of an iteration is followed by a sync";
      EXPECT_GE(k.boundary_count, 10u);
    }
  }
  const auto runs = Database(db_).runs("probe");
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].sample_unit, "window");
  EXPECT_EQ(runs[0].sample_every, 4u);
  EXPECT_GE(runs[0].ops_launched, 720u / 8) << "about one op in 4 of 720";
  EXPECT_LE(runs[0].ops_launched, 720u / 2);
  EXPECT_EQ(runs[0].ops_timed, runs[0].ops_launched);
  EXPECT_GE(runs[0].iterations, 200u) << "every synchronisation counts, measured or not";
  EXPECT_GE(runs[0].request_busy_pct, 0) << "a busy share from the windows";
  // Its requests as the host saw them (first launch after a synchronisation to the next), and its
  // backend: what tells a service's MPS cost (rules/backend_rule.h).
  EXPECT_EQ(runs[0].backend, "plain");
  EXPECT_GE(runs[0].requests, 200u);
  EXPECT_LE(runs[0].requests, 241u);
  uint64_t iteration_gpu_ns = 0;
  for (const auto& w : want) iteration_gpu_ns += w.dur_lo;
  EXPECT_GE(runs[0].request_p50_ns, iteration_gpu_ns) << "a request waits for its kernels";
}

// A run counts synchronisations that ended work on SMs: hundreds of synchronous weight uploads
// before the first kernel do not make the first runs (auto mode's whole profile) a few copies each.
TEST_F(MeasureE2E, WindowsCountRunsInSynchronisationsAfterKernels) {
  auto args = kRhythm;
  args.insert(args.end(), {"--iterations", "120", "--uploads", "400"});
  ASSERT_EQ(run(args, {{"FIKIT_MEASURE_SAMPLE", "4"}, {"FIKIT_RUN_ITERATIONS", "10"}}), 0) << slurp("err0");
  // A run: 10 x 4 = 40 synchronisations after kernels (120 kernels, about 30 of them measured): three
  // runs and what is left at exit, not one a 40 uploads.
  const auto runs = Database(db_).runs("probe");
  EXPECT_GE(runs.size(), 3u);
  EXPECT_LE(runs.size(), 4u);
  ASSERT_FALSE(runs.empty());
  // It ends at the first measured op past them: one window in every 32 launches, so up to 56
  // launches (19 iterations of 3) apart.
  EXPECT_GE(runs[0].iterations, 40u);
  EXPECT_LE(runs[0].iterations, 40u + 19);
  EXPECT_GE(runs[0].gpu_ops, 30u);
}

TEST_F(MeasureE2E, WindowsMeasureOneOpInSixteenUnlessTold) {
  ASSERT_EQ(run({"--iterations", "100"}, {{"FIKIT_MEASURE_SAMPLE", ""}}), 0) << slurp("err0");
  auto runs = Database(db_).runs("probe");
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].sample_unit, "window");
  EXPECT_EQ(runs[0].sample_every, 16u);
  // Whole iterations when asked: one in 8 unless told.
  ASSERT_EQ(run({"--iterations", "100"}, {{"FIKIT_MEASURE_SAMPLE", ""}, {"FIKIT_MEASURE_UNIT", "iteration"},
                                         {"FIKIT_TASK_KEY", "whole"}}),
            0)
      << slurp("err0");
  runs = Database(db_).runs("whole");
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].sample_unit, "iteration");
  EXPECT_EQ(runs[0].sample_every, 8u);
  EXPECT_EQ(runs[0].ops_launched, 13u * 3) << "iterations 0, 8, .., 96";
}

// A run says whether its process was an MPS client (the driver's answer): a service's runs under
// each backend tell what being one costs it.
TEST_F(MeasureE2E, ARunSaysWhetherItsProcessWasAnMpsClient) {
  const std::string mps_device = name_ + "-mps";
  const int rc = run({"--iterations", "40"}, {{"FIKIT_SIMGPU_NAME", mps_device}, {"FIKIT_SIMGPU_MPS", "1"}});
  std::filesystem::remove("/dev/shm/" + mps_device);
  ASSERT_EQ(rc, 0) << slurp("err0");
  const auto runs = Database(db_).runs("probe");
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].backend, "mps");
  EXPECT_GE(runs[0].requests, 40u);
  EXPECT_GT(runs[0].request_p50_ns, 0u);
}

// A program that rarely synchronises puts most of its launches in one iteration; measured one in N,
// that iteration is likely not measured, and the profile misses most of the work: said at exit.
TEST_F(MeasureE2E, AProgramThatRarelySynchronisesIsToldWhatItsProfileMisses) {
  // One upload (a copy and a synchronisation) first: the 1200 launches after it are the second iteration,
  // which one in four leaves out (the first period measures the first).
  ASSERT_EQ(run({"--iterations", "400", "--sync-every", "400", "--uploads", "1", "--think-us", "0"},
                {{"FIKIT_MEASURE_SAMPLE", "4"}, {"FIKIT_MEASURE_UNIT", "iteration"}}),
            0)
      << slurp("err0");
  EXPECT_NE(slurp("err0").find("1200 of this process's 1201 launches came between two host synchronisations in an "
                               "iteration that was not measured"),
            std::string::npos)
      << slurp("err0");
  // Measured every time, it says nothing.
  ASSERT_EQ(run({"--iterations", "400", "--sync-every", "400", "--uploads", "1", "--think-us", "0"},
                {{"FIKIT_MEASURE_SAMPLE", "1"}}),
            0)
      << slurp("err0");
  EXPECT_EQ(slurp("err0").find("was not measured"), std::string::npos) << slurp("err0");
}

// An iteration far longer than any the program ended before (and at least 4096 launches) is
// measured from there on, even where one in N would leave it out: the rest of a JAX job's steady
// state, which makes no synchronisation the hook counts.
TEST_F(MeasureE2E, AnIterationFarLongerThanTheOthersIsMeasuredFromItsMiddleOn) {
  // One upload (an iteration of one launch), then 6000 launches and a synchronisation at the end:
  // the second iteration, left out by one in four, is measured from its 4096th launch on.
  ASSERT_EQ(run({"--iterations", "2000", "--sync-every", "2000", "--uploads", "1", "--think-us", "0",
                 "--spin-us", "1,1,1", "--period-us", "1,1,1"},
                {{"FIKIT_MEASURE_SAMPLE", "4"}, {"FIKIT_MEASURE_UNIT", "iteration"}, {"FIKIT_LOG_LEVEL", "info"}}),
            0)
      << slurp("err0");
  const std::string err = slurp("err0");
  EXPECT_NE(err.find("an iteration ran 4096 launches without a host synchronisation the hook counts: the rest of "
                     "it is measured"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find("was not measured"), std::string::npos) << "no warning: " << err;
  const auto runs = Database(db_).runs("probe");
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_GE(runs[0].ops_launched, 6001u - 4096u) << "the rest of the iteration, and the upload";
  EXPECT_LE(runs[0].ops_launched, 6001u - 4096u + 2u);
  EXPECT_GE(runs[0].ops_timed, runs[0].ops_launched - 1);
  uint64_t kernels_timed = 0;
  for (const auto& k : Database(db_).kernels("probe")) kernels_timed += k.count;
  EXPECT_GE(kernels_timed, 1800u);
}

TEST_F(MeasureE2E, BurstsMeasureConsecutiveIterations) {
  // Bursts of three in every twelve iterations (at an offset drawn for each twelve: sampling.h),
  // 12 of 48 (one in four alone would measure 12 too, but not in threes: the consecutive iterations
  // are what sampling_test.cpp checks; here, that a burst's iterations are all stored).
  ASSERT_EQ(run({"--iterations", "48"},
                {{"FIKIT_MEASURE_SAMPLE", "4"}, {"FIKIT_MEASURE_BURST", "3"}, {"FIKIT_MEASURE_UNIT", "iteration"}}),
            0)
      << slurp("err0");
  const auto got = by_position();
  ASSERT_EQ(got.size(), 3u);
  for (uint32_t p = 0; p < 3; ++p) EXPECT_EQ(launches(got.at(p)), 12u) << p;
  const auto runs = Database(db_).runs("probe");
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].ops_launched, 36u);
  EXPECT_EQ(runs[0].ops_timed, 36u);
}

// More ops than the simulated GPU has events for a context (8192: 4096 pairs) are all timed: the event
// timer reuses a bounded pool of pairs. (It created a pair per ring slot, and the shipped training
// example measured 17-34 % of its ops.) At info level the hook says what each stored run timed.
TEST_F(MeasureE2E, ManyOpsAreAllTimedWithEvents) {
  ASSERT_EQ(run({"--iterations", "2000", "--spin-us", "1,1,1", "--period-us", "1,1,1", "--think-us", "0"},
                {{"FIKIT_LOG_LEVEL", "info"}}), 0)
      << slurp("err0");
  one_run_all_timed(6000);
  EXPECT_NE(slurp("err0").find("measure: run 1 of task probe stored: 6000 of 6000 ops timed"), std::string::npos)
      << slurp("err0");
}

// One thread driving two GPUs, a context each, switching per launch (as data-parallel programs
// do): every op is timed, each duration within its bounds, each gap counted. An event pair is its
// context's, and elapsed times exist only within a context: the timer keeps a chain per context.
void MeasureE2E::two_devices_alternating(const std::string& stall) {
  auto args = kRhythm;
  args.insert(args.end(), {"--iterations", "30", "--devices", "2"});
  std::map<std::string, std::string> env{{"FIKIT_SIMGPU_DEVICES", "2"}};
  if (!stall.empty()) env["FIKIT_SIMGPU_RECORD_STALL"] = stall;
  ASSERT_EQ(run(args, env), 0) << slurp("err0");
  const auto want = expected();
  ASSERT_EQ(want.size(), 3u) << slurp("out0");
  const auto stored = one_run_all_timed(90);
  EXPECT_EQ(stored.iterations, 29u);
  const uint64_t uncertainty = stored.timing_uncertainty_ns;
  const auto got = by_position();
  ASSERT_EQ(got.size(), 3u);
  for (uint32_t p = 0; p < 3; ++p) {
    const KernelProfile& k = got.at(p);
    EXPECT_EQ(launches(k), 30u) << p;
    expect_between(k.dur_p50, want[p].dur_lo, want[p].dur_hi, "duration p50");
    EXPECT_GE(k.dur_p50 + uncertainty, want[p].dur_lo) << p;
    // Each gap lies between a kernel on one GPU and the next on the other: counted, on one timeline.
    if (p < 2) {
      EXPECT_EQ(k.gap_count + got.at(p + 1).dur_unresolved, 30u) << p;
      // (Each GPU's chain is placed on the host's clock and kept within what every op bounds: its
      // record call before its start, its completion found after its end. Twice the run's stated
      // uncertainty: a gap spans both chains.)
      const uint64_t two_chains = 2 * uncertainty;
      expect_between(k.gap_p50, want[p].gap_lo - std::min(want[p].gap_lo, two_chains), want[p].gap_hi + two_chains,
                     "gap p50");
    }
  }
  EXPECT_EQ(slurp("err0"), "") << "measure mode prints nothing when all is well";
}

TEST_F(MeasureE2E, OpsAlternatingBetweenTwoDevicesAreAllTimed) { two_devices_alternating(""); }

// A host stalled at the record that places a GPU's chain on its clock (300 us, on the simulated GPU)
// after the call, or before it: the gaps between the two GPUs' kernels stay within their bounds. (A
// chain placed by the clock read after its first record read one gap 330 us long and the other
// 330 us short; CI on a busy 2-core machine read 50 us.)
TEST_F(MeasureE2E, AHostStalledAfterTheFirstRecordOfAGpuDoesNotShiftItsTimeline) {
  two_devices_alternating("1:1:300");
}
TEST_F(MeasureE2E, AHostStalledBeforeTheFirstRecordOfAGpuDoesNotShiftItsTimeline) {
  two_devices_alternating("1:1:300:before");
}

// A GPU used once and then left: its context's last op must not hold the timer's pool of event pairs
// (3072) once the other GPU's ops come round to it.
TEST_F(MeasureE2E, AGpuLeftBehindDoesNotHoldTheTimerBack) {
  ASSERT_EQ(run({"--iterations", "1200", "--spin-us", "1,1,1", "--period-us", "1,1,1", "--think-us", "0",
                 "--devices", "2", "--devices-for", "1"},
                {{"FIKIT_SIMGPU_DEVICES", "2"}}), 0)
      << slurp("err0");
  one_run_all_timed(3600);
}

// The timer keeps event pairs for eight contexts: the ops of a ninth go untimed, said once, and the
// others' are all timed.
TEST_F(MeasureE2E, OpsOfANinthContextGoUntimedAndTheRestAreTimed) {
  ASSERT_EQ(run({"--iterations", "20", "--spin-us", "5,5,5,5,5,5,5,5,5", "--period-us", "20,20,20,20,20,20,20,20,20",
                 "--contexts", "9"}),
            0)
      << slurp("err0");
  const auto runs = Database(db_).runs("probe");
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].ops_launched, 180u);
  EXPECT_EQ(runs[0].ops_timed, 160u);
  const auto got = by_position();
  EXPECT_EQ(got.size(), 8u) << "the ninth position's kernel was never timed";
  EXPECT_EQ(got.count(8), 0u);
  const std::string err = slurp("err0");
  EXPECT_NE(err.find("ops of more than 8 CUDA contexts in one process"), std::string::npos) << err;
  EXPECT_EQ(err.find("CUDA contexts", err.find("CUDA contexts") + 1), std::string::npos) << "said once: " << err;
}

// The program resets its primary context mid-run (cudaDeviceReset) and goes on in the new one,
// which the simulated driver, like a real one, may place at the old one's address: the timer lets go
// of the old one's events before the reset and tells the two apart by the driver's context ID; the
// new one's ops are timed with events of their own.
TEST_F(MeasureE2E, AContextResetMidRunIsTimedAfresh) {
  // Strict: a handle of the old context used after the reset aborts the probe.
  ASSERT_EQ(run({"--iterations", "20", "--reset-at", "10"}, {{"FIKIT_SIMGPU_STRICT", "1"}}), 0) << slurp("err0");
  one_run_all_timed(60);
}

TEST_F(MeasureE2E, RunIterationsSplitALongProcessIntoRuns) {
  ASSERT_EQ(run({"--iterations", "12"}, {{"FIKIT_RUN_ITERATIONS", "4"}}), 0) << slurp("err0");
  // 11 boundaries: runs close after boundaries 4 and 8; the rest (iterations 9..12) at exit.
  EXPECT_EQ(runs_of(), 3u);
  const auto got = by_position();
  EXPECT_EQ(launches(got.at(0)), 12u);
  EXPECT_EQ(got.at(2).boundary_count, 11u);
}

TEST_F(MeasureE2E, FourProcessesMeasuringOneKeyAddUp) {
  std::vector<pid_t> pids;
  for (int i = 0; i < 4; ++i) pids.push_back(spawn({"--iterations", "15"}, {}, i));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(wait_exit(pids[i]), 0) << slurp("err" + std::to_string(i));
  EXPECT_EQ(runs_of(), 4u);
  const auto got = by_position();
  ASSERT_EQ(got.size(), 3u) << "kernel IDs are equal across processes";
  // Each process calibrated its events while the others' kernels ran: the bias it takes off may be
  // more than its own host latency, by as much as the uncertainty its run states.
  uint64_t uncertainty = 0;
  for (const auto& r : Database(db_).runs("probe")) uncertainty = std::max(uncertainty, r.timing_uncertainty_ns);
  for (const auto& [p, k] : got) {
    // Under four processes' contention the uncertainty is wide: short-read launches are unresolved
    // (and counted) as well as those with an unknown start (not counted).
    EXPECT_LE(k.count, 60u) << p;
    EXPECT_GE(launches(k), 60u) << p;
    // Four processes share one simulated device, so ops queue behind the others' and events time
    // the queueing too: only a lower bound holds for durations, and gaps are not compared.
    EXPECT_GE(k.dur_p50 + uncertainty, (p == 0 ? 50000u : p == 1 ? 200000u : 20000u) * 98 / 100) << p;
  }
  EXPECT_LE(got.at(2).boundary_count + got.at(2).gap_count, 56u);
  EXPECT_GE(got.at(2).boundary_count + got.at(2).gap_count + got.at(0).dur_unresolved, 56u);
}

TEST_F(MeasureE2E, KilledMidRunThenACleanRun) {
  // Runs of 2 iterations, forever: kill it once a few runs are in, whatever it is doing.
  const pid_t pid = spawn({"--iterations", "0", "--think-us", "200"}, {{"FIKIT_RUN_ITERATIONS", "2"}});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (runs_of() < 3 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  kill(pid, SIGKILL);
  EXPECT_EQ(wait_exit(pid), -SIGKILL);
  const uint64_t before = runs_of();
  ASSERT_GE(before, 3u);
  const uint64_t count_before = launches(by_position().at(0));
  EXPECT_EQ(count_before, 2 * before) << "every stored run is whole";

  ASSERT_EQ(run({"--iterations", "4"}, {{"FIKIT_RUN_ITERATIONS", "2"}}), 0) << slurp("err0");
  EXPECT_EQ(runs_of(), before + 2);
  EXPECT_EQ(launches(by_position().at(0)), count_before + 4);
  EXPECT_EQ(fikit::profiledb::Database(db_).integrity_check(), "ok");
}

TEST_F(MeasureE2E, AutoModeSharesAfterTheMeasuredRuns) {
  // A service: a job shares from its first launch.
  const std::map<std::string, std::string> env{{"FIKIT_MODE", "auto"},
                                               {"FIKIT_PRIORITY", "0"},
                                               {"FIKIT_MEASURE_RUNS", "3"},
                                               {"FIKIT_RUN_ITERATIONS", "2"},
                                               {"FIKIT_LOG_LEVEL", "info"}};
  ASSERT_EQ(run({"--iterations", "40"}, env, 0), 0) << slurp("err0");
  // Three runs of two iterations, then share mode: nothing more is measured, not even at exit.
  EXPECT_EQ(runs_of(), 3u);
  // Switched mid-run, or (when the measurement thread was still behind at exit) from the next start.
  const std::string log = slurp("err0");
  EXPECT_TRUE(log.find("has 3 measured runs; switching to share mode") != std::string::npos ||
              log.find("has 3 measured runs; it shares from its next start") != std::string::npos)
      << log;
  EXPECT_EQ(Database(db_).task("probe")->state, "ready");

  ASSERT_EQ(run({"--iterations", "4"}, env, 1), 0) << slurp("err1");
  EXPECT_EQ(runs_of(), 3u);
  EXPECT_NE(slurp("err1").find("has 3 measured runs; sharing"), std::string::npos) << slurp("err1");
}

// Engine v5: a service started with the defaults that never exits (a server) stayed in its first
// measured run, its jobs held for measure-hold-max, then unprotected. Its runs end by time
// (FIKIT_RUN_SECONDS) and it shares after FIKIT_MEASURE_RUNS of them, in the same process.
TEST_F(MeasureE2E, AServerThatNeverExitsSharesAfterItsTimedRuns) {
  const pid_t pid = spawn({"--iterations", "0", "--think-us", "200"},
                          {{"FIKIT_MODE", "auto"}, {"FIKIT_PRIORITY", "0"}, {"FIKIT_MEASURE_RUNS", "2"},
                           {"FIKIT_RUN_SECONDS", "1"}, {"FIKIT_LOG_LEVEL", "info"}});
  // Two runs of a second each, on a host that may be busy: well within a minute.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (slurp("err0").find("has 2 measured runs; switching to share mode") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  kill(pid, SIGKILL);
  EXPECT_EQ(wait_exit(pid), -SIGKILL);
  EXPECT_NE(slurp("err0").find("has 2 measured runs; switching to share mode"), std::string::npos) << slurp("err0");
  EXPECT_EQ(runs_of(), 2u);
  for (const auto& run : Database(db_).runs("probe")) EXPECT_GT(run.iterations, 0u);
}

// Engine v5: a job (priority above 0) in auto mode was measured, unscheduled, until it had its runs.
// It shares from its first launch and stores no measured run.
TEST_F(MeasureE2E, AJobInAutoModeSharesFromItsFirstLaunch) {
  ASSERT_EQ(run({"--iterations", "4"}, {{"FIKIT_MODE", "auto"}, {"FIKIT_PRIORITY", "5"}, {"FIKIT_LOG_LEVEL", "info"}}), 0)
      << slurp("err0");
  EXPECT_NE(slurp("err0").find("is a job (priority 5): scheduled from its first launch"), std::string::npos)
      << slurp("err0");
  EXPECT_EQ(runs_of(), 0u);
}

// Found by an independent review: a service in auto mode whose database cannot store runs (garbage
// written into it) stayed measuring at every start, holding its jobs meanwhile. It shares once a run
// fails to be stored.
TEST_F(MeasureE2E, AServiceWhoseRunsCannotBeStoredShares) {
  std::filesystem::create_directories(std::filesystem::path(db_).parent_path());
  std::ofstream(db_) << std::string(8192, 'x');   // not a database
  const pid_t pid = spawn({"--iterations", "0", "--think-us", "200"},
                          {{"FIKIT_MODE", "auto"}, {"FIKIT_PRIORITY", "0"}, {"FIKIT_MEASURE_RUNS", "2"},
                           {"FIKIT_RUN_SECONDS", "1"}});
  const std::string said = "runs stored (its database cannot store them); switching to share mode";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (slurp("err0").find(said) == std::string::npos && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  kill(pid, SIGKILL);
  EXPECT_EQ(wait_exit(pid), -SIGKILL);
  EXPECT_NE(slurp("err0").find("not stored"), std::string::npos) << slurp("err0");
  EXPECT_NE(slurp("err0").find(said), std::string::npos) << slurp("err0");
}

TEST_F(MeasureE2E, UnwritableDatabaseIsReportedAndTheProgramRunsOn) {
  const auto blocker = dir_ / "file";
  std::ofstream(blocker) << "x";
  ASSERT_EQ(run({"--iterations", "3"}, {{"FIKIT_DB", (blocker / "profiles.db").string()}}), 0);
  EXPECT_NE(slurp("err0").find("not stored"), std::string::npos) << slurp("err0");
}
