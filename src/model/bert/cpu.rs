//! The encoder on the CPU, written once over [`CpuFloat`]: in f64 it is the reference the
//! other paths are checked against (weights promoted to f64 as they are read), in f32 it
//! is the fast path of `--backend cpu` (see `model/cpu_float.rs`).

use ndarray::{Array2, Array4, ArrayView1, ArrayView2};

use super::config::BertConfig;
use super::weights::{BertWeights, Dense, Norm};
use crate::error::AttentionError;
use crate::model::cpu_float::{CpuFloat, Heads};
use crate::model::stages::Clock;
use crate::model::HeadPatch;

/// A row-major `(rows, cols)` matrix.
struct Mat<T> {
    rows: usize,
    cols: usize,
    data: Vec<T>,
}

impl<T> Mat<T> {
    fn row(&self, r: usize) -> &[T] {
        &self.data[r * self.cols..(r + 1) * self.cols]
    }
}

/// `x Wᵀ + b`.
fn dense<T: CpuFloat>(x: &Mat<T>, d: &Dense) -> Mat<T> {
    let (out, inp) = d.w.dim();
    debug_assert_eq!(inp, x.cols);
    let w = d.w.as_standard_layout();
    let mut data = T::matmul(&x.data, x.rows, w.as_slice().unwrap_or_default(), inp);
    for row in data.chunks_exact_mut(out.max(1)) {
        for (y, &b) in row.iter_mut().zip(d.b.iter()) {
            *y += T::of(b);
        }
    }
    Mat {
        rows: x.rows,
        cols: out,
        data,
    }
}

/// `LayerNorm(x + residual)` over each row.
fn add_norm<T: CpuFloat>(x: &Mat<T>, residual: Option<&Mat<T>>, n: &Norm, eps: f64) -> Mat<T> {
    let mut data = Vec::with_capacity(x.data.len());
    let (eps, width) = (T::of64(eps), T::of64(x.cols as f64));
    for r in 0..x.rows {
        let row: Vec<T> = match residual {
            Some(res) => x
                .row(r)
                .iter()
                .zip(res.row(r))
                .map(|(&a, &b)| a + b)
                .collect(),
            None => x.row(r).to_vec(),
        };
        let mean = row.iter().copied().sum::<T>() / width;
        let var = row.iter().map(|&v| (v - mean) * (v - mean)).sum::<T>() / width;
        let inv = (var + eps).sqrt().recip();
        data.extend(
            row.iter()
                .enumerate()
                .map(|(c, &v)| (v - mean) * inv * T::of(n.w[c]) + T::of(n.b[c])),
        );
    }
    Mat {
        rows: x.rows,
        cols: x.cols,
        data,
    }
}

/// The error function to about 1e-15: its Maclaurin series below 2.5 (where the terms
/// shrink fast enough to lose under two digits to cancellation), the continued fraction
/// of erfc above (which converges fast there). `std` has no `erf`.
pub(crate) fn erf(x: f64) -> f64 {
    let a = x.abs();
    let r = if a < 2.5 {
        // Maclaurin series: erf(x) = 2/sqrt(pi) * sum (-1)^n x^(2n+1) / (n! (2n+1)).
        let mut term = a;
        let mut sum = a;
        let x2 = a * a;
        let mut n = 0.0;
        while term.abs() > 1e-17 * sum.abs() {
            n += 1.0;
            term *= -x2 / n;
            sum += term / (2.0 * n + 1.0);
        }
        sum * std::f64::consts::FRAC_2_SQRT_PI
    } else {
        // erfc(x) = exp(-x^2)/sqrt(pi) * 1/(x + 1/2/(x + 1/(x + 3/2/(x + ...)))) (Lentz).
        let mut f = a;
        for k in (1..60).rev() {
            f = a + (k as f64 / 2.0) / f;
        }
        1.0 - (-a * a).exp() / (f * std::f64::consts::PI.sqrt())
    };
    r.copysign(x)
}

/// `x/2 (1 + erf(x/√2))`: BERT's GELU.
pub(crate) fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2))
}

/// The encoder's result.
pub(crate) struct CpuForward<T> {
    pub hidden: Array2<T>,
    pub attention: Option<Array4<f32>>,
}

/// Runs the encoder over `ids` (already checked against the vocabulary and positions),
/// charging each stage to `clock` when there is one.
///
/// # Errors
/// [`AttentionError::TooLarge`] when the fast path's attention outputs do not fit in memory.
pub(crate) fn forward<T: CpuFloat>(
    w: &BertWeights,
    c: &BertConfig,
    ids: &[u32],
    (attention, patch): (bool, Option<&HeadPatch>),
    mut clock: Option<&mut Clock>,
) -> Result<CpuForward<T>, AttentionError> {
    let mut lap = |stage: &'static str| {
        if let Some(c) = clock.as_deref_mut() {
            c.lap(stage);
        }
    };
    let (l, h, heads, dim) = (
        ids.len(),
        c.hidden_size,
        c.num_attention_heads,
        c.head_dim(),
    );
    let mut x = Mat {
        rows: l,
        cols: h,
        data: Vec::with_capacity(l * h),
    };
    for (pos, &id) in ids.iter().enumerate() {
        let (word, place, kind) = (
            w.word.row(id as usize),
            w.position.row(pos),
            w.token_type.row(0),
        );
        x.data
            .extend((0..h).map(|j| T::of(word[j]) + T::of(place[j]) + T::of(kind[j])));
    }
    let eps = c.layer_norm_eps;
    let mut x = add_norm(&x, None, &w.embed_norm, eps);
    lap("embeddings + LayerNorm");
    let mut probs = attention.then(|| Array4::<f32>::zeros((w.layers.len(), heads, l, l)));
    for (n, layer) in w.layers.iter().enumerate() {
        let (q, k, v) = (
            dense(&x, &layer.query),
            dense(&x, &layer.key),
            dense(&x, &layer.value),
        );
        lap("q, k, v projections");
        let heads_out = T::attention(Heads {
            q: &q.data,
            k: &k.data,
            v: &v.data,
            heads_q: heads,
            heads_kv: heads,
            dim,
            causal: false,
            want_weights: attention,
        })?;
        if let (Some(all), Some(p)) = (probs.as_mut(), heads_out.weights) {
            let mut layer_probs = all.index_axis_mut(ndarray::Axis(0), n);
            for (dst, src) in layer_probs.iter_mut().zip(p) {
                *dst = src.to64() as f32;
            }
        }
        let mut ctx = Mat {
            rows: l,
            cols: h,
            data: heads_out.context,
        };
        if let Some(p) = patch.filter(|p| p.layer == n) {
            p.apply_rows(&mut ctx.data, heads, T::of);
        }
        lap("attention");
        let a = dense(&ctx, &layer.attn_out);
        x = add_norm(&a, Some(&x), &layer.attn_norm, eps);
        lap("output projection + residual + LayerNorm");
        let mut f = dense(&x, &layer.intermediate);
        lap("intermediate dense");
        f.data.iter_mut().for_each(|v| *v = T::of64(gelu(v.to64())));
        lap("GELU");
        let f = dense(&f, &layer.output);
        x = add_norm(&f, Some(&x), &layer.out_norm, eps);
        lap("output dense + residual + LayerNorm");
    }
    let hidden = Array2::from_shape_vec((l, h), x.data).unwrap_or_else(|_| Array2::zeros((l, h)));
    Ok(CpuForward {
        hidden,
        attention: probs,
    })
}

/// Mean of the rows of `hidden` weighted by `mask` (1 = a real token), divided by its L2
/// norm, computed in f64: sentence-transformers' mean pooling and normalisation.
pub(crate) fn pool_normalize(hidden: ArrayView2<'_, f32>, mask: ArrayView1<'_, f32>) -> Vec<f64> {
    let (rows, cols) = hidden.dim();
    let mut sum = vec![0.0f64; cols];
    let mut weight = 0.0f64;
    for r in 0..rows.min(mask.len()) {
        let m = f64::from(mask[r]);
        weight += m;
        for (s, &v) in sum.iter_mut().zip(hidden.row(r)) {
            *s += m * f64::from(v);
        }
    }
    // sentence-transformers clamps the token count at 1e-9 and the norm at 1e-12.
    let mean: Vec<f64> = sum.iter().map(|s| s / weight.max(1e-9)).collect();
    let norm = mean.iter().map(|v| v * v).sum::<f64>().sqrt().max(1e-12);
    mean.iter().map(|v| v / norm).collect()
}
