// fikit-profile: exports parsed back equal the database; exit codes for each kind of failure.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "db_fixture.h"

using namespace fikit::profiledb;
using fikit::testing::DbTest;
using fikit::testing::sample;

namespace {

// A small JSON reader, enough to check what fikit-profile writes (no external JSON library here).
struct Json {
  std::variant<std::nullptr_t, bool, double, std::string, std::vector<Json>, std::map<std::string, Json>> v;
  const Json& operator[](const std::string& k) const { return std::get<std::map<std::string, Json>>(v).at(k); }
  const Json& operator[](size_t i) const { return std::get<std::vector<Json>>(v).at(i); }
  const std::vector<Json>& arr() const { return std::get<std::vector<Json>>(v); }
  const std::string& str() const { return std::get<std::string>(v); }
  double num() const { return std::get<double>(v); }
  bool has(const std::string& k) const { return std::get<std::map<std::string, Json>>(v).count(k) > 0; }
};

class JsonParser {
 public:
  explicit JsonParser(const std::string& s) : s_(s) {}
  Json parse() {
    Json j = value();
    ws();
    if (i_ != s_.size()) throw std::runtime_error("trailing text at " + std::to_string(i_));
    return j;
  }

 private:
  void ws() { while (i_ < s_.size() && isspace(static_cast<unsigned char>(s_[i_]))) ++i_; }
  char peek() { ws(); if (i_ >= s_.size()) throw std::runtime_error("unexpected end"); return s_[i_]; }
  void expect(char c) { if (peek() != c) throw std::runtime_error(std::string("expected ") + c + " at " + std::to_string(i_)); ++i_; }
  Json value() {
    const char c = peek();
    if (c == '{') {
      ++i_;
      std::map<std::string, Json> m;
      if (peek() == '}') { ++i_; return {m}; }
      do { std::string k = string(); expect(':'); m[k] = value(); } while (peek() == ',' && ++i_);
      expect('}');
      return {m};
    }
    if (c == '[') {
      ++i_;
      std::vector<Json> a;
      if (peek() == ']') { ++i_; return {a}; }
      do { a.push_back(value()); } while (peek() == ',' && ++i_);
      expect(']');
      return {a};
    }
    if (c == '"') return {string()};
    if (s_.compare(i_, 4, "true") == 0) { i_ += 4; return {true}; }
    if (s_.compare(i_, 5, "false") == 0) { i_ += 5; return {false}; }
    if (s_.compare(i_, 4, "null") == 0) { i_ += 4; return {nullptr}; }
    size_t used = 0;
    const double d = std::stod(s_.substr(i_), &used);
    i_ += used;
    return {d};
  }
  std::string string() {
    expect('"');
    std::string out;
    while (i_ < s_.size() && s_[i_] != '"') {
      char c = s_[i_++];
      if (c == '\\') {
        c = s_[i_++];
        if (c == 'n') c = '\n';
        else if (c == 't') c = '\t';
        else if (c == 'u') { c = static_cast<char>(std::stoi(s_.substr(i_, 4), nullptr, 16)); i_ += 4; }
      }
      out += c;
    }
    expect('"');
    return out;
  }
  const std::string& s_;
  size_t i_ = 0;
};

// RFC 4180 rows.
std::vector<std::vector<std::string>> parse_csv(const std::string& s) {
  std::vector<std::vector<std::string>> rows(1, std::vector<std::string>(1));
  bool quoted = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (quoted) {
      if (c == '"' && i + 1 < s.size() && s[i + 1] == '"') rows.back().back() += '"', ++i;
      else if (c == '"') quoted = false;
      else rows.back().back() += c;
    } else if (c == '"') quoted = true;
    else if (c == ',') rows.back().emplace_back();
    else if (c == '\n') rows.emplace_back(1);
    else rows.back().back() += c;
  }
  if (rows.back().size() == 1 && rows.back()[0].empty()) rows.pop_back();
  return rows;
}

std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

uint64_t hex(const std::string& s) { return std::stoull(s, nullptr, 16); }

class ProfileCli : public DbTest {
 protected:
  // Runs fikit-profile with `args`; returns its exit status; stdout and stderr land in out_ / err_.
  int cli(const std::string& args) {
    const auto out = dir_ / "stdout", err = dir_ / "stderr";
    const std::string cmd = std::string(FIKIT_PROFILE_EXE) + " " + args + " >" + out.string() + " 2>" + err.string();
    const int status = std::system(cmd.c_str());
    out_ = slurp(out);
    err_ = slurp(err);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  std::string db_arg() const { return "--db " + path_ + " "; }
  void fill() {
    Database db(path_, Database::Open::Create);
    auto tricky = sample(0xabcdef0123456789ull, 12345, 7, 2500, 2);
    tricky.name = "void gemm<float, \"x\", 2>(a\\b, c)";
    tricky.call_site = "lib.so!f+0x1 <- lib.so!g+0x2";
    db.add_run("svc", "python infer.py --model \"r50\"", {.gpu_ops = 10}, {tricky, sample(2, 700, 20, 30000)},
               {{2, 1, 100, 800}, {0xabcdef0123456789ull, 2, 900, 13000}, {2, 1, 14000, 14700}});
  }
  std::string out_, err_;
};

}  // namespace

TEST_F(ProfileCli, JsonExportReadsBackAsStored) {
  fill();
  ASSERT_EQ(cli(db_arg() + "export svc --format json -o " + (dir_ / "k.json").string()), 0) << err_;
  const Json j = JsonParser(slurp(dir_ / "k.json")).parse();
  EXPECT_EQ(j["task"].str(), "svc");
  EXPECT_EQ(j["command_line"].str(), "python infer.py --model \"r50\"");
  EXPECT_EQ(j["runs_measured"].num(), 1.0);
  const auto stored = Database(path_).kernels("svc");
  ASSERT_EQ(j["kernels"].arr().size(), stored.size());
  for (size_t i = 0; i < stored.size(); ++i) {
    const Json& k = j["kernels"][i];
    EXPECT_EQ(hex(k["kernel_id"].str()), stored[i].kernel_id);
    EXPECT_EQ(k["name"].str(), stored[i].name);
    EXPECT_EQ(k["call_site"].str(), stored[i].call_site);
    EXPECT_EQ(k["grid"][0].num(), stored[i].grid[0]);
    EXPECT_EQ(k["block"][0].num(), stored[i].block[0]);
    EXPECT_EQ(k["count"].num(), stored[i].count);
    EXPECT_NEAR(k["dur_mean_ns"].num(), stored[i].dur_mean, 0.001);
    EXPECT_EQ(k["dur_p50_ns"].num(), stored[i].dur_p50);
    EXPECT_EQ(k["dur_p90_ns"].num(), stored[i].dur_p90);
    EXPECT_EQ(k["gap_count"].num(), stored[i].gap_count);
    EXPECT_NEAR(k["gap_mean_ns"].num(), stored[i].gap_mean, 0.001);
    EXPECT_EQ(k["gap_p50_ns"].num(), stored[i].gap_p50);
    EXPECT_EQ(k["boundary_count"].num(), stored[i].boundary_count);
  }
}

TEST_F(ProfileCli, CsvExportReadsBackAsStored) {
  fill();
  ASSERT_EQ(cli(db_arg() + "export svc --format csv"), 0) << err_;
  const auto rows = parse_csv(out_);
  const auto stored = Database(path_).kernels("svc");
  ASSERT_EQ(rows.size(), stored.size() + 1);
  std::map<std::string, size_t> col;
  for (size_t c = 0; c < rows[0].size(); ++c) col[rows[0][c]] = c;
  for (size_t i = 0; i < stored.size(); ++i) {
    const auto& r = rows[i + 1];
    ASSERT_EQ(r.size(), rows[0].size());
    EXPECT_EQ(hex(r[col.at("kernel_id")]), stored[i].kernel_id);
    EXPECT_EQ(r[col.at("name")], stored[i].name);
    EXPECT_EQ(r[col.at("call_site")], stored[i].call_site);
    EXPECT_EQ(std::stoull(r[col.at("count")]), stored[i].count);
    EXPECT_NEAR(std::stod(r[col.at("dur_mean_ns")]), stored[i].dur_mean, 0.001);
    EXPECT_EQ(std::stoull(r[col.at("gap_p90_ns")]), stored[i].gap_p90);
    EXPECT_EQ(std::stoull(r[col.at("boundary_count")]), stored[i].boundary_count);
  }
}

// Every column the export writes is documented in the user guide's table of them, and nothing else is.
TEST_F(ProfileCli, EveryExportColumnIsDocumented) {
  fill();
  ASSERT_EQ(cli(db_arg() + "export svc --format csv"), 0) << err_;
  const std::vector<std::string> header = parse_csv(out_).at(0);
  std::ifstream guide(FIKIT_USER_GUIDE);
  ASSERT_TRUE(guide) << FIKIT_USER_GUIDE;
  std::set<std::string> documented;
  bool in_table = false;
  for (std::string line; std::getline(guide, line);) {
    if (line == "| `kernel_id` | the kernel ID, 16 hex digits (name, call site and launch shape, hashed) |") in_table = true;
    if (!in_table) continue;
    if (line.empty() || line[0] != '|') break;
    const std::string first_cell = line.substr(0, line.find('|', 1));
    for (size_t at = first_cell.find('`'); at != std::string::npos; at = first_cell.find('`', at)) {
      const size_t end = first_cell.find('`', at + 1);
      documented.insert(first_cell.substr(at + 1, end - at - 1));
      at = end + 1;
    }
  }
  EXPECT_EQ(documented, std::set<std::string>(header.begin(), header.end()));
}

TEST_F(ProfileCli, TraceHasOneTrackPerStreamAndEveryOp) {
  fill();
  ASSERT_EQ(cli(db_arg() + "trace svc -o " + (dir_ / "t.json").string()), 0) << err_;
  const Json j = JsonParser(slurp(dir_ / "t.json")).parse();
  std::set<double> tids;
  size_t ops = 0;
  double first_ts = 1e18;
  for (const Json& e : j["traceEvents"].arr()) {
    if (e["ph"].str() != "X") continue;
    ++ops;
    tids.insert(e["tid"].num());
    first_ts = std::min(first_ts, e["ts"].num());
    if (hex(e["args"]["kernel_id"].str()) == 2) {
      EXPECT_NEAR(e["dur"].num(), 0.7, 1e-9);   // 700 ns in us
    }
  }
  EXPECT_EQ(ops, 3u);
  EXPECT_EQ(tids.size(), 2u);
  EXPECT_EQ(first_ts, 0.0);
}

TEST_F(ProfileCli, HumanViewsNameTheKernels) {
  fill();
  ASSERT_EQ(cli(db_arg() + "list"), 0) << err_;
  EXPECT_NE(out_.find("svc"), std::string::npos);
  ASSERT_EQ(cli(db_arg() + "show svc"), 0) << err_;
  EXPECT_NE(out_.find("kernel_2"), std::string::npos);
  EXPECT_LT(out_.find("void gemm"), out_.find("kernel_2"));   // 86 us in all before 14 us in all
  ASSERT_EQ(cli(db_arg() + "gaps svc"), 0) << err_;
  EXPECT_NE(out_.find("27 gaps"), std::string::npos) << out_;
  EXPECT_NE(out_.find('#'), std::string::npos);
}

TEST_F(ProfileCli, ShowListsAGraphsKernelsUnderItAndExportNamesTheirGraph) {
  {
    Database db(path_, Database::Open::Create);
    auto graph = sample(0x50, 40000, 10, 0, 10);
    graph.name = "[graph 1234abcd segment 2/5, 30 nodes]";
    auto node = sample(0x61, 30000, 10, 1000);
    node.name = "inner_gemm_node";
    node.call_site.clear();
    node.graph_op = 0x50;
    auto orphan = sample(0x62, 500, 4, 0);
    orphan.name = "orphan_node";
    orphan.graph_op = 0x99;
    db.add_run("job", "prog", {.gpu_ops = 20}, {graph, node, orphan, sample(0x70, 1000, 100, 0)}, {}, 1);
  }
  ASSERT_EQ(cli(db_arg() + "show job"), 0) << err_;
  // 400 us in the graph op, 100 us in kernel 0x70: the nodes' time is the graph's, not counted again.
  EXPECT_NE(out_.find("2 kernels, 500.0 us GPU time in all; 2 kernels timed inside 2 graph ops"), std::string::npos)
      << out_;
  const size_t graph_row = out_.find("[graph 1234abcd"), node_row = out_.find("  inner_gemm_node"),
               kernel_row = out_.find("kernel_112");
  ASSERT_NE(node_row, std::string::npos) << out_;
  EXPECT_LT(graph_row, node_row);
  EXPECT_LT(node_row, kernel_row) << "listed right under its graph";
  EXPECT_NE(out_.find(" 80.0%"), std::string::npos) << "the graph's share of 500 us: " << out_;
  EXPECT_LT(out_.find("[graph op not in the profile]"), out_.find("  orphan_node")) << out_;

  // The gaps between the task's ops: the graph node's 10 gaps (1 us each) are inside its graph op.
  ASSERT_EQ(cli(db_arg() + "gaps job"), 0) << err_;
  EXPECT_TRUE(out_.starts_with("0 gaps between ops")) << out_;
  // Compared with itself, every op agrees, and the nodes are not compared on top of their graph.
  ASSERT_EQ(cli(db_arg() + "compare job job"), 0) << err_;
  EXPECT_EQ(out_.find("inner_gemm_node"), std::string::npos) << out_;
  ASSERT_EQ(cli(db_arg() + "export job --format csv"), 0) << err_;
  const auto rows = parse_csv(out_);
  std::map<std::string, size_t> col;
  for (size_t c = 0; c < rows[0].size(); ++c) col[rows[0][c]] = c;
  std::map<uint64_t, std::string> graph_of;
  for (size_t i = 1; i < rows.size(); ++i) graph_of[hex(rows[i][col.at("kernel_id")])] = rows[i][col.at("graph_op")];
  EXPECT_EQ(graph_of[0x50], "");
  EXPECT_EQ(hex(graph_of[0x61]), 0x50u);
  ASSERT_EQ(cli(db_arg() + "export job --format json -o " + (dir_ / "g.json").string()), 0) << err_;
  const Json j = JsonParser(slurp(dir_ / "g.json")).parse();
  for (const Json& k : j["kernels"].arr()) {
    const uint64_t id = hex(k["kernel_id"].str());
    if (id == 0x61) {
      EXPECT_EQ(hex(k["graph_op"].str()), 0x50u);
    } else if (id == 0x70) {
      EXPECT_TRUE(std::holds_alternative<std::nullptr_t>(k["graph_op"].v));
    }
  }
}

TEST_F(ProfileCli, ExitCodesNameTheFailure) {
  EXPECT_EQ(cli(db_arg() + "list"), 0) << "nothing measured yet is an answer";
  EXPECT_NE(out_.find("no task measured yet"), std::string::npos) << out_;
  EXPECT_EQ(cli(db_arg() + "show svc"), 4);
  EXPECT_NE(err_.find("no profile database"), std::string::npos);
  fill();
  EXPECT_EQ(cli(db_arg() + "show nosuch"), 3);
  // Which keys there are, so that the user need not run list (and a likely typo by name).
  EXPECT_NE(err_.find("no task with key \"nosuch\"; it has "), std::string::npos) << err_;
  EXPECT_NE(err_.find("svc"), std::string::npos) << err_;
  EXPECT_EQ(cli(db_arg() + "show svd"), 3);
  EXPECT_NE(err_.find("did you mean \"svc\"?"), std::string::npos) << err_;
  EXPECT_EQ(cli(db_arg() + "delete nosuch"), 3);
  EXPECT_EQ(cli(db_arg() + "frobnicate"), 2);
  EXPECT_EQ(cli(db_arg() + "export svc"), 2);
  EXPECT_EQ(cli(db_arg() + "trace svc"), 2);
  EXPECT_EQ(cli("--help"), 0);
  EXPECT_NE(out_.find("usage: fikit-profile"), std::string::npos);
  EXPECT_EQ(cli(db_arg() + "show --help"), 0);

  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  // A delete waits for the other writer (here 100 ms), then reports the lock.
  EXPECT_EQ(cli(db_arg() + "--wait-ms 100 delete svc"), 5);
  sqlite3_exec(other, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close(other);
  EXPECT_EQ(cli(db_arg() + "delete svc"), 0);
  EXPECT_EQ(cli(db_arg() + "show svc"), 3);

  std::ofstream(path_, std::ios::trunc) << std::string(4096, 'J');
  std::filesystem::remove(path_ + "-wal");
  std::filesystem::remove(path_ + "-shm");
  EXPECT_EQ(cli(db_arg() + "list"), 6);
}

// Trust v4, N6: a huge profile is shown up to the bound, and fikit-profile says so in one line.
TEST_F(ProfileCli, AHugeProfileIsShownUpToItsBoundWithOneWarning) {
  {
    Database db(path_, Database::Open::Create);
    std::vector<KernelSample> many;
    for (uint64_t id = 1; id <= Database::kMaxKernelsRead + 10; ++id) many.push_back(sample(id, 10, 1, 0));
    db.merge_kernels("huge", "", many);
  }
  EXPECT_EQ(cli(db_arg() + "show huge"), 0) << err_;
  EXPECT_NE(err_.find("has more than 32768 kernels: only those are shown"), std::string::npos) << err_;
}

TEST_F(ProfileCli, ShowReportsCoverageAndWarnsBelowNinetyNinePercent) {
  {
    Database db(path_, Database::Open::Create);
    db.add_run("good", "p", {.gpu_ops = 10, .ops_launched = 1000, .ops_timed = 999, .sample_every = 4},
               {sample(1, 1000, 3, 50)}, {});
    db.add_run("poor", "p", {.gpu_ops = 10, .ops_launched = 1000, .ops_timed = 900}, {sample(1, 1000, 3, 50)}, {});
  }
  ASSERT_EQ(cli(db_arg() + "show good"), 0) << err_;
  EXPECT_NE(out_.find("coverage: 99.90 % of ops timed (999 of 1000"), std::string::npos) << out_;
  EXPECT_NE(out_.find("one iteration in 4 measured"), std::string::npos) << out_;
  EXPECT_EQ(err_, "");
  ASSERT_EQ(cli(db_arg() + "show poor"), 0) << err_;
  EXPECT_NE(out_.find("coverage: 90.00 %"), std::string::npos) << out_;
  EXPECT_NE(err_.find("warning: task \"poor\" timed under 99 %"), std::string::npos) << err_;
}

// What being an MPS client costs the task's requests, from its runs under each backend: the rule
// fikit-run starts a service by (rules/backend_rule.h).
TEST_F(ProfileCli, ShowSaysWhatBeingAnMpsClientCostsTheRequests) {
  {
    Database db(path_, Database::Open::Create);
    for (int i = 0; i < 5; ++i) {
      db.add_run("svc", "p", {.gpu_ops = 4, .backend = "mps", .request_p50_ns = 1'620'000, .requests = 300},
                 {sample(1, 1000, 4, 5000)}, {}, 10);
      db.add_run("svc", "p", {.gpu_ops = 4, .backend = "plain", .request_p50_ns = 1'500'000, .requests = 300},
                 {sample(1, 1000, 4, 5000)}, {}, 10);
    }
    db.add_run("half", "p", {.gpu_ops = 4, .backend = "mps", .request_p50_ns = 1'000'000, .requests = 30},
               {sample(1, 1000, 4, 5000)}, {}, 10);
    db.add_run("old", "p", {.gpu_ops = 4}, {sample(1, 1000, 4, 5000)}, {});
  }
  ASSERT_EQ(cli(db_arg() + "show svc"), 0) << err_;
  EXPECT_NE(out_.find("requests: 1.62 ms as an MPS client (median of 5 runs), 1.50 ms outside MPS (median of 5 runs): "
                      "being an MPS client costs it 1.080x (p 0.004, a one-sided rank test of the runs); as a service "
                      "(priority 0) under an MPS control daemon it starts outside MPS (limit 1.03x"),
            std::string::npos)
      << out_;
  ASSERT_EQ(cli(db_arg() + "show half"), 0) << err_;
  EXPECT_NE(out_.find("no run outside MPS: what being an MPS client costs it is not known yet (5 runs each way needed)"),
            std::string::npos)
      << out_;
  ASSERT_EQ(cli(db_arg() + "show old"), 0) << err_;
  EXPECT_EQ(out_.find("requests:"), std::string::npos) << "runs that do not say their backend: nothing to say";
}

TEST_F(ProfileCli, CompareCountsKernelsThatAgreeAndExitsSevenOtherwise) {
  {
    Database db(path_, Database::Open::Create);
    // Kernel 1 agrees; kernel 2's duration is 4 % off and its gap 8 % off; kernel 3 is A's only.
    db.add_run("full", "p", {.gpu_ops = 3}, {sample(1, 1000, 4, 5000), sample(2, 10000, 4, 20000), sample(3, 50, 4, 0)}, {});
    db.add_run("sampled", "p", {.gpu_ops = 2}, {sample(1, 1000, 4, 5000), sample(2, 10400, 4, 21600)}, {});
  }
  ASSERT_EQ(cli(db_arg() + "compare full sampled"), 0) << out_ << err_;
  EXPECT_NE(out_.find("3 kernels in full, 2 in sampled, 2 in both"), std::string::npos) << out_;
  EXPECT_NE(out_.find("duration mean within 5 %: 2 of 2 kernels (100.0 % of their GPU time); gap p50 within 10 %: "
                      "2 of 2"), std::string::npos)
      << out_;
  EXPECT_NE(out_.find("+4.0%"), std::string::npos) << out_;
  EXPECT_NE(out_.find("A = full\nB = sampled\n"), std::string::npos) << "which column is which: " << out_;
  EXPECT_NE(out_.find("DUR A      DUR B"), std::string::npos) << out_;
  EXPECT_EQ(cli(db_arg() + "--dur-tolerance 0.03 compare full sampled"), 7) << out_;
  // Kernel 1 (4 us in all) agrees, kernel 2 (40 us) does not.
  EXPECT_NE(out_.find("within 3 %: 1 of 2 kernels (9.1 % of their GPU time)"), std::string::npos) << out_;
  EXPECT_EQ(cli(db_arg() + "--gap-tolerance 0.05 compare full sampled"), 7);
  EXPECT_EQ(cli(db_arg() + "compare full"), 2);
  EXPECT_EQ(cli(db_arg() + "compare full nosuch"), 3);
  EXPECT_EQ(cli(db_arg() + "--dur-tolerance x compare full sampled"), 2);
}

TEST_F(ProfileCli, CompareHonoursADurationFloorTheTimersUncertaintyAndHoldClasses) {
  {
    Database db(path_, Database::Open::Create);
    // Kernel 1 (1 us) reads 30 % long with events; kernel 2 (10 us) agrees within 1 %, its gap is
    // 1.6 us (8 %) off. Kernel 2 is one wave of 132 blocks in A; B saw 66 SMs: two waves.
    auto a1 = sample(1, 1000, 4, 5000), a2 = sample(2, 10000, 4, 20000);
    auto b1 = sample(1, 1300, 4, 5000), b2 = sample(2, 10050, 4, 21600);
    a2.grid = b2.grid = {132, 1, 1};
    a2.blocks_per_sm = b2.blocks_per_sm = 1;
    a2.sm_count = 132;
    b2.sm_count = 66;
    db.add_run("cupti", "p", {.gpu_ops = 2, .timer = "cupti"}, {a1, a2}, {});
    db.add_run("events", "p", {.gpu_ops = 2, .timer = "events", .timing_bias_ns = 3000, .timing_uncertainty_ns = 2000},
               {b1, b2}, {});
  }
  EXPECT_EQ(cli(db_arg() + "compare cupti events"), 7) << "kernel 1's duration disagrees: " << out_;
  // The floor leaves kernel 1's duration out; the 2 us uncertainty the events run states covers
  // kernel 2's gap even at a 5 % tolerance.
  ASSERT_EQ(cli(db_arg() + "--min-dur 5us --gap-tolerance 0.05 compare cupti events"), 0) << out_ << err_;
  EXPECT_NE(out_.find("duration mean within 5 %: 1 of 1 kernels at least 5.0 us long in A"), std::string::npos) << out_;
  EXPECT_NE(out_.find("gap p50 within 5 % or 2.0 us (the timers' uncertainty): 2 of 2 kernels"), std::string::npos)
      << out_;
  EXPECT_NE(out_.find("SM hold class (short up to 1.00 ms) the same: 1 of 1 kernels"), std::string::npos) << out_;
  // Holds of 10 us (A) and 5 us (B) fall on two sides of 7 us.
  EXPECT_EQ(cli(db_arg() + "--min-dur 5us --short-hold 7us compare cupti events"), 7) << out_;
  EXPECT_NE(out_.find("long/short"), std::string::npos) << out_;
  EXPECT_NE(out_.find("the same: 0 of 1 kernels"), std::string::npos) << out_;
  EXPECT_EQ(cli(db_arg() + "--min-dur 5 parsecs compare cupti events"), 2);
}

TEST_F(ProfileCli, ShowSaysHowTheRunsWereTimed) {
  {
    Database db(path_, Database::Open::Create);
    auto k = sample(1, 1000, 4, 5000);
    k.dur_unresolved = 3;
    db.add_run("ev", "p", {.gpu_ops = 4, .timer = "events", .timing_bias_ns = 3000, .timing_uncertainty_ns = 2000},
               {k, sample(2, 50000, 4, 5000)}, {});
    db.add_run("cu", "p", {.gpu_ops = 4, .timer = "cupti"}, {sample(1, 1000, 4, 5000)}, {});
    db.add_run("old", "p", {.gpu_ops = 4}, {sample(1, 1000, 4, 5000)}, {});
  }
  ASSERT_EQ(cli(db_arg() + "show ev"), 0) << err_;
  EXPECT_NE(out_.find("timing: CUDA events in 1 run (calibrated in the process: up to 3.0 us moved from an "
                      "idle-start op's duration to its gap); each duration and gap within +-2.0 us; 1 kernel read "
                      "shorter than that"), std::string::npos) << out_;
  ASSERT_EQ(cli(db_arg() + "show cu"), 0) << err_;
  EXPECT_NE(out_.find("timing: CUPTI (the GPU's timestamps) in 1 run; each duration and gap within +-0 ns; 0 kernels"),
            std::string::npos) << out_;
  ASSERT_EQ(cli(db_arg() + "show old"), 0) << err_;
  EXPECT_NE(out_.find("timing: not recorded"), std::string::npos) << out_;
  ASSERT_EQ(cli(db_arg() + "export ev --format csv"), 0) << err_;
  EXPECT_NE(out_.find(",3,2000,\n"), std::string::npos)
      << "dur_unresolved and the uncertainty, then no graph op, end kernel 1's row: " << out_;
}
