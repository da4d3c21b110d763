//! Rotary position embedding in the layout llama.cpp's GGUF converter leaves the q and k
//! rows in: within each head, elements `2i` and `2i + 1` form pair `i`, rotated by
//! `pos * theta^(-2i / D)`. (The converter permutes Hugging Face's rows, whose pairs are
//! `i` and `i + D/2` rotated with `rotate_half`, into this order; the reference generator
//! un-permutes instead, so the two conventions check each other.)

use crate::model::cpu_float::CpuFloat;

/// The rotation frequencies of one head width.
#[derive(Debug, Clone)]
pub(crate) struct Rope {
    inv_freq: Vec<f64>,
}

impl Rope {
    pub(crate) fn new(head_dim: usize, theta: f64) -> Self {
        let half = head_dim / 2;
        Self {
            inv_freq: (0..half)
                .map(|i| theta.powf(-2.0 * i as f64 / head_dim as f64))
                .collect(),
        }
    }

    /// Rotates every head in `x` (heads of `2 * inv_freq.len()` values, back to back) as
    /// the token at `pos`.
    /// The angle is computed in f64 whatever `T` is, so long positions lose nothing to it.
    pub(crate) fn apply<T: CpuFloat>(&self, x: &mut [T], pos: usize) {
        let d = 2 * self.inv_freq.len();
        for head in x.chunks_exact_mut(d.max(1)) {
            for (pair, f) in head.chunks_exact_mut(2).zip(&self.inv_freq) {
                let (s, c) = (pos as f64 * f).sin_cos();
                let (s, c) = (T::of64(s), T::of64(c));
                let (a, b) = (pair[0], pair[1]);
                pair[0] = a * c - b * s;
                pair[1] = a * s + b * c;
            }
        }
    }

    /// `(positions, D/2, 2)` cos and sin for positions `0..positions`, rounded to f32:
    /// the table the GPU kernel reads, computed here in f64 so long positions lose no
    /// precision to an f32 angle.
    pub(crate) fn table(&self, positions: usize) -> Vec<f32> {
        let mut out = Vec::with_capacity(positions * self.inv_freq.len() * 2);
        for pos in 0..positions {
            for f in &self.inv_freq {
                let (s, c) = (pos as f64 * f).sin_cos();
                out.push(c as f32);
                out.push(s as f32);
            }
        }
        out
    }
}
