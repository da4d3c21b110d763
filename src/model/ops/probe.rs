//! The quantized kernels run on their own from host data, for the tests that check them
//! against the CPU dequantizer at edge shapes. Outputs start as NaN, so an element a
//! kernel fails to write shows.

use ndarray::{ArrayViewD, IxDyn};

use super::glue::{force_split_products, read_tensors, submit, upload_ids, Recorder};
use super::quant_matrix::force_pages;
use super::{OutLayout, QuantEmbedKernel, QuantMatmul, QuantMatmulKernel, QuantMatrix};
use crate::model::llama::quant::GgmlType;
use crate::model::ModelError;
use crate::{GpuContext, GpuTensor};

fn nan_tensor(ctx: &GpuContext, shape: &[usize]) -> Result<GpuTensor, ModelError> {
    let n = shape.iter().product::<usize>();
    let nan = vec![f32::NAN; n];
    let view = ArrayViewD::from_shape(IxDyn(shape), &nan)
        .map_err(|e| ModelError::format("probe", e.to_string()))?;
    Ok(GpuTensor::upload(ctx, "y", view)?)
}

/// Which entry point of the quantized matmul a probe runs.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuantEntry {
    /// The adapter's own choice (on lanes adapters, the subgroup entry for one row).
    Adapter,
    /// The entry adapters without subgroups run, also where the adapter has them.
    Plain,
    /// K split across lanes for at most 16 rows (what GPUs take), on any adapter.
    Split,
}

/// `y (rows, n) = x (rows, k) Wᵀ` with `w` the bytes of an `(n, k)` tensor of type `ty`,
/// on the entry point `entry`, so that every entry runs on one machine.
///
/// # Errors
/// As the launcher: a bad shape, an unsupported type, a device failure.
#[doc(hidden)]
pub async fn quant_matmul_probe(
    ctx: &GpuContext,
    entry: QuantEntry,
    ty: GgmlType,
    (n, k): (usize, usize),
    (w, x, rows): (&[u8], &[f32], usize),
) -> Result<Vec<f32>, ModelError> {
    let w = QuantMatrix::upload(ctx, "probe weights", ty, (n, k), w)?;
    quant_matmul_on(ctx, entry, &w, (x, rows)).await
}

/// [`quant_matmul_probe`] with W stored in uniform pages of at most `page_rows` rows
/// (where a row fits a page), as a model keeps its Q4_1 projections on lavapipe: the
/// adapter's products then take the paged entry, every other entry finds the
/// rows in the pages.
///
/// # Errors
/// As [`quant_matmul_probe`].
#[doc(hidden)]
pub async fn quant_matmul_paged_probe(
    ctx: &GpuContext,
    entry: QuantEntry,
    ty: GgmlType,
    (n, k): (usize, usize),
    (w, x, rows): (&[u8], &[f32], usize),
    page_rows: usize,
) -> Result<Vec<f32>, ModelError> {
    let w = QuantMatrix::upload_paged(ctx, "probe weights", ty, (n, k), w, page_rows)?;
    if w.pages.is_none() {
        return Err(ModelError::input(
            "page_rows",
            "these rows cannot be paged: a row must be whole words and fit a 64 KiB page",
        ));
    }
    quant_matmul_on(ctx, entry, &w, (x, rows)).await
}

/// [`quant_matmul_probe`] for Q8_0 with W in planes, as a model keeps its Q8_0 logits
/// head on lavapipe (QuantMatrix's `planes`), on any adapter and entry.
///
/// # Errors
/// As [`quant_matmul_probe`]; `Unsupported` for a type other than Q8_0.
#[doc(hidden)]
pub async fn quant_matmul_planes_probe(
    ctx: &GpuContext,
    entry: QuantEntry,
    (n, k): (usize, usize),
    (w, x, rows): (&[u8], &[f32], usize),
) -> Result<Vec<f32>, ModelError> {
    let w = QuantMatrix::upload_planes(ctx, "probe weights", GgmlType::Q8_0, (n, k), w)?;
    quant_matmul_on(ctx, entry, &w, (x, rows)).await
}

async fn quant_matmul_on(
    ctx: &GpuContext,
    entry: QuantEntry,
    w: &QuantMatrix,
    (x, rows): (&[f32], usize),
) -> Result<Vec<f32>, ModelError> {
    let (n, k) = (w.rows, w.cols);
    let xs = ArrayViewD::from_shape(IxDyn(&[rows, k]), x)
        .map_err(|e| ModelError::input("x", e.to_string()))?;
    let x = GpuTensor::upload(ctx, "x", xs)?;
    let y = nan_tensor(ctx, &[rows, n])?;
    let (subgroups, split) = match entry {
        QuantEntry::Adapter => (true, false),
        QuantEntry::Plain => (false, false),
        QuantEntry::Split => (false, true),
    };
    let kernel = QuantMatmulKernel::prepare_plain(ctx, &[w.kind()], subgroups, split).await?;
    let mut enc = ctx.device().create_command_encoder(&Default::default());
    let call = QuantMatmul::plain((&x, 0, rows), w, &y, OutLayout::rows(rows, n));
    kernel.record(ctx, &mut Recorder::new(&mut enc), &call)?;
    submit(ctx, enc, "quant matmul probe").await?;
    Ok(read_tensors(ctx, &[&y]).await?.remove(0))
}

/// Makes every few-row quantized product of the models run on `ctx` from now on take the
/// entry that splits K across lanes, as on GPUs, also where the adapter would not (as
/// `WGPU_ATTENTION_KERNEL=split-products` does for every context).
#[doc(hidden)]
pub fn force_split_products_for_tests(ctx: &GpuContext) {
    force_split_products(ctx);
}

/// Makes every model uploaded on `ctx` from now on keep the matrices the paged entry of
/// the quantized matmul reads (Q4_1, on lavapipe) in pages of at most `page_rows` rows,
/// also where the pages take more memory than the rows (small models).
#[doc(hidden)]
pub fn force_pages_for_tests(ctx: &GpuContext, page_rows: usize) {
    force_pages(ctx, page_rows);
}

/// Rows `ids` of a `(vocab, k)` table of type `ty`, dequantized on the device.
///
/// # Errors
/// As the launcher.
#[doc(hidden)]
pub async fn quant_embed_probe(
    ctx: &GpuContext,
    ty: GgmlType,
    (vocab, k): (usize, usize),
    table: &[u8],
    ids: &[u32],
) -> Result<Vec<f32>, ModelError> {
    let table = QuantMatrix::upload(ctx, "probe table", ty, (vocab, k), table)?;
    quant_embed_on(ctx, &table, ids).await
}

/// [`quant_embed_probe`] for a Q8_0 table in planes (QuantMatrix's `planes`).
///
/// # Errors
/// As [`quant_embed_probe`].
#[doc(hidden)]
pub async fn quant_embed_planes_probe(
    ctx: &GpuContext,
    (vocab, k): (usize, usize),
    table: &[u8],
    ids: &[u32],
) -> Result<Vec<f32>, ModelError> {
    let table = QuantMatrix::upload_planes(ctx, "probe table", GgmlType::Q8_0, (vocab, k), table)?;
    quant_embed_on(ctx, &table, ids).await
}

async fn quant_embed_on(
    ctx: &GpuContext,
    table: &QuantMatrix,
    ids: &[u32],
) -> Result<Vec<f32>, ModelError> {
    let k = table.cols;
    let out = nan_tensor(ctx, &[ids.len(), k])?;
    let ids_buffer = upload_ids(ctx, ids)?;
    let kernel = QuantEmbedKernel::prepare(ctx, table).await?;
    let mut enc = ctx.device().create_command_encoder(&Default::default());
    kernel.record(
        ctx,
        &mut Recorder::new(&mut enc),
        (&ids_buffer, ids.len()),
        table,
        &out,
    )?;
    submit(ctx, enc, "quant embed probe").await?;
    Ok(read_tensors(ctx, &[&out]).await?.remove(0))
}
