//! The kernel `shaders/kernels/linear.wgsl`: the dense layer `y = x Wᵀ + b` with head
//! layouts on both sides. Each tensor is bound whole, so each must fit one storage
//! binding; larger ones are a [`AttentionError::TooLarge`] naming the tensor.

use bytemuck::{Pod, Zeroable};

use std::sync::Arc;

use crate::error::{AttentionError, Result};
use crate::gpu::device::buffers;
use crate::gpu::device::context::GpuContext;
use crate::gpu::device::tensor::GpuTensor;
use crate::gpu::kernels::dispatch::{bind_group, grid, range};
use crate::gpu::kernels::pipelines::{pipeline, Binding, KernelPipeline, KernelSpec};
use crate::gpu::kernels::source;

/// Bindings: params, x, W, bias, y.
pub(crate) const SPEC: KernelSpec = KernelSpec {
    name: "linear",
    source: source::LINEAR,
    bindings: &[
        Binding::Uniform,
        Binding::Read,
        Binding::Read,
        Binding::Read,
        Binding::ReadWrite,
    ],
    // Indices into x and y go through the head layouts, whose bounds the host checks
    // rather than the shader: keep the runtime checks.
    trusted: false,
};

/// As T in linear.wgsl (checked by `reflection.rs`).
pub(crate) const TILE: u64 = 16;

/// Where row `m = (b, l)` and column `c = (h, d)` of a matrix live in a buffer:
/// `((b * heads + h) * cap + off + l) * dim + d`. See linear.wgsl.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HeadLayout {
    pub len: u32,
    pub heads: u32,
    pub dim: u32,
    pub cap: u32,
    pub off: u32,
}

impl HeadLayout {
    /// `rows` rows of `per_batch` tokens, `heads` heads of width `dim`, stored as
    /// `(B, heads, cap, dim)` with these rows at positions `off..off + per_batch`.
    pub(crate) fn heads(per_batch: u32, heads: u32, dim: u32, cap: u32, off: u32) -> Self {
        Self {
            len: per_batch,
            heads,
            dim,
            cap,
            off,
        }
    }

    /// A plain row-major matrix with `width` columns, `per_batch` rows per batch.
    pub(crate) fn rows(per_batch: u32, width: u32) -> Self {
        Self::heads(per_batch, 1, width, per_batch, 0)
    }

    /// Elements a buffer needs to hold `rows` rows in this layout.
    pub(crate) fn elements(&self, rows: u64) -> u64 {
        let batch = rows.div_ceil(u64::from(self.len.max(1)));
        batch * u64::from(self.heads) * u64::from(self.cap) * u64::from(self.dim)
    }
}

/// As the WGSL struct `Linear` in linear.wgsl (checked by `reflection.rs`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
pub(crate) struct LinearParams {
    pub rows: u32,
    pub cols: u32,
    pub inner: u32,
    pub tiles_n: u32,
    pub input: [u32; 5],
    pub output: [u32; 5],
    pub _pad: [u32; 2],
}

impl LinearParams {
    pub(crate) fn new(
        rows: u32,
        cols: u32,
        inner: u32,
        input: HeadLayout,
        output: HeadLayout,
    ) -> Self {
        let pack = |l: HeadLayout| [l.len, l.heads, l.dim, l.cap, l.off];
        Self {
            rows,
            cols,
            inner,
            tiles_n: (u64::from(cols).div_ceil(TILE)) as u32,
            input: pack(input),
            output: pack(output),
            _pad: [0; 2],
        }
    }
}

/// One workgroup per 16 x 16 block of y.
pub(crate) fn workgroups(rows: u32, cols: u32) -> u64 {
    u64::from(rows).div_ceil(TILE) * u64::from(cols).div_ceil(TILE)
}

/// One dense layer: `rows` rows of `x` (in `x_layout`, `inner` wide) times `w`
/// `(cols, inner)`ᵀ plus `bias` `(cols,)`, written to `y` in `y_layout`.
pub(crate) struct Linear<'a> {
    pub x: (&'static str, &'a GpuTensor, HeadLayout),
    pub w: (&'static str, &'a GpuTensor),
    pub bias: (&'static str, &'a GpuTensor),
    pub y: (&'static str, &'a GpuTensor, HeadLayout),
    pub rows: usize,
}

fn small(arg: &'static str, what: &str, n: usize) -> Result<u32> {
    u32::try_from(n).map_err(|_| AttentionError::TooLarge {
        arg,
        detail: format!("{what} = {n} exceeds the kernel's 32-bit index"),
    })
}

/// Checks that `t` holds `need` elements and fits one binding.
fn check(ctx: &GpuContext, arg: &'static str, t: &GpuTensor, need: u64) -> Result<()> {
    if (t.len() as u64) < need {
        return Err(AttentionError::shape(
            arg,
            format!(
                "tensor of shape {:?} holds {} values, the layer needs {need}",
                t.shape(),
                t.len()
            ),
        ));
    }
    let bytes = buffers::f32_bytes(arg, t.shape())?;
    let max = ctx.max_binding();
    if bytes > max {
        return Err(AttentionError::TooLarge {
            arg,
            detail: format!(
                "shape {:?} needs {bytes} bytes in one binding; the device binds at most {max}",
                t.shape()
            ),
        });
    }
    Ok(())
}

/// The dense-layer kernel, built.
pub(crate) struct LinearKernel {
    pipe: Arc<KernelPipeline>,
}

impl LinearKernel {
    /// Builds (or finds cached) the pipeline.
    ///
    /// # Errors
    /// A device error building the pipeline.
    pub(crate) async fn prepare(ctx: &GpuContext) -> Result<Self> {
        Ok(Self {
            pipe: pipeline(ctx, &SPEC, &[]).await?,
        })
    }

    /// Records the layer into `encoder` (nothing is recorded for zero rows).
    ///
    /// # Errors
    /// [`AttentionError::TooLarge`] for a tensor beyond one binding or a launch beyond the
    /// grid; [`AttentionError::Shape`] when a tensor is too small for its layout; a device
    /// error allocating.
    pub(crate) fn record(
        &self,
        ctx: &GpuContext,
        encoder: &mut wgpu::CommandEncoder,
        call: &Linear<'_>,
    ) -> Result<()> {
        let (x_arg, x, x_layout) = call.x;
        let (w_arg, w, bias_arg, bias) = (call.w.0, call.w.1, call.bias.0, call.bias.1);
        let (y_arg, y, y_layout) = call.y;
        let [cols, inner] = <[usize; 2]>::try_from(w.shape()).map_err(|_| {
            AttentionError::shape(w_arg, format!("expected rank 2, got {:?}", w.shape()))
        })?;
        if call.rows == 0 || cols == 0 {
            return Ok(());
        }
        let rows = small(x_arg, "rows", call.rows)?;
        let (cols32, inner32) = (small(w_arg, "rows", cols)?, small(w_arg, "columns", inner)?);
        check(ctx, x_arg, x, x_layout.elements(rows.into()))?;
        check(ctx, w_arg, w, cols as u64 * inner as u64)?;
        check(ctx, bias_arg, bias, cols as u64)?;
        check(ctx, y_arg, y, y_layout.elements(rows.into()))?;
        let params = LinearParams::new(rows, cols32, inner32, x_layout, y_layout);
        let (params_buffer, _) =
            buffers::uniform_array(ctx, "wgpu-attention linear params", &[params])?;
        let pipe = &self.pipe;
        let whole = |t: &'_ GpuTensor| (t.len() as u64 * 4).max(4);
        let group = bind_group(
            ctx,
            "linear",
            &pipe.layout,
            vec![
                range(
                    &params_buffer,
                    0,
                    std::mem::size_of::<LinearParams>() as u64,
                ),
                range(x.buffer(), 0, whole(x)),
                range(w.buffer(), 0, whole(w)),
                range(bias.buffer(), 0, whole(bias)),
                range(y.buffer(), 0, whole(y)),
            ],
        );
        let (gx, gy) = grid(ctx, workgroups(rows, cols32), y_arg)?;
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("wgpu-attention linear"),
            timestamp_writes: None,
        });
        pass.set_pipeline(&pipe.pipeline);
        pass.set_bind_group(0, &group, &[]);
        pass.dispatch_workgroups(gx, gy, 1);
        Ok(())
    }
}
