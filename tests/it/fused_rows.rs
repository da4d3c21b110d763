//! The row fused kernel (fused.wgsl) forced on its own context: the tests of
//! `forced_kernel.rs`. Untuned calls take the tiled kernel first on every adapter type,
//! so without the forcing the row kernel would run only where the tiled one does not fit.

crate::forced_kernel_tests!(FusedKernel::Rows, "rows", |_| true);
