// Share mode's predictions: by kernel ID as the profile stores them, and, for a kernel whose ID the
// profile lacks (launched from another call site), by its shape: the longest of the profile's
// kernels of the same device function and launch dimensions.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <unistd.h>

#include "config.h"
#include "kernelid.h"
#include "predictions.h"
#include "profiledb.h"

namespace {

using fikit::hook::share::Predictions;

fikit::profiledb::KernelSample sample(uint64_t id, const char* name, uint32_t grid_x, uint64_t dur_ns) {
  fikit::profiledb::KernelSample k;
  k.kernel_id = id;
  k.name = name;
  k.call_site = "app!site" + std::to_string(id);
  k.grid = {grid_x, 1, 1};
  k.block = {128, 1, 1};
  for (int i = 0; i < 4; ++i) k.duration.add(dur_ns);
  return k;
}

// The fake driver's name of every function: what the sim or a GPU would return for it.
CUresult name_of(const char** name, CUfunction) {
  *name = "spin(int)";
  return CUDA_SUCCESS;
}

class PredictionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::snprintf(cfg.db_path, sizeof cfg.db_path, "%s/fikit-predictions-%d.db", ::testing::TempDir().c_str(), getpid());
    std::snprintf(cfg.task_key, sizeof cfg.task_key, "job");
    std::remove(cfg.db_path);
    fikit::profiledb::Database db(cfg.db_path, fikit::profiledb::Database::Open::Create);
    // Two call sites of one shape (500 and 900 us), and another shape of the same function.
    db.add_run("job", "train", {.gpu_ops = 3},
               {sample(111, "spin(int)", 4, 500'000), sample(222, "spin(int)", 4, 900'000),
                sample(333, "spin(int)", 8, 2'000'000)},
               {});
  }
  void TearDown() override { std::remove(cfg.db_path); }
  fikit::hook::Config cfg;
};

TEST_F(PredictionsTest, AKernelUnknownByItsIdIsChargedAsTheLongestOfItsShape) {
  Predictions p;
  ASSERT_EQ(p.load(cfg), 3u);
  EXPECT_TRUE(p.of(111).measured);
  EXPECT_EQ(p.of(111).dur_ns, 500'000u);
  // Launched from a call site the profile never saw: its ID is new.
  Predictions::Kernel k = p.of(999);
  EXPECT_FALSE(k.measured);
  EXPECT_EQ(k.dur_ns, fikit::hook::share::kUnknownKernelNs);
  const uint32_t grid[3] = {4, 1, 1}, block[3] = {128, 1, 1}, wider[3] = {16, 1, 1};
  ASSERT_TRUE(p.by_shape(fikit::kernelid::shape_id_of("spin(int)", grid, block, 0), k));
  EXPECT_EQ(k.dur_ns, 900'000u);
  EXPECT_FALSE(k.measured);   // the daemon plans by ID only
  EXPECT_EQ(k.id, 999u);
  // A shape the profile lacks stays the unknown guess.
  Predictions::Kernel other = p.of(998);
  EXPECT_FALSE(p.by_shape(fikit::kernelid::shape_id_of("spin(int)", wider, block, 0), other));
  EXPECT_EQ(other.dur_ns, fikit::hook::share::kUnknownKernelNs);
  EXPECT_FALSE(p.by_shape(fikit::kernelid::shape_id_of("spin(long)", grid, block, 0), other));
}

// Measure mode stores a graph's kernel nodes under CUPTI's (mangled) names, demangled, with the
// graph's op (graph_op); share mode then knows a graph's kernel by its shape when it cuts the graph.
TEST_F(PredictionsTest, AKernelTimedInsideAGraphIsKnownByItsShape) {
  const uint32_t grid[3] = {32, 1, 1}, block[3] = {128, 1, 1};
  const std::string readable = fikit::kernelid::readable_name("_Z4spini");
  EXPECT_EQ(readable, "spin(int)");
  auto node = sample(0, readable.c_str(), 32, 70'000);
  node.graph_op = 0x50;
  node.call_site.clear();
  node.kernel_id = fikit::kernelid::graph_node_id(0x50, fikit::kernelid::shape_id_of(readable, grid, block, 0));
  {
    fikit::profiledb::Database db(cfg.db_path, fikit::profiledb::Database::Open::Create);
    db.add_run("job", "train", {.gpu_ops = 1}, {node}, {});
  }
  Predictions p;
  ASSERT_EQ(p.load(cfg), 3u) << "the graph's kernel is not a kernel launched by its ID";
  EXPECT_FALSE(p.of(node.kernel_id).measured);
  fikit::kernelid::Settings s;
  s.func_get_name = &name_of;
  fikit::kernelid::configure(s);
  Predictions::Kernel k;
  ASSERT_TRUE(p.by_shape(fikit::kernelid::shape_id(reinterpret_cast<CUfunction>(0x99), grid, block, 0), k));
  EXPECT_EQ(k.dur_ns, 70'000u);
}

TEST(ShapeId, ALaunchsShapeIsTheProfilesWhateverItsCallSite) {
  fikit::kernelid::Settings s;
  s.func_get_name = &name_of;
  fikit::kernelid::configure(s);
  const uint32_t grid[3] = {4, 1, 1}, block[3] = {128, 1, 1}, other[3] = {4, 2, 1};
  const CUfunction f = reinterpret_cast<CUfunction>(0x1234);
  EXPECT_EQ(fikit::kernelid::shape_id(f, grid, block, 0), fikit::kernelid::shape_id_of("spin(int)", grid, block, 0));
  EXPECT_NE(fikit::kernelid::shape_id(f, other, block, 0), fikit::kernelid::shape_id(f, grid, block, 0));
  EXPECT_NE(fikit::kernelid::shape_id(f, grid, block, 64), fikit::kernelid::shape_id(f, grid, block, 0));
}

}  // namespace
