//! What one product is asked for: x, W, y and where y's columns go, the RMSNorm folded
//! into x's reads and the epilogue, and the checks of a q/k/v split against the buffers
//! it names.

use super::super::glue::uniform_scratch;
use super::super::quant_matrix::QuantMatrix;
use super::super::{shape_error, u32_of};
use super::spec::XU_ELEMS;
use crate::error::{AttentionError, Result};
use crate::model::llama::quant::GgmlType;
use crate::{GpuContext, GpuTensor};

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
    pub(super) buffer: &'a wgpu::Buffer,
    pub(super) offset: u64,
    pub(super) len: usize,
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
    pub(super) fn kind(&self) -> EpiKind {
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

/// A product a pass will record, as far as its pipeline depends on it: W's type, the
/// variant, and how many rows of how wide an x it multiplies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProductShape {
    pub ty: GgmlType,
    /// W is Q8_0 in [planes](super::super::quant_matrix::QuantMatrix::planes).
    pub planes: bool,
    pub var: QuantVariant,
    pub rows: usize,
    pub inner: usize,
    /// W is in [`Pages`](super::super::quant_matrix::Pages): the product takes the paged entry
    /// where it serves.
    pub paged: bool,
}

/// Elements an output at `l` spans for `batches` batches.
pub(super) fn layout_need(batches: usize, l: OutLayout) -> usize {
    batches
        .saturating_mul(l.heads)
        .saturating_mul(l.cap)
        .saturating_mul(l.dim)
}

/// `s` fits W (`w`) and the call's layout `l`: even boundaries (the rotation and the
/// stores take columns in pairs), q as wide as the layout, k and v as wide as `s.kv`,
/// W's columns inside the space, the stores and the table large enough.
pub(super) fn check_split<'a>(
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
