//! Launcher for `shaders/model/gelu.wgsl`: GELU (erf form) in place.

use bytemuck::{Pod, Zeroable};

use super::glue::{dispatch, uniform, whole, Binding, KernelSpec};
use super::source;
use crate::error::{AttentionError, Result};
use crate::{GpuContext, GpuTensor};

/// Bindings: params, data.
const SPEC: KernelSpec = KernelSpec {
    name: "model_gelu",
    source: source::GELU,
    bindings: &[Binding::Uniform, Binding::ReadWrite],
    trusted: false,
};

/// Must match the WGSL struct `Gelu` in gelu.wgsl.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
struct GeluParams {
    len: u32,
    _pad: [u32; 3],
}

/// Records GELU over the first `len` elements of `data`.
///
/// # Errors
/// [`AttentionError::Shape`] when `data` holds fewer than `len`; a device error building
/// the pipeline.
pub(crate) async fn record_gelu(
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
    dispatch(ctx, encoder, &SPEC, resources, u64::from(n).div_ceil(256)).await
}
