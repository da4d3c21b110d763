//! Launcher for `shaders/model/silu_mul.wgsl`: SwiGLU's `gate = silu(gate) * up`.

use std::sync::Arc;

use bytemuck::{Pod, Zeroable};

use super::glue::{
    pipeline, record_pass, uniform, uniform_layout, whole, Binding, KernelPipeline, KernelSpec,
    Recorder, UniformLayout,
};
use super::{shape_error, source, u32_of};
use crate::error::Result;
use crate::{GpuContext, GpuTensor};

/// Bindings: params, gate (overwritten), up.
pub(crate) const SPEC: KernelSpec = KernelSpec {
    name: "model_silu_mul",
    source: source::SILU_MUL,
    bindings: &[Binding::Uniform, Binding::ReadWrite, Binding::Read],
    trusted: false,
    uniforms: &[params_uniform],
};

/// Must match the WGSL struct `SiluMul` in silu_mul.wgsl.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
pub(crate) struct SiluMulParams {
    n: u32,
    _pad: [u32; 3],
}

/// [`SiluMulParams`] as the WGSL declares it.
fn params_uniform() -> UniformLayout {
    uniform_layout!(SiluMulParams as "SiluMul" { n, _pad => ["_pad0", "_pad1", "_pad2"] })
}

/// The SwiGLU kernel, built.
pub(crate) struct SiluMulKernel {
    pipe: Arc<KernelPipeline>,
}

impl SiluMulKernel {
    /// Builds (or finds cached) the pipeline.
    ///
    /// # Errors
    /// A device error building the pipeline.
    pub(crate) async fn prepare(ctx: &GpuContext) -> Result<Self> {
        Ok(Self {
            pipe: pipeline(ctx, &SPEC).await?,
        })
    }

    /// `gate = silu(gate) * up` over the first `n` elements.
    ///
    /// # Errors
    /// [`crate::AttentionError::Shape`] when a tensor holds fewer than `n`.
    pub(crate) fn record(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder<'_>,
        gate: &GpuTensor,
        up: &GpuTensor,
        n: usize,
    ) -> Result<()> {
        for (arg, t) in [("gate", gate), ("up", up)] {
            if t.len() < n {
                return Err(shape_error("silu mul", arg, t, n));
            }
        }
        let n32 = u32_of("silu mul", n)?;
        let params = uniform(
            ctx,
            "wgpu-attention silu_mul params",
            &SiluMulParams {
                n: n32,
                _pad: [0; 3],
            },
        )?;
        let resources = vec![params.as_entire_binding(), whole(gate), whole(up)];
        let groups = u64::from(n32).div_ceil(64);
        record_pass(ctx, rec, (SPEC.name, &*self.pipe), resources, groups)
    }
}
