#pragma once
// PTX the simulator understands: "spin" kernels run for their first (.u64) argument in ns, any
// other kernel for FIKIT_SIMGPU_KERNEL_NS.
inline constexpr char kSpinPtx[] = R"(
.version 8.0
.target sm_90
.address_size 64

// spin for the given number of nanoseconds
.visible .entry spin_ns(
    .param .u64 spin_ns_param_0,
    .param .u64 .ptr .global .align 8 spin_ns_param_1
)
{
    ret;
}

.visible .entry add_one(.param .u64 add_one_param_0, .param .u32 add_one_param_1, .param .align 8 .b8 add_one_param_2[16])
{
    ret;
}
)";
