// What the graph probes share around smid_kernel (smid_ptx.h): a driver-call check that ends the
// probe, and the read-back of where a launch's blocks ran.
#pragma once
#include <cuda.h>

#include <cstdio>
#include <cstdlib>
#include <set>
#include <vector>

#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { const char* s_ = nullptr; cuGetErrorString(r_, &s_); \
  std::printf("FAIL %s:%d %s -> %d %s\n", __FILE__, __LINE__, #x, int(r_), s_ ? s_ : "?"); std::exit(1); } } while (0)

// Distinct SMs that ran the `blocks` blocks of what was just launched on stream s, each block's SM
// ID in out[block], the highest in *max_id (-rc: the launch failed with rc).
static int smid_distinct_after(CUresult launch_rc, CUstream s, CUdeviceptr out, int blocks, unsigned* max_id) {
  if (launch_rc != CUDA_SUCCESS) return -int(launch_rc);
  CK(cuStreamSynchronize(s));
  std::vector<unsigned> ids(blocks);
  CK(cuMemcpyDtoH(ids.data(), out, blocks * 4));
  std::set<unsigned> used(ids.begin(), ids.end());
  *max_id = *used.rbegin();
  return int(used.size());
}

// Every block's slot back to "never ran" before the next launch.
static void smid_reset(CUdeviceptr out, int blocks) {
  CK(cuMemsetD32(out, 0xFFFFFFFF, blocks));
  CK(cuCtxSynchronize());
}
