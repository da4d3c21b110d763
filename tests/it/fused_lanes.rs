//! The lanes fused kernel (fused_lanes.wgsl) forced on its own context: the tests of
//! `forced_kernel.rs`. It is built for adapters whose subgroup size is fixed at 8 on Mesa
//! 22's lavapipe; elsewhere the other kernels serve. The library's tuner tests check that
//! it is chosen there.
//!
//! The slow tier: on Mesa 22 the kernel's unrolled source takes the driver 11 s and more
//! per shape to compile with a cold shader cache, so a plain `cargo test` leaves these to
//! `cargo test --test it -- --ignored fused_lanes::` (which `.ci/run` runs).

crate::forced_kernel_tests!(FusedKernel::Lanes, "lanes", |ctx| {
    let info = ctx.adapter_info();
    info.driver == "llvmpipe"
        && info.driver_info.contains("Mesa 22.")
        && info.subgroup_min_size == 8
        && info.subgroup_max_size == 8
}, #[ignore = "slow tier: the lanes kernel compiles for minutes cold; .ci/run runs it"]);
