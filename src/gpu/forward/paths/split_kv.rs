//! The split-KV forward: per chunk, a first pass writes partials for key ranges in
//! parallel, then one combine dispatch merges them. Recorded into one encoder; the
//! caller submits.
//!
//! The first pass is decode.wgsl for decoding (lanes are keys), decode_subgroup.wgsl
//! where the adapter has subgroups (groups of lanes share a key), or fused.wgsl with
//! `PARTIAL` where the fused path must cut long key ranges (see `routing/budget.rs`).

use std::sync::{Arc, Mutex, PoisonError};

use crate::error::{AttentionError, Result};
use crate::gpu::device::buffers;
use crate::gpu::device::context::GpuContext;
use crate::gpu::forward::chunk_bindings::ChunkBindings;
use crate::gpu::forward::io::{ForwardOutputs, Recording};
use crate::gpu::forward::paths::one_pass::{limits, split_buffer};
use crate::gpu::kernels::combine::{self, KeySplit};
use crate::gpu::kernels::decode::DecodeKernel;
use crate::gpu::kernels::decode_subgroup::SubgroupDecodeKernel;
use crate::gpu::kernels::dispatch::{bind_group, range};
use crate::gpu::kernels::elem::Elem;
use crate::gpu::kernels::fused::FusedConfig;
use crate::gpu::kernels::launch::{self, SplitParams};
use crate::gpu::kernels::pipelines::{pipeline, KernelPipeline};
use crate::gpu::kernels::plan::plan;
use crate::gpu::kernels::plan::Chunk;
use crate::problem::Problem;

/// Device bytes the partials of one chunk may take; rows are chunked to stay under it.
const PARTIALS_BUDGET: u64 = 32 << 20;

/// The kernel that writes the partials combine.wgsl merges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum FirstPass {
    /// fused.wgsl with `PARTIAL`: lanes are rows.
    Fused(FusedConfig),
    /// decode.wgsl: lanes are keys.
    Decode(DecodeKernel),
    /// decode_subgroup.wgsl: groups of lanes share a key, subgroups walk their own keys.
    SubgroupDecode(SubgroupDecodeKernel),
}

impl FirstPass {
    /// Keys per tile; key ranges start on tile boundaries.
    pub(crate) fn tile_keys(&self) -> u32 {
        match self {
            FirstPass::Fused(c) => c.keys,
            FirstPass::Decode(k) => k.wg,
            // Its key loop needs no alignment; ranges of whole workgroups' worth.
            FirstPass::SubgroupDecode(k) => k.wg,
        }
    }

    /// Rows one workgroup covers.
    fn tile_rows(&self) -> u64 {
        match self {
            FirstPass::Fused(c) => c.tile_rows(),
            FirstPass::Decode(k) => u64::from(k.rows),
            FirstPass::SubgroupDecode(k) => u64::from(k.rows),
        }
    }

    async fn build(
        &self,
        ctx: &GpuContext,
        p: &Problem,
        elem: Elem,
    ) -> Result<Arc<KernelPipeline>> {
        match self {
            FirstPass::Fused(c) => pipeline(ctx, c.spec(ctx, p, elem), &c.constants(p, true)).await,
            FirstPass::Decode(k) => {
                let spec = DecodeKernel::spec(ctx, p, elem);
                pipeline(ctx, spec, &k.constants()).await
            }
            FirstPass::SubgroupDecode(k) => {
                let spec = SubgroupDecodeKernel::spec(ctx, p, elem);
                pipeline(ctx, spec, &k.constants()).await
            }
        }
    }
}

/// How a split-KV launch cuts its keys: about how many workgroups the ranges should
/// make, and the most keys one range may take (see [`KeySplit`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeyRanges {
    pub workgroups: u32,
    pub budget: Option<u64>,
}

/// Split-KV over key ranges: the first pass and the combine pass, built, and how the
/// keys are cut.
pub(crate) struct SplitKv {
    elem: Elem,
    first: FirstPass,
    /// The first pass and the combine pass over key ranges; `None` where every record
    /// of the problem prepared for takes `direct_pipe` (a decoding step of a model
    /// whose cache fits one range a row builds neither).
    first_pipe: Option<Arc<KernelPipeline>>,
    merge_pipe: Option<Arc<KernelPipeline>>,
    /// decode.wgsl with `DIRECT`, where the problem prepared for cuts into one key range
    /// per row: its records write the output at once, one dispatch instead of two.
    direct_pipe: Option<Arc<KernelPipeline>>,
    ranges: KeyRanges,
    /// The scratch of the last problem recorded, kept for the next record of the same
    /// problem: a prepared call records once per layer of a model's every step, and
    /// allocating and zero-filling five buffers each time cost 10 to 25 µs a record on
    /// lavapipe. Reuse within one encoder is safe: wgpu orders each record's writes of
    /// the partials after the previous record's reads.
    scratch: Mutex<Option<Arc<Scratch>>>,
}

/// What one problem's record binds besides the caller's buffers: the chunks and how
/// their keys are cut, the partials, the chunks' parameters and the key ranges.
struct Scratch {
    p: Problem,
    lse: bool,
    chunks: Vec<Chunk>,
    layouts: Vec<SplitParams>,
    partials: wgpu::Buffer,
    bind: ChunkBindings,
    splits: wgpu::Buffer,
    split_stride: u64,
}

impl Scratch {
    /// Device bytes it holds.
    fn bytes(&self) -> u64 {
        self.partials.size() + self.splits.size() + self.bind.bytes()
    }
}

impl SplitKv {
    /// Builds (or finds cached) the pipelines of `first` for `p` with q, k and v stored
    /// as `elem`, and of the combine pass, to cut the keys into `ranges`; and, where
    /// `first` is decode.wgsl and `p`'s rows each take one range, its `DIRECT` build.
    ///
    /// # Errors
    /// A device error building a pipeline.
    pub(crate) async fn prepare(
        ctx: &GpuContext,
        p: &Problem,
        elem: Elem,
        first: FirstPass,
        ranges: KeyRanges,
    ) -> Result<Self> {
        let mut split = Self {
            elem,
            first,
            first_pipe: None,
            merge_pipe: None,
            direct_pipe: None,
            ranges,
            scratch: Mutex::new(None),
        };
        // A problem that cannot be cut fails at record, as it always has.
        if let (FirstPass::Decode(k), Ok((_, layouts))) = (first, split.cut(ctx, p)) {
            if layouts.iter().all(|l| l.splits == 1) {
                let spec = DecodeKernel::spec(ctx, p, elem);
                split.direct_pipe = Some(pipeline(ctx, spec, &k.constants_direct(true)).await?);
                return Ok(split);
            }
        }
        split.first_pipe = Some(first.build(ctx, p, elem).await?);
        split.merge_pipe =
            Some(pipeline(ctx, &combine::COMBINE_SPEC, &combine::combine_constants()).await?);
        Ok(split)
    }

    /// How `p`'s rows are chunked and each chunk's keys cut into ranges (with the
    /// partials' layout in each range's parameters).
    fn cut(&self, ctx: &GpuContext, p: &Problem) -> Result<(Vec<Chunk>, Vec<SplitParams>)> {
        let first = self.first;
        let how = KeySplit {
            tile_keys: first.tile_keys(),
            workgroups: self.ranges.workgroups,
            budget: self.ranges.budget,
        };
        // Rows per chunk bounded so that the partials stay under PARTIALS_BUDGET: the plan
        // bounds rows x Lk x 4 bytes, so express the bound in those units.
        let row_bytes = how.most_splits(p) * (p.dim_v as u64 + 2) * 4;
        let rows = (PARTIALS_BUDGET.min(ctx.max_binding()) / row_bytes).max(1);
        let mut lim = limits(ctx, self.elem);
        lim.max_scores = Some(rows * p.len_k as u64 * 4);
        let chunks = plan(p, &lim)?;
        let max_binding = ctx.max_binding();
        let mut layouts = Vec::with_capacity(chunks.len());
        for c in &chunks {
            let layout = launch::layout(p, first.tile_rows(), first.tile_keys(), c);
            let mut s = combine::split(p, c, layout, &how, max_binding)?;
            let (outs, _) = combine::partial_elems(p, c, &s);
            s.ml_base = outs as u32;
            layouts.push(s);
        }
        Ok((chunks, layouts))
    }

    /// Records the first pass over key ranges, then the combine pass; or, with a
    /// `DIRECT` build and one range per row, the first pass alone, finishing the rows.
    /// Returns the device bytes its scratch takes beyond inputs and outputs (partials,
    /// parameters), allocated at the first record of a problem and kept for the next.
    ///
    /// # Errors
    /// [`crate::error::AttentionError::TooLarge`] when the problem or its partials cannot be split
    /// to fit, or a device error allocating.
    pub(crate) fn record(&self, r: &mut Recording<'_, '_>) -> Result<u64> {
        let (ctx, p, inputs, outputs) = (r.ctx, r.p, r.inputs, r.outputs);
        let scratch = self.scratch(ctx, p, outputs)?;
        let Scratch {
            chunks,
            layouts,
            partials,
            bind,
            splits,
            split_stride,
            ..
        } = &*scratch;
        let split_stride = *split_stride;
        let split_size = std::mem::size_of::<SplitParams>() as u64;

        let pass = r.rec.pass();
        // DIRECT: the first pass finishes the rows into the caller's outputs, and no
        // combine pass follows.
        let direct = self.direct_pipe.as_ref().filter(|_| self.direct(layouts));
        let (pipe, merge) = match (direct, &self.first_pipe, &self.merge_pipe) {
            (Some(direct), _, _) => (direct, None),
            (None, Some(first), Some(merge)) => (first, Some(merge)),
            // Only a problem other than the one prepared for could get here.
            _ => {
                return Err(AttentionError::Unsupported(
                    "split-KV: this problem needs key ranges its preparation did not build".into(),
                ))
            }
        };
        for (n, (chunk, layout)) in chunks.iter().zip(layouts).enumerate() {
            let (outs, pairs) = combine::partial_elems(p, chunk, layout);
            let partial_bytes = (outs + pairs) * 4;
            let split_range = || range(splits, n as u64 * split_stride, split_size);
            let out = || range(outputs.out, chunk.out.offset, chunk.out.size);
            let targets = if direct.is_some() {
                [out(), bind.lse(outputs, chunk), split_range()]
            } else {
                let partials = range(partials, 0, partial_bytes);
                [partials, bind.unused_writable(), split_range()]
            };
            let resources = bind.key_loop(n, inputs, chunk, targets);
            let group = bind_group(ctx, "decode", &pipe.layout, resources);
            launch::record(ctx, pass, (pipe, &group), layout)?;
            let Some(merge) = merge else {
                continue;
            };
            let combine_group = bind_group(
                ctx,
                "combine",
                &merge.layout,
                vec![
                    bind.params(n),
                    range(partials, 0, partial_bytes),
                    out(),
                    bind.lse(outputs, chunk),
                    split_range(),
                ],
            );
            combine::record(ctx, pass, (merge, &combine_group), chunk)?;
        }
        Ok(scratch.bytes())
    }

    /// The scratch for `p` with `outputs`: the kept one when it was made for the same
    /// problem and log-sum-exp choice, else a new one, kept in its place.
    fn scratch(
        &self,
        ctx: &GpuContext,
        p: &Problem,
        outputs: &ForwardOutputs<'_>,
    ) -> Result<Arc<Scratch>> {
        let lse = outputs.lse.is_some();
        let mut kept = self.scratch.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(s) = kept.as_ref().filter(|s| s.lse == lse && s.p == *p) {
            return Ok(Arc::clone(s));
        }
        let made = Arc::new(self.make_scratch(ctx, p, outputs)?);
        *kept = Some(Arc::clone(&made));
        Ok(made)
    }

    /// Whether records with these key ranges take the `DIRECT` build (one range a row).
    fn direct(&self, layouts: &[SplitParams]) -> bool {
        self.direct_pipe.is_some() && layouts.iter().all(|l| l.splits == 1)
    }

    /// Cuts the keys of `p` into chunks and ranges and allocates what they bind (no
    /// partials beyond one word where the `DIRECT` build writes the outputs itself).
    fn make_scratch(
        &self,
        ctx: &GpuContext,
        p: &Problem,
        outputs: &ForwardOutputs<'_>,
    ) -> Result<Scratch> {
        let (chunks, layouts) = self.cut(ctx, p)?;
        let scratch_elems = if self.direct(&layouts) {
            1
        } else {
            chunks
                .iter()
                .zip(&layouts)
                .map(|(c, s)| {
                    let (outs, pairs) = combine::partial_elems(p, c, s);
                    outs + pairs
                })
                .fold(1, u64::max)
        };
        let partials = buffers::empty(
            ctx,
            "wgpu-attention decode partials",
            scratch_elems * 4,
            wgpu::BufferUsages::STORAGE,
        )?;
        let bind = ChunkBindings::new(ctx, p, &chunks, outputs)?;
        let (splits, split_stride) = split_buffer(ctx, &layouts)?;
        Ok(Scratch {
            p: p.clone(),
            lse: outputs.lse.is_some(),
            chunks,
            layouts,
            partials,
            bind,
            splits,
            split_stride,
        })
    }
}
