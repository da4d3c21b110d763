//! Helpers for the per-path tests (fused, decode, f16): path options, and the shared
//! NaN-prefilled runner and reference check of `common` under short names.

#![allow(dead_code)]

use ndarray::Array4;
use wgpu_attention::*;

use crate::common::*;

/// `extra` on `path`, with lse asked for as well (weights are the staged path's only).
pub fn on_path(path: KernelPath, extra: AttentionOptions<'_>) -> AttentionOptions<'_> {
    AttentionOptions {
        path,
        return_lse: true,
        ..extra
    }
}

/// Runs on the GPU into outputs first filled with NaN, so an element the kernels never
/// write fails the comparison.
#[allow(unused_imports)] // not every test binary uses every helper
pub use crate::common::gpu_nan_prefilled_on as run_gpu_on;

/// Compares every requested output with the reference, element by element, and returns
/// the GPU's outputs for checks of the row rules themselves.
#[allow(unused_imports)] // not every test binary uses every helper
pub use crate::common::{check_against_reference as check, check_against_reference_on as check_on};

/// [`run_gpu_on`] on the shared context, expected to succeed.
pub fn run_gpu(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    opts: &AttentionOptions<'_>,
) -> AttentionOutput {
    gpu_nan_prefilled(q, k, v, opts).expect("gpu attention")
}

/// Runs `opts`, which the path must refuse, and returns the error after checking that it
/// is an invalid option naming `path`.
pub fn refused_by_path(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    opts: &AttentionOptions<'_>,
) -> AttentionError {
    let err = run_gpu_on(ctx(), q, k, v, opts).expect_err("the path must refuse these options");
    assert!(
        matches!(err, AttentionError::InvalidOption { arg: "path", .. }),
        "{err}"
    );
    err
}

/// A context whose storage bindings are capped at `max_binding` bytes, so that problems
/// split into several chunks.
pub fn small_binding_ctx(max_binding: u64) -> GpuContext {
    GpuContext::new()
        .expect("no GPU adapter")
        .with_max_binding(max_binding)
}
