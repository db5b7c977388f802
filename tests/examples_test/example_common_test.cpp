#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "flags.h"
#include "report.h"
#include "spin_kernel.h"

namespace ex = fikit::examples;

TEST(Percentile, InterpolatesBetweenClosestRanks) {
  EXPECT_DOUBLE_EQ(ex::percentile({4, 1, 3, 2}, 50), 2.5);
  EXPECT_DOUBLE_EQ(ex::percentile({4, 1, 3, 2}, 0), 1);
  EXPECT_DOUBLE_EQ(ex::percentile({4, 1, 3, 2}, 100), 4);
  std::vector<double> hundred_and_one;
  for (int i = 0; i <= 100; ++i) hundred_and_one.push_back(100 - i);
  EXPECT_DOUBLE_EQ(ex::percentile(hundred_and_one, 99), 99);
  EXPECT_DOUBLE_EQ(ex::percentile({7}, 99), 7);
  EXPECT_DOUBLE_EQ(ex::percentile({}, 50), 0);
}

TEST(Summarize, MeanAndMax) {
  const ex::Summary s = ex::summarize({10, 20, 30, 100});
  EXPECT_DOUBLE_EQ(s.mean, 40);
  EXPECT_DOUBLE_EQ(s.max, 100);
  EXPECT_DOUBLE_EQ(s.p50, 25);
  EXPECT_GE(s.p99, 30);
  EXPECT_LE(s.p99, 100);
}

TEST(JsonObject, NestedObjectsAndEscapedStrings) {
  const std::string text = ex::JsonObject()
                               .add("example", "in\"fer")
                               .add("n", uint64_t{3})
                               .add("jct_us", ex::JsonObject().add("p50", 1.26, 1).add("p99", 2.0, 2))
                               .str();
  EXPECT_EQ(text, R"({"example":"in\"fer","n":3,"jct_us":{"p50":1.3,"p99":2.0}})");
}

// Control characters are escaped and a byte that is not UTF-8 becomes U+FFFD: the line stays JSON.
TEST(JsonObject, ControlCharactersAndBadBytesStayValidJson) {
  const std::string text = ex::JsonObject().add("name", std::string_view("a\nb\x01\xff", 5)).str();
  EXPECT_EQ(text, "{\"name\":\"a\\nb\\u0001\xef\xbf\xbd\"}");
}

class FlagsTest : public ::testing::Test {
 protected:
  FlagsTest() : flags_("prog [options]", "summary") {
    flags_.add("count", &count_, "a count");
    flags_.add("time-us", &time_us_, "a time");
    flags_.add_switch("fast", &fast_, "a switch");
    flags_.add_choice("arrival", &arrival_, {"closed", "poisson"}, "a choice");
  }
  ex::Flags::Outcome parse(std::vector<const char*> args) {
    args.insert(args.begin(), "prog");
    return flags_.try_parse(static_cast<int>(args.size()), args.data(), &error_);
  }
  uint64_t count_ = 50;
  double time_us_ = 5;
  bool fast_ = false;
  std::string arrival_ = "closed";
  std::string error_;
  ex::Flags flags_;
};

TEST_F(FlagsTest, SeparateAndInlineValues) {
  ASSERT_EQ(parse({"--count", "7", "--time-us=2.5", "--fast", "--arrival", "poisson"}), ex::Flags::Outcome::Ok)
      << error_;
  EXPECT_EQ(count_, 7u);
  EXPECT_DOUBLE_EQ(time_us_, 2.5);
  EXPECT_TRUE(fast_);
  EXPECT_EQ(arrival_, "poisson");
}

TEST_F(FlagsTest, RejectsBadInput) {
  EXPECT_EQ(parse({"--count", "-1"}), ex::Flags::Outcome::Error);
  EXPECT_EQ(parse({"--count", "1.5"}), ex::Flags::Outcome::Error);
  EXPECT_EQ(parse({"--time-us", "-3"}), ex::Flags::Outcome::Error);
  EXPECT_EQ(parse({"--time-us", "nan"}), ex::Flags::Outcome::Error);
  EXPECT_EQ(parse({"--count"}), ex::Flags::Outcome::Error);
  EXPECT_EQ(parse({"--fast=1"}), ex::Flags::Outcome::Error);
  EXPECT_EQ(error_, "--fast takes no value");
  EXPECT_EQ(parse({"--count"}), ex::Flags::Outcome::Error);
  EXPECT_EQ(error_, "--count needs a value");
  EXPECT_EQ(parse({"--cuont", "1"}), ex::Flags::Outcome::Error);
  EXPECT_EQ(error_, "unknown option '--cuont'; did you mean --count?");
  EXPECT_EQ(parse({"--unknown", "1"}), ex::Flags::Outcome::Error);
  EXPECT_NE(error_.find("--unknown"), std::string::npos);
  EXPECT_EQ(parse({"stray"}), ex::Flags::Outcome::Error);
  EXPECT_EQ(parse({"--arrival", "open"}), ex::Flags::Outcome::Error);
  EXPECT_NE(error_.find("closed|poisson"), std::string::npos);
  EXPECT_EQ(count_, 50u);   // nothing assigned by failed parses
  EXPECT_EQ(arrival_, "closed");
}

TEST_F(FlagsTest, HelpListsFlagsWithDefaults) {
  EXPECT_EQ(parse({"--count", "3", "--help"}), ex::Flags::Outcome::Help);
  const std::string help = flags_.help_text();
  EXPECT_NE(help.find("--count N"), std::string::npos);
  EXPECT_NE(help.find("(default 50)"), std::string::npos);   // registration-time value
  EXPECT_NE(help.find("--fast"), std::string::npos);
  EXPECT_NE(help.find("--arrival closed|poisson"), std::string::npos);
  EXPECT_NE(help.find("(default closed)"), std::string::npos);
}

TEST(SpinKernelPtx, AssemblesForTuringAndHopper) {
#ifndef FIKIT_PTXAS
  GTEST_SKIP() << "ptxas not found at configure time";
#else
  // ptxas is what the driver's JIT runs: PTX it accepts for sm_75 and sm_90 loads on those GPUs.
  const std::string ptx_path = ::testing::TempDir() + "fikit_spin_" + std::to_string(getpid()) + ".ptx";
  std::ofstream(ptx_path) << ex::kSpinKernelPtx;
  for (const char* arch : {"sm_75", "sm_90"}) {
    const std::string cubin = ptx_path + "." + arch + ".cubin";
    const std::string cmd = std::string(FIKIT_PTXAS) + " --gpu-name " + arch + " " + ptx_path + " -o " + cubin;
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::remove(cubin.c_str());
  }
  std::remove(ptx_path.c_str());
  EXPECT_NE(std::string(ex::kSpinKernelPtx).find(".entry " + std::string(ex::kSpinKernelName) + "("),
            std::string::npos);
#endif
}
