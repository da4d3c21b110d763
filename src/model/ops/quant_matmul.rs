//! Launcher for `shaders/model/quant_matmul.wgsl`: `y = x Wᵀ` with W kept as its GGUF
//! blocks ([`QuantMatrix`]), dequantized in registers. Each invocation computes four
//! columns of y, so each x element is read once for four W rows, for one row of x (a
//! decoding step) or four. A [`QuantVariant`] folds neighbouring model kernels into the
//! product: RMSNorm of x as it is read, a residual add, q/k/v with RoPE into their heads
//! and the KV store, or SwiGLU over interleaved gate and up rows. x is first copied into
//! a uniform buffer wherever all its rows fit there (a decoding step's one row, a short
//! prompt's few); longer inputs are read from storage. On GPUs, products of at most
//! [`SPLIT_MAX_ROWS`] rows take the entry that splits K across lanes instead
//! ([`split_products`]). The pipelines of each [`Tile`] a pass needs are built per weight
//! type and variant at prepare.

use std::sync::Arc;

use bytemuck::{Pod, Zeroable};

use super::glue::{
    lanes_adapter, pipeline_with, range, record_pass, split_products, uniform, uniform_layout,
    uniform_readable_tensor, uniform_scratch, whole, Binding, KernelPipeline, KernelSpec, Recorder,
    UniformLayout, SPLIT_MAX_ROWS,
};
use super::quant_matrix::{pages_serve, QuantMatrix};
use super::{shape_error, source, u32_of};
use crate::error::{AttentionError, Result};
use crate::model::llama::quant::GgmlType;
use crate::{GpuContext, GpuTensor};

/// Bindings: params, x, the weight words, y, the norm's weight, the RoPE table, the key
/// store, the value store (those four stand-ins where the variant does not use them), the
/// uniform copy of x's rows and the norm's weight in a uniform buffer, which products
/// whose x fits the copy read.
pub(crate) const SPEC: KernelSpec = KernelSpec {
    name: "model_quant_matmul",
    source: source::QUANT_MATMUL,
    bindings: &BINDINGS,
    trusted: false,
    uniforms: &UNIFORMS,
};

/// [`SPEC`]'s bindings, which every entry shares (the paged one adds its pages).
const BINDINGS: [Binding; 10] = [
    Binding::Uniform,
    Binding::Read,
    Binding::Read,
    Binding::ReadWrite,
    Binding::Read,
    Binding::Read,
    Binding::ReadWrite,
    Binding::ReadWrite,
    Binding::Uniform,
    Binding::Uniform,
];

/// The layouts of [`BINDINGS`]' uniform structs, in binding order.
const UNIFORMS: [fn() -> UniformLayout; 3] = [params_uniform, x_row_uniform, x_row_uniform];

/// The same kernel on a CPU driver's 8-lane subgroups (lavapipe): for one row of x and
/// the 32-element block types, each lane loads one chunk of a block's x and the subgroup
/// shares them by broadcasts (`shaders/model/quant_matmul_sg.wgsl`).
pub(crate) const SPEC_SUBGROUPS: KernelSpec = KernelSpec {
    name: "model_quant_matmul_subgroups",
    source: source::QUANT_MATMUL_SUBGROUPS,
    bindings: &SUBGROUP_BINDINGS,
    ..SPEC
};

/// [`BINDINGS`] and W's buffer again as four-word elements (`wv`), for loads of four
/// words at once.
const SUBGROUP_BINDINGS: [Binding; BINDINGS.len() + 1] = followed_by(BINDINGS, Binding::Read);

/// The same kernel with K split across the lanes of groups of 16 and the lanes' sums
/// added through workgroup memory (`shaders/model/quant_matmul_split.wgsl`): for GPUs,
/// where neighbouring lanes then read neighbouring blocks of one W row.
pub(crate) const SPEC_SPLIT: KernelSpec = KernelSpec {
    name: "model_quant_matmul_split",
    source: source::QUANT_MATMUL_SPLIT,
    ..SPEC
};

/// The subgroup kernel reading W from [`PAGES`] uniform pages (QuantMatrix's
/// [`Pages`](super::quant_matrix::Pages)) rather than storage
/// (`shaders/model/quant_matmul_paged.wgsl`): Q4_1 and Q4_0 products on lavapipe, whose
/// storage loads go lane by lane.
pub(crate) const SPEC_PAGED: KernelSpec = KernelSpec {
    name: "model_quant_matmul_paged",
    source: source::QUANT_MATMUL_PAGED,
    bindings: &PAGED_BINDINGS,
    trusted: false,
    uniforms: &PAGED_UNIFORMS,
};

/// [`BINDINGS`] and the paged entry's [`PAGES`] uniform pages.
const PAGED_BINDINGS: [Binding; BINDINGS.len() + PAGES] = followed_by(BINDINGS, Binding::Uniform);

/// [`UNIFORMS`] and the pages' layouts.
const PAGED_UNIFORMS: [fn() -> UniformLayout; UNIFORMS.len() + PAGES] =
    followed_by(UNIFORMS, page_uniform);

/// `base` followed by `more` up to `M` elements (the length the constant declares).
const fn followed_by<T: Copy, const N: usize, const M: usize>(base: [T; N], more: T) -> [T; M] {
    assert!(M > N, "at least one element past `base`");
    let mut all = [more; M];
    let mut i = 0;
    while i < N {
        all[i] = base[i];
        i += 1;
    }
    all
}

/// Pages a dispatch of the paged entry binds (`PAGES` in the shader).
pub(crate) const PAGES: usize = 12;

/// Columns of y a workgroup of the split entry owns (`GROUPS * COLS` in the shader).
const SPLIT_COLS: u64 = 16;

/// Elements of the uniform copy `xu` and of the norm's weight `nu` (`XRow` in the
/// shader, 32 KiB each: two fit the 64 KiB every adapter and browser must allow for
/// uniform bindings). Products whose x has more elements read x from storage.
const XU_ELEMS: usize = 8192;

/// The uniform copy of x's rows, or a norm's weight (`XRow`), as the WGSL declares it.
/// Never built on the host: it is filled on the device.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct XRow {
    v: [[f32; 4]; XU_ELEMS / 4],
}

/// One uniform page of W (`Page` in quant_matmul_paged.wgsl).
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Page {
    v: [[u32; 4]; PAGE_BYTES / 16],
}

/// Bytes of a [`Page`] binding.
pub(crate) const PAGE_BYTES: usize = 65536;

/// [`Page`] as the WGSL declares it.
fn page_uniform() -> UniformLayout {
    uniform_layout!(Page as "Page" { v })
}

/// [`XRow`] as the WGSL declares it.
fn x_row_uniform() -> UniformLayout {
    uniform_layout!(XRow as "XRow" { v })
}

/// A tensor of `shape` for x of the products, which a product whose x rows start at a
/// multiple of the uniform offset alignment binds as its uniform copy (`xu`) rather than
/// copying them there first: a uniform buffer too, and at least the copy's size. On
/// lavapipe each copy is a command of about 20 µs, four in each layer of a decoding step.
///
/// # Errors
/// As [`GpuTensor::empty`].
pub(crate) fn x_tensor(ctx: &GpuContext, shape: &[usize]) -> Result<GpuTensor> {
    uniform_readable_tensor(ctx, shape, XU_ELEMS as u64 * 4)
}

/// Must match the WGSL struct `QuantMatmul` in quant_matmul.wgsl.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
pub(crate) struct QuantMatmulParams {
    rows: u32,
    cols: u32,
    inner: u32,
    row_bytes: u32,
    x_off: u32,
    x_stride: u32,
    out: [u32; 5],
    eps: f32,
    col0: u32,
    q_end: u32,
    k_end: u32,
    kv_heads: u32,
    kv_cap: u32,
    kv_off: u32,
    pos0: u32,
    positions: u32,
    page_rows: u32,
    page_stride: u32,
    chunk: u32,
    row0: u32,
}

/// [`QuantMatmulParams`] as the WGSL declares it.
fn params_uniform() -> UniformLayout {
    uniform_layout!(QuantMatmulParams as "QuantMatmul" { rows, cols, inner, row_bytes, x_off, x_stride, out => ["out_len", "out_heads", "out_dim", "out_cap", "out_off"], eps, col0, q_end, k_end, kv_heads, kv_cap, kv_off, pos0, positions, page_rows, page_stride, chunk, row0 })
}

/// Where row `m`, column `c` of y goes: `((b * heads + h) * cap + off + l) * dim + d` with
/// `b = m / len`, `l = m % len`, `h = c / dim`, `d = c % dim`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OutLayout {
    pub len: usize,
    pub heads: usize,
    pub dim: usize,
    pub cap: usize,
    pub off: usize,
}

impl OutLayout {
    /// Plain rows of `cols`.
    pub(crate) fn rows(rows: usize, cols: usize) -> Self {
        Self {
            len: rows.max(1),
            heads: 1,
            dim: cols,
            cap: rows.max(1),
            off: 0,
        }
    }
}

/// What becomes of the product's sums (the shader's `EPI`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EpiKind {
    /// Stored at the layout.
    Store = 0,
    /// Added to y at the layout (a residual add).
    Add = 1,
    /// Attention's q, k and v, rotated by RoPE where q or k ([`QkvSplit`]).
    Qkv = 2,
    /// `silu(gate) * up` from W rows interleaving gate and up (row 2j gate j, 2j + 1 up j).
    SwiGlu = 3,
}

/// One pipeline of the kernel: whether x is RMS-normed as it is read, and the epilogue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QuantVariant {
    pub norm: bool,
    pub epi: EpiKind,
}

impl QuantVariant {
    pub(crate) const PLAIN: Self = Self {
        norm: false,
        epi: EpiKind::Store,
    };
}

/// RMSNorm applied to x as it is read: `x / sqrt(mean(x²) + eps) * weight`, with the
/// weight's copy in a [`NormRows`] buffer if the model keeps one (else each product
/// that reads x from the uniform copy copies the weight too).
#[derive(Clone, Copy)]
pub(crate) struct QuantNorm<'a> {
    pub weight: &'a GpuTensor,
    pub eps: f32,
    pub uniform: Option<NormSlot<'a>>,
}

/// Norms' weights kept in one uniform buffer for the products that read x from the
/// uniform copy, each at its own aligned offset, so that no product copies a weight
/// that never changes (on lavapipe each copy is a command of its own, tens of
/// microseconds, two per layer of a decoding step).
pub(crate) struct NormRows {
    buffer: wgpu::Buffer,
    slots: Vec<(u64, usize)>,
}

/// Where one norm's weight lies in a [`NormRows`] buffer, and its length.
#[derive(Clone, Copy)]
pub(crate) struct NormSlot<'a> {
    buffer: &'a wgpu::Buffer,
    offset: u64,
    len: usize,
}

impl NormRows {
    /// The weights copied into one buffer (on the device, submitted here); `None` when
    /// one is longer than the uniform copy holds (its products read storage anyway).
    ///
    /// # Errors
    /// [`AttentionError::Device`] when the allocation fails.
    pub(crate) fn new(ctx: &GpuContext, weights: &[&GpuTensor]) -> Result<Option<Self>> {
        if weights.is_empty() || weights.iter().any(|w| w.len() > XU_ELEMS) {
            return Ok(None);
        }
        let align = u64::from(ctx.limits.min_uniform_buffer_offset_alignment).max(4);
        let mut slots = Vec::with_capacity(weights.len());
        let mut end = 0u64;
        for w in weights {
            slots.push((end, w.len()));
            end += (w.len() as u64 * 4).div_ceil(align) * align;
        }
        // The last slot is bound as a whole XRow too.
        let last = slots.last().map_or(0, |s| s.0);
        let size = (last + XU_ELEMS as u64 * 4).max(end);
        let buffer = uniform_scratch(ctx, "wgpu-attention norm weights", size as usize)?;
        let mut enc = ctx.device().create_command_encoder(&Default::default());
        for (w, &(at, len)) in weights.iter().zip(&slots) {
            enc.copy_buffer_to_buffer(w.buffer(), 0, &buffer, at, len as u64 * 4);
        }
        ctx.queue().submit([enc.finish()]);
        Ok(Some(Self { buffer, slots }))
    }

    /// The slot of the `i`th weight given to [`NormRows::new`].
    pub(crate) fn slot(&self, i: usize) -> Option<NormSlot<'_>> {
        self.slots.get(i).map(|&(offset, len)| NormSlot {
            buffer: &self.buffer,
            offset,
            len,
        })
    }

    /// Device bytes it holds.
    pub(crate) fn bytes(&self) -> u64 {
        self.buffer.size()
    }
}

/// Where [`EpiKind::Qkv`] sends each column of the attention space `[q | k | v]`: W's
/// rows are its columns `col0 .. col0 + W.rows`; columns below `q_end` go to y at the
/// call's layout, those below `k_end` to `k` and the rest to `v`, both at `kv` (whose
/// `len` and `dim` must be the layout's). q and k are rotated at positions `pos0 + l` by
/// `table`, `(positions, dim / 2, 2)` cos and sin.
#[derive(Clone, Copy)]
pub(crate) struct QkvSplit<'a> {
    pub k: &'a GpuTensor,
    pub v: &'a GpuTensor,
    pub col0: usize,
    pub q_end: usize,
    pub k_end: usize,
    pub kv: OutLayout,
    pub table: &'a GpuTensor,
    pub positions: usize,
    pub pos0: usize,
}

/// The epilogue of one call, with what it needs.
#[derive(Clone, Copy)]
pub(crate) enum QuantEpilogue<'a> {
    Store,
    Add,
    Qkv(QkvSplit<'a>),
    SwiGlu,
}

impl QuantEpilogue<'_> {
    fn kind(&self) -> EpiKind {
        match self {
            Self::Store => EpiKind::Store,
            Self::Add => EpiKind::Add,
            Self::Qkv(_) => EpiKind::Qkv,
            Self::SwiGlu => EpiKind::SwiGlu,
        }
    }
}

/// One product: `rows` rows of x, each `w.cols` wide, starting at element `x_off`, times
/// `w`'s rows, into `y` at `layout` (for [`EpiKind::SwiGlu`], `w.rows / 2` columns).
pub(crate) struct QuantMatmul<'a> {
    pub x: &'a GpuTensor,
    pub x_off: usize,
    pub rows: usize,
    pub w: &'a QuantMatrix,
    pub y: &'a GpuTensor,
    pub layout: OutLayout,
    pub norm: Option<QuantNorm<'a>>,
    pub epilogue: QuantEpilogue<'a>,
}

impl<'a> QuantMatmul<'a> {
    /// A plain product `y = x Wᵀ` at `layout`.
    pub(crate) fn plain(
        (x, x_off, rows): (&'a GpuTensor, usize, usize),
        w: &'a QuantMatrix,
        y: &'a GpuTensor,
        layout: OutLayout,
    ) -> Self {
        Self {
            x,
            x_off,
            rows,
            w,
            y,
            layout,
            norm: None,
            epilogue: QuantEpilogue::Store,
        }
    }
}

/// The kernel's pipelines for a set of weight types, variants and tiles, and the
/// stand-ins bound where a variant reads or writes nothing.
pub(crate) struct QuantMatmulKernel {
    /// (type, variant, tile, the spec's name, pipeline).
    pipes: Vec<(
        GgmlType,
        QuantVariant,
        Tile,
        &'static str,
        Arc<KernelPipeline>,
    )>,
    unused_read: GpuTensor,
    unused_k: GpuTensor,
    unused_v: GpuTensor,
    /// `xu`: products that read x from the uniform copy copy x's rows here first.
    x_row: wgpu::Buffer,
    /// `nu`: the norm's weight, copied here when the call has no [`NormSlot`].
    norm_row: wgpu::Buffer,
    /// Whether few-row products take the split entry ([`tile_for`]'s `split`).
    split: bool,
}

/// Columns of y per invocation (`COLS` in the shader).
const TILE_COLS: u64 = 4;

/// How a product's invocations cover its rows, and where they read x from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tile {
    /// One row (a decoding step), read from the uniform copy.
    One,
    /// Four rows an invocation, all of x read from the uniform copy.
    FourUniform,
    /// Four rows an invocation, read from storage.
    Four,
    /// One row, K split across lanes, read from storage ([`SPEC_SPLIT`]).
    SplitOne,
    /// Four rows a workgroup, K split across lanes, read from storage.
    SplitFour,
    /// One row a workgroup, rows read from the uniform copy as many at a time as it
    /// holds, W from its uniform pages ([`SPEC_PAGED`]).
    Paged,
}

impl Tile {
    /// Rows of y per invocation, or per column group of the split entry (`ROWS`).
    fn rows(self) -> u32 {
        match self {
            Tile::One | Tile::SplitOne | Tile::Paged => 1,
            Tile::FourUniform | Tile::Four | Tile::SplitFour => 4,
        }
    }

    /// Whether x (and the norm's weight) come from the uniform copy (`XU`).
    fn uniform(self) -> bool {
        matches!(self, Tile::One | Tile::FourUniform | Tile::Paged)
    }

    /// Whether the split entry runs it.
    fn split(self) -> bool {
        matches!(self, Tile::SplitOne | Tile::SplitFour)
    }

    /// Workgroups for `rows` rows of x and `cols` columns of y.
    fn workgroups(self, rows: usize, cols: usize) -> u64 {
        let per = if self.split() {
            SPLIT_COLS
        } else {
            64 * TILE_COLS
        };
        (cols as u64).div_ceil(per) * (rows as u64).div_ceil(u64::from(self.rows()))
    }
}

/// A product a pass will record, as far as its pipeline depends on it: W's type, the
/// variant, and how many rows of how wide an x it multiplies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProductShape {
    pub ty: GgmlType,
    pub var: QuantVariant,
    pub rows: usize,
    pub inner: usize,
    /// W is in [`Pages`](super::quant_matrix::Pages): the product takes the paged entry
    /// where it serves.
    pub paged: bool,
}

/// Every tile, for kernels prepared for products of any number of rows.
const ALL_TILES: &[Tile] = &[Tile::One, Tile::FourUniform, Tile::Four];

/// Every tile [`tile_for`] gives with `split`: the split entry's for few rows.
const ALL_SPLIT_TILES: &[Tile] = &[
    Tile::SplitOne,
    Tile::SplitFour,
    Tile::FourUniform,
    Tile::Four,
];

/// The tile of a product of `rows` rows of `inner` elements. With `split` (see
/// [`split_products`]), at most [`SPLIT_MAX_ROWS`] rows take the split entry. Otherwise
/// x goes through the uniform copy wherever it fits its [`XU_ELEMS`] elements (on
/// lavapipe a storage load is a checked loop over the lanes, a uniform one a gather), a
/// single row by the one-row tile, a few rows (a short prompt) by tiles of four; longer
/// inputs read storage.
fn tile_for(rows: usize, inner: usize, split: bool) -> Tile {
    if split && rows == 1 {
        return Tile::SplitOne;
    }
    if split && rows <= SPLIT_MAX_ROWS as usize {
        return Tile::SplitFour;
    }
    match rows.checked_mul(inner) {
        Some(n) if n <= XU_ELEMS && rows == 1 => Tile::One,
        Some(n) if n <= XU_ELEMS => Tile::FourUniform,
        _ => Tile::Four,
    }
}

/// Whether a product [`tile_for`] gave `tile` may take the paged entry instead when its
/// W is in pages: not on the split entry's adapters, and only where one row of x (of
/// `inner` elements) fits the uniform copy; the entry takes as many rows as fit at once.
fn fits_paged_entry(tile: Tile, inner: usize) -> bool {
    !tile.split() && inner <= XU_ELEMS
}

impl QuantMatmulKernel {
    /// Builds (or finds cached) the plain pipelines for every type of `types` in every
    /// tile [`tile_for`] gives with `split`: with it, the split entry's for few rows on
    /// any adapter (tests run it on CPU drivers); without, one-row products from the
    /// subgroup entry where `subgroups` and the adapter is a lanes adapter (tests run
    /// both entries on one), and from the paged entry for matrices in pages.
    ///
    /// # Errors
    /// A device error building a pipeline.
    pub(crate) async fn prepare_plain(
        ctx: &GpuContext,
        types: &[GgmlType],
        subgroups: bool,
        split: bool,
    ) -> Result<Self> {
        let tiles = if split { ALL_SPLIT_TILES } else { ALL_TILES };
        let subgroups = subgroups && lanes_adapter(ctx);
        let tiled: Vec<_> = types
            .iter()
            .flat_map(|&ty| {
                // With the subgroup entry, the paged entry too where W's type is paged.
                let paged = (subgroups && !split && pages_serve(ctx, ty)).then_some(Tile::Paged);
                tiles
                    .iter()
                    .copied()
                    .chain(paged)
                    .map(move |tile| (ty, QuantVariant::PLAIN, tile))
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
                (w.ty, w.var, tile)
            })
            .collect();
        Self::build(ctx, &tiled, subgroups, split).await
    }

    /// The pipelines of `wants`, one-row ones from the subgroup entry when `subgroups`;
    /// `split` says which tiles `wants` were chosen with.
    async fn build(
        ctx: &GpuContext,
        wants: &[(GgmlType, QuantVariant, Tile)],
        subgroups: bool,
        split: bool,
    ) -> Result<Self> {
        let mut pipes = Vec::new();
        for &(ty, var, tile) in wants {
            if pipes
                .iter()
                .any(|(t, v, r, _, _)| *t == ty && *v == var && *r == tile)
            {
                continue;
            }
            let constants = [
                ("KIND", f64::from(ty.0)),
                ("ROWS", f64::from(tile.rows())),
                ("NORM", if var.norm { 1.0 } else { 0.0 }),
                ("EPI", f64::from(var.epi as u32)),
                ("XU", if tile.uniform() { 1.0 } else { 0.0 }),
            ];
            let spec = if tile.split() {
                &SPEC_SPLIT
            } else if tile == Tile::Paged {
                &SPEC_PAGED
            } else if subgroups && tile == Tile::One {
                &SPEC_SUBGROUPS
            } else {
                &SPEC
            };
            let pipe = pipeline_with(ctx, spec, &constants).await?;
            pipes.push((ty, var, tile, spec.name, pipe));
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
        let find = |tile| {
            self.pipes
                .iter()
                .find(|(t, v, r, _, _)| *t == w.ty && *v == var && *r == tile)
        };
        // A paged matrix's products take the paged entry where it was built and a row of
        // x fits the uniform copy; every other entry finds W's rows through the pages too.
        if fits_paged_entry(tile, w.cols) && w.pages.is_some() && find(Tile::Paged).is_some() {
            tile = Tile::Paged;
        }
        let (name, pipe) = find(tile)
            .map(|(_, _, _, name, p)| (*name, p))
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
        let rest = [
            whole(call.x),
            range(&w.buffer, 0, w.buffer.size()),
            whole(call.y),
            whole(call.norm.map_or(&self.unused_read, |n| n.weight)),
            whole(s.map_or(&self.unused_read, |s| s.table)),
            whole(s.map_or(&self.unused_k, |s| s.k)),
            whole(s.map_or(&self.unused_v, |s| s.v)),
        ];
        fn bindings<'b>(
            params: &'b wgpu::Buffer,
            rest: &[wgpu::BindingResource<'b>],
            x_row: wgpu::BindingResource<'b>,
            norm_row: &wgpu::BindingResource<'b>,
        ) -> Vec<wgpu::BindingResource<'b>> {
            let mut resources = vec![params.as_entire_binding()];
            resources.extend(rest.iter().cloned());
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
                        let params = uniform(ctx, "wgpu-attention quant_matmul params", &params)?;
                        let mut resources = bindings(&params, &rest, x_row.clone(), &norm_row);
                        for page in chunk * PAGES..(chunk + 1) * PAGES {
                            let at = (page * pages.stride) as u64;
                            resources.push(range(&w.buffer, at, PAGE_BYTES as u64));
                        }
                        let groups = pages.rows.div_ceil(8) as u64 * n as u64;
                        record_pass(ctx, rec, (name, pipe), resources, groups)?;
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
                let params = uniform(ctx, "wgpu-attention quant_matmul params", &params)?;
                let groups = tile.workgroups(call.rows, w.rows);
                let mut resources = bindings(&params, &rest, x_row, &norm_row);
                if name == SPEC_SUBGROUPS.name {
                    // Whole four-word elements only (the upload pads the buffer past the
                    // last one a block is read from).
                    resources.push(range(&w.buffer, 0, w.buffer.size() / 16 * 16));
                }
                record_pass(ctx, rec, (name, pipe), resources, groups)
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

/// Elements an output at `l` spans for `batches` batches.
fn layout_need(batches: usize, l: OutLayout) -> usize {
    batches
        .saturating_mul(l.heads)
        .saturating_mul(l.cap)
        .saturating_mul(l.dim)
}

/// `s` fits W (`w`) and the call's layout `l`: even boundaries (the rotation and the
/// stores take columns in pairs), q as wide as the layout, k and v as wide as `s.kv`,
/// W's columns inside the space, the stores and the table large enough.
fn check_split<'a>(
    s: &QkvSplit<'a>,
    w: &QuantMatrix,
    l: OutLayout,
    batches: usize,
) -> Result<QkvSplit<'a>> {
    let kv_cols = s.kv.heads.saturating_mul(l.dim);
    let space = s.k_end.saturating_add(kv_cols);
    let even = [s.col0, s.q_end, s.k_end, w.rows, l.dim]
        .iter()
        .all(|n| n % 2 == 0);
    let bad = |why: String| Err(AttentionError::shape("quant matmul (q, k, v)", why));
    if !even {
        return bad(format!(
            "columns must come in pairs: col0 {}, q_end {}, k_end {}, rows {}, head dim {}",
            s.col0, s.q_end, s.k_end, w.rows, l.dim
        ));
    }
    if s.q_end > s.k_end
        || s.k_end - s.q_end != kv_cols
        || s.col0.saturating_add(w.rows) > space
        || s.kv.len != l.len
        || s.kv.dim != l.dim
        || s.kv.off.saturating_add(s.kv.len) > s.kv.cap
    {
        return bad(format!(
            "W's {} rows from column {} do not fit q ..{} | k ..{} | v ..{space} with {:?}",
            w.rows, s.col0, s.q_end, s.k_end, s.kv
        ));
    }
    let kv_need = layout_need(batches, s.kv);
    for (arg, t) in [("k", s.k), ("v", s.v)] {
        if t.len() < kv_need {
            return Err(shape_error("quant matmul", arg, t, kv_need));
        }
    }
    let table_need = s.positions.saturating_mul(l.dim);
    if s.table.len() < table_need {
        return Err(shape_error(
            "quant matmul",
            "rope table",
            s.table,
            table_need,
        ));
    }
    u32_of("quant matmul", kv_need)?;
    u32_of("quant matmul", table_need)?;
    Ok(*s)
}
