//! Launcher for `shaders/model/rope.wgsl`: rotary position embedding in place.

use std::sync::Arc;

use bytemuck::{Pod, Zeroable};

use super::glue::{pipeline, record_pass, uniform, whole, Binding, KernelPipeline, KernelSpec};
use super::{shape_error, source, u32_of};
use crate::error::{AttentionError, Result};
use crate::{GpuContext, GpuTensor};

/// Bindings: params, x (rotated in place), the cos/sin table.
pub(crate) const SPEC: KernelSpec = KernelSpec {
    name: "model_rope",
    source: source::ROPE,
    bindings: &[Binding::Uniform, Binding::ReadWrite, Binding::Read],
    trusted: false,
};

/// Must match the WGSL struct `Rope` in rope.wgsl.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
pub(crate) struct RopeParams {
    rows: u32,
    heads: u32,
    dim: u32,
    cap: u32,
    off: u32,
    pos0: u32,
    positions: u32,
    _pad: u32,
}

/// Where RoPE applies: `rows` tokens at rows `off..` of a `(heads, cap, dim)` tensor,
/// as positions `pos0..`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RopeSpan {
    pub heads: usize,
    pub dim: usize,
    pub cap: usize,
    pub off: usize,
    pub rows: usize,
    pub pos0: usize,
}

/// The RoPE kernel, built.
pub(crate) struct RopeKernel {
    pipe: Arc<KernelPipeline>,
}

impl RopeKernel {
    /// Builds (or finds cached) the pipeline.
    ///
    /// # Errors
    /// A device error building the pipeline.
    pub(crate) async fn prepare(ctx: &GpuContext) -> Result<Self> {
        Ok(Self {
            pipe: pipeline(ctx, &SPEC).await?,
        })
    }

    /// Rotates `x` over `span`, reading cos/sin from `table (positions, dim/2, 2)`.
    ///
    /// # Errors
    /// [`AttentionError::Shape`] for a span outside `x` or an odd `dim`;
    /// [`AttentionError::TooLarge`] past 32-bit indices.
    pub(crate) fn record(
        &self,
        ctx: &GpuContext,
        encoder: &mut wgpu::CommandEncoder,
        x: &GpuTensor,
        table: &GpuTensor,
        s: &RopeSpan,
    ) -> Result<()> {
        let need = s.heads.saturating_mul(s.cap).saturating_mul(s.dim);
        if x.len() < need {
            return Err(shape_error("rope", "x", x, need));
        }
        if s.off.saturating_add(s.rows) > s.cap || !s.dim.is_multiple_of(2) || s.dim == 0 {
            return Err(AttentionError::shape(
                "rope",
                format!(
                    "rows {}..{} of {} with dim {}",
                    s.off,
                    s.off + s.rows,
                    s.cap,
                    s.dim
                ),
            ));
        }
        let params = RopeParams {
            rows: u32_of("rope", s.rows)?,
            heads: u32_of("rope", s.heads)?,
            dim: u32_of("rope", s.dim)?,
            cap: u32_of("rope", s.cap)?,
            off: u32_of("rope", s.off)?,
            pos0: u32_of("rope", s.pos0)?,
            positions: u32_of("rope", table.len() / s.dim)?,
            _pad: 0,
        };
        let pairs = u32_of("rope", need / 2)?;
        let params = uniform(ctx, "wgpu-attention rope params", &params)?;
        let resources = vec![params.as_entire_binding(), whole(x), whole(table)];
        let groups = u64::from(pairs).div_ceil(64);
        record_pass(ctx, encoder, (SPEC.name, &*self.pipe), resources, groups)
    }
}
