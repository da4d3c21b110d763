//! Helpers for the per-path tests (fused, decode, f16): path options, a run expected to
//! succeed, a run the path must refuse, and a context with small bindings.

use ndarray::Array4;
use wgpu_attention::*;

use crate::common::*;

/// `extra` on `path`, with lse asked for as well.
pub fn on_path(path: KernelPath, extra: AttentionOptions<'_>) -> AttentionOptions<'_> {
    AttentionOptions {
        path,
        return_lse: true,
        ..extra
    }
}

/// [`gpu_nan_prefilled`] on the shared context, expected to succeed.
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
    let err =
        gpu_nan_prefilled_on(ctx(), q, k, v, opts).expect_err("the path must refuse these options");
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
