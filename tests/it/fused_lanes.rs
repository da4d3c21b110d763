//! The lanes fused kernel (fused_lanes.wgsl) forced on its own context: the tests of
//! `forced_kernel.rs`. It fits where the adapter's subgroup size is fixed at 8 on Mesa 22's
//! lavapipe;
//! elsewhere the other kernels serve. The library's tuner tests check that it is chosen
//! there.

crate::forced_kernel_tests!(FusedKernel::Lanes, "lanes");
