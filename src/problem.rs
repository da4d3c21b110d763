//! Input validation, done once before any work: shapes, options and their agreement,
//! resolved into a [`Problem`] that every backend reads.

use ndarray::Dimension;

use crate::error::{AttentionError, Result};
use crate::options::{Alignment, AttentionOptions, Mask};

/// Largest sequence length accepted. Positions are signed 32-bit on the GPU and
/// `p(i) ± window` must not overflow.
pub const MAX_SEQ_LEN: usize = 1 << 30;

/// The kind of explicit mask, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaskKind {
    Bool,
    Additive,
}

/// A mask's layout after broadcasting: its element strides against `(B, Hq, Lq, Lk)`
/// (0 along broadcast dimensions) and its own element count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaskLayout {
    pub kind: MaskKind,
    pub strides: [usize; 4],
    pub len: usize,
}

/// A validated attention problem: all sizes and resolved options.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    pub batch: usize,
    pub heads_q: usize,
    pub heads_kv: usize,
    pub len_q: usize,
    pub len_k: usize,
    pub dim: usize,
    pub dim_v: usize,
    pub scale: f32,
    pub causal: bool,
    /// `p(i) = i + pos_offset`: 0 for top-left, `Lk - Lq` for bottom-right.
    pub pos_offset: i64,
    /// Window reach back and ahead of `p(i)`; `None` = unbounded.
    pub window_left: Option<i64>,
    pub window_right: Option<i64>,
    pub mask: Option<MaskLayout>,
    pub has_kv_lens: bool,
    pub return_weights: bool,
    pub return_lse: bool,
}

impl Problem {
    /// Query heads that share one K/V head.
    pub fn group(&self) -> usize {
        self.heads_q / self.heads_kv
    }

    /// Whether key `j` may be attended by query row `i`, before any explicit mask or
    /// key length: causal and window only.
    pub fn structurally_allowed(&self, i: usize, j: usize) -> bool {
        let p = i as i64 + self.pos_offset;
        let j = j as i64;
        if self.causal && j > p {
            return false;
        }
        if let Some(l) = self.window_left {
            if j < p - l {
                return false;
            }
        }
        if let Some(r) = self.window_right {
            if j > p + r {
                return false;
            }
        }
        true
    }

    /// Count of (i, j) pairs allowed by causal and window, summed over all rows of one head.
    /// Used for FLOP counts.
    pub fn allowed_pairs_per_head(&self) -> u64 {
        (0..self.len_q)
            .map(|i| {
                let p = i as i64 + self.pos_offset;
                let mut lo = 0i64;
                let mut hi = self.len_k as i64 - 1;
                if self.causal {
                    hi = hi.min(p);
                }
                if let Some(l) = self.window_left {
                    lo = lo.max(p - l);
                }
                if let Some(r) = self.window_right {
                    hi = hi.min(p + r);
                }
                (hi - lo + 1).max(0) as u64
            })
            .sum()
    }
}

fn dims4(arg: &'static str, shape: &[usize]) -> Result<[usize; 4]> {
    let dims: [usize; 4] = shape.try_into().map_err(|_| {
        AttentionError::shape(
            arg,
            format!("expected rank 4 (B, H, L, D), got shape {shape:?}"),
        )
    })?;
    if dims.contains(&0) {
        return Err(AttentionError::shape(
            arg,
            format!("zero-size dimension in shape {shape:?}"),
        ));
    }
    Ok(dims)
}

/// Checks the shapes of q `(B, Hq, Lq, D)`, k `(B, Hkv, Lk, D)`, v `(B, Hkv, Lk, Dv)` and
/// every option, and resolves them into a [`Problem`].
///
/// # Errors
/// [`AttentionError::Shape`] or [`AttentionError::InvalidOption`] naming the argument
/// and the shapes involved.
pub fn validate(
    q: &[usize],
    k: &[usize],
    v: &[usize],
    opts: &AttentionOptions<'_>,
) -> Result<Problem> {
    VALIDATE_CALLS.with(|n| n.set(n.get() + 1));
    let [b, hq, lq, d] = dims4("q", q)?;
    let [bk, hkv, lk, dk] = dims4("k", k)?;
    let [bv, hv, lv, dv] = dims4("v", v)?;
    if bk != b {
        return Err(AttentionError::shape(
            "k",
            format!("batch {bk} differs from q's {b} (q {q:?}, k {k:?})"),
        ));
    }
    if dk != d {
        return Err(AttentionError::shape(
            "k",
            format!("head dim {dk} differs from q's {d} (q {q:?}, k {k:?})"),
        ));
    }
    if (bv, hv, lv) != (b, hkv, lk) {
        return Err(AttentionError::shape(
            "v",
            format!("(B, Hkv, Lk) must match k's: v {v:?}, k {k:?}"),
        ));
    }
    if hq % hkv != 0 {
        return Err(AttentionError::shape(
            "k",
            format!(
                "query heads {hq} are not a multiple of key/value heads {hkv} (q {q:?}, k {k:?})"
            ),
        ));
    }
    // Every tensor of the call must have an element count that a machine can address.
    let mut tensors = vec![("q", q), ("k", k), ("v", v)];
    let out = [b, hq, lq, dv];
    let weights = [b, hq, lq, lk];
    tensors.push(("out", &out));
    if opts.return_weights {
        tensors.push(("weights", &weights));
    }
    for (arg, shape) in tensors {
        let bytes = shape
            .iter()
            .try_fold(4u64, |n, &d| n.checked_mul(d as u64))
            .filter(|&n| n <= isize::MAX as u64);
        if bytes.is_none() {
            return Err(AttentionError::TooLarge {
                arg,
                detail: format!("shape {shape:?} has more elements than memory can address"),
            });
        }
    }
    if lq >= MAX_SEQ_LEN || lk >= MAX_SEQ_LEN {
        return Err(AttentionError::TooLarge {
            arg: "q",
            detail: format!("sequence lengths must be below {MAX_SEQ_LEN} (Lq {lq}, Lk {lk})"),
        });
    }
    let scale = match opts.scale {
        None => 1.0 / (d as f32).sqrt(),
        Some(s) if s.is_finite() => s,
        Some(s) => {
            return Err(AttentionError::option(
                "scale",
                format!("must be finite, got {s}"),
            ))
        }
    };
    let pos_offset = match opts.alignment {
        Alignment::TopLeft => 0,
        Alignment::BottomRight => lk as i64 - lq as i64,
    };
    let (window_left, window_right) = match opts.window {
        None => (None, None),
        Some(w) => (w.left.map(i64::from), w.right.map(i64::from)),
    };
    let target = [b, hq, lq, lk];
    let mask = match &opts.mask {
        None => None,
        Some(Mask::Bool(m)) => Some(mask_layout(MaskKind::Bool, m.shape(), target)?),
        Some(Mask::Additive(m)) => {
            check_bias_values(m)?;
            Some(mask_layout(MaskKind::Additive, m.shape(), target)?)
        }
    };
    if let Some(lens) = opts.kv_lens {
        check_kv_lens(lens, b, lk)?;
    }
    Ok(Problem {
        batch: b,
        heads_q: hq,
        heads_kv: hkv,
        len_q: lq,
        len_k: lk,
        dim: d,
        dim_v: dv,
        scale,
        causal: opts.causal,
        pos_offset,
        window_left,
        window_right,
        mask,
        has_kv_lens: opts.kv_lens.is_some(),
        return_weights: opts.return_weights,
        return_lse: opts.return_lse,
    })
}

thread_local! {
    static VALIDATE_CALLS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many times [`validate`] has run on this thread: lets tests check that each call
/// validates its inputs once. Not part of the API.
#[doc(hidden)]
pub fn validate_calls_for_tests() -> u64 {
    VALIDATE_CALLS.with(std::cell::Cell::get)
}

/// Per-batch key lengths `lens` against a batch of `batch` and a key length of `lk`:
/// one a batch entry, none past Lk. Also checks the lengths a prepared call is given
/// later (`PreparedAttention::set_kv_lens`).
pub(crate) fn check_kv_lens(lens: &[u32], batch: usize, lk: usize) -> Result<()> {
    if lens.len() != batch {
        return Err(AttentionError::shape(
            "kv_lens",
            format!(
                "expected shape ({batch},) for batch {batch}, got ({},)",
                lens.len()
            ),
        ));
    }
    if let Some((i, &n)) = lens.iter().enumerate().find(|(_, &n)| n as usize > lk) {
        return Err(AttentionError::option(
            "kv_lens",
            format!("kv_lens[{i}] = {n} exceeds the key length Lk = {lk}"),
        ));
    }
    Ok(())
}

/// An additive mask is a bias on the logits: finite, or -inf to mask the pair exactly
/// as a boolean `false` would. +inf or NaN cannot be a bias (it would make the row NaN,
/// or pick one key over all others by a non-number), so it is refused.
fn check_bias_values(m: &ndarray::ArrayViewD<'_, f32>) -> Result<()> {
    let bad = m
        .indexed_iter()
        .find(|(_, &x)| x.is_nan() || x == f32::INFINITY);
    match bad {
        None => Ok(()),
        Some((index, x)) => Err(AttentionError::option(
            "mask",
            format!(
                "an additive mask holds {x} at {:?}; its values must be finite or -inf",
                index.slice()
            ),
        )),
    }
}

/// NumPy broadcasting of a rank-2..4 mask against `(B, Hq, Lq, Lk)`.
fn mask_layout(kind: MaskKind, shape: &[usize], target: [usize; 4]) -> Result<MaskLayout> {
    let not_broadcastable = || {
        AttentionError::shape(
            "mask",
            format!("shape {shape:?} does not broadcast to (B, Hq, Lq, Lk) = {target:?}"),
        )
    };
    if !(2..=4).contains(&shape.len()) {
        return Err(AttentionError::shape(
            "mask",
            format!("rank must be 2 to 4, got shape {shape:?} (target {target:?})"),
        ));
    }
    let mut full = [1usize; 4];
    full[4 - shape.len()..].copy_from_slice(shape);
    let mut strides = [0usize; 4];
    let mut stride = 1usize;
    for axis in (0..4).rev() {
        let n = full[axis];
        if n != target[axis] && n != 1 {
            return Err(not_broadcastable());
        }
        // A size-1 axis repeats: stride 0 broadcasts it.
        strides[axis] = if n == 1 { 0 } else { stride };
        stride *= n;
    }
    Ok(MaskLayout {
        kind,
        strides,
        len: stride,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_strides() {
        let l = mask_layout(MaskKind::Bool, &[5, 7], [2, 3, 5, 7]).unwrap();
        assert_eq!(l.strides, [0, 0, 7, 1]);
        let l = mask_layout(MaskKind::Bool, &[2, 1, 1, 7], [2, 3, 5, 7]).unwrap();
        assert_eq!(l.strides, [7, 0, 0, 1]);
        assert!(mask_layout(MaskKind::Bool, &[4, 7], [2, 3, 5, 7]).is_err());
        assert!(mask_layout(MaskKind::Bool, &[7], [2, 3, 5, 7]).is_err());
    }

    #[test]
    fn allowed_pairs_causal_square() {
        let opts = AttentionOptions {
            causal: true,
            ..Default::default()
        };
        let p = validate(&[1, 1, 4, 8], &[1, 1, 4, 8], &[1, 1, 4, 8], &opts).unwrap();
        assert_eq!(p.allowed_pairs_per_head(), 10);
    }
}
