//! The fused forward: one flash-attention dispatch per chunk, no score matrix. Where the
//! adapter limits how many keys one workgroup may loop over (see `routing/budget.rs`), the
//! fused path runs as split-KV instead (`split_kv.rs`); the route decides which.

use std::sync::Arc;

use crate::error::Result;
use crate::gpu::device::buffers;
use crate::gpu::device::context::GpuContext;
use crate::gpu::forward::chunk_bindings::ChunkBindings;
use crate::gpu::forward::io::Recording;
use crate::gpu::kernels::dispatch::{bind_group, range};
use crate::gpu::kernels::elem::Elem;
use crate::gpu::kernels::fused::FusedConfig;
use crate::gpu::kernels::launch::{self, SplitParams};
use crate::gpu::kernels::pipelines::{pipeline, KernelPipeline};
use crate::gpu::kernels::plan::{plan, PlanLimits};
use crate::problem::Problem;

/// The plan limits of the fused and decode paths: bindings only, no score scratch.
pub(crate) fn limits(ctx: &GpuContext, elem: Elem) -> PlanLimits {
    PlanLimits {
        max_binding: ctx.max_binding(),
        offset_alignment: u64::from(ctx.limits.min_storage_buffer_offset_alignment),
        input_elem_bytes: elem.bytes(),
        max_scores: None,
    }
}

/// One uniform buffer holding every chunk's split parameters at aligned offsets.
///
/// # Errors
/// [`crate::error::AttentionError::Device`] when the device is lost or the allocation fails.
pub(crate) fn split_buffer(
    ctx: &GpuContext,
    splits: &[SplitParams],
) -> Result<(wgpu::Buffer, u64)> {
    buffers::uniform_array(ctx, "wgpu-attention splits", splits)
}

/// The fused forward in one pass: a configuration and its pipeline, built.
pub(crate) struct OnePass {
    elem: Elem,
    cfg: FusedConfig,
    pipe: Arc<KernelPipeline>,
}

impl OnePass {
    /// Builds (or finds cached) the pipeline of `cfg` for `p` with q, k and v stored as
    /// `elem`.
    ///
    /// # Errors
    /// A device error building the pipeline.
    pub(crate) async fn prepare(
        ctx: &GpuContext,
        p: &Problem,
        elem: Elem,
        cfg: FusedConfig,
    ) -> Result<Self> {
        let pipe = pipeline(ctx, cfg.spec(ctx, p, elem), &cfg.constants(p, false)).await?;
        Ok(Self { elem, cfg, pipe })
    }

    /// Records the fused forward in one pass per chunk, each workgroup looping over every key
    /// its rows may attend. Returns the device bytes it allocated beyond inputs and outputs
    /// (parameters and stand-ins).
    ///
    /// # Errors
    /// [`crate::error::AttentionError::TooLarge`] when the problem cannot be split to fit, or a
    /// device error allocating.
    pub(crate) fn record(&self, r: &mut Recording<'_, '_>) -> Result<u64> {
        let (ctx, p, inputs, outputs) = (r.ctx, r.p, r.inputs, r.outputs);
        let (elem, cfg, pipe) = (self.elem, self.cfg, &self.pipe);
        let chunks = plan(p, &limits(ctx, elem))?;
        // Separate stand-ins: one buffer may not be bound read-only and writable at once.
        let bind = ChunkBindings::new(ctx, p, &chunks, outputs)?;
        let layouts: Vec<SplitParams> = chunks
            .iter()
            .map(|c| launch::layout(p, cfg.tile_rows(), cfg.keys, c))
            .collect();
        let (splits, split_stride) = split_buffer(ctx, &layouts)?;
        let split_size = std::mem::size_of::<SplitParams>() as u64;

        let pass = r.rec.pass();
        for (n, (chunk, layout)) in chunks.iter().zip(&layouts).enumerate() {
            let resources = bind.key_loop(
                n,
                inputs,
                chunk,
                [
                    range(outputs.out, chunk.out.offset, chunk.out.size),
                    bind.lse(outputs, chunk),
                    range(&splits, n as u64 * split_stride, split_size),
                ],
            );
            let group = bind_group(ctx, "fused", &pipe.layout, resources);
            launch::record(ctx, pass, (pipe, &group), layout)?;
        }
        Ok(splits.size() + bind.bytes())
    }
}
