#pragma once
// Profile samples get their kernels' readable names, call sites and launch shapes from the kernel
// IDs' descriptions (kernelid/), for fikit-profile and the trace. Used where samples are stored.
#include <vector>

#include "kernelid.h"
#include "profiledb.h"

namespace fikit::hook {

inline void describe_samples(std::vector<profiledb::KernelSample>& samples) {
  for (auto& k : samples) {
    const kernelid::Description* d = kernelid::describe(k.kernel_id);
    if (d == nullptr) continue;
    k.name = d->name;
    k.call_site = d->call_site;
    for (int i = 0; i < 3; ++i) {
      k.grid[i] = d->grid[i];
      k.block[i] = d->block[i];
    }
    k.shared_mem = d->shared_mem;
    k.blocks_per_sm = d->blocks_per_sm;
    k.sm_count = d->sm_count;
  }
}

}  // namespace fikit::hook
