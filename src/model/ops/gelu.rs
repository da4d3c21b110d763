//! Launcher for `shaders/model/gelu.wgsl`: GELU (erf form) in place.

use std::sync::Arc;

use bytemuck::{Pod, Zeroable};

use super::glue::{pipeline, record_pass, uniform, whole, Binding, KernelPipeline, KernelSpec};
use super::source;
use crate::error::{AttentionError, Result};
use crate::{GpuContext, GpuTensor};

/// Bindings: params, data.
pub(crate) const SPEC: KernelSpec = KernelSpec {
    name: "model_gelu",
    source: source::GELU,
    bindings: &[Binding::Uniform, Binding::ReadWrite],
    trusted: false,
};

/// Must match the WGSL struct `Gelu` in gelu.wgsl.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
pub(crate) struct GeluParams {
    len: u32,
    _pad: [u32; 3],
}

/// The GELU kernel, built.
pub(crate) struct GeluKernel {
    pipe: Arc<KernelPipeline>,
}

impl GeluKernel {
    /// Builds (or finds cached) the pipeline.
    ///
    /// # Errors
    /// A device error building the pipeline.
    pub(crate) async fn prepare(ctx: &GpuContext) -> Result<Self> {
        Ok(Self {
            pipe: pipeline(ctx, &SPEC).await?,
        })
    }

    /// Records GELU over the first `len` elements of `data`.
    ///
    /// # Errors
    /// [`AttentionError::Shape`] when `data` holds fewer than `len`; a device error
    /// allocating the params.
    pub(crate) fn record(
        &self,
        ctx: &GpuContext,
        encoder: &mut wgpu::CommandEncoder,
        data: &GpuTensor,
        len: usize,
    ) -> Result<()> {
        if data.len() < len {
            return Err(AttentionError::shape(
                "gelu",
                format!("{len} elements of a {:?} tensor", data.shape()),
            ));
        }
        let n = u32::try_from(len).map_err(|_| AttentionError::TooLarge {
            arg: "gelu",
            detail: format!("{len} elements exceed the kernel's 32-bit index"),
        })?;
        let params = uniform(
            ctx,
            "wgpu-attention gelu params",
            &GeluParams {
                len: n,
                _pad: [0; 3],
            },
        )?;
        let resources = vec![params.as_entire_binding(), whole(data)];
        let pipe = (SPEC.name, &*self.pipe);
        record_pass(ctx, encoder, pipe, resources, u64::from(n).div_ceil(256))
    }
}
