//! The fused forward: one flash-attention dispatch per chunk, no score matrix. Recorded
//! into one encoder; the caller submits.

use crate::error::Result;
use crate::gpu::device::buffers;
use crate::gpu::device::context::GpuContext;
use crate::gpu::forward::chunk_bindings::ChunkBindings;
use crate::gpu::forward::paths::split_kv as decode;
use crate::gpu::forward::paths::split_kv::FirstPass;
use crate::gpu::forward::paths::staged::{ForwardInputs, ForwardOutputs};
use crate::gpu::forward::plan::{plan, PlanLimits};
use crate::gpu::forward::route_table::Elem;
use crate::gpu::kernels::dispatch::{bind_group, grid, range};
use crate::gpu::kernels::fused::{self, FusedConfig, SplitParams};
use crate::gpu::tune::budget::key_budget;
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

/// The kernel for q, k and v stored as `elem`.
pub(crate) fn spec(elem: Elem) -> &'static crate::gpu::kernels::pipelines::KernelSpec {
    match elem {
        Elem::F32 => &fused::SPEC,
        Elem::F16 => &fused::SPEC_F16,
    }
}

/// One uniform buffer holding every chunk's split parameters at aligned offsets.
///
/// # Errors
/// [`crate::AttentionError::Device`] when the device is lost or the allocation fails.
pub(crate) fn split_buffer(
    ctx: &GpuContext,
    splits: &[SplitParams],
) -> Result<(wgpu::Buffer, u64)> {
    buffers::uniform_array(ctx, "wgpu-attention splits", splits)
}

/// Records the fused forward of `p` with configuration `cfg` into `encoder`: one pass,
/// or, where the adapter limits how many keys one workgroup may loop over (see
/// `budget.rs`), key ranges merged like split-KV decoding. Returns the device bytes it
/// allocated beyond inputs and outputs.
///
/// # Errors
/// [`crate::AttentionError::TooLarge`] when the problem cannot be split to fit, or a
/// device error building a pipeline or probing the adapter.
pub(crate) async fn record(
    ctx: &GpuContext,
    encoder: &mut wgpu::CommandEncoder,
    p: &Problem,
    elem: Elem,
    cfg: FusedConfig,
    inputs: &ForwardInputs<'_>,
    outputs: &ForwardOutputs<'_>,
) -> Result<u64> {
    let first = FirstPass::Fused(cfg);
    let budget = key_budget(ctx, p, elem, first).await?;
    if budget.is_some_and(|b| p.len_k as u64 > b) {
        let ranges = (1, budget);
        return decode::record_split(ctx, encoder, p, elem, first, ranges, inputs, outputs).await;
    }
    record_direct(ctx, encoder, p, elem, cfg, inputs, outputs).await
}

/// Records the fused forward in one pass per chunk, each workgroup looping over every key
/// its rows may attend. Returns the device bytes it allocated beyond inputs and outputs
/// (parameters and stand-ins).
///
/// # Errors
/// [`crate::AttentionError::TooLarge`] when the problem cannot be split to fit, or a
/// device error building the pipeline.
pub(crate) async fn record_direct(
    ctx: &GpuContext,
    encoder: &mut wgpu::CommandEncoder,
    p: &Problem,
    elem: Elem,
    cfg: FusedConfig,
    inputs: &ForwardInputs<'_>,
    outputs: &ForwardOutputs<'_>,
) -> Result<u64> {
    let chunks = plan(p, &limits(ctx, elem))?;
    let pipe = ctx.pipeline(spec(elem), &cfg.constants(p, false)).await?;
    // Separate stand-ins: one buffer may not be bound read-only and writable at once.
    let bind = ChunkBindings::new(ctx, p, &chunks, outputs)?;
    let layouts: Vec<SplitParams> = chunks
        .iter()
        .map(|c| fused::layout(p, cfg.tile_rows(), cfg.keys, c))
        .collect();
    let (splits, split_stride) = split_buffer(ctx, &layouts)?;
    let split_size = std::mem::size_of::<SplitParams>() as u64;

    let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
        label: Some("wgpu-attention fused"),
        timestamp_writes: None,
    });
    pass.set_pipeline(&pipe.pipeline);
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
        let (x, y) = grid(ctx, fused::workgroups(layout), "q")?;
        pass.set_bind_group(0, &group, &[]);
        pass.dispatch_workgroups(x, y, 1);
    }
    Ok(splits.size() + bind.bytes())
}
