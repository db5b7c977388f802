// The hook's settings table (settings/hook_settings.h) and the command-line conventions every tool
// shares (cli/cli.h): what each accepts and refuses, and the words it uses.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "cli.h"
#include "hook_settings.h"

namespace {

using fikit::settings::check;
using fikit::settings::find;
using fikit::settings::Kind;

std::string refusal(const char* env, const std::string& text) {
  fikit::settings::Value value;
  char why[192] = {};
  EXPECT_FALSE(check(*find(env), text.c_str(), &value, why, sizeof why)) << env << "=" << text;
  return why;
}

TEST(HookSettings, NumbersAcceptTheirRangeAndSayItWhenRefusing) {
  for (const auto& s : fikit::settings::kHookSettings) {
    if (s.kind != Kind::Number) continue;
    fikit::settings::Value value;
    char why[192];
    EXPECT_TRUE(check(s, std::to_string(s.min).c_str(), &value, why, sizeof why)) << s.env;
    EXPECT_EQ(value.number, s.min) << s.env;
    EXPECT_TRUE(check(s, std::to_string(s.max).c_str(), &value, why, sizeof why)) << s.env;
    EXPECT_EQ(value.number, s.max) << s.env;
    const std::string range = std::to_string(s.min) + " to " + std::to_string(s.max);
    EXPECT_NE(refusal(s.env, std::to_string(uint64_t(s.max) + 1)).find("out of range " + range), std::string::npos);
    if (s.min > 0) {
      EXPECT_NE(refusal(s.env, std::to_string(s.min - 1)).find("out of range " + range), std::string::npos);
    }
    for (const char* bad : {"", "-1", "1x", " 1", "99999999999"})
      EXPECT_FALSE(check(s, bad, &value, why, sizeof why)) << s.env << "='" << bad << "'";
  }
  EXPECT_EQ(refusal("FIKIT_MEASURE_RUNS", "0"), "0 is out of range 1 to 1000000 runs");
}

TEST(HookSettings, ChoicesParseToTheirPositionInTheHooksEnum) {
  fikit::settings::Value index;
  char why[192];
  EXPECT_TRUE(check(*find("FIKIT_MODE"), "auto", &index, why, sizeof why));
  EXPECT_EQ(index.number, 3u);   // hook::ModeKind::Auto
  EXPECT_TRUE(check(*find("FIKIT_BACKEND"), "mps", &index, why, sizeof why));
  EXPECT_EQ(index.number, 2u);   // hook::BackendKind::Mps
  EXPECT_TRUE(check(*find("FIKIT_LOG_LEVEL"), "debug", &index, why, sizeof why));
  EXPECT_EQ(index.number, 3u);   // hook::LogLevel::Debug
  EXPECT_EQ(refusal("FIKIT_TIMING", "cuda"), "'cuda' is not one of auto|cupti|events");
  refusal("FIKIT_MODE", "");
  refusal("FIKIT_MODE", "autox");
}

TEST(HookSettings, StringsFollowWhatTheHookCanHoldAndSend) {
  fikit::settings::Value unused;
  char why[192];
  EXPECT_TRUE(check(*find("FIKIT_SCHEDULER"), "[::1]:47800", &unused, why, sizeof why));
  EXPECT_EQ(unused.host, "::1");   // parsed once, here: the hook and fikit-run take it as it is
  EXPECT_EQ(unused.port, 47800);
  EXPECT_TRUE(check(*find("FIKIT_SCHEDULER"), "gpu-node-3:47800", &unused, why, sizeof why));
  EXPECT_EQ(unused.host, "gpu-node-3");
  for (const char* bad : {"localhost", ":47800", "h:0", "h:65536", "h:-1", "::1:47800", "a b:1"})
    EXPECT_NE(refusal("FIKIT_SCHEDULER", bad).find("is not HOST:PORT"), std::string::npos) << bad;
  refusal("FIKIT_SCHEDULER", std::string(64, 'h') + ":1");   // the hook's host buffer holds 63
  EXPECT_TRUE(check(*find("FIKIT_DB"), std::string(511, 'p').c_str(), &unused, why, sizeof why));
  refusal("FIKIT_DB", std::string(512, 'p'));
  refusal("FIKIT_TASK_KEY", "caf\xc3\xa9");
  EXPECT_NE(refusal("FIKIT_MEMORY_LIMIT", "0").find("refuse every allocation"), std::string::npos);
  EXPECT_TRUE(check(*find("FIKIT_MEMORY_LIMIT"), "20GiB", &unused, why, sizeof why));
  EXPECT_FALSE(unused.memory.is_share());
  EXPECT_TRUE(check(*find("FIKIT_MEMORY_LIMIT"), "30%", &unused, why, sizeof why));
  EXPECT_TRUE(unused.memory.is_share());
  EXPECT_NE(refusal("FIKIT_MEMORY_LIMIT", "20XB").find("unknown unit"), std::string::npos);
}

TEST(HookSettings, AnObjectiveIsAFactorAsPeopleWriteIt) {
  fikit::settings::Value permille;
  char why[192];
  const auto parsed = [&](const char* text) {
    permille = {};
    EXPECT_TRUE(check(*find("FIKIT_OBJECTIVE"), text, &permille, why, sizeof why)) << text << ": " << why;
    return permille.number;
  };
  EXPECT_EQ(parsed("1.2"), 1200u);
  EXPECT_EQ(parsed("1.25x"), 1250u);
  EXPECT_EQ(parsed("120%"), 1200u);
  EXPECT_EQ(parsed("2"), 2000u);
  EXPECT_EQ(parsed("1.0004"), 1000u);   // past a permille: cut
  EXPECT_NE(refusal("FIKIT_OBJECTIVE", "0.9").find("out of range 1 to 100"), std::string::npos);
  EXPECT_NE(refusal("FIKIT_OBJECTIVE", "101").find("out of range"), std::string::npos);
  for (const char* bad : {"", "x", "1.2.3", "-1.2", "1,2", "1.2 x"})
    EXPECT_NE(refusal("FIKIT_OBJECTIVE", bad).find("is not a factor"), std::string::npos) << bad;
}

TEST(HookSettings, AReasonIsCutToItsBufferAndTerminated) {
  fikit::settings::Value unused;
  char why[8];
  std::memset(why, 'x', sizeof why);
  EXPECT_FALSE(check(*find("FIKIT_MODE"), "nonsense", &unused, why, sizeof why));
  EXPECT_EQ(std::string(why), "'nonsen");
}

TEST(Cli, NearestNamesATypoAndNothingFarOff) {
  const std::vector<std::string> flags{"--listen", "--lease", "--log-level", "--metrics"};
  EXPECT_EQ(fikit::cli::nearest("--lisen", flags), "--listen");
  EXPECT_EQ(fikit::cli::nearest("--metric", flags), "--metrics");
  EXPECT_EQ(fikit::cli::nearest("--frobnicate", flags), "");
  EXPECT_EQ(fikit::cli::nearest("-x", flags), "");
}

TEST(Cli, DurationsReadAsPeopleWriteThem) {
  EXPECT_EQ(fikit::cli::format_duration_ns(0), "0");
  EXPECT_EQ(fikit::cli::format_duration_ns(500), "500 ns");
  EXPECT_EQ(fikit::cli::format_duration_ns(20'000), "20 us");
  EXPECT_EQ(fikit::cli::format_duration_ns(1'500'000), "1.5 ms");
  EXPECT_EQ(fikit::cli::format_duration_ns(4'294'967'295), "4.29 s");
  EXPECT_EQ(fikit::cli::format_duration_ns(3'600'000'000'000), "3600 s");
}

}  // namespace
