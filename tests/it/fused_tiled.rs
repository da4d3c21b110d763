//! The tiled fused kernel (fused_tiled.wgsl) forced on its own context: the tests of
//! `forced_kernel.rs`. Its shapes fit every adapter the tests run on.

crate::forced_kernel_tests!(FusedKernel::Tiled, "tiled", |_| true);
