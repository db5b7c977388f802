#include "spin_kernel.h"

namespace fikit::examples {

// PTX 7.0 / sm_75 is the oldest level that has everything used here; the driver JITs it forward to
// any newer GPU (Hopper included). %globaltimer is a nanosecond clock shared by all SMs, so the
// kernel's duration does not depend on the clock rate or on how many blocks run at once.
const char kSpinKernelPtx[] = R"PTX(
.version 7.0
.target sm_75
.address_size 64

.visible .entry fikit_spin(
    .param .u64 duration_ns,
    .param .u64 out
)
{
    .reg .pred  %p<4>;
    .reg .b32   %r<4>;
    .reg .b64   %rd<8>;

    ld.param.u64    %rd1, [duration_ns];
    ld.param.u64    %rd2, [out];
    mov.u64         %rd3, %globaltimer;
$L_spin:
    mov.u64         %rd4, %globaltimer;
    sub.u64         %rd5, %rd4, %rd3;
    setp.lt.u64     %p1, %rd5, %rd1;
    @%p1 bra        $L_spin;

    setp.eq.u64     %p2, %rd2, 0;
    @%p2 bra        $L_done;
    mov.u32         %r1, %tid.x;
    mov.u32         %r2, %ctaid.x;
    or.b32          %r3, %r1, %r2;
    setp.ne.u32     %p3, %r3, 0;
    @%p3 bra        $L_done;
    cvta.to.global.u64  %rd6, %rd2;
    st.global.u64   [%rd6], %rd5;
$L_done:
    ret;
}
)PTX";

}  // namespace fikit::examples
