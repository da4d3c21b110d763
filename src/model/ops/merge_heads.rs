//! Launcher for `shaders/model/merge_heads.wgsl`: `(heads, rows, dim)` to `(rows, heads * dim)`.

use std::sync::Arc;

use bytemuck::{Pod, Zeroable};

use super::glue::{
    pipeline, record_pass, uniform, uniform_layout, whole, Binding, KernelPipeline, KernelSpec,
    Recorder, UniformLayout,
};
use super::{shape_error, source, u32_of};
use crate::error::{AttentionError, Result};
use crate::{GpuContext, GpuTensor};

/// Bindings: params, src, dst.
pub(crate) const SPEC: KernelSpec = KernelSpec {
    name: "model_merge_heads",
    source: source::MERGE_HEADS,
    bindings: &[Binding::Uniform, Binding::Read, Binding::ReadWrite],
    trusted: false,
    uniforms: &[params_uniform],
};

/// Must match the WGSL struct `MergeHeads` in merge_heads.wgsl.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
pub(crate) struct MergeHeadsParams {
    rows: u32,
    heads: u32,
    dim: u32,
    _pad: u32,
}

/// [`MergeHeadsParams`] as the WGSL declares it.
fn params_uniform() -> UniformLayout {
    uniform_layout!(MergeHeadsParams as "MergeHeads" { rows, heads, dim, _pad })
}

/// The head-merging copy, built.
pub(crate) struct MergeHeadsKernel {
    pipe: Arc<KernelPipeline>,
}

impl MergeHeadsKernel {
    /// Builds (or finds cached) the pipeline.
    ///
    /// # Errors
    /// A device error building the pipeline.
    pub(crate) async fn prepare(ctx: &GpuContext) -> Result<Self> {
        Ok(Self {
            pipe: pipeline(ctx, &SPEC).await?,
        })
    }

    /// `dst[r, h * dim + d] = src[h, r, d]` for `rows` rows of `heads` heads.
    ///
    /// # Errors
    /// [`AttentionError::Shape`] when a tensor is too small or `dst` is `src`.
    pub(crate) fn record(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder<'_>,
        (src, dst): (&GpuTensor, &GpuTensor),
        (rows, heads, dim): (usize, usize, usize),
    ) -> Result<()> {
        let n = rows.saturating_mul(heads).saturating_mul(dim);
        for (arg, t) in [("src", src), ("dst", dst)] {
            if t.len() < n {
                return Err(shape_error("merge heads", arg, t, n));
            }
        }
        if src.buffer() == dst.buffer() {
            return Err(AttentionError::shape("merge heads", "dst is src"));
        }
        let params = MergeHeadsParams {
            rows: u32_of("merge heads", rows)?,
            heads: u32_of("merge heads", heads)?,
            dim: u32_of("merge heads", dim)?,
            _pad: 0,
        };
        let groups = u64::from(u32_of("merge heads", n)?).div_ceil(64);
        let params = uniform(ctx, "wgpu-attention merge_heads params", &params)?;
        let resources = vec![params.as_entire_binding(), whole(src), whole(dst)];
        record_pass(ctx, rec, (SPEC.name, &*self.pipe), resources, groups)
    }
}
