//! Dequantization exactly as ggml defines it (ggml-quants.c), in f32 arithmetic:
//!
//! - Q4_1, blocks of 32: f16 scale `d`, f16 minimum `m`, 16 bytes of 4-bit values; the
//!   low nibbles are elements 0..16 and the high nibbles 16..32; `x = d * q + m`.
//! - Q8_0, blocks of 32: f16 scale `d`, 32 signed bytes; `x = d * q`.
//! - F16 and F32 as stored.

use half::f16;

use crate::model::llama::gguf::GgmlType;

fn f16_at(b: &[u8]) -> f32 {
    f16::from_le_bytes([b[0], b[1]]).to_f32()
}

/// Dequantizes `bytes` of type `ty`. The caller has checked that `bytes` is whole blocks
/// of a supported type ([`crate::model::llama::gguf::tensor_bytes`]); trailing bytes
/// that make no whole block are ignored and an unknown type yields nothing.
pub fn dequantize(ty: GgmlType, bytes: &[u8]) -> Vec<f32> {
    match ty {
        GgmlType::F32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        GgmlType::F16 => bytes.chunks_exact(2).map(f16_at).collect(),
        GgmlType::Q4_1 => {
            let mut out = Vec::with_capacity(bytes.len() / 20 * 32);
            for block in bytes.chunks_exact(20) {
                let (d, m) = (f16_at(&block[0..2]), f16_at(&block[2..4]));
                let qs = &block[4..20];
                out.extend(qs.iter().map(|&q| d * f32::from(q & 0x0f) + m));
                out.extend(qs.iter().map(|&q| d * f32::from(q >> 4) + m));
            }
            out
        }
        GgmlType::Q8_0 => {
            let mut out = Vec::with_capacity(bytes.len() / 34 * 32);
            for block in bytes.chunks_exact(34) {
                let d = f16_at(&block[0..2]);
                out.extend(block[2..34].iter().map(|&q| d * f32::from(q as i8)));
            }
            out
        }
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q4_1_low_nibbles_first_then_high() {
        let mut block = Vec::new();
        block.extend(f16::from_f32(0.5).to_le_bytes());
        block.extend(f16::from_f32(-1.0).to_le_bytes());
        block.extend((0..16u8).map(|i| i | ((15 - i) << 4)));
        let x = dequantize(GgmlType::Q4_1, &block);
        assert_eq!(x.len(), 32);
        for i in 0..16 {
            assert_eq!(x[i], 0.5 * i as f32 - 1.0);
            assert_eq!(x[16 + i], 0.5 * (15 - i) as f32 - 1.0);
        }
    }

    #[test]
    fn q8_0_signed_bytes_times_scale() {
        let mut block = Vec::new();
        block.extend(f16::from_f32(0.25).to_le_bytes());
        block.extend((0..32i8).map(|i| (i - 16) as u8));
        let x = dequantize(GgmlType::Q8_0, &block);
        for (i, v) in x.iter().enumerate() {
            assert_eq!(*v, 0.25 * (i as f32 - 16.0));
        }
    }
}
