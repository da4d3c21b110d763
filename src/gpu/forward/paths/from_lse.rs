//! Attention weights without a score matrix: after the fused or decode pass has written
//! each row's log-sum-exp, `weights.wgsl` recomputes every requested logit into the
//! weights output and softmaxes it there (the lse marks the rows that met a NaN). Device memory beyond the
//! outputs is the lse (when the call did not ask for it) and the parameters; the staged
//! path's score scratch and its three passes over it are not needed.

use std::sync::Arc;

use crate::error::Result;
use crate::gpu::device::buffers;
use crate::gpu::device::context::GpuContext;
use crate::gpu::forward::chunk_bindings::ChunkBindings;
use crate::gpu::forward::io::Recording;
use crate::gpu::kernels::dispatch::{bind_group, range};
use crate::gpu::kernels::elem::Elem;
use crate::gpu::kernels::params::Params;
use crate::gpu::kernels::pipelines::{pipeline, KernelPipeline};
use crate::gpu::kernels::plan::{plan, Chunk, PlanLimits};
use crate::gpu::kernels::weights::{self, Stage};
use crate::problem::Problem;

/// The weights pass, built for q and k stored as one element type.
pub(crate) struct FromLse {
    elem: Elem,
    /// One pipeline per stage, in recording order.
    stages: Vec<(Stage, Arc<KernelPipeline>)>,
}

/// Chunks whose weights windows fit a binding: a window starts at the aligned offset at
/// or below the chunk's first weight, so it may run up to one alignment past the
/// chunk's weights.
fn limits(ctx: &GpuContext, elem: Elem) -> PlanLimits {
    let align = u64::from(ctx.limits.min_storage_buffer_offset_alignment);
    PlanLimits {
        max_binding: ctx.max_binding(),
        offset_alignment: align,
        input_elem_bytes: elem.bytes(),
        max_scores: Some(ctx.max_binding().saturating_sub(align).max(4)),
    }
}

/// The aligned window of `dest` (weights starting at byte `base`) holding chunk `c`'s
/// weights, and the logical weight index at its start (wrapping, as every base is).
fn window(p: &Problem, c: &Chunk, base: u64, align: u64) -> (u64, u64, u32) {
    let first = (c.bh_start as u64 * p.len_q as u64 + c.row_start as u64) * p.len_k as u64;
    let start = base + first * 4;
    let offset = start - start % align;
    let size = start + c.score_elems(p) * 4 - offset;
    // Logical index of the weight at `offset`: `first` less the elements before it.
    let w_base = (first as i64 - ((start - offset) / 4) as i64) as u32;
    (offset, size, w_base)
}

impl FromLse {
    /// Builds (or finds cached) the pipeline for q and k stored as `elem`.
    ///
    /// # Errors
    /// A device error building the pipeline.
    pub(crate) async fn prepare(ctx: &GpuContext, elem: Elem) -> Result<Self> {
        let mut stages = Vec::new();
        for stage in Stage::ALL {
            let pipe = pipeline(ctx, weights::spec_for(elem), &stage.constants()).await?;
            stages.push((stage, pipe));
        }
        Ok(Self { elem, stages })
    }

    /// A log-sum-exp buffer for the forward to write when the call did not ask for one.
    ///
    /// # Errors
    /// A device error allocating.
    pub(crate) fn lse_scratch(ctx: &GpuContext, p: &Problem) -> Result<wgpu::Buffer> {
        let rows = (p.batch * p.heads_q) as u64 * p.len_q as u64;
        buffers::empty(
            ctx,
            "wgpu-attention lse for weights",
            (rows * 4).max(4),
            wgpu::BufferUsages::STORAGE,
        )
    }

    /// Records the weights of `r.p` into `r.outputs.weights` from `lse`, which the
    /// forward recorded before this has filled. Returns the device bytes it allocated
    /// (parameters and stand-ins).
    ///
    /// # Errors
    /// [`crate::error::AttentionError::TooLarge`] when the problem cannot be split to
    /// fit, or a device error allocating.
    pub(crate) fn record(&self, r: &mut Recording<'_, '_>, lse: &wgpu::Buffer) -> Result<u64> {
        let (ctx, p, inputs) = (r.ctx, r.p, r.inputs);
        let Some((dest, base)) = r.outputs.weights else {
            return Ok(0);
        };
        let lim = limits(ctx, self.elem);
        let chunks = plan(p, &lim)?;
        let windows: Vec<(u64, u64, u32)> = chunks
            .iter()
            .map(|c| window(p, c, base, lim.offset_alignment))
            .collect();
        let params: Vec<Params> = chunks
            .iter()
            .zip(&windows)
            .map(|(c, w)| Params {
                w_base: w.2,
                ..Params::new(p, c, false)
            })
            .collect();
        let bind = ChunkBindings::with_params(ctx, &params)?;
        let partial_bytes = chunks
            .iter()
            .map(|c| weights::partials(p, c) * 4)
            .max()
            .unwrap_or(4)
            .max(4);
        let partials = buffers::empty(
            ctx,
            "wgpu-attention weight sums",
            partial_bytes,
            wgpu::BufferUsages::STORAGE,
        )?;
        // One layout for all stages: the same bind group serves each.
        let layout = &self.stages[0].1.layout;
        let groups: Vec<wgpu::BindGroup> = chunks
            .iter()
            .zip(&windows)
            .enumerate()
            .map(|(n, (chunk, &(offset, size, _)))| {
                bind_group(
                    ctx,
                    "weights",
                    layout,
                    vec![
                        bind.params(n),
                        range(inputs.q, chunk.q.offset, chunk.q.size),
                        range(inputs.k, chunk.k.offset, chunk.k.size),
                        bind.mask(inputs, chunk),
                        bind.kv_lens(inputs),
                        range(lse, chunk.lse.offset, chunk.lse.size),
                        range(dest, offset, size),
                        range(&partials, 0, (weights::partials(p, chunk) * 4).max(4)),
                    ],
                )
            })
            .collect();
        let pass = r.rec.pass();
        for (chunk, group) in chunks.iter().zip(&groups) {
            for (stage, pipe) in &self.stages {
                weights::record(ctx, pass, (pipe, group), (*stage, p, chunk))?;
            }
        }
        Ok(bind.bytes() + partials.size())
    }
}
