//! Running a GPU call with NaN-filled outputs (so an element the kernels never write
//! fails) and comparing every output with the CPU reference.

#![allow(dead_code)]

use ndarray::{Array3, Array4, ArrayView4};
use wgpu_attention::*;

use crate::common::{assert_close, ATOL, RTOL};

/// Runs the GPU path into outputs pre-filled with NaN and reads them back.
pub fn gpu_nan_prefilled(
    ctx: &GpuContext,
    q: ArrayView4<'_, f32>,
    k: ArrayView4<'_, f32>,
    v: ArrayView4<'_, f32>,
    opts: &AttentionOptions<'_>,
) -> Result<AttentionOutput> {
    let p = validate(q.shape(), k.shape(), v.shape(), opts)?;
    let nan4 = |s: [usize; 4]| Array4::<f32>::from_elem(s, f32::NAN).into_dyn();
    let up = |a: ArrayView4<'_, f32>| GpuTensor::from_array(ctx, a.into_dyn());
    let (b, h, lq, lk) = (p.batch, p.heads_q, p.len_q, p.len_k);
    let outputs = GpuOutputs {
        out: GpuTensor::from_array(ctx, nan4([b, h, lq, p.dim_v]).view())?,
        weights: p
            .return_weights
            .then(|| GpuTensor::from_array(ctx, nan4([b, h, lq, lk]).view()))
            .transpose()?,
        lse: p
            .return_lse
            .then(|| {
                let nan = Array3::<f32>::from_elem((b, h, lq), f32::NAN).into_dyn();
                GpuTensor::from_array(ctx, nan.view())
            })
            .transpose()?,
    };
    let (qt, kt, vt) = (up(q)?, up(k)?, up(v)?);
    pollster::block_on(attention_gpu_into_async(ctx, &qt, &kt, &vt, opts, &outputs))?;
    pollster::block_on(outputs.read_async(ctx))
}

/// Asserts every requested output of `gpu` is within the f32 bounds of `cpu`.
pub fn assert_outputs_close(what: &str, gpu: &AttentionOutput, cpu: &AttentionOutput) {
    assert_close(
        &format!("{what}: out"),
        gpu.out.view(),
        cpu.out.view(),
        ATOL,
        RTOL,
    );
    match (&gpu.weights, &cpu.weights) {
        (Some(g), Some(c)) => {
            assert_close(&format!("{what}: weights"), g.view(), c.view(), ATOL, RTOL)
        }
        (None, None) => {}
        _ => panic!("{what}: weights requested on one side only"),
    }
    match (&gpu.lse, &cpu.lse) {
        (Some(g), Some(c)) => assert_close(&format!("{what}: lse"), g.view(), c.view(), ATOL, RTOL),
        (None, None) => {}
        _ => panic!("{what}: lse requested on one side only"),
    }
}

/// The GPU (NaN-prefilled) against the CPU reference for one problem.
pub fn check(
    what: &str,
    ctx: &GpuContext,
    q: ArrayView4<'_, f32>,
    k: ArrayView4<'_, f32>,
    v: ArrayView4<'_, f32>,
    opts: &AttentionOptions<'_>,
) {
    let gpu = gpu_nan_prefilled(ctx, q, k, v, opts)
        .unwrap_or_else(|e| panic!("{what}: GPU call failed: {e}"));
    let cpu = attention_cpu(q, k, v, opts).unwrap_or_else(|e| panic!("{what}: CPU failed: {e}"));
    assert_outputs_close(what, &gpu, &cpu);
}
