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
pub fn run_gpu_on(
    c: &GpuContext,
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    opts: &AttentionOptions<'_>,
) -> Result<AttentionOutput> {
    gpu_nan_prefilled_on(c, q, k, v, opts)
}

pub fn run_gpu(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    opts: &AttentionOptions<'_>,
) -> AttentionOutput {
    gpu_nan_prefilled(q, k, v, opts).expect("gpu attention")
}

/// Compares every requested output with the reference, element by element, and returns
/// the GPU's outputs for checks of the row rules themselves.
pub fn check_on(
    c: &GpuContext,
    what: &str,
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    opts: &AttentionOptions<'_>,
) -> AttentionOutput {
    check_against_reference_on(c, what, q, k, v, opts)
}

pub fn check(
    what: &str,
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    opts: &AttentionOptions<'_>,
) -> AttentionOutput {
    check_against_reference(what, q, k, v, opts)
}

/// A context whose storage bindings are capped at `max_binding` bytes, so that problems
/// split into several chunks.
pub fn small_binding_ctx(max_binding: u64) -> GpuContext {
    GpuContext::new()
        .expect("no GPU adapter")
        .with_max_binding(max_binding)
}
