//! The forward pass in float64 on the CPU: the reference the GPU path is checked against.
//!
//! Per layer, on rows `x` of the residual stream:
//!
//! ```text
//! h = rmsnorm(x) * attn_norm
//! q, k, v = h Wqᵀ, h Wkᵀ, h Wvᵀ; RoPE on q and k at each token's position
//! x += softmax(q kᵀ / sqrt(D), causal) v Woᵀ      (query head h reads kv head h / (Hq/Hkv))
//! h = rmsnorm(x) * ffn_norm
//! x += (silu(h Wgateᵀ) * h Wupᵀ) Wdownᵀ
//! ```
//!
//! then `rmsnorm(x) * out_norm` and the logits of the last row. Keys and values go into a
//! [`CpuCache`], so the same code runs a whole sequence or one new token after a prompt.

use crate::model::llama::rope::Rope;
use crate::model::llama::weights::{LlamaConfig, LlamaWeights};

/// Keys and values of the tokens seen so far, per layer: `(len, kv_heads * head_dim)`.
#[derive(Debug, Clone, Default)]
pub(crate) struct CpuCache {
    k: Vec<Vec<f64>>,
    v: Vec<Vec<f64>>,
    len: usize,
}

impl CpuCache {
    pub(crate) fn new(layers: usize) -> Self {
        Self {
            k: vec![Vec::new(); layers],
            v: vec![Vec::new(); layers],
            len: 0,
        }
    }
}

/// What one pass over new tokens yields.
pub(crate) struct CpuPass {
    /// `(L, hidden)` after the final norm.
    pub hidden: Vec<f64>,
    /// `(vocab,)` at the last new token.
    pub logits: Vec<f64>,
    /// `(layers, heads, L, len)` probabilities over every key seen, when asked.
    pub attention: Option<Vec<f64>>,
}

/// `y (rows, out) = x (rows, inner) Wᵀ` with `w (out, inner)` in f32, accumulated in f64.
/// Output rows are split across threads where there are several.
pub(crate) fn matmul(x: &[f64], rows: usize, w: &[f32], inner: usize) -> Vec<f64> {
    let out = if inner == 0 { 0 } else { w.len() / inner };
    let mut y = vec![0.0; rows * out];
    if out == 0 || rows == 0 {
        return y;
    }
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(out);
    // Each thread computes a block of output columns into its own buffer.
    let per = out.div_ceil(threads);
    let work = |c0: usize, c1: usize| -> Vec<f64> {
        let mut part = vec![0.0; rows * (c1 - c0)];
        for c in c0..c1 {
            let wr = &w[c * inner..(c + 1) * inner];
            for r in 0..rows {
                part[r * (c1 - c0) + c - c0] = dot(&x[r * inner..(r + 1) * inner], wr);
            }
        }
        part
    };
    let parts: Vec<(usize, usize, Vec<f64>)> = if threads <= 1 || rows * out * inner < 1 << 16 {
        vec![(0, out, work(0, out))]
    } else {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| (t * per, ((t + 1) * per).min(out)))
                .filter(|(a, b)| a < b)
                .map(|(a, b)| (a, b, s.spawn(move || work(a, b))))
                .collect();
            handles
                .into_iter()
                .map(|(a, b, h)| (a, b, h.join().unwrap_or_default()))
                .collect()
        })
    };
    for (c0, c1, part) in parts {
        let width = c1 - c0;
        if part.len() != rows * width {
            continue; // a thread that panicked leaves zeros; cannot happen in practice
        }
        for r in 0..rows {
            y[r * out + c0..r * out + c1].copy_from_slice(&part[r * width..(r + 1) * width]);
        }
    }
    y
}

fn dot(x: &[f64], w: &[f32]) -> f64 {
    let mut acc = [0.0f64; 4];
    let (xc, wc) = (x.chunks_exact(4), w.chunks_exact(4));
    let (xr, wr) = (xc.remainder(), wc.remainder());
    for (a, b) in xc.zip(wc) {
        for i in 0..4 {
            acc[i] += a[i] * f64::from(b[i]);
        }
    }
    let tail: f64 = xr.iter().zip(wr).map(|(a, &b)| a * f64::from(b)).sum();
    (acc[0] + acc[1]) + (acc[2] + acc[3]) + tail
}

/// Each row of `x` scaled by `1 / sqrt(mean(x²) + eps)` and by `w`.
pub(crate) fn rmsnorm(x: &[f64], w: &[f32], eps: f64) -> Vec<f64> {
    let n = w.len();
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks_exact(n) {
        let ms = row.iter().map(|v| v * v).sum::<f64>() / n as f64;
        let inv = 1.0 / (ms + eps).sqrt();
        out.extend(row.iter().zip(w).map(|(v, &g)| v * inv * f64::from(g)));
    }
    out
}

fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

/// Runs the new tokens `ids` (positions `cache.len()..`) through the model, appending
/// their keys and values to `cache`. The caller has validated the ids and the length.
pub(crate) fn pass(
    c: &LlamaConfig,
    w: &LlamaWeights,
    ids: &[u32],
    cache: &mut CpuCache,
    want_attention: bool,
) -> CpuPass {
    let (hd, hq, hkv, h) = (c.head_dim, c.heads, c.kv_heads, c.hidden);
    let (l, past) = (ids.len(), cache.len);
    let total = past + l;
    let rope = Rope::new(hd, c.rope_theta);
    let mut x: Vec<f64> = ids
        .iter()
        .flat_map(|&id| {
            let r = id as usize * h;
            w.embed[r..r + h].iter().map(|&v| f64::from(v))
        })
        .collect();
    let mut attention = want_attention.then(|| vec![0.0; c.layers * hq * l * total]);
    let group = hq / hkv;
    let scale = 1.0 / (hd as f64).sqrt();
    for (li, lw) in w.layers.iter().enumerate() {
        let xn = rmsnorm(&x, &lw.attn_norm, c.rms_eps);
        let mut q = matmul(&xn, l, &lw.wq, h);
        let mut k = matmul(&xn, l, &lw.wk, h);
        let v = matmul(&xn, l, &lw.wv, h);
        for t in 0..l {
            rope.apply(&mut q[t * hq * hd..(t + 1) * hq * hd], past + t);
            rope.apply(&mut k[t * hkv * hd..(t + 1) * hkv * hd], past + t);
        }
        cache.k[li].extend_from_slice(&k);
        cache.v[li].extend_from_slice(&v);
        let (ck, cv) = (&cache.k[li], &cache.v[li]);
        let kvw = hkv * hd;
        let mut o = vec![0.0; l * hq * hd];
        let mut p = vec![0.0; total];
        for head in 0..hq {
            let g = head / group;
            for t in 0..l {
                let qr = &q[(t * hq + head) * hd..(t * hq + head + 1) * hd];
                let seen = past + t + 1;
                let mut max = f64::NEG_INFINITY;
                for (j, pj) in p.iter_mut().enumerate().take(seen) {
                    let kr = &ck[j * kvw + g * hd..j * kvw + (g + 1) * hd];
                    *pj = scale * qr.iter().zip(kr).map(|(a, b)| a * b).sum::<f64>();
                    max = max.max(*pj);
                }
                let mut sum = 0.0;
                for pj in &mut p[..seen] {
                    *pj = (*pj - max).exp();
                    sum += *pj;
                }
                let or = &mut o[(t * hq + head) * hd..(t * hq + head + 1) * hd];
                for (j, pj) in p[..seen].iter_mut().enumerate() {
                    *pj /= sum;
                    let vr = &cv[j * kvw + g * hd..j * kvw + (g + 1) * hd];
                    for (od, vd) in or.iter_mut().zip(vr) {
                        *od += *pj * vd;
                    }
                }
                if let Some(a) = attention.as_mut() {
                    let base = ((li * hq + head) * l + t) * total;
                    a[base..base + seen].copy_from_slice(&p[..seen]);
                }
            }
        }
        let attn_out = matmul(&o, l, &lw.wo, hq * hd);
        x.iter_mut().zip(&attn_out).for_each(|(a, b)| *a += b);
        let xn = rmsnorm(&x, &lw.ffn_norm, c.rms_eps);
        let mut gate = matmul(&xn, l, &lw.gate, h);
        let up = matmul(&xn, l, &lw.up, h);
        gate.iter_mut()
            .zip(&up)
            .for_each(|(g, u)| *g = silu(*g) * u);
        let down = matmul(&gate, l, &lw.down, c.intermediate);
        x.iter_mut().zip(&down).for_each(|(a, b)| *a += b);
    }
    cache.len = total;
    let hidden = rmsnorm(&x, &w.out_norm, c.rms_eps);
    let last = &hidden[(l.max(1) - 1) * h..];
    let logits = if l == 0 {
        Vec::new()
    } else {
        matmul(last, 1, w.output(), h)
    };
    CpuPass {
        hidden,
        logits,
        attention,
    }
}
