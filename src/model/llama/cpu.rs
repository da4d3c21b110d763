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
//! Written once over [`CpuFloat`]: f64 is the reference, f32 the fast path of
//! `--backend cpu` (see `model/cpu_float.rs`).

use crate::error::AttentionError;
use crate::model::cpu_float::{CpuFloat, Heads};
use crate::model::llama::rope::Rope;
use crate::model::llama::weights::{LlamaConfig, LlamaWeights};
use crate::model::HeadPatch;

/// Keys and values of the tokens seen so far, per layer: `(len, kv_heads * head_dim)`.
#[derive(Debug, Clone, Default)]
pub(crate) struct CpuCache<T> {
    k: Vec<Vec<T>>,
    v: Vec<Vec<T>>,
    len: usize,
}

impl<T: Clone> CpuCache<T> {
    pub(crate) fn new(layers: usize) -> Self {
        Self {
            k: vec![Vec::new(); layers],
            v: vec![Vec::new(); layers],
            len: 0,
        }
    }
}

/// What one pass over new tokens yields.
pub(crate) struct CpuPass<T> {
    /// `(L, hidden)` after the final norm.
    pub hidden: Vec<T>,
    /// `(vocab,)` at the last new token.
    pub logits: Vec<T>,
    /// `(layers, heads, L, len)` probabilities over every key seen, when asked.
    pub attention: Option<Vec<T>>,
}

/// Each row of `x` scaled by `1 / sqrt(mean(x²) + eps)` and by `w`.
pub(crate) fn rmsnorm<T: CpuFloat>(x: &[T], w: &[f32], eps: f64) -> Vec<T> {
    let n = w.len();
    let (eps, width) = (T::of64(eps), T::of64(n as f64));
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks_exact(n.max(1)) {
        let ms = row.iter().map(|&v| v * v).sum::<T>() / width;
        let inv = (ms + eps).sqrt().recip();
        out.extend(row.iter().zip(w).map(|(&v, &g)| v * inv * T::of(g)));
    }
    out
}

fn silu<T: CpuFloat>(x: T) -> T {
    x / (T::one() + (-x).exp())
}

/// Runs the new tokens `ids` (positions `cache.len()..`) through the model, appending
/// their keys and values to `cache`. The caller has validated the ids and the length.
///
/// # Errors
/// [`AttentionError::TooLarge`] when the fast path's attention outputs do not fit in memory.
pub(crate) fn pass<T: CpuFloat>(
    c: &LlamaConfig,
    w: &LlamaWeights,
    ids: &[u32],
    cache: &mut CpuCache<T>,
    (want_attention, patch): (bool, Option<&HeadPatch>),
) -> Result<CpuPass<T>, AttentionError> {
    let (hd, hq, hkv, h) = (c.head_dim, c.heads, c.kv_heads, c.hidden);
    let (l, past) = (ids.len(), cache.len);
    let total = past + l;
    let rope = Rope::new(hd, c.rope_theta);
    let mut x: Vec<T> = ids
        .iter()
        .flat_map(|&id| {
            let r = id as usize * h;
            w.embed[r..r + h].iter().map(|&v| T::of(v))
        })
        .collect();
    let mut attention = want_attention.then(|| vec![T::zero(); c.layers * hq * l * total]);
    for (li, lw) in w.layers.iter().enumerate() {
        let xn = rmsnorm(&x, &lw.attn_norm, c.rms_eps);
        let mut q = T::matmul(&xn, l, &lw.wq, h);
        let mut k = T::matmul(&xn, l, &lw.wk, h);
        let v = T::matmul(&xn, l, &lw.wv, h);
        for t in 0..l {
            rope.apply(&mut q[t * hq * hd..(t + 1) * hq * hd], past + t);
            rope.apply(&mut k[t * hkv * hd..(t + 1) * hkv * hd], past + t);
        }
        cache.k[li].extend_from_slice(&k);
        cache.v[li].extend_from_slice(&v);
        let mut heads = T::attention(Heads {
            q: &q,
            k: &cache.k[li],
            v: &cache.v[li],
            heads_q: hq,
            heads_kv: hkv,
            dim: hd,
            causal: true,
            want_weights: want_attention,
        })?;
        if let (Some(a), Some(p)) = (attention.as_mut(), heads.weights) {
            let per_layer = hq * l * total;
            a[li * per_layer..(li + 1) * per_layer].copy_from_slice(&p);
        }
        if let Some(p) = patch.filter(|p| p.layer == li) {
            p.apply_rows(&mut heads.context, hq, T::of);
        }
        let attn_out = T::matmul(&heads.context, l, &lw.wo, hq * hd);
        x.iter_mut().zip(&attn_out).for_each(|(a, &b)| *a += b);
        let xn = rmsnorm(&x, &lw.ffn_norm, c.rms_eps);
        let mut gate = T::matmul(&xn, l, &lw.gate, h);
        let up = T::matmul(&xn, l, &lw.up, h);
        gate.iter_mut()
            .zip(&up)
            .for_each(|(g, &u)| *g = silu(*g) * u);
        let down = T::matmul(&gate, l, &lw.down, c.intermediate);
        x.iter_mut().zip(&down).for_each(|(a, &b)| *a += b);
    }
    cache.len = total;
    let hidden = rmsnorm(&x, &w.out_norm, c.rms_eps);
    let last = &hidden[(l.max(1) - 1) * h..];
    let logits = if l == 0 {
        Vec::new()
    } else {
        T::matmul(last, 1, w.output(), h)
    };
    Ok(CpuPass {
        hidden,
        logits,
        attention,
    })
}
