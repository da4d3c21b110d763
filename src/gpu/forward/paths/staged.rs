//! The three-kernel forward: for each chunk, Q·Kᵀ into a score scratch, masked softmax in
//! place, weights·V into the output; optionally the weights copied out. Recorded into
//! one encoder; the caller submits.

use std::sync::Arc;

use crate::error::Result;
use crate::gpu::device::buffers;
use crate::gpu::device::context::GpuContext;
use crate::gpu::forward::chunk_bindings::ChunkBindings;
use crate::gpu::forward::io::Recording;
use crate::gpu::kernels::dispatch::{bind_group, range};
use crate::gpu::kernels::pipelines::{pipeline, KernelPipeline};
use crate::gpu::kernels::plan::{plan, Chunk, PlanLimits};
use crate::gpu::kernels::{pv, qk, softmax};
use crate::problem::Problem;

/// The plan limits of the staged path on this context.
pub(crate) fn limits(ctx: &GpuContext) -> PlanLimits {
    PlanLimits {
        max_binding: ctx.max_binding(),
        offset_alignment: u64::from(ctx.limits.min_storage_buffer_offset_alignment),
        input_elem_bytes: 4,
        max_scores: Some(ctx.max_binding()),
    }
}

/// The chunks the staged path splits `p` into on this context, each within the
/// device's binding limits.
///
/// # Errors
/// [`crate::error::AttentionError::TooLarge`] when one row of one head does not fit.
pub(crate) fn chunks(ctx: &GpuContext, p: &Problem) -> Result<Vec<Chunk>> {
    plan(p, &limits(ctx))
}

/// The staged path's three pipelines, built, and its chunk plan.
pub(crate) struct Staged {
    qk: Arc<KernelPipeline>,
    softmax: Arc<KernelPipeline>,
    pv: Arc<KernelPipeline>,
    chunks: Vec<Chunk>,
}

impl Staged {
    /// Builds (or finds cached) the three pipelines for a call planned as `chunks` (from
    /// [`chunks`], made once when the call was checked).
    ///
    /// # Errors
    /// A device error building a pipeline.
    pub(crate) async fn prepare(ctx: &GpuContext, chunks: Vec<Chunk>) -> Result<Self> {
        Ok(Self {
            qk: pipeline(ctx, &qk::SPEC, &[]).await?,
            softmax: pipeline(ctx, &softmax::SPEC, &[]).await?,
            pv: pipeline(ctx, &pv::SPEC, &[]).await?,
            chunks,
        })
    }

    /// Records the staged forward of `r.p`. Returns the device bytes it allocated beyond
    /// inputs and outputs (the score scratch, parameters, stand-ins).
    ///
    /// # Errors
    /// A device error allocating.
    pub(crate) fn record(&self, r: &mut Recording<'_, '_>) -> Result<u64> {
        let (ctx, p, inputs, outputs) = (r.ctx, r.p, r.inputs, r.outputs);
        let chunks = &self.chunks;
        let (qk_pipe, softmax_pipe, pv_pipe) = (&self.qk, &self.softmax, &self.pv);

        let score_bytes = chunks
            .iter()
            .map(|c| c.score_elems(p) * 4)
            .max()
            .unwrap_or(4);
        let scores = buffers::empty(
            ctx,
            "wgpu-attention scores",
            score_bytes,
            wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
        )?;
        let bind = ChunkBindings::new(ctx, p, chunks, outputs)?;

        for (n, chunk) in chunks.iter().enumerate() {
            let s_size = chunk.score_elems(p) * 4;
            let qk_group = bind_group(
                ctx,
                "qk",
                &qk_pipe.layout,
                vec![
                    bind.params(n),
                    range(inputs.q, chunk.q.offset, chunk.q.size),
                    range(inputs.k, chunk.k.offset, chunk.k.size),
                    range(&scores, 0, s_size),
                ],
            );
            let softmax_group = bind_group(
                ctx,
                "softmax",
                &softmax_pipe.layout,
                vec![
                    bind.params(n),
                    range(&scores, 0, s_size),
                    bind.mask(inputs, chunk),
                    bind.kv_lens(inputs),
                    bind.lse(outputs, chunk),
                ],
            );
            let pv_group = bind_group(
                ctx,
                "pv",
                &pv_pipe.layout,
                vec![
                    bind.params(n),
                    range(&scores, 0, s_size),
                    range(inputs.v, chunk.v.offset, chunk.v.size),
                    range(outputs.out, chunk.out.offset, chunk.out.size),
                ],
            );
            {
                let pass = r.rec.pass();
                qk::record(ctx, pass, (qk_pipe, &qk_group), p, chunk)?;
                softmax::record(ctx, pass, (softmax_pipe, &softmax_group), chunk)?;
                pv::record(ctx, pass, (pv_pipe, &pv_group), p, chunk)?;
            }
            if let Some((dest, base)) = outputs.weights {
                r.rec.encoder().copy_buffer_to_buffer(
                    &scores,
                    0,
                    dest,
                    base + weights_offset(p, chunk),
                    s_size,
                );
            }
        }
        Ok(scores.size() + bind.bytes())
    }
}

/// Byte offset of a chunk's first weight row in the full `(B, Hq, Lq, Lk)` weights.
fn weights_offset(p: &Problem, c: &Chunk) -> u64 {
    (c.bh_start as u64 * p.len_q as u64 + c.row_start as u64) * p.len_k as u64 * 4
}
