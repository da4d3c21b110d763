//! A weight matrix on the device as its GGUF blocks: the tensor's bytes uploaded as they
//! are stored in the file (one copy, whatever reads it), with what the kernels need to
//! find a row and decode it.

use super::glue::{lanes_adapter, split_products, upload_words};
use crate::error::{AttentionError, Result};
use crate::model::llama::quant::GgmlType;
use crate::GpuContext;

/// Pages a dispatch of the paged entry binds (`PAGES` in quant_matmul_paged.wgsl).
pub(crate) const PAGES: usize = 12;

/// Bytes of a page's uniform binding (`Page` in quant_matmul_paged.wgsl).
pub(crate) const PAGE_BYTES: usize = 65536;

/// The kernels' `KIND` for a Q8_0 matrix in [planes](QuantMatrix::planes) (`Q8_0_PLANES`
/// in quant_blocks.wgsl; not a ggml type id).
pub(crate) const KIND_Q8_0_PLANES: u32 = 108;

/// The kernels' `KIND` for a matrix of type `ty`, in [planes](QuantMatrix::planes) or
/// not: its ggml type id, or [`KIND_Q8_0_PLANES`].
pub(crate) fn kernel_kind(ty: GgmlType, planes: bool) -> u32 {
    if planes {
        KIND_Q8_0_PLANES
    } else {
        ty.0
    }
}

/// The types the quantized kernels decode, with (elements, bytes) per block as the
/// kernels read them (F32 and F16 four elements at a time).
pub(crate) fn kernel_block(ty: GgmlType) -> Option<(usize, usize)> {
    match ty {
        GgmlType::F32 => Some((4, 16)),
        GgmlType::F16 => Some((4, 8)),
        GgmlType::Q4_0 => Some((32, 18)),
        GgmlType::Q4_1 => Some((32, 20)),
        GgmlType::Q8_0 => Some((32, 34)),
        GgmlType::Q4_K => Some((256, 144)),
        GgmlType::Q6_K => Some((256, 210)),
        _ => None,
    }
}

/// `(rows, cols)` of type `ty` on the device: row r (an output of `y = x Wᵀ`, or a row
/// of an embedding table) is bytes `r * row_bytes ..` of the buffer, or where `pages`
/// puts it.
pub(crate) struct QuantMatrix {
    pub(crate) buffer: wgpu::Buffer,
    pub(crate) ty: GgmlType,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    pub(crate) row_bytes: usize,
    pub(crate) pages: Option<Pages>,
    /// Q8_0 with each block's 32 quant bytes and its f16 scale in two planes: first
    /// every row's quants (row r at `r * row_bytes`, `row_bytes` = 32 a block, so every
    /// block's quants are two aligned four-word loads), then the scales block by block,
    /// `rows` rounded up to 8 per block (block b of row r at `(b * rows8 + r) * 2` past
    /// the quants), so that one four-word load holds the scales of eight consecutive
    /// rows. The same bytes as the file's 34-byte blocks, but for the rounding. On
    /// lavapipe a storage load costs the same whatever its width, and a file block
    /// straddles three aligned four-word loads: SmolLM2's logits head (49,152 Q8_0
    /// rows) took a sixth of a decoding step that way.
    pub(crate) planes: bool,
}

/// W's rows in pages a uniform binding can hold, for the quantized matmul's paged entry
/// (lavapipe's Q4_1 and Q4_0 products; `shaders/model/quant_matmul_paged.wgsl`). Chunk d
/// of [`PAGES`] pages holds rows `d * PAGES * rows ..`: page `4 g + j` of the chunk, at
/// slot s (bytes `s * row_bytes ..` of the page), holds the chunk's row `4 rows g + 4 s +
/// j`, so that one invocation reads its twelve columns from one slot of every page. Page
/// i starts at byte `i * stride` and is bound as [`PAGE_BYTES`] bytes, so the buffer ends
/// that far past the last page's start. Every other entry finds a row through the same
/// mapping (`row_at` in quant_matmul.wgsl).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pages {
    /// Rows (slots) a page.
    pub(crate) rows: usize,
    /// Bytes from one page's start to the next's.
    pub(crate) stride: usize,
    /// Chunks of [`PAGES`] pages: a paged product's dispatches.
    pub(crate) chunks: usize,
}

impl Pages {
    /// Pages for `rows` rows of `row_bytes` with at most `max_rows` a page, each page's
    /// start a multiple of `align`; `None` when a row does not fit a page.
    pub(crate) fn plan(
        rows: usize,
        row_bytes: usize,
        align: usize,
        max_rows: usize,
    ) -> Option<Self> {
        let most = (PAGE_BYTES / row_bytes.max(1)).min(max_rows);
        if most == 0 || rows == 0 || !row_bytes.is_multiple_of(4) {
            return None;
        }
        let chunks = rows.div_ceil(PAGES * most);
        let per = rows.div_ceil(PAGES * chunks);
        Some(Self {
            rows: per,
            stride: (per * row_bytes).next_multiple_of(align.max(4)),
            chunks,
        })
    }

    /// Bytes of the buffer: every page's start, and the last page's whole binding.
    pub(crate) fn bytes(&self) -> usize {
        (PAGES * self.chunks - 1) * self.stride + PAGE_BYTES
    }

    /// Byte offset of row c (as `row_at` in quant_matmul.wgsl).
    pub(crate) fn row_at(&self, c: usize, row_bytes: usize) -> usize {
        let (d, r) = (c / (PAGES * self.rows), c % (PAGES * self.rows));
        let page = d * PAGES + r / (4 * self.rows) * 4 + r % 4;
        page * self.stride + (r % (4 * self.rows)) / 4 * row_bytes
    }

    /// The tensor's bytes (`rows` rows of `row_bytes`) laid out in these pages.
    fn lay_out(&self, bytes: &[u8], row_bytes: usize) -> Vec<u8> {
        let mut out = vec![0u8; self.bytes()];
        for (c, row) in bytes.chunks_exact(row_bytes).enumerate() {
            let at = self.row_at(c, row_bytes);
            out[at..at + row_bytes].copy_from_slice(row);
        }
        out
    }
}

impl QuantMatrix {
    /// The kernels' `KIND` for this matrix ([`kernel_kind`]).
    pub(crate) fn kind(&self) -> u32 {
        kernel_kind(self.ty, self.planes)
    }

    /// Uploads `bytes`, `rows` rows of `cols` elements of type `ty`.
    ///
    /// # Errors
    /// [`AttentionError::Unsupported`] for a type the kernels do not decode;
    /// [`AttentionError::Shape`] when `cols` is not whole blocks (four elements for F32
    /// and F16) or `bytes` is not `rows` such rows; [`AttentionError::TooLarge`] past
    /// 32-bit byte offsets or the device's limits.
    pub(crate) fn upload(
        ctx: &GpuContext,
        label: &str,
        ty: GgmlType,
        (rows, cols): (usize, usize),
        bytes: &[u8],
    ) -> Result<Self> {
        Self::upload_laid_out(ctx, label, ty, (rows, cols), bytes, Layout::Rows)
    }

    /// [`QuantMatrix::upload`] for a matrix the quantized matmul reads: in [`Pages`]
    /// where the paged entry will read it (Q4_1 and Q4_0 products on a CPU driver with
    /// 8-lane subgroups, which can bind [`PAGES`] uniform pages), unless the pages would
    /// take more than a quarter more memory than the rows (a small matrix: each buffer
    /// ends a whole page binding past its last page's start).
    ///
    /// # Errors
    /// As [`QuantMatrix::upload`].
    pub(crate) fn upload_for_products(
        ctx: &GpuContext,
        label: &str,
        ty: GgmlType,
        shape: (usize, usize),
        bytes: &[u8],
    ) -> Result<Self> {
        let forced = ctx.memo.get::<ForcedPages, usize>(&ForcedPages);
        let layout = match forced {
            _ if !pages_serve(ctx, ty) => Layout::Rows,
            Some(rows) => Layout::Paged(rows),
            None => Layout::PagedIfSmall,
        };
        Self::upload_laid_out(ctx, label, ty, shape, bytes, layout)
    }

    /// [`QuantMatrix::upload`] for an embedding table or a logits head, which only the
    /// embedding gather and one-row products read: Q8_0 in
    /// [planes](QuantMatrix::planes) where one-row products take the subgroup entry
    /// (lavapipe), else rows as stored.
    ///
    /// # Errors
    /// As [`QuantMatrix::upload`].
    pub(crate) fn upload_table(
        ctx: &GpuContext,
        label: &str,
        ty: GgmlType,
        shape: (usize, usize),
        bytes: &[u8],
    ) -> Result<Self> {
        let layout = if planes_serve(ctx, ty) {
            Layout::Planes
        } else {
            Layout::Rows
        };
        Self::upload_laid_out(ctx, label, ty, shape, bytes, layout)
    }

    /// Q8_0 `bytes` uploaded in [planes](QuantMatrix::planes) on any adapter (the tests
    /// of every entry).
    ///
    /// # Errors
    /// As [`QuantMatrix::upload`]; [`AttentionError::Unsupported`] for another type.
    pub(crate) fn upload_planes(
        ctx: &GpuContext,
        label: &str,
        ty: GgmlType,
        shape: (usize, usize),
        bytes: &[u8],
    ) -> Result<Self> {
        if ty != GgmlType::Q8_0 {
            return Err(AttentionError::Unsupported(format!(
                "{label}: only Q8_0 is kept in planes, not {}",
                ty.name()
            )));
        }
        Self::upload_laid_out(ctx, label, ty, shape, bytes, Layout::Planes)
    }

    /// [`QuantMatrix::upload`] in [`Pages`] of at most `max_rows` rows whatever the
    /// memory they take (the edge-shape tests), rows as stored where a row does not fit
    /// a page.
    ///
    /// # Errors
    /// As [`QuantMatrix::upload`].
    pub(crate) fn upload_paged(
        ctx: &GpuContext,
        label: &str,
        ty: GgmlType,
        shape: (usize, usize),
        bytes: &[u8],
        max_rows: usize,
    ) -> Result<Self> {
        Self::upload_laid_out(ctx, label, ty, shape, bytes, Layout::Paged(max_rows))
    }

    fn upload_laid_out(
        ctx: &GpuContext,
        label: &str,
        ty: GgmlType,
        (rows, cols): (usize, usize),
        bytes: &[u8],
        layout: Layout,
    ) -> Result<Self> {
        let (per, size) = kernel_block(ty).ok_or_else(|| {
            AttentionError::Unsupported(format!("{label}: the kernels do not decode {}", ty.name()))
        })?;
        if cols == 0 || !cols.is_multiple_of(per) || rows == 0 {
            return Err(AttentionError::shape(
                "weights",
                format!(
                    "{label}: {rows} rows of {cols} are not whole {} blocks of {per}",
                    ty.name()
                ),
            ));
        }
        let row_bytes = cols / per * size;
        if rows.checked_mul(row_bytes) != Some(bytes.len()) {
            return Err(AttentionError::shape(
                "weights",
                format!(
                    "{label}: {} bytes for {rows} rows of {row_bytes}",
                    bytes.len()
                ),
            ));
        }
        if u32::try_from(bytes.len() + 8).is_err() {
            return Err(AttentionError::TooLarge {
                arg: "weights",
                detail: format!("{label}: {} bytes exceed 32-bit offsets", bytes.len()),
            });
        }
        if matches!(layout, Layout::Planes) {
            let planes = planes_of(bytes, rows, cols / per);
            if u32::try_from(planes.len() + 16).is_err() {
                return Err(AttentionError::TooLarge {
                    arg: "weights",
                    detail: format!("{label}: {} bytes exceed 32-bit offsets", planes.len()),
                });
            }
            let buffer = upload_words(ctx, label, &planes, wgpu::BufferUsages::STORAGE)?;
            return Ok(Self {
                planes: true,
                ..Self::rows(buffer, ty, (rows, cols), cols / per * 32)
            });
        }
        let align = ctx.limits.min_uniform_buffer_offset_alignment as usize;
        let pages = match layout {
            Layout::Rows | Layout::Planes => None,
            Layout::Paged(max_rows) => Pages::plan(rows, row_bytes, align, max_rows),
            Layout::PagedIfSmall => Pages::plan(rows, row_bytes, align, usize::MAX)
                .filter(|p| p.bytes() <= bytes.len() + bytes.len() / 4),
        };
        let buffer = match pages {
            Some(p) if u32::try_from(p.bytes() + 8).is_ok() => {
                let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::UNIFORM;
                upload_words(ctx, label, &p.lay_out(bytes, row_bytes), usage)?
            }
            _ => {
                let buffer = upload_words(ctx, label, bytes, wgpu::BufferUsages::STORAGE)?;
                return Ok(Self::rows(buffer, ty, (rows, cols), row_bytes));
            }
        };
        Ok(Self {
            pages,
            ..Self::rows(buffer, ty, (rows, cols), row_bytes)
        })
    }

    fn rows(
        buffer: wgpu::Buffer,
        ty: GgmlType,
        (rows, cols): (usize, usize),
        row_bytes: usize,
    ) -> Self {
        Self {
            buffer,
            ty,
            rows,
            cols,
            row_bytes,
            pages: None,
            planes: false,
        }
    }

    /// Device bytes the matrix occupies.
    pub(crate) fn device_bytes(&self) -> u64 {
        self.buffer.size()
    }
}

/// The memo key of [`force_pages`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct ForcedPages;

/// Makes [`QuantMatrix::upload_for_products`] on `ctx` from now on keep every matrix the
/// paged entry can read in pages of at most `rows` rows, whatever the memory they take.
pub(crate) fn force_pages(ctx: &GpuContext, rows: usize) {
    ctx.memo.insert(ForcedPages, rows);
}

/// How [`QuantMatrix::upload_laid_out`] stores the rows.
#[derive(Debug, Clone, Copy)]
enum Layout {
    /// One after another, as in the file.
    Rows,
    /// In [`Pages`] of at most this many rows.
    Paged(usize),
    /// In [`Pages`] where they take at most a quarter more memory.
    PagedIfSmall,
    /// Q8_0 in [planes](QuantMatrix::planes).
    Planes,
}

/// Q8_0 `bytes` (`rows` rows of `blocks` 34-byte blocks) rearranged into
/// [planes](QuantMatrix::planes): every block's 32 quant bytes in row order, then the
/// f16 scales block by block with `rows` rounded up to 8 (the rest zeros).
fn planes_of(bytes: &[u8], rows: usize, blocks: usize) -> Vec<u8> {
    let rows8 = rows.next_multiple_of(8);
    let quants = rows * blocks * 32;
    let mut out = vec![0u8; quants + rows8 * blocks * 2];
    for (n, block) in bytes.chunks_exact(34).enumerate() {
        let (r, b) = (n / blocks, n % blocks);
        out[n * 32..n * 32 + 32].copy_from_slice(&block[2..]);
        let at = quants + (b * rows8 + r) * 2;
        out[at..at + 2].copy_from_slice(&block[..2]);
    }
    out
}

/// Whether a Q8_0 table on `ctx` is kept in [planes](QuantMatrix::planes): where one-row
/// products take the subgroup entry (a CPU driver's 8-lane subgroups), which reads them
/// in four-word loads.
pub(crate) fn planes_serve(ctx: &GpuContext, ty: GgmlType) -> bool {
    ty == GgmlType::Q8_0 && lanes_adapter(ctx) && !split_products(ctx)
}

/// Whether products of type `ty` on `ctx` take the paged entry: Q4_1 or Q4_0 on a CPU
/// driver with 8-lane subgroups (the subgroup entry's adapters) that can bind the
/// entry's [`PAGES`] pages beside its three other uniform buffers, where few-row
/// products do not split K across lanes.
pub(crate) fn pages_serve(ctx: &GpuContext, ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q4_1 | GgmlType::Q4_0)
        && lanes_adapter(ctx)
        && !split_products(ctx)
        && ctx.limits.max_uniform_buffers_per_shader_stage as usize >= PAGES + 3
        && ctx.limits.max_uniform_buffer_binding_size as usize >= PAGE_BYTES
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row lands at its own whole-row place inside the buffer, no two overlap, and
    /// chunk d's page 4 g + j, slot s holds row d * 12 S + 4 S g + 4 s + j.
    #[test]
    fn pages_hold_every_row_once_where_the_paged_entry_reads_it() {
        for (rows, row_bytes, max_rows) in [
            (1, 20, usize::MAX),
            (5, 20, usize::MAX),
            (100, 40, 3),
            (3072, 360, usize::MAX),
            (576, 960, usize::MAX),
            (49_152, 612, usize::MAX),
            (2000, 40, 7),
        ] {
            let p = Pages::plan(rows, row_bytes, 256, max_rows).expect("pages");
            assert!(p.rows * row_bytes <= PAGE_BYTES && p.rows <= max_rows);
            assert!(p.chunks * PAGES * p.rows >= rows, "{p:?} holds every row");
            assert_eq!(p.stride % 256, 0);
            let mut starts: Vec<usize> = (0..rows).map(|c| p.row_at(c, row_bytes)).collect();
            for (c, &at) in starts.iter().enumerate() {
                let (d, r) = (c / (PAGES * p.rows), c % (PAGES * p.rows));
                let (g, s, j) = (r / (4 * p.rows), r % (4 * p.rows) / 4, r % 4);
                let page = d * PAGES + 4 * g + j;
                assert_eq!(at, page * p.stride + s * row_bytes, "row {c} of {rows}");
                assert!(
                    at + row_bytes <= p.bytes(),
                    "row {c} of {rows} inside the buffer"
                );
            }
            starts.sort_unstable();
            assert!(
                starts.windows(2).all(|w| w[1] >= w[0] + row_bytes),
                "rows of {rows} overlap"
            );
        }
        assert_eq!(
            Pages::plan(4, 65_540, 256, usize::MAX),
            None,
            "a row past a page"
        );
        assert_eq!(
            Pages::plan(4, 18, 256, usize::MAX),
            None,
            "rows not whole words"
        );
    }
}
