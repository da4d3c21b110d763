//! The arithmetic the models' CPU forward passes share, in the two precisions they run in.
//!
//! - `f64` is the reference every model test compares the other paths against: plain
//!   loops that follow the formulas, f32 weights promoted as they are read, attention with
//!   the full softmax row. It is slow on purpose: nothing in it is clever.
//! - `f32` is the fast path behind `--backend cpu`: matrix products through
//!   `matrixmultiply` (by way of ndarray's `general_mat_mul`) with the output columns split
//!   across rayon's threads, a threaded dot-product loop for one or two rows (decoding,
//!   where a blocked product would spend its time packing the weights), and attention
//!   through [`attention_cpu`], the crate's fast flash-attention path, so the semantics are
//!   those every other path is tested against.
//!
//! The forward passes themselves (`bert/cpu.rs`, `llama/cpu.rs`) are written once, generic
//! over [`CpuFloat`].

use ndarray::{linalg::general_mat_mul, ArrayView2, ArrayView4, ArrayViewMut2, Axis};
use num_traits::Float;

use crate::cpu::attention_cpu;
use crate::error::AttentionError;
use crate::options::{Alignment, AttentionOptions};

/// The heads of one layer's attention over rows of packed heads: `q` is `(L, Hq·D)`, `k`
/// and `v` are `(T, Hkv·D)` for `T ≥ L` keys; when `causal`, query row `i` is the token at
/// position `T − L + i` and sees keys `0..=T − L + i` (the bottom-right rule a cache needs).
pub(crate) struct Heads<'a, T> {
    pub q: &'a [T],
    pub k: &'a [T],
    pub v: &'a [T],
    pub heads_q: usize,
    pub heads_kv: usize,
    pub dim: usize,
    pub causal: bool,
    pub want_weights: bool,
}

impl<T> Heads<'_, T> {
    fn rows(&self) -> (usize, usize) {
        let width_kv = self.heads_kv * self.dim;
        (
            self.q.len() / (self.heads_q * self.dim).max(1),
            self.k.len() / width_kv.max(1),
        )
    }
}

/// What [`CpuFloat::attention`] gives back: the context rows `(L, Hq·D)` and, when asked,
/// the probabilities `(Hq, L, T)`.
pub(crate) struct HeadsOut<T> {
    pub context: Vec<T>,
    pub weights: Option<Vec<T>>,
}

/// A float the CPU forward passes run in.
pub(crate) trait CpuFloat:
    Float + std::iter::Sum + std::ops::AddAssign + Default + Send + Sync + 'static
{
    fn of(v: f32) -> Self;
    fn of64(v: f64) -> Self;
    fn to64(self) -> f64;

    /// `y (rows, out) = x (rows, inner) · Wᵀ` for `w (out, inner)` in f32.
    fn matmul(x: &[Self], rows: usize, w: &[f32], inner: usize) -> Vec<Self>;

    /// Softmax attention of every query head, scale `1/√D`.
    ///
    /// # Errors
    /// [`AttentionError::TooLarge`] when the fast path's outputs do not fit in memory.
    fn attention(h: Heads<'_, Self>) -> Result<HeadsOut<Self>, AttentionError>;
}

impl CpuFloat for f64 {
    fn of(v: f32) -> Self {
        f64::from(v)
    }
    fn of64(v: f64) -> Self {
        v
    }
    fn to64(self) -> f64 {
        self
    }

    fn matmul(x: &[f64], rows: usize, w: &[f32], inner: usize) -> Vec<f64> {
        let out = w.len().checked_div(inner).unwrap_or(0);
        let mut y = Vec::with_capacity(rows * out);
        for xr in x.chunks_exact(inner.max(1)).take(rows) {
            y.extend(w.chunks_exact(inner.max(1)).map(|wr| dot64(xr, wr)));
        }
        y.resize(rows * out, 0.0);
        y
    }

    fn attention(h: Heads<'_, f64>) -> Result<HeadsOut<f64>, AttentionError> {
        let (l, total) = h.rows();
        let (hq, hd) = (h.heads_q, h.dim);
        let (group, kvw) = (hq / h.heads_kv.max(1), h.heads_kv * hd);
        let scale = 1.0 / (hd as f64).sqrt();
        let mut context = vec![0.0; l * hq * hd];
        let mut weights = h.want_weights.then(|| vec![0.0; hq * l * total]);
        let mut p = vec![0.0; total];
        for head in 0..hq {
            let g = head / group.max(1);
            for t in 0..l {
                let qr = &h.q[(t * hq + head) * hd..(t * hq + head + 1) * hd];
                let seen = if h.causal { total - l + t + 1 } else { total };
                let mut max = f64::NEG_INFINITY;
                for (j, pj) in p.iter_mut().enumerate().take(seen) {
                    let kr = &h.k[j * kvw + g * hd..j * kvw + (g + 1) * hd];
                    *pj = scale * qr.iter().zip(kr).map(|(a, b)| a * b).sum::<f64>();
                    max = max.max(*pj);
                }
                let mut sum = 0.0;
                for pj in &mut p[..seen] {
                    *pj = (*pj - max).exp();
                    sum += *pj;
                }
                let or = &mut context[(t * hq + head) * hd..(t * hq + head + 1) * hd];
                for (j, pj) in p[..seen].iter_mut().enumerate() {
                    *pj /= sum;
                    let vr = &h.v[j * kvw + g * hd..j * kvw + (g + 1) * hd];
                    for (od, vd) in or.iter_mut().zip(vr) {
                        *od += *pj * vd;
                    }
                }
                if let Some(w) = weights.as_mut() {
                    let base = (head * l + t) * total;
                    w[base..base + seen].copy_from_slice(&p[..seen]);
                }
            }
        }
        Ok(HeadsOut { context, weights })
    }
}

/// A dot product of f64 activations with f32 weights, in four running sums.
fn dot64(x: &[f64], w: &[f32]) -> f64 {
    let mut acc = [0.0f64; 4];
    let (xc, wc) = (x.chunks_exact(4), w.chunks_exact(4));
    let tail: f64 = xc
        .remainder()
        .iter()
        .zip(wc.remainder())
        .map(|(a, &b)| a * f64::from(b))
        .sum();
    for (a, b) in xc.zip(wc) {
        for i in 0..4 {
            acc[i] += a[i] * f64::from(b[i]);
        }
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3]) + tail
}

impl CpuFloat for f32 {
    fn of(v: f32) -> Self {
        v
    }
    fn of64(v: f64) -> Self {
        v as f32
    }
    fn to64(self) -> f64 {
        f64::from(self)
    }

    fn matmul(x: &[f32], rows: usize, w: &[f32], inner: usize) -> Vec<f32> {
        let out = w.len().checked_div(inner).unwrap_or(0);
        let mut y = vec![0.0f32; rows * out];
        if rows == 0 || out == 0 || inner == 0 || x.len() < rows * inner {
            return y;
        }
        let (Ok(xv), Ok(wv), Ok(mut yv)) = (
            ArrayView2::from_shape((rows, inner), &x[..rows * inner]),
            ArrayView2::from_shape((out, inner), &w[..out * inner]),
            ArrayViewMut2::from_shape((rows, out), &mut y[..]),
        ) else {
            return y; // the shapes above are the slices' own lengths
        };
        // Column blocks of the output, one per task: each multiplies all of x by a slab
        // of W's rows, so no two tasks write the same element. One or two rows are dot
        // products (a blocked product would spend its time packing the slab).
        let few = rows <= FEW_ROWS;
        let cols = out.div_ceil(threads()).max(if few { 16 } else { 64 });
        let tasks: Vec<_> = yv
            .axis_chunks_iter_mut(Axis(1), cols)
            .zip(wv.axis_chunks_iter(Axis(0), cols))
            .collect();
        for_each(tasks, |(mut yc, wc)| match few {
            true => dots(xv, wc, yc),
            false => general_mat_mul(1.0, &xv, &wc.t(), 0.0, &mut yc),
        });
        y
    }

    fn attention(h: Heads<'_, f32>) -> Result<HeadsOut<f32>, AttentionError> {
        let (l, total) = h.rows();
        let (hq, hkv, hd) = (h.heads_q, h.heads_kv, h.dim);
        let (q, k, v) = (
            heads_view(h.q, l, hq, hd)?,
            heads_view(h.k, total, hkv, hd)?,
            heads_view(h.v, total, hkv, hd)?,
        );
        let opts = AttentionOptions {
            causal: h.causal,
            alignment: Alignment::BottomRight,
            return_weights: h.want_weights,
            ..Default::default()
        };
        let out = attention_cpu(q, k, v, &opts)?;
        // `(1, Hq, L, D)` back to packed rows `(L, Hq·D)`.
        let context: Vec<f32> = out
            .out
            .permuted_axes([0, 2, 1, 3])
            .iter()
            .copied()
            .collect();
        let weights = out.weights.map(|w| w.iter().copied().collect());
        Ok(HeadsOut { context, weights })
    }
}

/// Packed rows `(L, H·D)` seen as `(1, H, L, D)` without a copy.
fn heads_view(
    x: &[f32],
    rows: usize,
    heads: usize,
    dim: usize,
) -> Result<ArrayView4<'_, f32>, AttentionError> {
    ArrayView4::from_shape((1, rows, heads, dim), x)
        .map(|a| a.permuted_axes([0, 2, 1, 3]))
        .map_err(|e| AttentionError::Shape {
            arg: "model attention rows",
            detail: e.to_string(),
        })
}

/// Up to this many rows, a product is one dot product per output element: for one or two
/// rows a blocked product spends more time packing W than multiplying.
const FEW_ROWS: usize = 2;

/// `y (rows, width) = x · wᵀ` for a slab `w (width, inner)`, element by element, with the
/// widest vector instructions this CPU has: one token's products are a stream through
/// every weight, and SSE2's 4 lanes leave half of a core's loads unused.
fn dots(x: ArrayView2<'_, f32>, w: ArrayView2<'_, f32>, y: ArrayViewMut2<'_, f32>) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has just been found to support AVX-512F.
            return unsafe { dots_avx512(x, w, y) };
        }
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has just been found to support AVX2.
            return unsafe { dots_avx2(x, w, y) };
        }
    }
    dots_body(x, w, y);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn dots_avx512(x: ArrayView2<'_, f32>, w: ArrayView2<'_, f32>, y: ArrayViewMut2<'_, f32>) {
    dots_body(x, w, y);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn dots_avx2(x: ArrayView2<'_, f32>, w: ArrayView2<'_, f32>, y: ArrayViewMut2<'_, f32>) {
    dots_body(x, w, y);
}

/// x and w are row-major (views of whole rows), so each of their rows is one slice.
#[inline(always)]
fn dots_body(x: ArrayView2<'_, f32>, w: ArrayView2<'_, f32>, mut y: ArrayViewMut2<'_, f32>) {
    for (c, wr) in w.rows().into_iter().enumerate() {
        let wr = wr.to_slice().unwrap_or_default();
        for (r, xr) in x.rows().into_iter().enumerate() {
            y[[r, c]] = dot32(xr.to_slice().unwrap_or_default(), wr);
        }
    }
}

/// A dot product in 32 running sums: several independent vector chains, so additions do
/// not wait on each other, whatever the vector width.
#[inline(always)]
fn dot32(x: &[f32], w: &[f32]) -> f32 {
    const LANES: usize = 32;
    let mut acc = [0.0f32; LANES];
    let (xc, wc) = (x.chunks_exact(LANES), w.chunks_exact(LANES));
    let tail: f32 = xc
        .remainder()
        .iter()
        .zip(wc.remainder())
        .map(|(a, b)| a * b)
        .sum();
    for (a, b) in xc.zip(wc) {
        for i in 0..LANES {
            acc[i] += a[i] * b[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

#[cfg(not(target_arch = "wasm32"))]
fn threads() -> usize {
    rayon::current_num_threads().max(1)
}

#[cfg(target_arch = "wasm32")]
fn threads() -> usize {
    1
}

#[cfg(not(target_arch = "wasm32"))]
fn for_each<I: Send>(items: Vec<I>, f: impl Fn(I) + Send + Sync) {
    use rayon::prelude::*;
    items.into_par_iter().for_each(f);
}

#[cfg(target_arch = "wasm32")]
fn for_each<I: Send>(items: Vec<I>, f: impl Fn(I) + Send + Sync) {
    items.into_iter().for_each(f);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(n: usize, seed: usize) -> Vec<f32> {
        (0..n)
            .map(|i| (((i * 31 + seed * 17) % 97) as f32 - 48.0) / 40.0)
            .collect()
    }

    /// The fast products (dot loop and blocked, several column blocks) equal the float64 ones.
    #[test]
    fn f32_matmul_matches_f64_at_every_row_count() {
        for (rows, inner, out) in [(1, 7, 5), (2, 64, 300), (3, 33, 129), (9, 384, 1536)] {
            let (x, w) = (pattern(rows * inner, 1), pattern(out * inner, 2));
            let x64: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
            let want = f64::matmul(&x64, rows, &w, inner);
            let got = f32::matmul(&x, rows, &w, inner);
            assert_eq!(got.len(), rows * out);
            for (i, (g, e)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (f64::from(*g) - e).abs() <= 1e-4 * (1.0 + e.abs()),
                    "({rows}, {inner}, {out}) element {i}: {g} against {e}"
                );
            }
        }
    }

    /// The fast attention of packed heads (GQA, causal with a cache prefix) equals the loops.
    #[test]
    fn f32_attention_matches_f64_with_a_prefix_and_grouped_heads() {
        let (l, total, hq, hkv, d) = (3, 7, 4, 2, 8);
        let (q, k, v) = (
            pattern(l * hq * d, 3),
            pattern(total * hkv * d, 4),
            pattern(total * hkv * d, 5),
        );
        let up = |x: &[f32]| x.iter().map(|&a| f64::from(a)).collect::<Vec<f64>>();
        let (q64, k64, v64) = (up(&q), up(&k), up(&v));
        for causal in [false, true] {
            let fast = f32::attention(Heads {
                q: &q,
                k: &k,
                v: &v,
                heads_q: hq,
                heads_kv: hkv,
                dim: d,
                causal,
                want_weights: true,
            })
            .expect("fast attention");
            let exact = f64::attention(Heads {
                q: &q64,
                k: &k64,
                v: &v64,
                heads_q: hq,
                heads_kv: hkv,
                dim: d,
                causal,
                want_weights: true,
            })
            .expect("reference attention");
            let close = |a: &[f32], b: &[f64], what: &str| {
                assert_eq!(a.len(), b.len(), "{what}");
                for (i, (x, y)) in a.iter().zip(b).enumerate() {
                    assert!(
                        (f64::from(*x) - y).abs() < 1e-5,
                        "{what} {i} (causal {causal}): {x} against {y}"
                    );
                }
            };
            close(&fast.context, &exact.context, "context");
            close(
                &fast.weights.unwrap_or_default(),
                &exact.weights.unwrap_or_default(),
                "weights",
            );
        }
    }
}
