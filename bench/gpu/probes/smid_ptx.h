// The PTX the green-context probes share: a module header and smid_kernel, whose blocks' first
// threads write the SM they ran on (%smid) to out[block] and then spin `spin` clocks.
#pragma once

static const char kProbePtxHeader[] = ".version 8.0\n.target sm_90\n.address_size 64\n";

static const char kSmidKernelPtx[] = R"(
.visible .entry smid_kernel(.param .u64 out, .param .u64 spin) {
  .reg .u32 %r<6>; .reg .u64 %rd<8>; .reg .pred %p;
  ld.param.u64 %rd1, [out]; ld.param.u64 %rd5, [spin];
  mov.u32 %r1, %smid; mov.u32 %r2, %ctaid.x; mov.u32 %r3, %tid.x;
  setp.ne.u32 %p, %r3, 0; @%p bra DONE;
  mul.wide.u32 %rd2, %r2, 4; add.u64 %rd3, %rd1, %rd2; st.global.u32 [%rd3], %r1;
  mov.u64 %rd6, %clock64;
LOOP: mov.u64 %rd7, %clock64; sub.u64 %rd7, %rd7, %rd6; setp.lt.u64 %p, %rd7, %rd5; @%p bra LOOP;
DONE: ret;
}
)";
