//! Launcher for `shaders/model/add_norm.wgsl`: LayerNorm of x, or of x + residual.

use std::sync::Arc;

use bytemuck::{Pod, Zeroable};

use super::glue::{
    pipeline, record_pass, uniform, uniform_layout, whole, Binding, KernelPipeline, KernelSpec,
    Recorder, UniformLayout,
};
use super::source;
use crate::error::{AttentionError, Result};
use crate::{GpuContext, GpuTensor};

/// Bindings: params, x, residual, gamma, beta, y.
pub(crate) const SPEC: KernelSpec = KernelSpec {
    name: "model_add_norm",
    source: source::ADD_NORM,
    bindings: &[
        Binding::Uniform,
        Binding::Read,
        Binding::Read,
        Binding::Read,
        Binding::Read,
        Binding::ReadWrite,
    ],
    trusted: false,
    uniforms: &[params_uniform],
};

/// Must match the WGSL struct `AddNorm` in add_norm.wgsl.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
pub(crate) struct AddNormParams {
    rows: u32,
    cols: u32,
    has_residual: u32,
    _pad0: u32,
    eps: f32,
    _pad1: [u32; 3],
}

/// [`AddNormParams`] as the WGSL declares it.
fn params_uniform() -> UniformLayout {
    uniform_layout!(AddNormParams as "AddNorm" { rows, cols, has_residual, _pad0, eps, _pad1 => ["_pad1", "_pad2", "_pad3"] })
}

/// `y = LayerNorm(x + residual)` over `rows` rows of `gamma.len()` columns. `y` must not
/// be `x` or `residual`.
pub(crate) struct AddNorm<'a> {
    pub x: &'a GpuTensor,
    pub residual: Option<&'a GpuTensor>,
    pub gamma: &'a GpuTensor,
    pub beta: &'a GpuTensor,
    pub y: &'a GpuTensor,
    pub rows: usize,
    pub eps: f32,
}

/// The normalisation kernel, built.
pub(crate) struct AddNormKernel {
    pipe: Arc<KernelPipeline>,
}

impl AddNormKernel {
    /// Builds (or finds cached) the pipeline.
    ///
    /// # Errors
    /// A device error building the pipeline.
    pub(crate) async fn prepare(ctx: &GpuContext) -> Result<Self> {
        Ok(Self {
            pipe: pipeline(ctx, &SPEC).await?,
        })
    }

    /// Records the normalisation.
    ///
    /// # Errors
    /// [`AttentionError::Shape`] when a tensor is too small or `gamma` and `beta` differ;
    /// [`AttentionError::InvalidOption`] when `y` aliases an input; a device error allocating the
    /// params.
    pub(crate) fn record(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder<'_>,
        n: &AddNorm<'_>,
    ) -> Result<()> {
        let cols = n.gamma.len();
        let need = n.rows.saturating_mul(cols);
        let small = [Some(n.x), n.residual, Some(n.y)]
            .into_iter()
            .flatten()
            .any(|t| t.len() < need);
        if n.beta.len() != cols || small {
            return Err(AttentionError::shape(
                "layer norm",
                format!(
                    "{} rows of gamma {:?}, beta {:?}, x {:?}, y {:?}",
                    n.rows,
                    n.gamma.shape(),
                    n.beta.shape(),
                    n.x.shape(),
                    n.y.shape()
                ),
            ));
        }
        if n.y.buffer() == n.x.buffer() || n.residual.is_some_and(|r| r.buffer() == n.y.buffer()) {
            return Err(AttentionError::option("layer norm", "y aliases an input"));
        }
        let (Ok(rows), Ok(cols32), Ok(_)) = (
            u32::try_from(n.rows),
            u32::try_from(cols),
            u32::try_from(need),
        ) else {
            return Err(AttentionError::TooLarge {
                arg: "layer norm",
                detail: format!("{} rows of {cols} exceed the kernel's 32-bit index", n.rows),
            });
        };
        let params = AddNormParams {
            rows,
            cols: cols32,
            has_residual: u32::from(n.residual.is_some()),
            _pad0: 0,
            eps: n.eps,
            _pad1: [0; 3],
        };
        let params = uniform(ctx, "wgpu-attention add_norm params", &params)?;
        // Without a residual, x is bound twice (read-only bindings may share a buffer).
        let resources = vec![
            params.as_entire_binding(),
            whole(n.x),
            whole(n.residual.unwrap_or(n.x)),
            whole(n.gamma),
            whole(n.beta),
            whole(n.y),
        ];
        let pipe = (SPEC.name, &*self.pipe);
        record_pass(ctx, rec, pipe, resources, u64::from(rows))
    }
}
