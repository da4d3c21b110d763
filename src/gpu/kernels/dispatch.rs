//! Launch arithmetic shared by the kernels.

use crate::error::{AttentionError, Result};
use crate::gpu::device::context::GpuContext;
use crate::gpu::kernels::pipelines::KernelPipeline;

/// A 2-D grid holding `n` workgroups, read back as one linear index by the kernels
/// (`linear_workgroup` in common.wgsl), so launches may exceed the per-dimension limit.
pub(crate) fn grid(ctx: &GpuContext, n: u64, what: &'static str) -> Result<(u32, u32)> {
    let max = u64::from(ctx.limits.max_compute_workgroups_per_dimension).max(1);
    let x = n.clamp(1, max);
    let y = n.div_ceil(x).max(1);
    if y > max {
        return Err(AttentionError::TooLarge {
            arg: what,
            detail: format!("{n} workgroups exceed a {max} x {max} grid"),
        });
    }
    Ok((x as u32, y as u32))
}

/// One binding of a buffer range.
pub(crate) fn range(buffer: &wgpu::Buffer, offset: u64, size: u64) -> wgpu::BindingResource<'_> {
    wgpu::BindingResource::Buffer(wgpu::BufferBinding {
        buffer,
        offset,
        size: std::num::NonZeroU64::new(size),
    })
}

/// Builds a bind group for a layout from resources in binding order (the device layer's,
/// which its bind-group cache builds with too).
pub(crate) use crate::gpu::device::bind_cache::bind_group;

/// Records one dispatch of `pipe` with `group`, `workgroups` in all (as a [`grid`];
/// `what` names the argument a launch too large for the grid is blamed on).
///
/// # Errors
/// [`AttentionError::TooLarge`] for a launch beyond the grid limits.
pub(crate) fn dispatch(
    ctx: &GpuContext,
    pass: &mut wgpu::ComputePass<'_>,
    (pipe, group): (&KernelPipeline, &wgpu::BindGroup),
    workgroups: u64,
    what: &'static str,
) -> Result<()> {
    let (x, y) = grid(ctx, workgroups, what)?;
    pass.set_pipeline(&pipe.pipeline);
    pass.set_bind_group(0, group, &[]);
    pass.dispatch_workgroups(x, y, 1);
    Ok(())
}
