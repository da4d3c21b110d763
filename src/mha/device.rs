//! The layer's weights on the device, and the projections that use them.

use crate::error::{AttentionError, Result};
use crate::gpu::device::context::GpuContext;
use crate::gpu::device::recorder::Recorder;
use crate::gpu::device::scopes::ErrorScopes;
use crate::gpu::device::tensor::GpuTensor;
use crate::gpu::kernels::elem::Elem;
use crate::gpu::kernels::linear::{HeadLayout, Linear, LinearKernel, LinearNeed};
use crate::gpu::kernels::linear_tune::LinearProblem;
use crate::mha::weights::{MhaDims, MhaWeights};

/// [`MhaWeights`] uploaded once, for any number of GPU calls.
#[derive(Debug, Clone)]
pub struct MhaGpuWeights {
    pub(crate) dims: MhaDims,
    pub(crate) wq: GpuTensor,
    pub(crate) bq: GpuTensor,
    pub(crate) wk: GpuTensor,
    pub(crate) bk: GpuTensor,
    pub(crate) wv: GpuTensor,
    pub(crate) bv: GpuTensor,
    pub(crate) wo: GpuTensor,
    pub(crate) bo: GpuTensor,
}

impl MhaGpuWeights {
    /// Uploads every projection.
    ///
    /// # Errors
    /// [`AttentionError::TooLarge`] naming a tensor beyond the device's buffer size;
    /// [`AttentionError::Device`] when the device fails.
    pub fn upload(ctx: &GpuContext, w: &MhaWeights) -> Result<Self> {
        let m = |arg, a: &ndarray::Array2<f32>| GpuTensor::upload(ctx, arg, a.view().into_dyn());
        let v = |arg, a: &ndarray::Array1<f32>| GpuTensor::upload(ctx, arg, a.view().into_dyn());
        Ok(Self {
            dims: w.dims,
            wq: m("q_proj_weight", &w.wq)?,
            bq: v("in_proj_bias", &w.bq)?,
            wk: m("k_proj_weight", &w.wk)?,
            bk: v("in_proj_bias", &w.bk)?,
            wv: m("v_proj_weight", &w.wv)?,
            bv: v("in_proj_bias", &w.bv)?,
            wo: m("out_proj.weight", &w.wo)?,
            bo: v("out_proj.bias", &w.bo)?,
        })
    }

    /// The sizes these weights fix.
    pub fn dims(&self) -> MhaDims {
        self.dims
    }
}

/// Records `calls` into one encoder and submits it inside error scopes.
pub(crate) async fn submit(ctx: &GpuContext, what: &str, calls: &[Linear<'_>]) -> Result<()> {
    ctx.check_alive()?;
    // With tuning on, each projection's shape is timed once per class (see linear_tune).
    let problems: Vec<LinearProblem> = calls
        .iter()
        .filter_map(|c| match *c.w.1.shape() {
            [cols, inner] => Some(LinearProblem {
                rows: c.rows,
                cols,
                inner,
            }),
            _ => None,
        })
        .collect();
    let needs = [true, false].map(|vec4| LinearNeed {
        elem: Elem::F32,
        vec4,
    });
    let kernel = LinearKernel::prepare_for_problems(ctx, &needs, &problems).await?;
    kernel.tune(ctx, &problems).await?;
    let scopes = ErrorScopes::push(ctx);
    let mut encoder = ctx.device.create_command_encoder(&Default::default());
    let mut rec = Recorder::new(&mut encoder);
    for call in calls {
        kernel.record(ctx, &mut rec, call)?;
    }
    drop(rec);
    ctx.queue.submit([encoder.finish()]);
    scopes.pop(ctx, what).await
}

/// u32 for a layout field; the linear kernel's own checks reject the sizes this cannot
/// hold before anything runs.
pub(crate) fn u32_of(arg: &'static str, n: usize) -> Result<u32> {
    u32::try_from(n).map_err(|_| AttentionError::TooLarge {
        arg,
        detail: format!("{n} exceeds the kernels' 32-bit sizes"),
    })
}

/// The layouts of `per_batch` tokens per batch as rows `(B, per_batch, E)` and as query
/// heads `(B, H, per_batch, D)`: what the query projection reads and writes, and the
/// output projection the other way round.
fn token_layouts(w: &MhaGpuWeights, per_batch: usize) -> Result<(HeadLayout, HeadLayout)> {
    let d = w.dims;
    let l = u32_of("x", per_batch)?;
    let rows = HeadLayout::rows(l, u32_of("x", d.embed)?);
    let heads = HeadLayout::heads(l, u32_of("heads", d.heads)?, u32_of("x", d.head_dim)?, l, 0);
    Ok((rows, heads))
}

/// The query projection of `rows` tokens of `x` (`per_batch` per batch) into heads
/// `(B, H, per_batch, D)`.
pub(crate) fn query<'a>(
    w: &'a MhaGpuWeights,
    x: &'a GpuTensor,
    q: &'a GpuTensor,
    batch: usize,
    per_batch: usize,
) -> Result<Linear<'a>> {
    let (rows, heads) = token_layouts(w, per_batch)?;
    Ok(Linear {
        x: ("x", x, rows),
        w: ("q_proj_weight", &w.wq),
        bias: ("in_proj_bias", &w.bq),
        y: ("q", q, heads),
        rows: batch * per_batch,
    })
}

/// The key and value projections of `kv` (`per_batch` tokens per batch) into
/// `(B, N, cap, D)` tensors at positions `off..off + per_batch`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn keys_values<'a>(
    w: &'a MhaGpuWeights,
    kv: (&'static str, &'a GpuTensor),
    k: &'a GpuTensor,
    v: &'a GpuTensor,
    batch: usize,
    per_batch: usize,
    cap: usize,
    off: usize,
) -> Result<[Linear<'a>; 2]> {
    let d = w.dims;
    let l = u32_of(kv.0, per_batch)?;
    let input = HeadLayout::rows(l, u32_of(kv.0, d.kv_embed)?);
    let out = HeadLayout::heads(
        l,
        u32_of("kv_heads", d.kv_heads)?,
        u32_of(kv.0, d.head_dim)?,
        u32_of(kv.0, cap)?,
        u32_of(kv.0, off)?,
    );
    let rows = batch * per_batch;
    Ok([
        Linear {
            x: (kv.0, kv.1, input),
            w: ("k_proj_weight", &w.wk),
            bias: ("in_proj_bias", &w.bk),
            y: ("k", k, out),
            rows,
        },
        Linear {
            x: (kv.0, kv.1, input),
            w: ("v_proj_weight", &w.wv),
            bias: ("in_proj_bias", &w.bv),
            y: ("v", v, out),
            rows,
        },
    ])
}

/// The output projection of heads `(B, H, per_batch, D)` into rows `(B, per_batch, E)`.
pub(crate) fn output<'a>(
    w: &'a MhaGpuWeights,
    heads: &'a GpuTensor,
    y: &'a GpuTensor,
    batch: usize,
    per_batch: usize,
) -> Result<Linear<'a>> {
    let (rows, head_layout) = token_layouts(w, per_batch)?;
    Ok(Linear {
        x: ("out", heads, head_layout),
        w: ("out_proj.weight", &w.wo),
        bias: ("out_proj.bias", &w.bo),
        y: ("y", y, rows),
        rows: batch * per_batch,
    })
}
