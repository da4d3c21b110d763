//! One block of query rows of one head against its keys, a block of keys at a time:
//! scores by a matrix product, masks, an online softmax (running maximum and sum per
//! row, the output rescaled when the maximum grows), weights·V by a matrix product.
//! Nothing of size Lq x Lk is held unless the weights are asked for, and then the
//! logits are copied into the weights output and turned into probabilities there.
//!
//! Scores are held transposed, keys x rows: then both products read their operands in
//! the order matrixmultiply packs with contiguous copies (K from its transpose, Q from a
//! transposed copy of the block, P as it lies, V row-major; packed element by element
//! they took half the time), and the softmax's reductions over keys run across rows,
//! one vector lane per query row.
//!
//! Row rule (docs/DESIGN.md, as in `reference.rs` and every kernel): a key is allowed
//! when structure, masks and key length allow it and its logit is not `-inf`; masked
//! logits are set to `-inf`, so `-inf` marks exactly the keys not allowed. A NaN logit
//! makes the row's maximum NaN and so the row; a row with no allowed key gives out 0,
//! lse `-inf`, weights 0. A key whose weight is exactly 0 adds nothing to the output:
//! blocks whose value rows are all finite go through the matrix product (where a
//! weight of 0 adds 0), others through a loop that skips such keys.

use std::ops::Range;

use ndarray::linalg::general_mat_mul;
use ndarray::{s, ArrayView2, ArrayViewMut2};

use super::inputs::{Inputs, GEMM_ROWS};
use super::lanes::{axpy, dot, exp_nonpositive, scale};
use crate::error::Result;
use crate::host_memory::try_vec;

/// Keys per block: the scores of a block (rows x keys) and its K and V rows stay within
/// a core's L2 cache at D = 64.
pub(crate) const KEYS: usize = 256;

/// Query rows per block; also the unit of work handed to a thread.
pub(crate) const ROWS: usize = 128;

/// One block of query rows and the parts of the outputs it alone writes.
pub(crate) struct Block<'o> {
    pub b: usize,
    pub h: usize,
    pub rows: Range<usize>,
    /// `rows.len() x Dv`.
    pub out: &'o mut [f32],
    /// `rows.len() x Lk`, zero-filled.
    pub weights: Option<&'o mut [f32]>,
    /// `rows.len()`.
    pub lse: Option<&'o mut [f32]>,
}

/// Computes `block`, with the widest vector instructions this CPU has.
pub(crate) fn run(inputs: &Inputs<'_>, block: Block<'_>) -> Result<()> {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has just been found to support AVX-512F.
            return unsafe { run_avx512(inputs, block) };
        }
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has just been found to support AVX2.
            return unsafe { run_avx2(inputs, block) };
        }
    }
    body(inputs, block)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn run_avx512(inputs: &Inputs<'_>, block: Block<'_>) -> Result<()> {
    body(inputs, block)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn run_avx2(inputs: &Inputs<'_>, block: Block<'_>) -> Result<()> {
    body(inputs, block)
}

/// The keys `[lo, hi)` row `i` may attend by causality, window and key length alone
/// (`(0, 0)` for none).
fn span(inputs: &Inputs<'_>, b: usize, i: usize) -> (usize, usize) {
    let p = inputs.p;
    let pos = i as i64 + p.pos_offset;
    let mut lo = 0i64;
    let mut hi = inputs.kv_len(b) as i64;
    if p.causal {
        hi = hi.min(pos + 1);
    }
    if let Some(r) = p.window_right {
        hi = hi.min(pos + r + 1);
    }
    if let Some(l) = p.window_left {
        lo = lo.max(pos - l);
    }
    match lo < hi {
        true => (lo as usize, hi as usize),
        false => (0, 0),
    }
}

/// Per-row softmax state over the keys seen so far.
struct Rows {
    /// Running maximum; `-inf` while no key has been allowed, NaN once a NaN was.
    max: Vec<f32>,
    /// Running sum of `exp(logit - max)`.
    sum: Vec<f32>,
    /// Running `sum of exp(logit - max) * v`, `rows x Dv`.
    acc: Vec<f32>,
    /// Per row, the new maximum, then the shift of this block's exponentials.
    shift: Vec<f32>,
    /// Per row, the factor of the old sum and output.
    alpha: Vec<f32>,
}

#[inline(always)]
fn body(inputs: &Inputs<'_>, block: Block<'_>) -> Result<()> {
    let p = inputs.p;
    let (b, h, n, dv) = (block.b, block.h, block.rows.len(), p.dim_v);
    let g = h / p.group();
    let spans: Vec<(usize, usize)> = block.rows.clone().map(|i| span(inputs, b, i)).collect();
    let lo = spans
        .iter()
        .filter(|s| s.0 < s.1)
        .map(|s| s.0)
        .min()
        .unwrap_or(0);
    let hi = spans.iter().map(|s| s.1).max().unwrap_or(0);
    let mut state = Rows {
        max: vec![f32::NEG_INFINITY; n],
        sum: vec![0.0; n],
        acc: try_vec("v", &[n, dv], n * dv, 0f32)?,
        shift: vec![0.0; n],
        alpha: vec![1.0; n],
    };
    let qt = transposed_q(inputs, b, h, &block.rows)?;
    let mut scores = try_vec("k", &[KEYS, n], n * KEYS.min(hi.saturating_sub(lo)), 0f32)?;
    let mut weights = block.weights;
    let mut j0 = lo;
    while j0 < hi {
        let keys = j0..(j0 + KEYS).min(hi);
        let nk = keys.len();
        let s = &mut scores[..n * nk];
        logits(inputs, (b, h, g), &block.rows, &keys, &qt, s);
        mask(inputs, (b, h), &block.rows, &keys, &spans, s);
        if let Some(w) = weights.as_deref_mut() {
            for (jj, col) in s.chunks_exact(n).enumerate() {
                for (r, &x) in col.iter().enumerate() {
                    w[r * p.len_k + keys.start + jj] = x;
                }
            }
        }
        softmax_step(&mut state, s, n, dv);
        accumulate(inputs, (b, g), &keys, s, &mut state.acc);
        j0 = keys.end;
    }
    finish(&state, block.out, block.lse, dv);
    if let Some(w) = weights {
        for (r, row) in w.chunks_exact_mut(p.len_k).enumerate() {
            let (m, l) = (state.max[r], state.sum[r]);
            for x in &mut row[lo..hi] {
                *x = match *x == f32::NEG_INFINITY {
                    true => 0.0,
                    false => exp_nonpositive(*x - m) / l,
                };
            }
        }
    }
    Ok(())
}

/// The block's query rows transposed, `(D, rows)` row-major, where its scores are a
/// matrix product (empty otherwise).
fn transposed_q(inputs: &Inputs<'_>, b: usize, h: usize, rows: &Range<usize>) -> Result<Vec<f32>> {
    let (n, d) = (rows.len(), inputs.p.dim);
    if n < GEMM_ROWS {
        return Ok(Vec::new());
    }
    let mut qt = try_vec("q", &[d, n], d * n, 0f32)?;
    for (r, row) in inputs
        .q_rows(b, h, rows.clone())
        .chunks_exact(d)
        .enumerate()
    {
        for (e, &x) in row.iter().enumerate() {
            qt[e * n + r] = x;
        }
    }
    Ok(qt)
}

/// `s = scale * k · qᵀ` for `keys` against the block's rows, `keys x rows` row-major.
#[inline(always)]
fn logits(
    inputs: &Inputs<'_>,
    (b, h, g): (usize, usize, usize),
    rows: &Range<usize>,
    keys: &Range<usize>,
    qt: &[f32],
    s: &mut [f32],
) {
    let (d, n, nk, scale) = (inputs.p.dim, rows.len(), keys.len(), inputs.p.scale);
    let kt = inputs.k_block_transposed(b, g, keys.clone());
    match (n >= GEMM_ROWS, kt) {
        (true, Some(km)) => {
            let qm = ArrayView2::from_shape((d, n), qt);
            let sm = ArrayViewMut2::from_shape((nk, n), &mut *s);
            if let (Ok(qm), Ok(mut sm)) = (qm, sm) {
                // The scale in the product saves a pass; a scale of 0 is applied after
                // it (below), so that NaN or infinite products still make NaN.
                let alpha = if scale == 0.0 { 1.0 } else { scale };
                general_mat_mul(alpha, &km, &qm, 0.0, &mut sm);
            }
            if scale == 0.0 {
                super::lanes::scale(s, scale);
            }
        }
        _ => {
            let q = inputs.q_rows(b, h, rows.clone());
            let k = inputs.k_rows(b, g, keys.clone());
            for (kr, sc) in k.chunks_exact(d).zip(s.chunks_exact_mut(n)) {
                for (x, qr) in sc.iter_mut().zip(q.chunks_exact(d)) {
                    // Scaled after the product, as the reference does.
                    *x = scale * dot(qr, kr);
                }
            }
        }
    }
}

/// Sets the logit of every pair that is not allowed to `-inf`, and adds the bias.
#[inline(always)]
fn mask(
    inputs: &Inputs<'_>,
    (b, h): (usize, usize),
    rows: &Range<usize>,
    keys: &Range<usize>,
    spans: &[(usize, usize)],
    s: &mut [f32],
) {
    let n = rows.len();
    for ((r, i), &(lo, hi)) in rows.clone().enumerate().zip(spans) {
        if let Some(bias) = &inputs.bias {
            let bias = bias.slice(s![b, h, i, keys.clone()]);
            for (jj, &m) in bias.iter().enumerate() {
                let x = &mut s[jj * n + r];
                // An additive -inf masks the key whatever q and k hold (NaN + -inf is NaN).
                *x = match m == f32::NEG_INFINITY {
                    true => f32::NEG_INFINITY,
                    false => *x + m,
                };
            }
        }
        if let Some(allowed) = &inputs.bool_mask {
            let allowed = allowed.slice(s![b, h, i, keys.clone()]);
            for (jj, &a) in allowed.iter().enumerate() {
                if !a {
                    s[jj * n + r] = f32::NEG_INFINITY;
                }
            }
        }
        // Keys of the block outside the row's span: causality, window, key length.
        let start = lo.clamp(keys.start, keys.end) - keys.start;
        let end = hi.clamp(keys.start, keys.end) - keys.start;
        // A span that misses the block masks all of it.
        let (start, end) = if start < end { (start, end) } else { (0, 0) };
        for jj in (0..start).chain(end..keys.len()) {
            s[jj * n + r] = f32::NEG_INFINITY;
        }
    }
}

/// One block of the online softmax over `s` (`keys x rows`): updates each row's maximum
/// and sum, rescales its output, and turns its logits into `exp(logit - max)` (0 for
/// keys not allowed).
#[inline(always)]
fn softmax_step(state: &mut Rows, s: &mut [f32], n: usize, dv: usize) {
    // Each row's maximum over the block, NaN once a NaN is met (a NaN maximum stays:
    // neither comparison holds against it).
    state.shift.copy_from_slice(&state.max);
    for col in s.chunks_exact(n) {
        for (m, &x) in state.shift.iter_mut().zip(col) {
            #[allow(clippy::eq_op)]
            let take = x > *m || x != x;
            *m = if take { x } else { *m };
        }
    }
    let rows = state
        .max
        .iter_mut()
        .zip(&mut state.shift)
        .zip(&mut state.alpha);
    for ((max, shift), alpha) in rows {
        let (old, new) = (*max, *shift);
        *max = new;
        // Nothing allowed yet: every logit is -inf, and a shift of 0 makes each weight 0.
        // Otherwise -inf - new is -inf for a first allowed block (sum and output were 0).
        (*shift, *alpha) = match new == f32::NEG_INFINITY {
            true => (0.0, 1.0),
            false => (new, exp_nonpositive(old - new)),
        };
    }
    // The old sums rescaled, then this block's exponentials added to them.
    for (l, &a) in state.sum.iter_mut().zip(&state.alpha) {
        *l *= a;
    }
    for col in s.chunks_exact_mut(n) {
        for ((x, &m), l) in col.iter_mut().zip(&state.shift).zip(&mut state.sum) {
            *x = exp_nonpositive(*x - m);
            *l += *x;
        }
    }
    for (acc, &a) in state.acc.chunks_exact_mut(dv).zip(&state.alpha) {
        if a != 1.0 {
            scale(acc, a);
        }
    }
}

/// `acc += p · v[keys]`, with `p` held `keys x rows`.
#[inline(always)]
fn accumulate(
    inputs: &Inputs<'_>,
    (b, g): (usize, usize),
    keys: &Range<usize>,
    p: &[f32],
    acc: &mut [f32],
) {
    use ndarray::ShapeBuilder;
    let (nk, dv) = (keys.len(), inputs.p.dim_v);
    let n = p.len() / nk;
    let (v, finite) = inputs.v_rows(b, g, keys.clone());
    if finite && n >= GEMM_ROWS {
        let pm = ArrayView2::from_shape((n, nk).strides((1, n)), p);
        let vm = ArrayView2::from_shape((nk, dv), v);
        let am = ArrayViewMut2::from_shape((n, dv), acc);
        if let (Ok(pm), Ok(vm), Ok(mut am)) = (pm, vm, am) {
            general_mat_mul(1.0, &pm, &vm, 1.0, &mut am);
        }
        return;
    }
    for (col, vr) in p.chunks_exact(n).zip(v.chunks_exact(dv)) {
        for (&w, ar) in col.iter().zip(acc.chunks_exact_mut(dv)) {
            // A weight of exactly 0 adds nothing, even against an infinite or NaN value.
            if w != 0.0 {
                axpy(ar, w, vr);
            }
        }
    }
}

/// Writes each row's output and lse from its final state.
#[inline(always)]
fn finish(state: &Rows, out: &mut [f32], lse: Option<&mut [f32]>, dv: usize) {
    let rows = out.chunks_exact_mut(dv).zip(state.acc.chunks_exact(dv));
    for (r, (o, a)) in rows.enumerate() {
        let (m, l) = (state.max[r], state.sum[r]);
        if m == f32::NEG_INFINITY {
            o.fill(0.0);
        } else {
            for (o, a) in o.iter_mut().zip(a) {
                *o = a / l;
            }
        }
    }
    if let Some(lse) = lse {
        for (r, x) in lse.iter_mut().enumerate() {
            let (m, l) = (state.max[r], state.sum[r]);
            *x = match m == f32::NEG_INFINITY {
                true => f32::NEG_INFINITY,
                false => m + l.ln(),
            };
        }
    }
}
