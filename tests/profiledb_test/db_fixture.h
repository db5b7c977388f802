#pragma once
// Shared by the profiledb tests: a private temporary directory per test and a sample builder.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "profiledb.h"

namespace fikit::testing {

class DbTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("fikit-profiledb-" + std::to_string(getpid()) + "-" + info->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "profiles.db").string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
  std::string path_;
};

// `calls` launches of kernel `id` lasting `dur_ns`, each followed by a gap of `gap_ns` (none when 0),
// plus `boundaries` iteration boundaries.
inline profiledb::KernelSample sample(uint64_t id, uint64_t dur_ns, int calls, uint64_t gap_ns,
                                      uint64_t boundaries = 0) {
  profiledb::KernelSample k;
  k.kernel_id = id;
  k.name = "kernel_" + std::to_string(id);
  k.call_site = "prog!main+0x10";
  k.grid = {4, 1, 1};
  k.block = {128, 1, 1};
  for (int i = 0; i < calls; ++i) {
    k.duration.add(dur_ns);
    if (gap_ns) k.gap.add(gap_ns);
  }
  k.boundary_count = boundaries;
  return k;
}

}  // namespace fikit::testing
