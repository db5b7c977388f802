// The derived task key (settings/hook_settings.h): documented format, equal for equal command lines.
#include <gtest/gtest.h>

#include <cstring>
#include <regex>
#include <string>

#include "hook_settings.h"

namespace {

std::string key(const char* exe, const std::string& cmdline, size_t size = 128) {
  char out[128];
  fikit::settings::derive_task_key(exe, cmdline.data(), cmdline.size(), out, size);
  return out;
}

TEST(TaskKey, IsExecutableBasenameAndEightHexDigits) {
  const std::string k = key("/usr/bin/python3.11", std::string("python3\0serve.py\0--bs\0001", 23));
  EXPECT_TRUE(std::regex_match(k, std::regex("python3\\.11-[0-9a-f]{8}"))) << k;
}

TEST(TaskKey, DependsOnEveryArgument) {
  const std::string a = key("/bin/app", std::string("app\0--bs\0" "1", 11));
  const std::string b = key("/bin/app", std::string("app\0--bs\0" "2", 11));
  EXPECT_EQ(a, key("/bin/app", std::string("app\0--bs\0" "1", 11)));
  EXPECT_NE(a, b);
}

TEST(TaskKey, LongExecutableNameKeepsTheHash) {
  const std::string exe = "/x/" + std::string(200, 'e');
  const std::string k = key(exe.c_str(), "e", 32);
  EXPECT_EQ(k.size(), 31u);
  EXPECT_TRUE(std::regex_search(k, std::regex("-[0-9a-f]{8}$"))) << k;
}

}  // namespace
