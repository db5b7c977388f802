#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "hook_settings.h"
#include "profiledb.h"

extern char** environ;

namespace fs = std::filesystem;

namespace {

struct Result {
  int exit_code = -1;
  std::string out, err;
};

std::string slurp(int fd) {
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
  return text;
}

// Runs `args` with the test's environment minus LD_PRELOAD and FIKIT_*, plus `extra_env`.
Result run(const std::vector<std::string>& args, const std::vector<std::string>& extra_env = {}) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    if (entry.rfind("LD_PRELOAD=", 0) == 0 || entry.rfind("FIKIT_", 0) == 0) continue;
    env_strings.push_back(entry);
  }
  env_strings.insert(env_strings.end(), extra_env.begin(), extra_env.end());
  std::vector<char*> envp, argv;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args_copy = args;
  for (auto& s : args_copy) argv.push_back(s.data());
  argv.push_back(nullptr);

  // stderr goes to a file so that a chatty child cannot fill one pipe while we drain the other.
  char err_path[] = "/tmp/fikit-run-test-err-XXXXXX";
  const int err_fd = mkstemp(err_path);
  int out_pipe[2];
  if (err_fd < 0 || pipe(out_pipe) != 0) return {};
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out_pipe[1], 1);
    dup2(err_fd, 2);
    close(out_pipe[0]);
    execve(argv[0], argv.data(), envp.data());
    _exit(99);
  }
  close(out_pipe[1]);
  Result r;
  r.out = slurp(out_pipe[0]);
  close(out_pipe[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  lseek(err_fd, 0, SEEK_SET);
  r.err = slurp(err_fd);
  close(err_fd);
  unlink(err_path);
  return r;
}

std::map<std::string, std::string> parse_env(const std::string& text) {
  std::map<std::string, std::string> vars;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);)
    if (const size_t eq = line.find('='); eq != std::string::npos) vars[line.substr(0, eq)] = line.substr(eq + 1);
  return vars;
}

size_t line_count(const std::string& text) {
  size_t n = 0;
  for (char c : text) n += c == '\n';
  return n;
}

class FikitRun : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("fikit-run-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    hook_ = (dir_ / "libdummy_hook.so").string();
    std::ofstream(hook_) << "not a real library\n";
  }
  void TearDown() override { fs::remove_all(dir_); }

  // fikit-run --hook <dummy> ARGS...
  Result run_with_hook(std::vector<std::string> args, const std::vector<std::string>& env = {}) {
    args.insert(args.begin(), {FIKIT_RUN_PATH, "--hook", hook_});
    return run(args, env);
  }

  fs::path dir_;
  std::string hook_;
};

TEST_F(FikitRun, HelpAndVersionExitZero) {
  const Result help = run({FIKIT_RUN_PATH, "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("Usage: fikit-run"), std::string::npos);
  EXPECT_NE(help.out.find("--priority"), std::string::npos);
  const Result version = run({FIKIT_RUN_PATH, "--version"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_NE(version.out.find("fikit-run"), std::string::npos);
}

// The flags come from the hook's settings table: --help names each, with the same range.
TEST_F(FikitRun, HelpNamesEveryFlagOfTheSettingsTable) {
  const Result help = run({FIKIT_RUN_PATH, "--help"});
  for (const auto& s : fikit::settings::kHookSettings) {
    if (s.flag == nullptr) continue;
    EXPECT_NE(help.out.find(std::string("  ") + s.flag + " "), std::string::npos) << s.flag;
    EXPECT_NE(help.out.find(s.env), std::string::npos) << s.env;
  }
}

// --help states the defaults the hook uses: a flag's text, up to the next flag, names its fallback
// (and --measure-sample also the one for windows).
TEST_F(FikitRun, HelpStatesTheSettingsTablesDefaults) {
  const Result help = run({FIKIT_RUN_PATH, "--help"});
  auto text_of = [&](const std::string& flag) {
    const size_t at = help.out.find("\n  " + flag + " ");
    if (at == std::string::npos) return std::string();
    std::string text = help.out.substr(at + 1, help.out.find("\n  --", at + 1) - at - 1);
    std::string words;   // the help wraps lines: one space between words
    for (char c : text) {
      if (c == '\n' || c == ' ') {
        if (!words.empty() && words.back() != ' ') words += ' ';
      } else {
        words += c;
      }
    }
    return words;
  };
  for (const auto& s : fikit::settings::kHookSettings) {
    if (s.flag == nullptr || s.kind != fikit::settings::Kind::Number) continue;
    const std::string text = text_of(s.flag);
    const std::string fallback = s.fallback == 0 ? "(0:" : "default " + std::to_string(s.fallback);
    const size_t at = text.find(fallback);
    const bool whole = at != std::string::npos && !std::isdigit(static_cast<unsigned char>(text[at + fallback.size()]));
    EXPECT_TRUE(whole) << s.flag << ": " << text;
  }
  EXPECT_NE(text_of("--measure-sample").find(std::to_string(fikit::settings::kMeasureWindowSampleFallback) + " for windows"),
            std::string::npos);
}

TEST_F(FikitRun, BadUsageExitsTwoWithOneLine) {
  const std::vector<std::vector<std::string>> bad = {
      {"--priority", "10", "/bin/true"},        {"--priority", "-1", "/bin/true"},
      {"--priority", "x", "/bin/true"},         {"--bogus", "/bin/true"},
      {"--mode", "fast", "/bin/true"},          {"--scheduler", "localhost", "/bin/true"},
      {"--scheduler", ":47800", "/bin/true"},   {"--scheduler", "127.0.0.1:0", "/bin/true"},
      {"--scheduler", "127.0.0.1:70000", "/bin/true"}, {"--measure-runs", "0", "/bin/true"},
      {"--priority"},                           {},
      {"--priority", "3"},                      {"--"},
      {"--backend", "cuda", "/bin/true"},       {"--max-wait-ms", "0", "/bin/true"},
      {"--key-file", "/nonexistent/key", "/bin/true"}, {"--measure-sample", "0", "/bin/true"},
      {"--measure-sample", "1001", "/bin/true"},
      // What the hook could not use: a key it cannot send, a host it cannot resolve.
      {"--task-key", "\xc3\xa9-\xd0\xba\xd0\xbb\xd1\x8e\xd1\x87", "/bin/true"},
      {"--scheduler", "no-such-host.invalid:47800", "/bin/true"},
  };
  for (const auto& args : bad) {
    const Result r = run_with_hook(args);
    std::string shown;
    for (const auto& a : args) shown += a + " ";
    EXPECT_EQ(r.exit_code, 2) << shown;
    EXPECT_EQ(line_count(r.err), 1u) << shown << "stderr: " << r.err;
    EXPECT_EQ(r.err.rfind("fikit-run: ", 0), 0u) << r.err;
  }
}

TEST_F(FikitRun, MissingProgramIs127AndNonExecutableIs126) {
  EXPECT_EQ(run_with_hook({"fikit-no-such-program-anywhere"}).exit_code, 127);
  EXPECT_EQ(run_with_hook({(dir_ / "missing").string()}).exit_code, 127);
  const std::string plain = (dir_ / "plain-file").string();
  std::ofstream(plain) << "#!/bin/sh\nexit 0\n";
  chmod(plain.c_str(), 0644);
  const Result r = run_with_hook({plain});
  EXPECT_EQ(r.exit_code, 126);
  EXPECT_NE(r.err.find(plain), std::string::npos);
}

TEST_F(FikitRun, MissingHookExitsThree) {
  EXPECT_EQ(run({FIKIT_RUN_PATH, "--hook", (dir_ / "nope.so").string(), "/bin/true"}).exit_code, 3);
  // An explicit FIKIT_HOOK that is missing is an error too, not a silent fallback.
  EXPECT_EQ(run({FIKIT_RUN_PATH, "/bin/true"}, {"FIKIT_HOOK=" + (dir_ / "nope.so").string()}).exit_code, 3);
}

TEST_F(FikitRun, DefaultsAndPrependedPreload) {
  const Result r = run_with_hook({"/usr/bin/env"}, {"LD_PRELOAD=/opt/other.so", "FIKIT_DB=/kept.db"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto vars = parse_env(r.out);
  EXPECT_EQ(vars["LD_PRELOAD"], fs::canonical(hook_).string() + ":/opt/other.so");
  EXPECT_EQ(vars["FIKIT_MODE"], "auto");
  EXPECT_EQ(vars["FIKIT_PRIORITY"], "5");
  EXPECT_EQ(vars["FIKIT_DB"], "/kept.db");   // not given on the command line: left alone
  EXPECT_EQ(vars.count("FIKIT_TASK_KEY"), 0u);
  EXPECT_EQ(vars.count("FIKIT_SCHEDULER"), 0u);
}

// An exported FIKIT_* variable counts as its flag (--help says so): fikit-run's own defaults wrote
// FIKIT_MODE and FIKIT_PRIORITY over the user's (FIKIT_PRIORITY=0 fikit-run -- prog ran at 5).
// Each setting fikit-run has a flag for, exported alone, reaches the program as exported.
TEST_F(FikitRun, EveryExportedSettingCountsAsItsFlag) {
  const std::map<std::string, std::string> exported{
      {"FIKIT_MODE", "measure"},          {"FIKIT_PRIORITY", "0"},       {"FIKIT_TASK_KEY", "svc"},
      {"FIKIT_DB", "/tmp/x.db"},          {"FIKIT_SCHEDULER", "127.0.0.1:9998"},
      {"FIKIT_MEASURE_RUNS", "3"},        {"FIKIT_RUN_ITERATIONS", "4"}, {"FIKIT_RUN_SECONDS", "9"},
      {"FIKIT_MEASURE_SAMPLE", "2"},      {"FIKIT_MAX_WAIT_MS", "50"},   {"FIKIT_BACKEND", "timeslice"},
      {"FIKIT_MEMORY_LIMIT", "1GiB"},     {"FIKIT_OBJECTIVE", "1.5"},    {"FIKIT_MPS_COST_LIMIT", "1.1"}};
  size_t covered = 0;
  for (const fikit::settings::Setting& s : fikit::settings::kHookSettings) {
    if (s.flag == nullptr || std::string(s.env) == "FIKIT_KEY_FILE") continue;   // a file: tested on its own
    ++covered;
    const auto it = exported.find(s.env);
    ASSERT_NE(it, exported.end()) << s.env << " has a flag: give it a value here";
    const Result r = run_with_hook({"/usr/bin/env"}, {it->first + "=" + it->second});
    ASSERT_EQ(r.exit_code, 0) << s.env << ": " << r.err;
    EXPECT_EQ(parse_env(r.out)[it->first], it->second) << s.env;
  }
  EXPECT_EQ(covered, exported.size());
}

// The hint fikit-run prints while a service is measured can be pasted as it is, whatever the key.
TEST_F(FikitRun, TheMeasuringHintQuotesAKeyAShellWouldSplit) {
  const std::string db = (dir_ / "none.db").string();
  Result r = run_with_hook({"--priority", "0", "--db", db, "--task-key", "my svc's", "/bin/true"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("fikit-profile show 'my svc'\\''s')"), std::string::npos) << r.err;
  r = run_with_hook({"--priority", "0", "--db", db, "--task-key", "svcA", "/bin/true"});
  EXPECT_NE(r.err.find("fikit-profile show svcA)"), std::string::npos) << r.err;
  // A job is not measured first: nothing is said.
  r = run_with_hook({"--priority", "5", "--db", db, "--task-key", "trainB", "/bin/true"});
  EXPECT_EQ(r.err.find("measured"), std::string::npos) << r.err;
}

// A flag given wins over the same setting exported; a bad exported value is refused even where a
// flag would have given the setting (the user's environment is checked whole), and named as such.
TEST_F(FikitRun, AFlagWinsOverItsExportedVariable) {
  Result r = run_with_hook({"--priority", "2", "--mode", "share", "/usr/bin/env"},
                           {"FIKIT_PRIORITY=7", "FIKIT_MODE=measure", "FIKIT_MEASURE_RUNS=4"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto vars = parse_env(r.out);
  EXPECT_EQ(vars["FIKIT_PRIORITY"], "2");
  EXPECT_EQ(vars["FIKIT_MODE"], "share");
  EXPECT_EQ(vars["FIKIT_MEASURE_RUNS"], "4") << "an exported setting without its flag is kept";
  r = run_with_hook({"/usr/bin/env"}, {"FIKIT_PRIORITY=eleven"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("FIKIT_PRIORITY (from the environment)"), std::string::npos) << r.err;
}

TEST_F(FikitRun, FlagsBecomeEnvironment) {
  const Result r = run_with_hook({"--priority", "0", "--task-key", "demo-hp", "--mode=share", "--scheduler",
                                  "127.0.0.1:9999", "--db", "/tmp/p.db", "--measure-runs", "7",
                                  "--run-iterations", "3", "--measure-sample", "2", "--", "/usr/bin/env"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto vars = parse_env(r.out);
  EXPECT_EQ(vars["LD_PRELOAD"], fs::canonical(hook_).string());
  EXPECT_EQ(vars["FIKIT_PRIORITY"], "0");
  EXPECT_EQ(vars["FIKIT_TASK_KEY"], "demo-hp");
  EXPECT_EQ(vars["FIKIT_MODE"], "share");
  EXPECT_EQ(vars["FIKIT_SCHEDULER"], "127.0.0.1:9999");
  EXPECT_EQ(vars["FIKIT_DB"], "/tmp/p.db");
  EXPECT_EQ(vars["FIKIT_MEASURE_RUNS"], "7");
  EXPECT_EQ(vars["FIKIT_RUN_ITERATIONS"], "3");
  EXPECT_EQ(vars["FIKIT_MEASURE_SAMPLE"], "2");
}

// Attack 9: a task key the hook cannot send, or a scheduler it cannot resolve, were accepted (exit 0)
// and the program ran unscheduled for its whole life. They are refused; names are resolved here and
// the hook gets an address (IPv6 literals in brackets).
TEST_F(FikitRun, TheHookGetsAnAddressAndAKeyItCanSend) {
  Result r = run_with_hook({"--scheduler", "localhost:47801", "/usr/bin/env"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string resolved = parse_env(r.out)["FIKIT_SCHEDULER"];
  EXPECT_TRUE(resolved == "127.0.0.1:47801" || resolved == "[::1]:47801") << resolved;
  r = run_with_hook({"--scheduler", "[::1]:47802", "/usr/bin/env"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(parse_env(r.out)["FIKIT_SCHEDULER"], "[::1]:47802");
  // Set in the environment instead of on the command line: checked alike.
  r = run_with_hook({"/usr/bin/env"}, {"FIKIT_TASK_KEY=caf\xc3\xa9"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("printable ASCII"), std::string::npos) << r.err;
  r = run_with_hook({"/usr/bin/env"}, {"FIKIT_SCHEDULER=no-such-host.invalid:47800"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("cannot resolve the scheduler's host 'no-such-host.invalid'"), std::string::npos) << r.err;
}

TEST_F(FikitRun, KeyFileBackendAndMaxWaitBecomeEnvironment) {
  const std::string key = (dir_ / "key").string();
  std::ofstream(key) << std::string(64, 'a') << "\n";
  chmod(key.c_str(), 0600);
  const Result r = run_with_hook({"--key-file", key, "--backend", "mps", "--max-wait-ms", "250", "/usr/bin/env"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto vars = parse_env(r.out);
  EXPECT_EQ(vars["FIKIT_KEY_FILE"], key);
  EXPECT_EQ(vars["FIKIT_BACKEND"], "mps");
  EXPECT_EQ(vars["FIKIT_MAX_WAIT_MS"], "250");
}

TEST_F(FikitRun, AKeyFileOthersCanReadIsRefused) {
  const std::string key = (dir_ / "key").string();
  std::ofstream(key) << std::string(64, 'a') << "\n";
  chmod(key.c_str(), 0644);
  const Result r = run_with_hook({"--key-file", key, "/bin/true"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("group or others"), std::string::npos) << r.err;
  // Exported rather than given: refused the same way, not left to the hook inside the program.
  const Result exported = run_with_hook({"/bin/true"}, {"FIKIT_KEY_FILE=" + key});
  EXPECT_EQ(exported.exit_code, 2);
  EXPECT_NE(exported.err.find("group or others"), std::string::npos) << exported.err;
}

// A stand-in for nvidia-cuda-mps-control: a listening `control` socket in a pipe folder.
class FakeMpsControl {
 public:
  explicit FakeMpsControl(const fs::path& dir) {
    fs::create_directories(dir);
    fd_ = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", (dir / "control").c_str());
    bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    listen(fd_, 4);
  }
  ~FakeMpsControl() { close(fd_); }

 private:
  int fd_;
};

TEST_F(FikitRun, UnderMpsTheClientPriorityFollowsTheFikitPriority) {
  const fs::path pipe = dir_ / "mps";
  FakeMpsControl control(pipe);
  const std::string dir_env = "CUDA_MPS_PIPE_DIRECTORY=" + pipe.string();
  auto prio = [&](const char* fikit_priority, std::vector<std::string> env) {
    env.push_back(dir_env);
    const Result r = run_with_hook({"--priority", fikit_priority, "/usr/bin/env"}, env);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    auto vars = parse_env(r.out);
    return vars.count("CUDA_MPS_CLIENT_PRIORITY") ? vars["CUDA_MPS_CLIENT_PRIORITY"] : std::string("unset");
  };
  EXPECT_EQ(prio("0", {}), "0");
  EXPECT_EQ(prio("1", {}), "1");
  EXPECT_EQ(prio("9", {}), "1");
  EXPECT_EQ(prio("5", {"CUDA_MPS_CLIENT_PRIORITY=0"}), "0");   // the user's choice is kept
}

// --backend timeslice: never an MPS client, though a control daemon runs: CUDA is pointed at a
// private folder where none runs, and no MPS setting is made.
TEST_F(FikitRun, ATimeSlicedProgramIsKeptOffARunningMpsDaemon) {
  const fs::path pipe = dir_ / "mps";
  FakeMpsControl control(pipe);
  const Result r = run_with_hook({"--priority", "0", "--backend", "timeslice", "/usr/bin/env"},
                                 {"CUDA_MPS_PIPE_DIRECTORY=" + pipe.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto vars = parse_env(r.out);
  const std::string none = "/tmp/fikit-no-mps-" + std::to_string(geteuid());
  EXPECT_EQ(vars["CUDA_MPS_PIPE_DIRECTORY"], none);
  EXPECT_EQ(vars.count("CUDA_MPS_CLIENT_PRIORITY"), 0u);
  EXPECT_EQ(vars["FIKIT_BACKEND"], "timeslice");
  struct stat st;
  ASSERT_EQ(stat(none.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 077, 0u);
  EXPECT_FALSE(fs::exists(fs::path(none) / "control"));
  // Without the flag the same program is the daemon's client.
  const Result mps = run_with_hook({"--priority", "0", "/usr/bin/env"}, {"CUDA_MPS_PIPE_DIRECTORY=" + pipe.string()});
  EXPECT_EQ(parse_env(mps.out)["CUDA_MPS_PIPE_DIRECTORY"], pipe.string());
  // FIKIT_BACKEND exported counts as the flag.
  const Result exported = run_with_hook({"--priority", "0", "/usr/bin/env"},
                                        {"CUDA_MPS_PIPE_DIRECTORY=" + pipe.string(), "FIKIT_BACKEND=timeslice"});
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  EXPECT_EQ(parse_env(exported.out)["CUDA_MPS_PIPE_DIRECTORY"], none);
}

// (These start fikit-run a dozen times against one stand-in control daemon that never accepts: past
// its backlog of 4, a blocking connect would wait for good. fikit-run's check must not.)
// A service (priority 0) under an MPS control daemon, its backend left to choose: while it
// measures its runs alternate between an MPS client and a context of its own, and once half its
// runs were measured each way it is an MPS client only if that cost its requests at most
// --mps-cost-limit (rules/backend_rule.h).
class ServiceBackend : public FikitRun {
 protected:
  void SetUp() override {
    FikitRun::SetUp();
    pipe_ = dir_ / "mps";
    control_ = std::make_unique<FakeMpsControl>(pipe_);
    db_ = (dir_ / "profiles.db").string();
  }
  void add_runs(int n, const char* backend, uint64_t request_ns) {
    fikit::profiledb::Database db(db_, fikit::profiledb::Database::Open::Create);
    for (int i = 0; i < n; ++i)
      db.add_run("svc", "prog",
                 fikit::profiledb::RunSummary{.gpu_ops = 3, .iterations = 1, .backend = backend,
                                              .request_p50_ns = request_ns, .requests = 100},
                 {}, {}, 10);
  }
  struct Start {
    bool mps;
    std::map<std::string, std::string> env;
    std::string err;
  };
  Start start(std::vector<std::string> flags, std::vector<std::string> env = {}) {
    flags.insert(flags.begin(), {"--task-key", "svc", "--db", db_});
    flags.push_back("/usr/bin/env");
    env.push_back("CUDA_MPS_PIPE_DIRECTORY=" + pipe_.string());
    const Result r = run_with_hook(flags, env);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    Start s{false, parse_env(r.out), r.err};
    s.mps = s.env["CUDA_MPS_PIPE_DIRECTORY"] == pipe_.string();
    return s;
  }
  fs::path pipe_;
  std::unique_ptr<FakeMpsControl> control_;
  std::string db_;
};

TEST_F(ServiceBackend, WhileItMeasuresItsRunsAlternateAndThenTheCheaperOneIsKept) {
  Start s = start({"--priority", "0"});
  EXPECT_TRUE(s.mps) << "the first run as an MPS client";
  EXPECT_NE(s.err.find("is measured as an MPS client this start"), std::string::npos) << s.err;
  add_runs(1, "mps", 1'080'000);
  s = start({"--priority", "0"});
  EXPECT_FALSE(s.mps) << "the next outside MPS";
  EXPECT_EQ(s.env.count("CUDA_MPS_CLIENT_PRIORITY"), 0u);
  EXPECT_NE(s.err.find("is measured outside MPS this start"), std::string::npos) << s.err;
  add_runs(1, "plain", 1'000'000);
  EXPECT_TRUE(start({"--priority", "0"}).mps);
  add_runs(4, "mps", 1'080'000);
  add_runs(4, "plain", 1'000'000);
  // 5 and 5 runs: 1.08x is more than 3 %.
  s = start({"--priority", "0"});
  EXPECT_FALSE(s.mps);
  EXPECT_EQ(s.err.find("fikit-run: task"), std::string::npos) << "the choice is said at info level only: " << s.err;
  s = start({"--priority", "0"}, {"FIKIT_LOG_LEVEL=info"});
  EXPECT_NE(s.err.find("runs outside MPS: its requests took 1.08x as an MPS client"), std::string::npos) << s.err;
  EXPECT_TRUE(start({"--priority", "0", "--mps-cost-limit", "1.1"}).mps) << "within a limit of 1.1";
  EXPECT_TRUE(start({"--priority", "0", "--backend", "mps"}).mps) << "the user's choice wins";
  EXPECT_TRUE(start({"--priority", "0"}, {"FIKIT_BACKEND=mps"}).mps) << "exported, as the flag";
  EXPECT_TRUE(start({"--priority", "5"}).mps) << "a job is always an MPS client: its service's regime governs it";
  EXPECT_TRUE(start({"--priority", "0", "--mode", "off"}).mps);
  EXPECT_FALSE(start({"--priority", "0", "--mode", "share"}).mps);
}

TEST_F(ServiceBackend, AServerThatMeasuredAllItsRunsOneWayMeasuresTheOtherBeforeItShares) {
  add_runs(10, "mps", 1'000'000);
  Start s = start({"--priority", "0"});
  EXPECT_FALSE(s.mps);
  EXPECT_EQ(s.env["FIKIT_MEASURE_RUNS"], "15") << "5 runs outside MPS more";
  EXPECT_NE(s.err.find("5 runs more than --measure-runs"), std::string::npos) << s.err;
  // Forced share mode measures nothing: no trial there, an MPS client as without a choice.
  s = start({"--priority", "0", "--mode", "share"});
  EXPECT_TRUE(s.mps);
  EXPECT_EQ(s.err.find("fikit-run: task"), std::string::npos) << s.err;
}

// Under FIKIT's own MPS control daemon (fikit-scheduler --mps), a service whose jobs could only wait
// beside it in its last run as an MPS client (the daemon's record in the MPS folder, mps/outcomes.h)
// starts outside MPS, whatever its measured cost says (rules::mps_bought_nothing).
TEST_F(FikitRun, AServiceWhoseJobsOnlyWaitedBesideItAsAnMpsClientStartsTimeSliced) {
  // Short: the control socket's path must fit a Unix socket address (108 bytes).
  const fs::path mps_dir = "/tmp/fikit-mps-test-" + std::to_string(getpid());
  fs::remove_all(mps_dir);
  fs::create_directory(mps_dir);
  fs::permissions(mps_dir, fs::perms::owner_all, fs::perm_options::replace);
  FakeMpsControl control(mps_dir / "pipe");
  const std::string outcomes = (mps_dir / "outcomes").string();
  const auto outcome = [&](uint64_t judged_ms, uint64_t beside_ms) {
    std::ofstream(outcomes) << "mps " << judged_ms << " " << beside_ms << " 0000000000000001 5 svc\n";
    fs::permissions(outcomes, fs::perms(0644), fs::perm_options::replace);
  };
  const std::string none = "/tmp/fikit-no-mps-" + std::to_string(geteuid());
  struct Start {
    std::string pipe, err;
  };
  const auto start = [&](std::vector<std::string> flags) {
    flags.insert(flags.begin(), {"--task-key", "svc", "--db", (dir_ / "profiles.db").string()});
    flags.push_back("/usr/bin/env");
    const Result r = run_with_hook(flags, {"FIKIT_MPS_DIR=" + mps_dir.string()});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return Start{parse_env(r.out)["CUDA_MPS_PIPE_DIRECTORY"], r.err};
  };
  const std::string pipe = (mps_dir / "pipe").string();
  EXPECT_EQ(start({"--priority", "0"}).pipe, pipe) << "no record: an MPS client, as the cost rule says";
  outcome(60'000, 1'000);
  Start s = start({"--priority", "0"});
  EXPECT_EQ(s.pipe, none);
  EXPECT_NE(s.err.find("runs outside MPS: in its last run as an MPS client its jobs ran beside it 2% of 60 s"),
            std::string::npos) << s.err;
  EXPECT_EQ(start({"--priority", "0", "--backend", "mps"}).pipe, pipe) << "the user's choice wins";
  EXPECT_EQ(start({"--priority", "5"}).pipe, pipe) << "a job is always an MPS client";
  EXPECT_EQ(start({"--priority", "0", "--mode", "off"}).pipe, pipe);
  outcome(60'000, 30'000);
  EXPECT_EQ(start({"--priority", "0"}).pipe, pipe) << "its jobs ran beside it half the time";
  outcome(10'000, 0);
  EXPECT_EQ(start({"--priority", "0"}).pipe, pipe) << "10 s say too little";
  outcome(60'000, 0);
  fs::permissions(outcomes, fs::perms(0666), fs::perm_options::replace);
  EXPECT_EQ(start({"--priority", "0"}).pipe, pipe) << "a file anyone may write is not believed";
  fs::remove_all(mps_dir);
}

// Under FIKIT's own MPS control daemon, a job starts outside MPS when the daemon publishes that a
// job started now would be the only one below time-sliced services (Policy::job_backend): an MPS
// client's work runs in the MPS server's context, which the regime preempt cannot switch out.
TEST_F(FikitRun, AJobStartsOutsideMpsWhereTheDaemonSaysItCanBePreempted) {
  const fs::path mps_dir = "/tmp/fikit-mps-job-" + std::to_string(getpid());
  fs::remove_all(mps_dir);
  fs::create_directory(mps_dir);
  fs::permissions(mps_dir, fs::perms::owner_all, fs::perm_options::replace);
  FakeMpsControl control(mps_dir / "pipe");
  const auto publish = [&](const char* name, const std::string& text, fs::perms mode = fs::perms(0644)) {
    std::ofstream((mps_dir / name).string()) << text << "\n";
    fs::permissions(mps_dir / name, mode, fs::perm_options::replace);
  };
  const std::string none = "/tmp/fikit-no-mps-" + std::to_string(geteuid()), pipe = (mps_dir / "pipe").string();
  struct Start {
    std::string pipe, err;
  };
  const auto start = [&](std::vector<std::string> flags) {
    flags.insert(flags.begin(), {"--task-key", "trainB", "--db", (dir_ / "profiles.db").string()});
    flags.push_back("/usr/bin/env");
    const Result r = run_with_hook(flags, {"FIKIT_MPS_DIR=" + mps_dir.string()});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return Start{parse_env(r.out)["CUDA_MPS_PIPE_DIRECTORY"], r.err};
  };
  EXPECT_EQ(start({"--priority", "5"}).pipe, pipe) << "nothing published: an MPS client";
  publish("jobs-backend", "timeslice 0");
  Start s = start({"--priority", "5"});
  EXPECT_EQ(s.pipe, none);
  EXPECT_NE(s.err.find("job 'trainB' starts outside MPS: the service above it runs time-sliced"), std::string::npos)
      << s.err;
  EXPECT_EQ(start({"--priority", "5", "--backend", "mps"}).pipe, pipe) << "the user's choice wins";
  EXPECT_EQ(start({"--priority", "5", "--mode", "off"}).pipe, pipe);
  EXPECT_EQ(start({"--priority", "0"}).pipe, pipe) << "not for a service: its own rules decide";
  publish("jobs-backend", "timeslice 5");
  EXPECT_EQ(start({"--priority", "5"}).pipe, pipe) << "not below the services it names";
  EXPECT_EQ(start({"--priority", "6"}).pipe, none);
  for (const char* bad : {"mps 0", "timeslice", "timeslice x", "timeslice 0 1", "", "timeslice -1"}) {
    publish("jobs-backend", bad);
    EXPECT_EQ(start({"--priority", "5"}).pipe, pipe) << "'" << bad << "' is not believed";
  }
  publish("jobs-backend", "timeslice 0", fs::perms(0666));
  EXPECT_EQ(start({"--priority", "5"}).pipe, pipe) << "a file anyone may write is not believed";
  publish("jobs-backend", "timeslice 0");
  publish("reserve", "3221225472B");
  EXPECT_EQ(start({"--priority", "5"}).pipe, pipe) << "a memory reserve, which MPS enforces, keeps it an MPS client";
  fs::remove_all(mps_dir);
}

// --memory-limit: the hook's FIKIT_MEMORY_LIMIT, checked by the same rules the hook reads it with;
// under MPS, for a size, MPS's own cap for each GPU the program can see (the user's is kept).
TEST_F(FikitRun, AMemoryLimitIsCheckedAndBecomesEnvironment) {
  Result r = run_with_hook({"--memory-limit", "20GiB", "/usr/bin/env"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(parse_env(r.out)["FIKIT_MEMORY_LIMIT"], "20GiB");
  EXPECT_EQ(parse_env(r.out).count("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), 0u) << "no MPS here";
  r = run_with_hook({"--memory-limit=30%", "/usr/bin/env"});
  EXPECT_EQ(parse_env(r.out)["FIKIT_MEMORY_LIMIT"], "30%");
  const std::pair<const char*, const char*> bad[] = {
      {"20XB", "unknown unit"}, {"0", "refuse every allocation"}, {"150%", "above 100 %"}, {"-1G", "negative"}};
  for (const auto& [size, why] : bad) {
    r = run_with_hook({"--memory-limit", size, "/bin/true"});
    EXPECT_EQ(r.exit_code, 2) << size;
    EXPECT_EQ(line_count(r.err), 1u) << r.err;
    EXPECT_NE(r.err.find(why), std::string::npos) << r.err;
  }
  r = run_with_hook({"/bin/true"}, {"FIKIT_MEMORY_LIMIT=lots"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("FIKIT_MEMORY_LIMIT (from the environment): 'lots'"), std::string::npos) << r.err;

  const fs::path pipe = dir_ / "mps";
  FakeMpsControl control(pipe);
  const std::string mps = "CUDA_MPS_PIPE_DIRECTORY=" + pipe.string();
  r = run_with_hook({"--memory-limit", "20GiB", "/usr/bin/env"}, {mps, "CUDA_VISIBLE_DEVICES=2,3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(parse_env(r.out)["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=20480M,1=20480M");
  r = run_with_hook({"--memory-limit", "20GiB", "/usr/bin/env"},
                    {mps, "CUDA_VISIBLE_DEVICES=0", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1G"});
  EXPECT_EQ(parse_env(r.out)["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=1G");
  r = run_with_hook({"--memory-limit", "25%", "/usr/bin/env"}, {mps, "CUDA_VISIBLE_DEVICES=0"});
  EXPECT_EQ(parse_env(r.out).count("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), 0u) << "a share needs the GPU's size";
}

// Every FIKIT_* variable is in the settings table, so fikit-run checks each one it hands on: the
// ones without a flag too (they were read unchecked by the hook: FIKIT_STATS=yes meant on).
TEST_F(FikitRun, EveryFikitVariableInTheEnvironmentIsChecked) {
  const std::pair<const char*, const char*> bad[] = {
      {"FIKIT_STATS=yes", "FIKIT_STATS (from the environment): 'yes' is not a whole number from 0 to 1"},
      {"FIKIT_LOG_LEVEL=loud", "FIKIT_LOG_LEVEL (from the environment): 'loud' is not one of error|warn|info|debug"},
      {"FIKIT_NOTIFY_SPIN_US=200000", "FIKIT_NOTIFY_SPIN_US (from the environment): 200000 is out of range"},
      {"FIKIT_GRAPH_SEGMENT_US=-1", "FIKIT_GRAPH_SEGMENT_US (from the environment)"}};
  for (const auto& [env, message] : bad) {
    const Result r = run_with_hook({"/bin/true"}, {env});
    EXPECT_EQ(r.exit_code, 2) << env;
    EXPECT_EQ(line_count(r.err), 1u) << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
  }
  const Result ok = run_with_hook({"/usr/bin/env"}, {"FIKIT_STATS=1", "FIKIT_LOG_LEVEL=info", "FIKIT_NOTIFY_SPIN_US=0"});
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_EQ(parse_env(ok.out)["FIKIT_LOG_LEVEL"], "info");
}

TEST_F(FikitRun, AControlPipeWithItsDaemonReadingCountsToo) {
  const fs::path pipe = dir_ / "mps";
  fs::create_directories(pipe);
  const std::string fifo = (pipe / "control").string();
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::vector<std::string> env{"CUDA_MPS_PIPE_DIRECTORY=" + pipe.string()};
  Result r = run_with_hook({"--priority", "3", "/usr/bin/env"}, env);
  EXPECT_EQ(parse_env(r.out).count("CUDA_MPS_CLIENT_PRIORITY"), 0u);   // nobody reads it: no daemon
  const int reader = open(fifo.c_str(), O_RDONLY | O_NONBLOCK);        // the daemon listening
  ASSERT_GE(reader, 0);
  r = run_with_hook({"--priority", "3", "/usr/bin/env"}, env);
  EXPECT_EQ(parse_env(r.out)["CUDA_MPS_CLIENT_PRIORITY"], "1");
  close(reader);
}

TEST_F(FikitRun, TheControlDaemonsPidFileDecidesWhenThereIsOne) {
  const fs::path pipe = dir_ / "mps";
  fs::create_directories(pipe);
  const std::vector<std::string> env{"CUDA_MPS_PIPE_DIRECTORY=" + pipe.string()};
  std::ofstream(pipe / "nvidia-cuda-mps-control.pid") << getpid() << "\n";   // alive: this test
  Result r = run_with_hook({"--priority", "0", "/usr/bin/env"}, env);
  EXPECT_EQ(parse_env(r.out)["CUDA_MPS_CLIENT_PRIORITY"], "0");
  const pid_t gone = fork();   // a pid that no longer exists
  if (gone == 0) _exit(0);
  waitpid(gone, nullptr, 0);
  std::ofstream(pipe / "nvidia-cuda-mps-control.pid") << gone << "\n";
  r = run_with_hook({"--priority", "0", "/usr/bin/env"}, env);
  EXPECT_EQ(parse_env(r.out).count("CUDA_MPS_CLIENT_PRIORITY"), 0u);
}

TEST_F(FikitRun, WithoutAnMpsDaemonNoClientPriorityIsSet) {
  const fs::path pipe = dir_ / "mps";
  fs::create_directories(pipe);
  std::ofstream(pipe / "control") << "";   // a leftover file, no daemon behind it
  const Result r = run_with_hook({"--priority", "5", "/usr/bin/env"}, {"CUDA_MPS_PIPE_DIRECTORY=" + pipe.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(parse_env(r.out).count("CUDA_MPS_CLIENT_PRIORITY"), 0u);
}

TEST_F(FikitRun, HookAlreadyPreloadedIsNotAddedTwice) {
  const std::string hook = fs::canonical(hook_).string();
  const Result r = run_with_hook({"/usr/bin/env"}, {"LD_PRELOAD=/opt/a.so " + hook});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(parse_env(r.out)["LD_PRELOAD"], "/opt/a.so " + hook);
}

TEST_F(FikitRun, HookFoundInInstalledLayout) {
  fs::create_directories(dir_ / "bin");
  fs::create_directories(dir_ / "lib");
  fs::copy_file(FIKIT_RUN_PATH, dir_ / "bin" / "fikit-run");
  std::ofstream(dir_ / "lib" / "libfikit_hook.so") << "dummy\n";
  const Result r = run({(dir_ / "bin" / "fikit-run").string(), "/usr/bin/env"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(parse_env(r.out)["LD_PRELOAD"], fs::canonical(dir_ / "lib" / "libfikit_hook.so").string());
}

TEST_F(FikitRun, ProgramExitStatusAndArgumentsPassThrough) {
  EXPECT_EQ(run_with_hook({"/bin/sh", "-c", "exit 42"}).exit_code, 42);
  EXPECT_EQ(run_with_hook({"/bin/sh", "-c", "exit 0"}).exit_code, 0);
  // Options after the program belong to the program, not to fikit-run.
  const Result r = run_with_hook({"/bin/sh", "-c", "echo \"$1 $2\"", "sh", "--priority", "99"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "--priority 99\n");
}

TEST_F(FikitRun, ProgramFoundOnPath) {
  const Result r = run_with_hook({"sh", "-c", "exit 7"});
  EXPECT_EQ(r.exit_code, 7) << r.err;
}

}  // namespace
