#pragma once
// A service's objective as people write it: how many times its time alone its GPU work per request
// may take, "1.2" or "1.2x" (or "120%"), to a permille value the wire and the policy carry. One
// parser for fikit-run, the hook and fikit-scheduler. Allocation-free and noexcept (the hook).
#include <cstdint>
#include <string_view>

namespace fikit::values {

constexpr uint32_t kMinObjectivePermille = 1000;     // 1x: nothing may slow it at all
constexpr uint32_t kMaxObjectivePermille = 100000;   // 100x
constexpr uint32_t kDefaultObjectivePermille = 1200; // fikit-scheduler --objective's default

// nullptr and `out` set, or what is wrong.
const char* parse_objective(std::string_view text, uint32_t& out) noexcept;

}  // namespace fikit::values
