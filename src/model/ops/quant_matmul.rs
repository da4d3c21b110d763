//! Launcher for `shaders/model/quant_matmul.wgsl`: `y = x Wᵀ` with W kept as its GGUF
//! blocks ([`QuantMatrix`]), dequantized in registers. Each invocation computes four
//! columns of y, so each x element is read once for four W rows, for one row of x (a
//! decoding step) or four. The pipelines of both tile heights are built per weight
//! type at prepare.

use std::sync::Arc;

use bytemuck::{Pod, Zeroable};

use super::glue::{
    pipeline_with, range, record_pass, uniform, whole, Binding, KernelPipeline, KernelSpec,
};
use super::quant_matrix::QuantMatrix;
use super::{shape_error, source, u32_of};
use crate::error::{AttentionError, Result};
use crate::model::llama::gguf::GgmlType;
use crate::{GpuContext, GpuTensor};

/// Bindings: params, x, the weight words, y.
pub(crate) const SPEC: KernelSpec = KernelSpec {
    name: "model_quant_matmul",
    source: source::QUANT_MATMUL,
    bindings: &[
        Binding::Uniform,
        Binding::Read,
        Binding::Read,
        Binding::ReadWrite,
    ],
    trusted: false,
};

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
    _pad: u32,
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

/// One product: `rows` rows of x, each `w.cols` wide, starting at element `x_off`, times
/// `w`'s rows, into `y` at `layout`.
pub(crate) struct QuantMatmul<'a> {
    pub x: &'a GpuTensor,
    pub x_off: usize,
    pub rows: usize,
    pub w: &'a QuantMatrix,
    pub y: &'a GpuTensor,
    pub layout: OutLayout,
}

/// The kernel's pipelines for a set of weight types, both tile heights each.
pub(crate) struct QuantMatmulKernel {
    pipes: Vec<(GgmlType, u32, Arc<KernelPipeline>)>,
}

/// Columns of y per invocation (`COLS` in the shader).
const TILE_COLS: u64 = 4;

/// Rows of y per invocation for a product of `rows` rows.
fn tile_rows(rows: usize) -> u32 {
    if rows == 1 {
        1
    } else {
        4
    }
}

impl QuantMatmulKernel {
    /// Builds (or finds cached) the pipelines for every type of `types`.
    ///
    /// # Errors
    /// A device error building a pipeline.
    pub(crate) async fn prepare(ctx: &GpuContext, types: &[GgmlType]) -> Result<Self> {
        let mut pipes = Vec::new();
        for &ty in types {
            for rows in [1u32, 4] {
                if pipes.iter().any(|(t, r, _)| *t == ty && *r == rows) {
                    continue;
                }
                let constants = [("KIND", f64::from(ty.0)), ("ROWS", f64::from(rows))];
                pipes.push((ty, rows, pipeline_with(ctx, &SPEC, &constants).await?));
            }
        }
        Ok(Self { pipes })
    }

    /// Records the product.
    ///
    /// # Errors
    /// [`AttentionError::Unsupported`] for a weight type not prepared;
    /// [`AttentionError::Shape`] when x or y is too small for the call, or no rows;
    /// [`AttentionError::TooLarge`] past 32-bit indices.
    pub(crate) fn record(
        &self,
        ctx: &GpuContext,
        encoder: &mut wgpu::CommandEncoder,
        call: &QuantMatmul<'_>,
    ) -> Result<()> {
        let (w, l) = (call.w, call.layout);
        let tile = tile_rows(call.rows);
        let pipe = self
            .pipes
            .iter()
            .find(|(t, r, _)| *t == w.ty && *r == tile)
            .map(|(_, _, p)| p)
            .ok_or_else(|| {
                AttentionError::Unsupported(format!(
                    "quant matmul: {} was not prepared",
                    w.ty.name()
                ))
            })?;
        let x_need = call.rows.saturating_mul(w.cols).saturating_add(call.x_off);
        if call.rows == 0 || call.x.len() < x_need {
            return Err(shape_error("quant matmul", "x", call.x, x_need));
        }
        let batches = call.rows.div_ceil(l.len.max(1));
        let y_need = batches
            .saturating_mul(l.heads)
            .saturating_mul(l.cap)
            .saturating_mul(l.dim);
        if l.heads.saturating_mul(l.dim) != w.rows
            || l.len == 0
            || l.off.saturating_add(l.len) > l.cap
            || call.y.len() < y_need
        {
            return Err(AttentionError::shape(
                "quant matmul",
                format!(
                    "y {:?} cannot hold {} rows of {} as {l:?}",
                    call.y.shape(),
                    call.rows,
                    w.rows
                ),
            ));
        }
        u32_of("quant matmul", x_need)?;
        u32_of("quant matmul", y_need)?;
        let params = QuantMatmulParams {
            rows: u32_of("quant matmul", call.rows)?,
            cols: u32_of("quant matmul", w.rows)?,
            inner: u32_of("quant matmul", w.cols)?,
            row_bytes: u32_of("quant matmul", w.row_bytes)?,
            x_off: u32_of("quant matmul", call.x_off)?,
            x_stride: u32_of("quant matmul", w.cols)?,
            out: [
                u32_of("quant matmul", l.len)?,
                u32_of("quant matmul", l.heads)?,
                u32_of("quant matmul", l.dim)?,
                u32_of("quant matmul", l.cap)?,
                u32_of("quant matmul", l.off)?,
            ],
            _pad: 0,
        };
        let groups =
            (w.rows as u64).div_ceil(64 * TILE_COLS) * (call.rows as u64).div_ceil(u64::from(tile));
        let params = uniform(ctx, "wgpu-attention quant_matmul params", &params)?;
        let resources = vec![
            params.as_entire_binding(),
            whole(call.x),
            range(&w.buffer, 0, w.buffer.size()),
            whole(call.y),
        ];
        record_pass(ctx, encoder, (SPEC.name, pipe), resources, groups)
    }
}
