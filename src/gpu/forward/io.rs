//! What every forward reads and writes, and the one struct every record function is
//! handed: the context, the encoder, the problem and the buffers.

use crate::error::Result;
use crate::gpu::device::buffers;
use crate::gpu::device::context::GpuContext;
use crate::gpu::device::outputs::GpuOutputs;
use crate::gpu::device::recorder::Recorder;
use crate::gpu::kernels::params::Params;
use crate::problem::Problem;

/// Device buffers a forward reads.
pub(crate) struct ForwardInputs<'a> {
    pub q: &'a wgpu::Buffer,
    pub k: &'a wgpu::Buffer,
    pub v: &'a wgpu::Buffer,
    pub mask: Option<&'a wgpu::Buffer>,
    pub kv_lens: Option<&'a wgpu::Buffer>,
}

/// Device buffers a forward writes. `weights` is a destination buffer and the byte
/// offset where the `(B, Hq, Lq, Lk)` weights start in it.
pub(crate) struct ForwardOutputs<'a> {
    pub out: &'a wgpu::Buffer,
    pub lse: Option<&'a wgpu::Buffer>,
    pub weights: Option<(&'a wgpu::Buffer, u64)>,
}

impl<'a> ForwardOutputs<'a> {
    /// The buffers of `outputs` that `p` requests.
    pub(crate) fn of(outputs: &'a GpuOutputs, p: &Problem) -> Self {
        Self {
            out: outputs.out.buffer(),
            lse: outputs
                .lse
                .as_ref()
                .filter(|_| p.return_lse)
                .map(|t| t.buffer()),
            weights: outputs
                .weights
                .as_ref()
                .filter(|_| p.return_weights)
                .map(|t| (t.buffer(), 0)),
        }
    }
}

/// Everything a record function needs: where to record, for which problem, from which
/// buffers into which. Record functions only encode; they never submit or wait.
pub(crate) struct Recording<'r, 'e> {
    pub ctx: &'r GpuContext,
    /// Kernels record into its open pass; copies end that pass.
    pub rec: &'r mut Recorder<'e>,
    pub p: &'r Problem,
    pub inputs: &'r ForwardInputs<'r>,
    pub outputs: &'r ForwardOutputs<'r>,
}

/// A 4-byte storage buffer for bindings the call does not use.
pub(crate) fn placeholder(ctx: &GpuContext) -> Result<wgpu::Buffer> {
    buffers::empty(
        ctx,
        "wgpu-attention unused binding",
        4,
        wgpu::BufferUsages::STORAGE,
    )
}

/// One uniform buffer holding every chunk's parameters at aligned offsets.
pub(crate) fn params_buffer(ctx: &GpuContext, params: &[Params]) -> Result<(wgpu::Buffer, u64)> {
    buffers::uniform_array(ctx, "wgpu-attention params", params)
}
