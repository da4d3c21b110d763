//! Launcher for `shaders/qk.wgsl`: scale · Q·Kᵀ into the chunk's score matrix.

use crate::error::Result;
use crate::gpu::device::context::GpuContext;
use crate::gpu::kernels::dispatch::dispatch;
use crate::gpu::kernels::pipelines::{Binding, KernelPipeline, KernelSpec};
use crate::gpu::kernels::plan::Chunk;
use crate::gpu::kernels::source;
use crate::problem::Problem;

/// Bindings: params, q, k, scores.
pub(crate) const SPEC: KernelSpec = KernelSpec {
    name: "qk",
    source: source::QK,
    bindings: &[
        Binding::Uniform,
        Binding::Read,
        Binding::Read,
        Binding::ReadWrite,
    ],
    trusted: false,
    uniforms: &[crate::gpu::kernels::params::params_uniform],
};

/// As TILE in qk.wgsl (checked by `reflection.rs`).
pub(crate) const TILE: u64 = 32;

/// One workgroup per 32 x 32 block of scores of each head in the chunk.
pub(crate) fn workgroups(p: &Problem, c: &Chunk) -> u64 {
    (p.len_k as u64).div_ceil(TILE) * (c.row_count as u64).div_ceil(TILE) * c.bh_count as u64
}

/// Records the kernel over chunk `c` with its bind group.
///
/// # Errors
/// [`crate::error::AttentionError::TooLarge`] for a launch beyond the grid limits.
pub(crate) fn record(
    ctx: &GpuContext,
    pass: &mut wgpu::ComputePass<'_>,
    kernel: (&KernelPipeline, &wgpu::BindGroup),
    p: &Problem,
    c: &Chunk,
) -> Result<()> {
    dispatch(ctx, pass, kernel, workgroups(p, c), "q")
}
