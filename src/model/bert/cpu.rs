//! The encoder in float64 on the CPU: the reference the GPU path is checked against.
//! Weights are f32 as stored and promoted to f64 as they are read.

use ndarray::{Array2, Array4, ArrayView1, ArrayView2};

use super::config::BertConfig;
use super::weights::{BertWeights, Dense, Norm};
use crate::model::stages::Clock;

/// A row-major `(rows, cols)` f64 matrix.
struct Mat {
    rows: usize,
    cols: usize,
    data: Vec<f64>,
}

impl Mat {
    fn row(&self, r: usize) -> &[f64] {
        &self.data[r * self.cols..(r + 1) * self.cols]
    }
}

/// `x Wᵀ + b`.
fn dense(x: &Mat, d: &Dense) -> Mat {
    let (out, inp) = d.w.dim();
    debug_assert_eq!(inp, x.cols);
    let w = d.w.as_standard_layout();
    let w = w.as_slice().unwrap_or_default();
    let mut data = Vec::with_capacity(x.rows * out);
    for r in 0..x.rows {
        let xr = x.row(r);
        for (o, wr) in w.chunks_exact(inp).enumerate() {
            let dot: f64 = xr.iter().zip(wr).map(|(a, &b)| a * f64::from(b)).sum();
            data.push(dot + f64::from(d.b[o]));
        }
    }
    Mat {
        rows: x.rows,
        cols: out,
        data,
    }
}

/// `LayerNorm(x + residual)` over each row.
fn add_norm(x: &Mat, residual: Option<&Mat>, n: &Norm, eps: f64) -> Mat {
    let mut data = Vec::with_capacity(x.data.len());
    for r in 0..x.rows {
        let row: Vec<f64> = match residual {
            Some(res) => x
                .row(r)
                .iter()
                .zip(res.row(r))
                .map(|(a, b)| a + b)
                .collect(),
            None => x.row(r).to_vec(),
        };
        let mean = row.iter().sum::<f64>() / row.len() as f64;
        let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / row.len() as f64;
        let inv = 1.0 / (var + eps).sqrt();
        data.extend(
            row.iter()
                .enumerate()
                .map(|(c, v)| (v - mean) * inv * f64::from(n.w[c]) + f64::from(n.b[c])),
        );
    }
    Mat {
        rows: x.rows,
        cols: x.cols,
        data,
    }
}

/// The error function to double precision (W. J. Cody's rational approximations, as
/// in most libm implementations, are replaced here by the series and continued fraction
/// that converge fast on each side of 2.5; both are exact to ~1e-16 in f64).
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

/// The encoder's result in f64.
pub(crate) struct CpuForward {
    pub hidden: Array2<f64>,
    pub attention: Option<Array4<f32>>,
}

/// Runs the encoder over `ids` (already checked against the vocabulary and positions),
/// charging each stage to `clock` when there is one.
pub(crate) fn forward(
    w: &BertWeights,
    c: &BertConfig,
    ids: &[u32],
    attention: bool,
    mut clock: Option<&mut Clock>,
) -> CpuForward {
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
            .extend((0..h).map(|j| f64::from(word[j]) + f64::from(place[j]) + f64::from(kind[j])));
    }
    let eps = c.layer_norm_eps;
    let mut x = add_norm(&x, None, &w.embed_norm, eps);
    lap("embeddings + LayerNorm");
    let mut probs = attention.then(|| Array4::<f32>::zeros((w.layers.len(), heads, l, l)));
    let scale = 1.0 / (dim as f64).sqrt();
    for (n, layer) in w.layers.iter().enumerate() {
        let (q, k, v) = (
            dense(&x, &layer.query),
            dense(&x, &layer.key),
            dense(&x, &layer.value),
        );
        lap("q, k, v projections");
        let mut ctx = Mat {
            rows: l,
            cols: h,
            data: vec![0.0; l * h],
        };
        let mut p = vec![0.0f64; l];
        for head in 0..heads {
            let cols = head * dim..(head + 1) * dim;
            for i in 0..l {
                let qi = &q.row(i)[cols.clone()];
                for (j, pj) in p.iter_mut().enumerate() {
                    let kj = &k.row(j)[cols.clone()];
                    *pj = scale * qi.iter().zip(kj).map(|(a, b)| a * b).sum::<f64>();
                }
                let max = p.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                p.iter_mut().for_each(|v| *v = (*v - max).exp());
                let total: f64 = p.iter().sum();
                p.iter_mut().for_each(|v| *v /= total);
                if let Some(a) = probs.as_mut() {
                    for (j, &pj) in p.iter().enumerate() {
                        a[[n, head, i, j]] = pj as f32;
                    }
                }
                let out = &mut ctx.data[i * h + head * dim..i * h + (head + 1) * dim];
                for (j, &pj) in p.iter().enumerate() {
                    for (o, vj) in out.iter_mut().zip(&v.row(j)[cols.clone()]) {
                        *o += pj * vj;
                    }
                }
            }
        }
        lap("attention");
        let a = dense(&ctx, &layer.attn_out);
        x = add_norm(&a, Some(&x), &layer.attn_norm, eps);
        lap("output projection + residual + LayerNorm");
        let mut f = dense(&x, &layer.intermediate);
        lap("intermediate dense");
        f.data.iter_mut().for_each(|v| *v = gelu(*v));
        lap("GELU");
        let f = dense(&f, &layer.output);
        x = add_norm(&f, Some(&x), &layer.out_norm, eps);
        lap("output dense + residual + LayerNorm");
    }
    let hidden = Array2::from_shape_vec((l, h), x.data).unwrap_or_else(|_| Array2::zeros((l, h)));
    CpuForward {
        hidden,
        attention: probs,
    }
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
