// The hook's own driver calls (hook/driver_calls.def): the simulated driver, which every test runs
// on, exports each of them; and the table takes each row's symbol, or its fallback where the
// driver lacks the symbol.
#include <cuda.h>
#include <dlfcn.h>

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "driver.h"

namespace {
void* sim_driver() {
  static void* handle = dlopen(FIKIT_SIM_DRIVER, RTLD_NOW | RTLD_LOCAL);
  return handle;
}
}  // namespace

namespace fikit::hook {
// The seam the table resolves through, over the simulated driver, as a driver without the newer
// (_v2) symbols of the rows that have a fallback.
void* real_driver_symbol(const char* name) noexcept {
  if (sim_driver() == nullptr) return nullptr;
#define FIKIT_DRIVER_CALL(field, symbol, fallback, params) \
  if (std::strcmp(#fallback, "none") != 0 && std::strcmp(name, #symbol) == 0) return nullptr;
#include "driver_calls.def"
#undef FIKIT_DRIVER_CALL
  return dlsym(sim_driver(), name);
}
}  // namespace fikit::hook

namespace {

TEST(DriverCalls, TheSimulatedDriverExportsEveryRow) {
  ASSERT_NE(sim_driver(), nullptr) << dlerror();
  int rows = 0;
#define FIKIT_DRIVER_CALL(field, symbol, fallback, params) \
  ++rows;                                                \
  EXPECT_NE(dlsym(sim_driver(), #symbol), nullptr) << #symbol;
#include "driver_calls.def"
#undef FIKIT_DRIVER_CALL
  EXPECT_GT(rows, 30);
}

TEST(DriverCalls, EachFieldIsItsSymbolOrItsFallbackWhereTheDriverLacksTheSymbol) {
  const fikit::hook::DriverCalls& d = fikit::hook::driver_calls();
#define FIKIT_DRIVER_CALL(field, symbol, fallback, params)                                              \
  {                                                                                                     \
    const bool has_fallback = std::strcmp(#fallback, "none") != 0;                                      \
    void* expected = dlsym(sim_driver(), has_fallback ? #fallback : #symbol);                           \
    EXPECT_EQ(reinterpret_cast<void*>(d.field), expected) << #field;                                    \
    EXPECT_NE(expected, nullptr) << (has_fallback ? #fallback : #symbol);                              \
  }
#include "driver_calls.def"
#undef FIKIT_DRIVER_CALL
  // Resolved once: the same table again.
  EXPECT_EQ(&fikit::hook::driver_calls(), &d);
}

}  // namespace
