//! Records the dense layer `y = x Wᵀ + b` (shaders/linear.wgsl) into an encoder. Each
//! tensor is bound whole, so each must fit one storage binding; larger ones are a
//! [`AttentionError::TooLarge`] naming the tensor.

use crate::error::{AttentionError, Result};
use crate::gpu::device::buffers;
use crate::gpu::device::context::GpuContext;
use crate::gpu::device::tensor::GpuTensor;
use crate::gpu::kernels::dispatch::{bind_group, grid, range};
use crate::gpu::kernels::linear::{self, HeadLayout, LinearParams};

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

/// Records the layer into `encoder` (nothing is recorded for zero rows).
///
/// # Errors
/// [`AttentionError::TooLarge`] for a tensor beyond one binding or a launch beyond the
/// grid; [`AttentionError::Shape`] when a tensor is too small for its layout; a device
/// error building the pipeline.
pub(crate) async fn record(
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
    let pipe = ctx.pipeline(&linear::SPEC, &[]).await?;
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
    let (gx, gy) = grid(ctx, linear::workgroups(rows, cols32), y_arg)?;
    let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
        label: Some("wgpu-attention linear"),
        timestamp_writes: None,
    });
    pass.set_pipeline(&pipe.pipeline);
    pass.set_bind_group(0, &group, &[]);
    pass.dispatch_workgroups(gx, gy, 1);
    Ok(())
}
