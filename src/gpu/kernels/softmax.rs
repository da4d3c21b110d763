//! Launcher for `shaders/softmax.wgsl`: mask and normalise each score row in place.

use crate::error::Result;
use crate::gpu::device::context::GpuContext;
use crate::gpu::kernels::dispatch::dispatch;
use crate::gpu::kernels::pipelines::{Binding, KernelPipeline, KernelSpec};
use crate::gpu::kernels::plan::Chunk;
use crate::gpu::kernels::source;

/// Bindings: params, scores, mask, kv_lens, lse.
pub(crate) const SPEC: KernelSpec = KernelSpec {
    name: "softmax",
    source: source::SOFTMAX,
    bindings: &[
        Binding::Uniform,
        Binding::ReadWrite,
        Binding::Read,
        Binding::Read,
        Binding::ReadWrite,
    ],
    trusted: false,
    uniforms: &[crate::gpu::kernels::params::params_uniform],
};

/// One workgroup per score row.
pub(crate) fn workgroups(c: &Chunk) -> u64 {
    (c.bh_count * c.row_count) as u64
}

/// Records the kernel over chunk `c` with its bind group.
///
/// # Errors
/// [`crate::error::AttentionError::TooLarge`] for a launch beyond the grid limits.
pub(crate) fn record(
    ctx: &GpuContext,
    pass: &mut wgpu::ComputePass<'_>,
    kernel: (&KernelPipeline, &wgpu::BindGroup),
    c: &Chunk,
) -> Result<()> {
    dispatch(ctx, pass, kernel, workgroups(c), "q")
}
