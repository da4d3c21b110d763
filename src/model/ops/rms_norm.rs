//! Launcher for `shaders/model/rms_norm.wgsl`: the residual add (when given) and RMSNorm.

use std::sync::Arc;

use bytemuck::{Pod, Zeroable};

use super::glue::{
    pipeline, record_pass, uniform, uniform_layout, whole, Binding, KernelPipeline, KernelSpec,
    Recorder, UniformLayout,
};
use super::{shape_error, source, u32_of};
use crate::error::Result;
use crate::{GpuContext, GpuTensor};

/// Bindings: params, x (updated in place when a residual is added), delta, weight, out.
pub(crate) const SPEC: KernelSpec = KernelSpec {
    name: "model_rms_norm",
    source: source::RMS_NORM,
    bindings: &[
        Binding::Uniform,
        Binding::ReadWrite,
        Binding::Read,
        Binding::Read,
        Binding::ReadWrite,
    ],
    trusted: false,
    uniforms: &[params_uniform],
};

/// Must match the WGSL struct `RmsNorm` in rms_norm.wgsl.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
pub(crate) struct RmsNormParams {
    rows: u32,
    width: u32,
    add: u32,
    eps: f32,
}

/// [`RmsNormParams`] as the WGSL declares it.
fn params_uniform() -> UniformLayout {
    uniform_layout!(RmsNormParams as "RmsNorm" { rows, width, add, eps })
}

/// `x += delta` (when given), then `out = x / sqrt(mean(x²) + eps) * weight`, over `rows`
/// rows of `weight.len()`. `dummy` is bound in `delta`'s place when there is none (a
/// binding cannot be left empty, nor alias `x`).
pub(crate) struct RmsNorm<'a> {
    pub x: &'a GpuTensor,
    pub delta: Option<&'a GpuTensor>,
    pub dummy: &'a GpuTensor,
    pub weight: &'a GpuTensor,
    pub out: &'a GpuTensor,
    pub rows: usize,
    pub eps: f32,
}

/// The RMSNorm kernel, built.
pub(crate) struct RmsNormKernel {
    pipe: Arc<KernelPipeline>,
}

impl RmsNormKernel {
    /// Builds (or finds cached) the pipeline.
    ///
    /// # Errors
    /// A device error building the pipeline.
    pub(crate) async fn prepare(ctx: &GpuContext) -> Result<Self> {
        Ok(Self {
            pipe: pipeline(ctx, &SPEC).await?,
        })
    }

    /// Records the norm.
    ///
    /// # Errors
    /// [`crate::AttentionError::Shape`] when a tensor is too small;
    /// [`crate::AttentionError::TooLarge`] past 32-bit indices; a device error allocating
    /// the params.
    pub(crate) fn record(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder<'_>,
        n: &RmsNorm<'_>,
    ) -> Result<()> {
        let width = n.weight.len();
        let need = n.rows.saturating_mul(width);
        for (arg, t) in [("x", n.x), ("out", n.out)]
            .into_iter()
            .chain(n.delta.map(|d| ("delta", d)))
        {
            if t.len() < need {
                return Err(shape_error("rms norm", arg, t, need));
            }
        }
        u32_of("rms norm", need)?;
        let params = RmsNormParams {
            rows: u32_of("rms norm", n.rows)?,
            width: u32_of("rms norm", width)?,
            add: u32::from(n.delta.is_some()),
            eps: n.eps,
        };
        let params = uniform(ctx, "wgpu-attention rms_norm params", &params)?;
        let resources = vec![
            params.as_entire_binding(),
            whole(n.x),
            whole(n.delta.unwrap_or(n.dummy)),
            whole(n.weight),
            whole(n.out),
        ];
        record_pass(ctx, rec, (SPEC.name, &*self.pipe), resources, n.rows as u64)
    }
}
