//! Helpers for the per-path tests (fused, decode, f16): seeded inputs and masks, and the
//! shared NaN-prefilled runner of `common` under short names.

#![allow(dead_code)]

use ndarray::{Array4, ArrayD, IxDyn};
use wgpu_attention::*;

use crate::common::*;

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

/// Compares out (and lse when requested) with the reference, element by element.
pub fn check_on(
    c: &GpuContext,
    what: &str,
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    opts: &AttentionOptions<'_>,
) {
    check_against_reference_on(c, what, q, k, v, opts)
}

pub fn check(
    what: &str,
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    opts: &AttentionOptions<'_>,
) {
    check_against_reference(what, q, k, v, opts)
}

/// Random q `(b, hq, lq, d)`, k `(b, hkv, lk, d)`, v `(b, hkv, lk, dv)`.
pub fn qkv(
    seed: u64,
    (b, hq, hkv): (usize, usize, usize),
    (lq, lk): (usize, usize),
    (d, dv): (usize, usize),
) -> (Array4<f32>, Array4<f32>, Array4<f32>) {
    let mut rng = Rng::new(seed);
    (
        rng.array4((b, hq, lq, d)),
        rng.array4((b, hkv, lk, d)),
        rng.array4((b, hkv, lk, dv)),
    )
}

/// A boolean mask of `shape` with about `keep` of its entries true.
pub fn bool_mask(seed: u64, shape: &[usize], keep: f64) -> ArrayD<bool> {
    let mut rng = Rng::new(seed);
    ArrayD::from_shape_simple_fn(IxDyn(shape), || rng.uniform() < keep)
}

/// An additive mask of `shape`: small normal values, with about `hide` of them -inf.
pub fn additive_mask(seed: u64, shape: &[usize], hide: f64) -> ArrayD<f32> {
    let mut rng = Rng::new(seed);
    ArrayD::from_shape_simple_fn(IxDyn(shape), || {
        if rng.uniform() < hide {
            f32::NEG_INFINITY
        } else {
            rng.normal()
        }
    })
}

/// A context whose storage bindings are capped at `max_binding` bytes, so that problems
/// split into several chunks.
pub fn small_binding_ctx(max_binding: u64) -> GpuContext {
    GpuContext::new()
        .expect("no GPU adapter")
        .with_max_binding(max_binding)
}
