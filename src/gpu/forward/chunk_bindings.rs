//! What every forward binds the same way for each chunk: the chunk's parameters, the
//! optional mask, key lengths and log-sum-exp (4-byte stand-ins where absent).

use crate::error::Result;
use crate::gpu::device::context::GpuContext;
use crate::gpu::forward::io::{params_buffer, placeholder, ForwardInputs, ForwardOutputs};
use crate::gpu::kernels::dispatch::range;
use crate::gpu::kernels::params::Params;
use crate::gpu::kernels::plan::Chunk;
use crate::problem::Problem;

/// Buffers shared by all chunks of one forward.
pub(crate) struct ChunkBindings {
    params: wgpu::Buffer,
    stride: u64,
    // Separate stand-ins: one buffer may not be bound read-only and writable at once.
    unused_read: wgpu::Buffer,
    unused_write: wgpu::Buffer,
}

impl ChunkBindings {
    /// Uploads every chunk's parameters and makes the stand-ins.
    ///
    /// # Errors
    /// A device error when an allocation fails.
    pub(crate) fn new(
        ctx: &GpuContext,
        p: &Problem,
        chunks: &[Chunk],
        outputs: &ForwardOutputs<'_>,
    ) -> Result<Self> {
        let all: Vec<Params> = chunks
            .iter()
            .map(|c| Params::new(p, c, outputs.lse.is_some()))
            .collect();
        Self::with_params(ctx, &all)
    }

    /// Uploads these parameters, one per chunk, and makes the stand-ins.
    ///
    /// # Errors
    /// A device error when an allocation fails.
    pub(crate) fn with_params(ctx: &GpuContext, all: &[Params]) -> Result<Self> {
        let (params, stride) = params_buffer(ctx, all)?;
        Ok(Self {
            params,
            stride,
            unused_read: placeholder(ctx)?,
            unused_write: placeholder(ctx)?,
        })
    }

    /// Device bytes these buffers take (counted as the call's scratch).
    pub(crate) fn bytes(&self) -> u64 {
        self.params.size() + self.unused_read.size() + self.unused_write.size()
    }

    /// The parameters of chunk `n`.
    pub(crate) fn params(&self, n: usize) -> wgpu::BindingResource<'_> {
        range(
            &self.params,
            n as u64 * self.stride,
            std::mem::size_of::<Params>() as u64,
        )
    }

    /// The chunk's window of the mask, or a stand-in.
    pub(crate) fn mask<'a>(
        &'a self,
        inputs: &ForwardInputs<'a>,
        chunk: &Chunk,
    ) -> wgpu::BindingResource<'a> {
        match (inputs.mask, chunk.mask) {
            (Some(m), Some(w)) => range(m, w.offset, w.size),
            _ => range(&self.unused_read, 0, 4),
        }
    }

    /// The key lengths, or a stand-in.
    pub(crate) fn kv_lens<'a>(&'a self, inputs: &ForwardInputs<'a>) -> wgpu::BindingResource<'a> {
        inputs
            .kv_lens
            .unwrap_or(&self.unused_read)
            .as_entire_binding()
    }

    /// The chunk's window of the log-sum-exp output, or a stand-in.
    pub(crate) fn lse<'a>(
        &'a self,
        outputs: &ForwardOutputs<'a>,
        chunk: &Chunk,
    ) -> wgpu::BindingResource<'a> {
        self.writable(outputs.lse.map(|l| (l, chunk.lse.offset, chunk.lse.size)))
    }

    /// The bindings of fused.wgsl and decode.wgsl for chunk `n`, in binding order: the
    /// parameters, the chunk's q, k and v, mask and key lengths, then `dst` (the output or
    /// the partials), `lse` and `split`.
    pub(crate) fn key_loop<'a>(
        &'a self,
        n: usize,
        inputs: &ForwardInputs<'a>,
        chunk: &Chunk,
        [dst, lse, split]: [wgpu::BindingResource<'a>; 3],
    ) -> Vec<wgpu::BindingResource<'a>> {
        vec![
            self.params(n),
            range(inputs.q, chunk.q.offset, chunk.q.size),
            range(inputs.k, chunk.k.offset, chunk.k.size),
            range(inputs.v, chunk.v.offset, chunk.v.size),
            self.mask(inputs, chunk),
            self.kv_lens(inputs),
            dst,
            lse,
            split,
        ]
    }

    /// A writable binding the kernel does not use here.
    pub(crate) fn unused_writable(&self) -> wgpu::BindingResource<'_> {
        self.writable(None)
    }

    fn writable<'a>(
        &'a self,
        target: Option<(&'a wgpu::Buffer, u64, u64)>,
    ) -> wgpu::BindingResource<'a> {
        match target {
            Some((b, offset, size)) => range(b, offset, size),
            None => range(&self.unused_write, 0, 4),
        }
    }
}
