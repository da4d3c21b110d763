//! The tiled fused kernel (fused_tiled.wgsl) forced on its own context: the tests of
//! `forced_kernel.rs`.

crate::forced_kernel_tests!(FusedKernel::Tiled, "tiled");
