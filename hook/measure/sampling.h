#pragma once
// Which iterations measure mode measures (FIKIT_MEASURE_SAMPLE, FIKIT_MEASURE_BURST): pure, so
// that tests/measure_test/sampling_test.cpp can check it without a program.
#include <cstdint>

namespace fikit::hook::measure {

// splitmix64's finaliser: a fixed, well-spread hash.
constexpr uint64_t mix64(uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Whether the iteration after `epoch` host synchronisations is measured: bursts of `burst`
// iterations in a row, one burst in every `every` (a period), at an offset drawn for that period (a
// fixed hash of its index; the first period's first burst). A program whose step makes as many
// synchronisations as `every`, or a multiple, is then not always measured at the same one of them:
// a JAX training step made 8, and with every eighth measured, each measured iteration fell between
// two where no graph was launched, so its graphs were never timed.
constexpr bool sampled_iteration(uint64_t epoch, uint64_t burst, uint64_t every) noexcept {
  const uint64_t b = epoch / burst, period = b / every;
  return b % every == (period == 0 ? 0 : mix64(period) % every);
}

}  // namespace fikit::hook::measure
