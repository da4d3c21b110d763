//! Launcher for `shaders/model/quant_matmul.wgsl`: `y = x Wᵀ` with W kept as its GGUF
//! blocks ([`QuantMatrix`](super::QuantMatrix)), dequantized in registers. Each invocation computes four
//! columns of y, so each x element is read once for four W rows, for one row of x (a
//! decoding step) or four. A [`QuantVariant`] folds neighbouring model kernels into the
//! product: RMSNorm of x as it is read, a residual add, q/k/v with RoPE into their heads
//! and the KV store, or SwiGLU over interleaved gate and up rows. x is first copied into
//! a uniform buffer wherever all its rows fit there (a decoding step's one row, a short
//! prompt's few); longer inputs are read from storage. On GPUs, products of at most
//! [`SPLIT_MAX_ROWS`](super::glue::SPLIT_MAX_ROWS) rows take the entry that splits K across lanes instead
//! ([`split_products`]). The pipelines of each [`Tile`] a pass needs are built per weight
//! type and variant at prepare.

mod call;
mod spec;
mod tile;

use std::sync::Arc;

use super::glue::{
    lanes_adapter, pipeline_with, range, record_with_params, split_products, uniform_scratch,
    whole, KernelPipeline, Recorder,
};
use super::quant_matrix::{kernel_kind, pages_serve, PAGES, PAGE_BYTES};
use super::{shape_error, u32_of};
use crate::error::{AttentionError, Result};
use crate::model::llama::quant::GgmlType;
use crate::{GpuContext, GpuTensor};
use call::{check_split, layout_need};
pub(crate) use call::{
    EpiKind, NormRows, OutLayout, ProductShape, QkvSplit, QuantEpilogue, QuantMatmul, QuantNorm,
    QuantVariant,
};
pub(crate) use spec::{x_tensor, SPEC, SPEC_PAGED, SPEC_SPLIT, SPEC_SUBGROUPS};
use spec::{QuantMatmulParams, XU_ELEMS};
use tile::{fits_paged_entry, tile_for, Entry, Tile, ALL_SPLIT_TILES, ALL_TILES};

/// The kernel's pipelines for a set of weight types, variants and tiles, and the
/// stand-ins bound where a variant reads or writes nothing.
pub(crate) struct QuantMatmulKernel {
    /// (W's kind, [`QuantMatrix::kind`](super::QuantMatrix::kind), variant, tile, the
    /// entry that runs it, pipeline).
    pipes: Vec<(u32, QuantVariant, Tile, Entry, Arc<KernelPipeline>)>,
    unused_read: GpuTensor,
    unused_k: GpuTensor,
    unused_v: GpuTensor,
    /// `xu`: products that read x from the uniform copy copy x's rows here first.
    x_row: wgpu::Buffer,
    /// `nu`: the norm's weight, copied here when the call has no [`NormSlot`](call::NormSlot).
    norm_row: wgpu::Buffer,
    /// Whether few-row products take the split entry ([`tile_for`]'s `split`).
    split: bool,
}

impl QuantMatmulKernel {
    /// Builds (or finds cached) the plain pipelines for every kind of W in `kinds`
    /// ([`QuantMatrix::kind`](super::QuantMatrix::kind): a type, or Q8_0 in planes) in every
    /// tile [`tile_for`] gives with `split`: with it, the split entry's for few rows on
    /// any adapter (tests run it on CPU drivers); without, one-row products from the
    /// subgroup entry where `subgroups` and the adapter is a lanes adapter (tests run
    /// both entries on one), and from the paged entry for matrices in pages.
    ///
    /// # Errors
    /// A device error building a pipeline.
    pub(crate) async fn prepare_plain(
        ctx: &GpuContext,
        kinds: &[u32],
        subgroups: bool,
        split: bool,
    ) -> Result<Self> {
        let tiles = if split { ALL_SPLIT_TILES } else { ALL_TILES };
        let subgroups = subgroups && lanes_adapter(ctx);
        let tiled: Vec<_> = kinds
            .iter()
            .flat_map(|&kind| {
                // With the subgroup entry, the paged entry too where W's type is paged.
                let paged = (subgroups && !split && pages_serve(ctx, GgmlType(kind)))
                    .then_some(Tile::Paged);
                tiles
                    .iter()
                    .copied()
                    .chain(paged)
                    .map(move |tile| (kind, QuantVariant::PLAIN, tile))
            })
            .collect();
        Self::build(ctx, &tiled, subgroups, split).await
    }

    /// Builds (or finds cached) the pipelines the products `wants` take (the paged entry
    /// for a paged W, not the other entries beside it).
    ///
    /// # Errors
    /// A device error building a pipeline.
    pub(crate) async fn prepare_variants(ctx: &GpuContext, wants: &[ProductShape]) -> Result<Self> {
        let split = split_products(ctx);
        let subgroups = lanes_adapter(ctx);
        let tiled: Vec<_> = wants
            .iter()
            .map(|w| {
                let tile = match tile_for(w.rows, w.inner, split) {
                    tile if fits_paged_entry(tile, w.inner)
                        && w.paged
                        && subgroups
                        && pages_serve(ctx, w.ty) =>
                    {
                        Tile::Paged
                    }
                    tile => tile,
                };
                (kernel_kind(w.ty, w.planes), w.var, tile)
            })
            .collect();
        Self::build(ctx, &tiled, subgroups, split).await
    }

    /// The pipelines of `wants`, one-row ones from the subgroup entry when `subgroups`;
    /// `split` says which tiles `wants` were chosen with.
    async fn build(
        ctx: &GpuContext,
        wants: &[(u32, QuantVariant, Tile)],
        subgroups: bool,
        split: bool,
    ) -> Result<Self> {
        let mut pipes = Vec::new();
        for &(kind, var, tile) in wants {
            if pipes
                .iter()
                .any(|(t, v, r, _, _)| *t == kind && *v == var && *r == tile)
            {
                continue;
            }
            let constants = [
                ("KIND", f64::from(kind)),
                ("ROWS", f64::from(tile.rows())),
                ("NORM", if var.norm { 1.0 } else { 0.0 }),
                ("EPI", f64::from(var.epi as u32)),
                ("XU", if tile.uniform() { 1.0 } else { 0.0 }),
            ];
            let entry = Entry::of(tile, subgroups);
            let pipe = pipeline_with(ctx, entry.spec(), &constants).await?;
            pipes.push((kind, var, tile, entry, pipe));
        }
        Ok(Self {
            pipes,
            unused_read: GpuTensor::empty(ctx, &[4])?,
            unused_k: GpuTensor::empty(ctx, &[4])?,
            unused_v: GpuTensor::empty(ctx, &[4])?,
            x_row: uniform_scratch(ctx, "wgpu-attention quant_matmul x row", XU_ELEMS * 4)?,
            norm_row: uniform_scratch(ctx, "wgpu-attention quant_matmul norm", XU_ELEMS * 4)?,
            split,
        })
    }

    /// Records the product.
    ///
    /// # Errors
    /// [`AttentionError::Unsupported`] for a weight type or variant not prepared;
    /// [`AttentionError::Shape`] when x, y, the norm's weight, the stores or the table are
    /// too small for the call, the q/k/v split does not fit W, or no rows;
    /// [`AttentionError::TooLarge`] past 32-bit indices.
    pub(crate) fn record(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder<'_>,
        call: &QuantMatmul<'_>,
    ) -> Result<()> {
        let (w, l) = (call.w, call.layout);
        let mut tile = tile_for(call.rows, w.cols, self.split);
        let var = QuantVariant {
            norm: call.norm.is_some(),
            epi: call.epilogue.kind(),
        };
        let kind = w.kind();
        let find = |tile| {
            self.pipes
                .iter()
                .find(|(t, v, r, _, _)| *t == kind && *v == var && *r == tile)
        };
        // A paged matrix's products take the paged entry where it was built and a row of
        // x fits the uniform copy; every other entry finds W's rows through the pages too.
        if fits_paged_entry(tile, w.cols) && w.pages.is_some() && find(Tile::Paged).is_some() {
            tile = Tile::Paged;
        }
        let (entry, pipe) = find(tile)
            .map(|(_, _, _, entry, p)| (*entry, p))
            .ok_or_else(|| {
                AttentionError::Unsupported(format!(
                    "quant matmul: {} as {var:?} was not prepared",
                    w.ty.name()
                ))
            })?;
        let x_need = call.rows.saturating_mul(w.cols).saturating_add(call.x_off);
        if call.rows == 0 || call.x.len() < x_need {
            return Err(shape_error("quant matmul", "x", call.x, x_need));
        }
        if let Some(n) = call.norm {
            if n.weight.len() < w.cols || n.uniform.is_some_and(|u| u.len < w.cols) {
                return Err(shape_error("quant matmul", "norm weight", n.weight, w.cols));
            }
        }
        let out_cols = match call.epilogue {
            QuantEpilogue::SwiGlu if w.rows % 2 == 0 => w.rows / 2,
            QuantEpilogue::SwiGlu => {
                return Err(AttentionError::shape(
                    "quant matmul",
                    format!(
                        "SwiGLU needs gate and up rows in pairs, not {} rows",
                        w.rows
                    ),
                ))
            }
            QuantEpilogue::Qkv(s) => s.q_end,
            _ => w.rows,
        };
        let batches = call.rows.div_ceil(l.len.max(1));
        let y_need = layout_need(batches, l);
        if l.heads.saturating_mul(l.dim) != out_cols
            || l.len == 0
            || l.off.saturating_add(l.len) > l.cap
            || call.y.len() < y_need
        {
            return Err(AttentionError::shape(
                "quant matmul",
                format!(
                    "y {:?} cannot hold {} rows of {out_cols} as {l:?}",
                    call.y.shape(),
                    call.rows,
                ),
            ));
        }
        u32_of("quant matmul", x_need)?;
        u32_of("quant matmul", y_need)?;
        let split = match call.epilogue {
            QuantEpilogue::Qkv(s) => Some(check_split(&s, w, l, batches)?),
            _ => None,
        };
        let s = split.as_ref();
        let params = QuantMatmulParams {
            rows: u32_of("quant matmul", call.rows)?,
            cols: u32_of("quant matmul", w.rows)?,
            inner: u32_of("quant matmul", w.cols)?,
            row_bytes: u32_of("quant matmul", w.row_bytes)?,
            // The uniform copy starts at the row.
            x_off: u32_of("quant matmul", if tile.uniform() { 0 } else { call.x_off })?,
            x_stride: u32_of("quant matmul", w.cols)?,
            out: [
                u32_of("quant matmul", l.len)?,
                u32_of("quant matmul", l.heads)?,
                u32_of("quant matmul", l.dim)?,
                u32_of("quant matmul", l.cap)?,
                u32_of("quant matmul", l.off)?,
            ],
            eps: call.norm.map_or(0.0, |n| n.eps),
            col0: u32_of("quant matmul", s.map_or(0, |s| s.col0))?,
            q_end: u32_of("quant matmul", s.map_or(0, |s| s.q_end))?,
            k_end: u32_of("quant matmul", s.map_or(0, |s| s.k_end))?,
            kv_heads: u32_of("quant matmul", s.map_or(0, |s| s.kv.heads))?,
            kv_cap: u32_of("quant matmul", s.map_or(0, |s| s.kv.cap))?,
            kv_off: u32_of("quant matmul", s.map_or(0, |s| s.kv.off))?,
            pos0: u32_of("quant matmul", s.map_or(0, |s| s.pos0))?,
            positions: u32_of("quant matmul", s.map_or(0, |s| s.positions))?,
            page_rows: u32_of("quant matmul", w.pages.map_or(0, |p| p.rows))?,
            page_stride: u32_of("quant matmul", w.pages.map_or(0, |p| p.stride))?,
            chunk: 0,
            row0: 0,
        };
        let xu_bytes = XU_ELEMS as u64 * 4;
        let mut norm_row = range(&self.norm_row, 0, xu_bytes);
        if tile.uniform() {
            match call.norm.map(|n| (n, n.uniform)) {
                Some((_, Some(u))) => norm_row = range(u.buffer, u.offset, xu_bytes),
                Some((n, None)) => {
                    let weight = n.weight.buffer();
                    let bytes = w.cols as u64 * 4;
                    rec.encoder()
                        .copy_buffer_to_buffer(weight, 0, &self.norm_row, 0, bytes);
                }
                None => {}
            }
        }
        // Every binding after the params, but for the uniform copy of x and the norm's.
        let middle = [
            whole(call.x),
            range(&w.buffer, 0, w.buffer.size()),
            whole(call.y),
            whole(call.norm.map_or(&self.unused_read, |n| n.weight)),
            whole(s.map_or(&self.unused_read, |s| s.table)),
            whole(s.map_or(&self.unused_k, |s| s.k)),
            whole(s.map_or(&self.unused_v, |s| s.v)),
        ];
        // Every binding after the params.
        fn bindings<'b>(
            middle: &[wgpu::BindingResource<'b>],
            x_row: wgpu::BindingResource<'b>,
            norm_row: &wgpu::BindingResource<'b>,
        ) -> Vec<wgpu::BindingResource<'b>> {
            let mut resources = middle.to_vec();
            resources.extend([x_row, norm_row.clone()]);
            resources
        }
        match (tile, w.pages) {
            (Tile::Paged, Some(pages)) => {
                // Rows of x in windows the uniform copy holds; for each, one dispatch a
                // chunk of pages, S / 8 workgroups of eight slots for each row.
                let per = (XU_ELEMS / w.cols).max(1);
                for r0 in (0..call.rows).step_by(per) {
                    let n = per.min(call.rows - r0);
                    let x_row = self.x_window(ctx, rec, call, r0, n);
                    for chunk in 0..pages.chunks {
                        let params = QuantMatmulParams {
                            chunk: u32_of("quant matmul", chunk)?,
                            row0: u32_of("quant matmul", r0)?,
                            ..params
                        };
                        let mut resources = bindings(&middle, x_row.clone(), &norm_row);
                        for page in chunk * PAGES..(chunk + 1) * PAGES {
                            let at = (page * pages.stride) as u64;
                            resources.push(range(&w.buffer, at, PAGE_BYTES as u64));
                        }
                        let groups = pages.rows.div_ceil(8) as u64 * n as u64;
                        let name = entry.spec().name;
                        record_with_params(ctx, rec, (name, pipe), &params, resources, groups)?;
                    }
                }
                Ok(())
            }
            _ => {
                let x_row = if tile.uniform() {
                    self.x_window(ctx, rec, call, 0, call.rows)
                } else {
                    self.x_row.as_entire_binding()
                };
                let groups = tile.workgroups(call.rows, w.rows);
                let mut resources = bindings(&middle, x_row, &norm_row);
                if entry == Entry::Subgroups {
                    // Whole four-word elements only (the upload pads the buffer past the
                    // last one a block is read from).
                    resources.push(range(&w.buffer, 0, w.buffer.size() / 16 * 16));
                }
                let name = entry.spec().name;
                record_with_params(ctx, rec, (name, pipe), &params, resources, groups)
            }
        }
    }

    /// The uniform copy of rows `r0 .. r0 + n` of the call's x (at most [`XU_ELEMS`]
    /// elements together, so whole vec4s: W's rows are whole blocks of at least four
    /// elements): x's own buffer where those rows start at a multiple of the uniform
    /// offset alignment and the binding fits it (see [`x_tensor`]), else the rows copied
    /// into the kernel's scratch, which the dispatches recorded before the copy have read.
    fn x_window<'a>(
        &'a self,
        ctx: &GpuContext,
        rec: &mut Recorder<'_>,
        call: &QuantMatmul<'a>,
        r0: usize,
        n: usize,
    ) -> wgpu::BindingResource<'a> {
        let xu_bytes = XU_ELEMS as u64 * 4;
        let row_bytes = call.w.cols as u64 * 4;
        let x = call.x.buffer();
        let x_at = call.x_off as u64 * 4 + r0 as u64 * row_bytes;
        if x.usage().contains(wgpu::BufferUsages::UNIFORM)
            && x_at.is_multiple_of(u64::from(ctx.limits.min_uniform_buffer_offset_alignment))
            && x_at + xu_bytes <= x.size()
        {
            range(x, x_at, xu_bytes)
        } else {
            rec.encoder()
                .copy_buffer_to_buffer(x, x_at, &self.x_row, 0, row_bytes * n as u64);
            self.x_row.as_entire_binding()
        }
    }
}
