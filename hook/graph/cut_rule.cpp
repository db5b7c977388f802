#include "cut_rule.h"

namespace fikit::hook::graph {

std::vector<uint32_t> open_nodes(const std::vector<size_t>& succ_last) {
  const size_t n = succ_last.size();
  // The node at position i is open at cuts k with i < k <= succ_last[i].
  std::vector<int64_t> diff(n + 2, 0);
  for (size_t i = 0; i < n; ++i) {
    ++diff[i + 1];
    --diff[(succ_last[i] < n ? succ_last[i] : n) + 1];
  }
  std::vector<uint32_t> open(n + 1, 0);
  int64_t running = 0;
  for (size_t k = 1; k <= n; ++k) {
    running += diff[k];
    open[k] = uint32_t(running);
  }
  return open;
}

std::vector<size_t> choose_cuts(const std::vector<uint64_t>& weight, const std::vector<uint32_t>& open,
                                uint64_t budget) {
  const size_t n = weight.size();
  std::vector<size_t> cuts{0};
  size_t start = 0;
  while (start < n) {
    uint64_t in_piece = 0;
    size_t k = start, best = 0;
    uint32_t best_open = UINT32_MAX;
    // Extend the piece while the next node fits (the first always goes in); every end with at least
    // half the budget in it is a candidate.
    while (k < n && (in_piece == 0 || in_piece + weight[k] <= budget)) {
      in_piece += weight[k++];
      if (k < n && 2 * in_piece >= budget && open[k] <= best_open) best = k, best_open = open[k];
    }
    if (k == n) break;
    start = best != 0 ? best : k;
    cuts.push_back(start);
  }
  cuts.push_back(n);
  return cuts;
}

}  // namespace fikit::hook::graph
