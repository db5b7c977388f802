// libfikit_hook.so exports exactly the entry table's symbols and dlsym: nothing of its static
// dependencies (libstdc++, SQLite helpers, kernelid) leaks into the processes it is injected into.
#include <gtest/gtest.h>

#include <cstdio>
#include <set>
#include <string>

#include "entry_table.h"

namespace {

std::set<std::string> dynamic_exports(const std::string& library) {
  std::set<std::string> names;
  const std::string command = "nm -D --defined-only " + library;
  FILE* nm = popen(command.c_str(), "r");
  if (nm == nullptr) return names;
  char line[512];
  while (std::fgets(line, sizeof line, nm)) {
    char address[64], type[8], name[400];
    if (std::sscanf(line, "%63s %7s %399s", address, type, name) == 3) names.insert(name);
  }
  pclose(nm);
  return names;
}

TEST(HookExports, AreExactlyTheEntryTableAndDlsym) {
  std::set<std::string> expected = {"dlsym"};
  for (const auto& v : fikit::hook::kVariants) expected.insert(v.symbol);
  EXPECT_EQ(dynamic_exports(FIKIT_HOOK_PATH), expected);
}

TEST(HookExports, TableHasEveryLaunchSurfaceForm) {
  std::set<std::string> symbols;
  for (const auto& v : fikit::hook::kVariants) symbols.insert(v.symbol);
  for (const char* s : {"cuLaunchKernel_ptsz", "cuLaunchKernelEx_ptsz", "cuLaunchCooperativeKernel_ptsz",
                        "cuGraphLaunch_ptsz", "cuMemcpyHtoDAsync_v2_ptsz", "cuMemsetD32Async_ptsz",
                        "cuStreamSynchronize_ptsz", "cuMemcpyDtoH_v2_ptds", "cuGetProcAddress_v2"}) {
    EXPECT_TRUE(symbols.count(s)) << s;
  }
}

}  // namespace
