//! The CPU reference: plain loops in f64 that follow docs/DESIGN.md's formula line by line.
//! Slow on purpose; every GPU path is tested against it.
//!
//! Row rule, shared with every GPU kernel:
//! - a pair is allowed when the causal/window structure, the boolean mask and the key
//!   length all allow it, its additive mask value is not `-inf` (which masks exactly as a
//!   boolean `false`, whatever q and k hold), and its final logit is not `-inf`;
//! - `m` is the largest allowed logit, NaN if any allowed logit is NaN;
//! - a row with no allowed pair gives out = 0, weights = 0, lse = -inf;
//! - otherwise `w_j = exp(logit_j - m) / sum`, `lse = m + ln(sum)`, and
//!   `out = sum of w_j * v_j` over the allowed `j` whose weight is not exactly 0.
//!   NaN and ±inf in q, k, v flow through this arithmetic unchanged.

use ndarray::{s, ArrayView4, ArrayViewD, Ix3, Ix4};

use crate::error::Result;
use crate::host_memory::{try_vec, try_zeros};
use crate::options::{AttentionOptions, Mask};
use crate::output::AttentionOutput;
use crate::problem::validate;

/// Computes attention on the CPU in float64, following the formula line by line: the
/// oracle every path is tested against (slow on purpose; [`attention_cpu`](crate::attention_cpu)
/// is the fast f32 CPU path). Same options, same outputs, same errors as the GPU.
///
/// # Errors
/// Any input error of [`crate::validate`].
pub fn attention_reference(
    q: ArrayView4<'_, f32>,
    k: ArrayView4<'_, f32>,
    v: ArrayView4<'_, f32>,
    opts: &AttentionOptions<'_>,
) -> Result<AttentionOutput> {
    let p = validate(q.shape(), k.shape(), v.shape(), opts)?;
    let target = (p.batch, p.heads_q, p.len_q, p.len_k);
    // Validation proved the mask broadcasts, so these cannot fail.
    let bool_mask = match &opts.mask {
        Some(Mask::Bool(m)) => broadcast(m, target),
        _ => None,
    };
    let bias = match &opts.mask {
        Some(Mask::Additive(m)) => broadcast(m, target),
        _ => None,
    };

    // Only the outputs asked for are held: one row of logits at a time otherwise, never
    // an Lq x Lk matrix. Every allocation is fallible and checked against free memory.
    let (nb, nh, lq, lk) = target;
    let mut out = try_zeros::<f32, _>("out", Ix4(nb, nh, lq, p.dim_v))?;
    let mut weights = match p.return_weights {
        true => Some(try_zeros::<f32, _>("weights", Ix4(nb, nh, lq, lk))?),
        false => None,
    };
    let mut lse = match p.return_lse {
        true => Some(try_zeros::<f32, _>("lse", Ix3(nb, nh, lq))?),
        false => None,
    };
    let mut logits = try_vec("k", &[lk], lk, 0f64)?;
    let mut allowed = try_vec("k", &[lk], lk, false)?;
    let mut row_weights = try_vec("k", &[lk], lk, 0f64)?;
    let mut acc = try_vec("v", &[p.dim_v], p.dim_v, 0f64)?;

    for b in 0..p.batch {
        let kv_len = opts.kv_lens.map_or(p.len_k, |l| l[b] as usize);
        for h in 0..p.heads_q {
            let g = h / p.group();
            for i in 0..p.len_q {
                for j in 0..p.len_k {
                    let mut ok = j < kv_len && p.structurally_allowed(i, j);
                    if let Some(m) = &bool_mask {
                        ok &= m[[b, h, i, j]];
                    }
                    let mut x = p.scale as f64 * dot(&q, &k, [b, h, i], [b, g, j], p.dim);
                    if let Some(bias) = &bias {
                        // An additive -inf masks the key as a boolean false does, whatever
                        // q and k hold there (NaN + -inf would otherwise be NaN).
                        let bias = bias[[b, h, i, j]];
                        ok &= bias != f32::NEG_INFINITY;
                        x += bias as f64;
                    }
                    allowed[j] = ok && x != f64::NEG_INFINITY;
                    logits[j] = x;
                }
                let row_lse = softmax_row(&logits, &allowed, &mut row_weights);
                if let Some(lse) = &mut lse {
                    lse[[b, h, i]] = row_lse as f32;
                }
                acc.iter_mut().for_each(|a| *a = 0.0);
                for j in 0..p.len_k {
                    let w = row_weights[j];
                    if let Some(weights) = &mut weights {
                        weights[[b, h, i, j]] = w as f32;
                    }
                    if allowed[j] && w != 0.0 {
                        for (e, a) in acc.iter_mut().enumerate() {
                            *a += w * v[[b, g, j, e]] as f64;
                        }
                    }
                }
                for (e, a) in acc.iter().enumerate() {
                    out[[b, h, i, e]] = *a as f32;
                }
            }
        }
    }
    Ok(AttentionOutput { out, weights, lse })
}

pub(crate) fn broadcast<'a, T: Copy>(
    m: &'a ArrayViewD<'_, T>,
    target: (usize, usize, usize, usize),
) -> Option<ArrayView4<'a, T>> {
    m.broadcast(target)
        .and_then(|v| v.into_dimensionality::<Ix4>().ok())
}

fn dot(
    q: &ArrayView4<'_, f32>,
    k: &ArrayView4<'_, f32>,
    qi: [usize; 3],
    ki: [usize; 3],
    dim: usize,
) -> f64 {
    let qr = q.slice(s![qi[0], qi[1], qi[2], ..]);
    let kr = k.slice(s![ki[0], ki[1], ki[2], ..]);
    (0..dim).map(|e| qr[e] as f64 * kr[e] as f64).sum()
}

/// Softmax of one row over the allowed logits, into `weights` (0 where not allowed);
/// returns the row's log-sum-exp (-inf when nothing is allowed).
pub(crate) fn softmax_row(logits: &[f64], allowed: &[bool], weights: &mut [f64]) -> f64 {
    weights.iter_mut().for_each(|w| *w = 0.0);
    // NaN-propagating max over the allowed logits; None when nothing is allowed.
    let mut max: Option<f64> = None;
    for (x, _) in logits.iter().zip(allowed).filter(|(_, &a)| a) {
        max = Some(match max {
            None => *x,
            Some(m) if m.is_nan() || x.is_nan() => f64::NAN,
            Some(m) => m.max(*x),
        });
    }
    let Some(m) = max else {
        return f64::NEG_INFINITY;
    };
    let mut sum = 0f64;
    for j in 0..logits.len() {
        if allowed[j] {
            weights[j] = (logits[j] - m).exp();
            sum += weights[j];
        }
    }
    for j in 0..logits.len() {
        if allowed[j] {
            weights[j] /= sum;
        }
    }
    m + sum.ln()
}
