//! A weight matrix on the device as its GGUF blocks: the tensor's bytes uploaded as they
//! are stored in the file (one copy, whatever reads it), with what the kernels need to
//! find a row and decode it.

use super::glue::upload_words;
use crate::error::{AttentionError, Result};
use crate::model::llama::quant::GgmlType;
use crate::GpuContext;

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
/// of an embedding table) is bytes `r * row_bytes ..` of the buffer.
pub(crate) struct QuantMatrix {
    pub(crate) buffer: wgpu::Buffer,
    pub(crate) ty: GgmlType,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    pub(crate) row_bytes: usize,
}

impl QuantMatrix {
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
        Ok(Self {
            buffer: upload_words(ctx, label, bytes)?,
            ty,
            rows,
            cols,
            row_bytes,
        })
    }

    /// Device bytes the matrix occupies.
    pub(crate) fn device_bytes(&self) -> u64 {
        self.buffer.size()
    }
}
