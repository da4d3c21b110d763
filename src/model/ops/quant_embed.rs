//! Launcher for `shaders/model/quant_embed.wgsl`: rows of an embedding table kept as its
//! GGUF blocks, dequantized into f32 rows.

use std::sync::Arc;

use bytemuck::{Pod, Zeroable};

use super::glue::{
    pipeline_with, range, record_pass, uniform, uniform_layout, whole, Binding, KernelPipeline,
    KernelSpec, Recorder, UniformLayout,
};
use super::quant_matrix::{kernel_block, QuantMatrix};
use super::{shape_error, source, u32_of};
use crate::error::{AttentionError, Result};
use crate::{GpuContext, GpuTensor};

/// Bindings: params, ids, the table's words, out.
pub(crate) const SPEC: KernelSpec = KernelSpec {
    name: "model_quant_embed",
    source: source::QUANT_EMBED,
    bindings: &[
        Binding::Uniform,
        Binding::Read,
        Binding::Read,
        Binding::ReadWrite,
    ],
    trusted: false,
    uniforms: &[params_uniform],
};

/// Must match the WGSL struct `QuantEmbed` in quant_embed.wgsl.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
pub(crate) struct QuantEmbedParams {
    rows: u32,
    hidden: u32,
    vocab: u32,
    row_bytes: u32,
}

/// [`QuantEmbedParams`] as the WGSL declares it.
fn params_uniform() -> UniformLayout {
    uniform_layout!(QuantEmbedParams as "QuantEmbed" { rows, hidden, vocab, row_bytes })
}

/// The gather, built for one table's type.
pub(crate) struct QuantEmbedKernel {
    pipe: Arc<KernelPipeline>,
    /// The table's [`QuantMatrix::kind`].
    kind: u32,
}

impl QuantEmbedKernel {
    /// Builds (or finds cached) the pipeline for `table`'s type.
    ///
    /// # Errors
    /// A device error building the pipeline.
    pub(crate) async fn prepare(ctx: &GpuContext, table: &QuantMatrix) -> Result<Self> {
        let constants = [("KIND", f64::from(table.kind()))];
        Ok(Self {
            pipe: pipeline_with(ctx, &SPEC, &constants).await?,
            kind: table.kind(),
        })
    }

    /// `out (rows, table.cols)` = rows `ids` of `table`.
    ///
    /// # Errors
    /// [`AttentionError::Shape`] when `out` or `ids` is too small, or `table` is not of
    /// the prepared type.
    pub(crate) fn record(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder<'_>,
        (ids, rows): (&wgpu::Buffer, usize),
        table: &QuantMatrix,
        out: &GpuTensor,
    ) -> Result<()> {
        let need = rows.saturating_mul(table.cols);
        if out.len() < need {
            return Err(shape_error("embeddings", "out", out, need));
        }
        if ids.size() < rows as u64 * 4 || rows == 0 || table.kind() != self.kind {
            return Err(AttentionError::shape(
                "embeddings",
                format!("{rows} ids in a buffer of {} bytes", ids.size()),
            ));
        }
        let (per, _) = kernel_block(table.ty).unwrap_or((4, 16));
        let blocks = u32_of("embeddings", need / per)?;
        let params = QuantEmbedParams {
            rows: u32_of("embeddings", rows)?,
            hidden: u32_of("embeddings", table.cols)?,
            vocab: u32_of("embeddings", table.rows)?,
            row_bytes: u32_of("embeddings", table.row_bytes)?,
        };
        let params = uniform(ctx, "wgpu-attention quant_embed params", &params)?;
        let resources = vec![
            params.as_entire_binding(),
            range(ids, 0, rows as u64 * 4),
            range(&table.buffer, 0, table.buffer.size()),
            whole(out),
        ];
        let groups = u64::from(blocks).div_ceil(64);
        record_pass(ctx, rec, (SPEC.name, &*self.pipe), resources, groups)
    }
}
