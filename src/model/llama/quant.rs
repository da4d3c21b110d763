//! Dequantization exactly as ggml defines it (ggml-quants.c, and the Python `gguf`
//! package's `gguf.quants.dequantize`, which the fixtures check), in f32 arithmetic with
//! the same order of operations, so results are bit-identical:
//!
//! - Q4_0, blocks of 32 in 18 bytes: f16 scale `d`, 16 bytes of 4-bit values (low nibbles
//!   are elements 0..16, high nibbles 16..32); `x = d * (q - 8)`.
//! - Q4_1, blocks of 32 in 20 bytes: f16 `d`, f16 minimum `m`, 16 bytes of nibbles as
//!   Q4_0; `x = d * q + m`.
//! - Q8_0, blocks of 32 in 34 bytes: f16 `d`, 32 signed bytes; `x = d * q`.
//! - Q4_K, superblocks of 256 in 144 bytes: f16 `d`, f16 `dmin`, 12 bytes packing eight
//!   6-bit scales and eight 6-bit minimums, 128 bytes of nibbles. Each 64 elements take
//!   32 bytes: low nibbles with sub-block scale `2j`, high nibbles with `2j + 1`;
//!   `x = (d * sc) * q - dmin * m`.
//! - Q6_K, superblocks of 256 in 210 bytes: 128 bytes of low nibbles, 64 bytes of 2-bit
//!   high parts, sixteen signed 8-bit scales, f16 `d`; `x = (d * sc) * (q - 32)` with the
//!   scale of element `e` at `e / 16`.
//! - F16 and F32 as stored.

use half::f16;

/// The tensor types this crate reads, as error messages name them.
pub const SUPPORTED: &str = "F32, F16, Q4_0, Q4_1, Q8_0, Q4_K and Q6_K";

/// A ggml tensor element type, by its number in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GgmlType(pub u32);

impl GgmlType {
    pub const F32: Self = Self(0);
    pub const F16: Self = Self(1);
    pub const Q4_0: Self = Self(2);
    pub const Q4_1: Self = Self(3);
    pub const Q8_0: Self = Self(8);
    pub const Q4_K: Self = Self(12);
    pub const Q6_K: Self = Self(14);

    /// ggml's name of the type (`Q4_1`), or `type N` for one this reader does not know.
    pub fn name(self) -> String {
        const NAMES: [&str; 31] = [
            "F32", "F16", "Q4_0", "Q4_1", "Q4_2", "Q4_3", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q2_K",
            "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S",
            "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8", "I16", "I32", "I64", "F64", "IQ1_M",
            "BF16",
        ];
        NAMES
            .get(self.0 as usize)
            .map_or_else(|| format!("type {}", self.0), |s| (*s).to_string())
    }

    /// (elements per block, bytes per block) for the types this crate reads.
    pub fn block(self) -> Option<(u64, u64)> {
        match self {
            Self::F32 => Some((1, 4)),
            Self::F16 => Some((1, 2)),
            Self::Q4_0 => Some((32, 18)),
            Self::Q4_1 => Some((32, 20)),
            Self::Q8_0 => Some((32, 34)),
            Self::Q4_K => Some((256, 144)),
            Self::Q6_K => Some((256, 210)),
            _ => None,
        }
    }
}

fn f16_at(b: &[u8]) -> f32 {
    f16::from_le_bytes([b[0], b[1]]).to_f32()
}

/// Q4_K's sub-block `j` (0..8) scale and minimum from the 12 packed bytes.
fn q4k_scale_min(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        (
            (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4),
            (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
        )
    }
}

fn q4_0(block: &[u8], out: &mut Vec<f32>) {
    let d = f16_at(&block[0..2]);
    let qs = &block[2..18];
    out.extend(qs.iter().map(|&q| d * (f32::from(q & 0x0f) - 8.0)));
    out.extend(qs.iter().map(|&q| d * (f32::from(q >> 4) - 8.0)));
}

fn q4_1(block: &[u8], out: &mut Vec<f32>) {
    let (d, m) = (f16_at(&block[0..2]), f16_at(&block[2..4]));
    let qs = &block[4..20];
    out.extend(qs.iter().map(|&q| d * f32::from(q & 0x0f) + m));
    out.extend(qs.iter().map(|&q| d * f32::from(q >> 4) + m));
}

fn q8_0(block: &[u8], out: &mut Vec<f32>) {
    let d = f16_at(&block[0..2]);
    out.extend(block[2..34].iter().map(|&q| d * f32::from(q as i8)));
}

fn q4_k(block: &[u8], out: &mut Vec<f32>) {
    let (d, dmin) = (f16_at(&block[0..2]), f16_at(&block[2..4]));
    let scales = &block[4..16];
    for (j, qs) in block[16..144].chunks_exact(32).enumerate() {
        let (sc_lo, m_lo) = q4k_scale_min(2 * j, scales);
        let (sc_hi, m_hi) = q4k_scale_min(2 * j + 1, scales);
        let (d_lo, dm_lo) = (d * f32::from(sc_lo), dmin * f32::from(m_lo));
        let (d_hi, dm_hi) = (d * f32::from(sc_hi), dmin * f32::from(m_hi));
        out.extend(qs.iter().map(|&q| d_lo * f32::from(q & 0x0f) - dm_lo));
        out.extend(qs.iter().map(|&q| d_hi * f32::from(q >> 4) - dm_hi));
    }
}

fn q6_k(block: &[u8], out: &mut Vec<f32>) {
    let (ql_all, rest) = block.split_at(128);
    let (qh_all, rest) = rest.split_at(64);
    let (scales, d) = rest.split_at(16);
    let d = f16_at(d);
    let start = out.len();
    out.resize(start + 256, 0.0);
    let y = &mut out[start..];
    for half in 0..2 {
        let (ql, qh) = (&ql_all[64 * half..], &qh_all[32 * half..]);
        let sc = &scales[8 * half..];
        let y = &mut y[128 * half..];
        for l in 0..32 {
            let is = l / 16;
            let q = [
                (ql[l] & 0x0f) | ((qh[l] & 3) << 4),
                (ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4),
                (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4),
                (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4),
            ];
            for (part, &qv) in q.iter().enumerate() {
                let scale = d * f32::from(sc[is + 2 * part] as i8);
                y[32 * part + l] = scale * (f32::from(qv) - 32.0);
            }
        }
    }
}

/// Dequantizes `bytes` of type `ty`. The caller has checked that `bytes` is whole blocks
/// of a supported type ([`crate::model::llama::gguf::tensor_bytes`]); trailing bytes
/// that make no whole block are ignored and an unknown type yields nothing.
pub fn dequantize(ty: GgmlType, bytes: &[u8]) -> Vec<f32> {
    let blocks = |size: usize, per: usize, decode: fn(&[u8], &mut Vec<f32>)| {
        let mut out = Vec::with_capacity(bytes.len() / size * per);
        for block in bytes.chunks_exact(size) {
            decode(block, &mut out);
        }
        out
    };
    match ty {
        GgmlType::F32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        GgmlType::F16 => bytes.chunks_exact(2).map(f16_at).collect(),
        GgmlType::Q4_0 => blocks(18, 32, q4_0),
        GgmlType::Q4_1 => blocks(20, 32, q4_1),
        GgmlType::Q8_0 => blocks(34, 32, q8_0),
        GgmlType::Q4_K => blocks(144, 256, q4_k),
        GgmlType::Q6_K => blocks(210, 256, q6_k),
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

    #[test]
    fn q4_0_centres_nibbles_on_eight() {
        let mut block = Vec::new();
        block.extend(f16::from_f32(2.0).to_le_bytes());
        block.extend((0..16u8).map(|i| i | ((15 - i) << 4)));
        let x = dequantize(GgmlType::Q4_0, &block);
        for i in 0..16 {
            assert_eq!(x[i], 2.0 * (i as f32 - 8.0));
            assert_eq!(x[16 + i], 2.0 * (7.0 - i as f32));
        }
    }

    #[test]
    fn k_quants_fill_whole_superblocks() {
        assert_eq!(dequantize(GgmlType::Q4_K, &[0; 288]).len(), 512);
        assert_eq!(dequantize(GgmlType::Q6_K, &[0; 210]).len(), 256);
    }
}
