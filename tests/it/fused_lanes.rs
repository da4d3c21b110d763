//! The lanes fused kernel (fused_lanes.wgsl) forced on its own context: the tests of
//! `forced_kernel.rs`. It is built for adapters whose subgroup size is fixed at 8 on Mesa
//! 22's lavapipe; elsewhere the other kernels serve. The library's tuner tests check that
//! it is chosen there.

crate::forced_kernel_tests!(FusedKernel::Lanes, "lanes", |ctx| {
    let info = ctx.adapter_info();
    info.driver == "llvmpipe"
        && info.driver_info.contains("Mesa 22.")
        && info.subgroup_min_size == 8
        && info.subgroup_max_size == 8
});
