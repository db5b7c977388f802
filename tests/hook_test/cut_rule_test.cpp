// Where a job's graph is cut into segments (hook/graph/cut_rule.h).
#include "graph/cut_rule.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace fikit::hook::graph {
namespace {

// succ_last for a graph given as edges between positions of its topological order.
std::vector<size_t> last_successors(size_t n, const std::vector<std::pair<size_t, size_t>>& edges) {
  std::vector<size_t> last(n, n);
  std::vector<bool> any(n, false);
  for (auto [a, b] : edges) {
    last[a] = any[a] ? std::max(last[a], b) : b;
    any[a] = true;
  }
  return last;
}

std::vector<std::pair<size_t, size_t>> chain(size_t n) {
  std::vector<std::pair<size_t, size_t>> edges;
  for (size_t i = 0; i + 1 < n; ++i) edges.push_back({i, i + 1});
  return edges;
}

// Groups of two branches of two nodes that meet in a join, each join leading to both branches of
// the next group: a1 b1 a2 b2 J | a1 b1 a2 b2 J | ...
std::vector<std::pair<size_t, size_t>> branches(size_t groups) {
  std::vector<std::pair<size_t, size_t>> edges;
  for (size_t g = 0; g < groups; ++g) {
    const size_t base = 5 * g, join = base + 4;
    for (size_t branch = 0; branch < 2; ++branch) {
      edges.push_back({base + branch, base + branch + 2});
      edges.push_back({base + branch + 2, join});
      if (g > 0) edges.push_back({base - 1, base + branch});
    }
  }
  return edges;
}

TEST(GraphCutRule, OpenNodesCountTheBranchesACutLeavesRunning) {
  const auto open = open_nodes(last_successors(10, branches(2)));
  EXPECT_EQ(open[1], 1u);   // a1
  EXPECT_EQ(open[2], 2u);   // a1 b1
  EXPECT_EQ(open[4], 2u);   // a2 b2 (a1 and b1 went on to them)
  EXPECT_EQ(open[5], 1u);   // J: both branches met
  EXPECT_EQ(open[6], 2u);   // J (b1 of the next group still to come) and a1
  // A sink stays open to the end: anything after it could have run beside it.
  const auto sink = open_nodes(last_successors(3, {{1, 2}}));
  EXPECT_EQ(sink[1], 1u);
  EXPECT_EQ(sink[2], 2u);
}

TEST(GraphCutRule, AChainIsCutWhereTheBudgetRunsOut) {
  const auto cuts = choose_cuts(std::vector<uint64_t>(10, 30), open_nodes(last_successors(10, chain(10))), 100);
  EXPECT_EQ(cuts, (std::vector<size_t>{0, 3, 6, 9, 10}));
}

// Nodes of 20 against a budget of 120: cut where the budget runs out, every piece would end inside
// the branches (6, 12, 18); the rule ends each at a join instead (5, 10, 15), a node shorter.
TEST(GraphCutRule, APieceEndsWhereTheBranchesMeetWhenThatKeepsHalfTheBudget) {
  const std::vector<uint64_t> weight(20, 20);
  const auto open = open_nodes(last_successors(20, branches(4)));
  EXPECT_EQ(choose_cuts(weight, open, 120), (std::vector<size_t>{0, 5, 10, 15, 20}));
  EXPECT_EQ(choose_cuts(weight, std::vector<uint32_t>(21, 1), 120), (std::vector<size_t>{0, 6, 12, 18, 20}));
  // Less than half the budget before the join: cut where the budget runs out.
  EXPECT_EQ(choose_cuts(weight, open, 220)[1], 5u * 2);   // 11 fit; the joins at 5 and 10: 10
  EXPECT_EQ(choose_cuts(std::vector<uint64_t>(20, 20), open, 60)[1], 3u);   // 3 fit, no join among 2..3
}

TEST(GraphCutRule, AHeavyNodeStandsAlone) {
  const auto cuts = choose_cuts({10, 500, 10}, open_nodes(last_successors(3, chain(3))), 100);
  EXPECT_EQ(cuts, (std::vector<size_t>{0, 1, 2, 3}));
}

TEST(GraphCutRule, NodesOfNoWeightRideAlong) {
  // 0 0 60 0 | 60 0: the piece ends after the last node that fits, zero-weight ones included.
  EXPECT_EQ(choose_cuts({0, 0, 60, 0, 60, 0}, std::vector<uint32_t>(7, 1), 100), (std::vector<size_t>{0, 4, 6}));
}

}  // namespace
}  // namespace fikit::hook::graph
