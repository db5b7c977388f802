#pragma once
// Where a job's graph is cut into segments (segments.h): a pure rule on a topological order, so it
// is tested without a driver.
//
// A segment boundary is a full join: everything before it ends before anything after it starts.
// Where the graph runs branches side by side (an XLA command buffer's independent fusions), a cut
// across them makes the GPU drain the earlier ones alone before the later ones start; where all the
// work before the cut meets in one node, the cut costs only the launch gap. So among the places where
// a segment could end with at least half the budget in it, the rule takes the one that leaves the
// fewest nodes open (nodes before it that are sinks or have a successor after it: the branches a
// cut there joins; with one open node every node before the cut leads to it), the latest of those;
// a chain, open 1 everywhere, is cut where the budget runs out.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace fikit::hook::graph {

// open[k] for a cut before position k of the order (1 <= k < n; open[0] unused): how many of the
// nodes at positions < k are sinks or have a successor at a position >= k. succ_last[i]: the highest
// position of the successors of the node at position i (n: none, a sink).
std::vector<uint32_t> open_nodes(const std::vector<size_t>& succ_last);

// The cut positions, first 0 and last n: segment s is [cuts[s], cuts[s + 1]). weight[k]: the node at
// position k's predicted GPU time. A piece holds at most `budget` unless one node alone weighs more.
std::vector<size_t> choose_cuts(const std::vector<uint64_t>& weight, const std::vector<uint32_t>& open,
                                uint64_t budget);

}  // namespace fikit::hook::graph
