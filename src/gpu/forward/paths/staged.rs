//! The three-kernel forward: for each chunk, Q·Kᵀ into a score scratch, masked softmax in
//! place, weights·V into the output; optionally the weights copied out. Recorded into
//! one encoder; the caller submits.

use crate::error::Result;
use crate::gpu::device::buffers;
use crate::gpu::device::context::GpuContext;
use crate::gpu::forward::chunk_bindings::ChunkBindings;
use crate::gpu::forward::plan::{plan, Chunk, PlanLimits};
use crate::gpu::kernels::dispatch::{bind_group, grid, range};
use crate::gpu::kernels::params::Params;
use crate::gpu::kernels::{pv, qk, softmax};
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

/// The plan limits of the staged path on this context.
pub(crate) fn limits(ctx: &GpuContext) -> PlanLimits {
    PlanLimits {
        max_binding: ctx.max_binding(),
        offset_alignment: u64::from(ctx.limits.min_storage_buffer_offset_alignment),
        input_elem_bytes: 4,
        max_scores: Some(ctx.max_binding()),
    }
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

/// Records the staged forward of `p` into `encoder`. Returns the device bytes it
/// allocated beyond inputs and outputs (the score scratch, parameters, stand-ins).
///
/// # Errors
/// [`crate::AttentionError::TooLarge`] when the problem cannot be split to fit, or a
/// device error building a pipeline.
pub(crate) async fn record(
    ctx: &GpuContext,
    encoder: &mut wgpu::CommandEncoder,
    p: &Problem,
    inputs: &ForwardInputs<'_>,
    outputs: &ForwardOutputs<'_>,
) -> Result<u64> {
    let chunks = plan(p, &limits(ctx))?;
    let qk_pipe = ctx.pipeline(&qk::SPEC, &[]).await?;
    let softmax_pipe = ctx.pipeline(&softmax::SPEC, &[]).await?;
    let pv_pipe = ctx.pipeline(&pv::SPEC, &[]).await?;

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
    let bind = ChunkBindings::new(ctx, p, &chunks, outputs)?;

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
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("wgpu-attention staged"),
                timestamp_writes: None,
            });
            dispatch(
                ctx,
                &mut pass,
                &qk_pipe.pipeline,
                &qk_group,
                qk::workgroups(p, chunk),
            )?;
            dispatch(
                ctx,
                &mut pass,
                &softmax_pipe.pipeline,
                &softmax_group,
                softmax::workgroups(chunk),
            )?;
            dispatch(
                ctx,
                &mut pass,
                &pv_pipe.pipeline,
                &pv_group,
                pv::workgroups(p, chunk),
            )?;
        }
        if let Some((dest, base)) = outputs.weights {
            encoder.copy_buffer_to_buffer(
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

/// Byte offset of a chunk's first weight row in the full `(B, Hq, Lq, Lk)` weights.
fn weights_offset(p: &Problem, c: &Chunk) -> u64 {
    (c.bh_start as u64 * p.len_q as u64 + c.row_start as u64) * p.len_k as u64 * 4
}

fn dispatch(
    ctx: &GpuContext,
    pass: &mut wgpu::ComputePass<'_>,
    pipeline: &wgpu::ComputePipeline,
    group: &wgpu::BindGroup,
    workgroups: u64,
) -> Result<()> {
    let (x, y) = grid(ctx, workgroups, "q")?;
    pass.set_pipeline(pipeline);
    pass.set_bind_group(0, group, &[]);
    pass.dispatch_workgroups(x, y, 1);
    Ok(())
}
