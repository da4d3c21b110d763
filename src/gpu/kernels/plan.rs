//! Splitting a problem into chunks whose every binding fits the device's limits.
//!
//! A chunk is a run of consecutive flattened query heads `bh = b * Hq + h` with all
//! their rows, or, when one head alone is too large, a run of rows of one head. Each
//! tensor is bound through a window: the smallest aligned byte range covering what the
//! chunk reads or writes. Kernels index tensors logically and subtract the window's
//! first logical element (see `shaders/prelude/common.wgsl`).

use crate::error::{AttentionError, Result};
use crate::problem::{MaskKind, Problem};

/// A byte range of a buffer bound for one chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BindWindow {
    pub offset: u64,
    pub size: u64,
    /// Logical element index at `offset`.
    pub base_elem: u64,
}

/// One dispatch group: heads `bh_start..bh_start + bh_count`, rows
/// `row_start..row_start + row_count` of each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Chunk {
    pub bh_start: usize,
    pub bh_count: usize,
    pub row_start: usize,
    pub row_count: usize,
    pub q: BindWindow,
    pub k: BindWindow,
    pub v: BindWindow,
    pub out: BindWindow,
    pub lse: BindWindow,
    pub mask: Option<BindWindow>,
}

impl Chunk {
    /// Elements of the chunk-local score matrix `(bh_count, row_count, Lk)`.
    pub fn score_elems(&self, p: &Problem) -> u64 {
        (self.bh_count * self.row_count) as u64 * p.len_k as u64
    }
}

/// What bounds a plan: the device's binding limits and, for the staged path, the
/// score scratch.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PlanLimits {
    pub max_binding: u64,
    pub offset_alignment: u64,
    /// Bytes of q, k, v elements on the device (4 for f32, 2 for f16).
    pub input_elem_bytes: u64,
    /// Largest chunk-local score matrix in bytes; `None` for kernels without one.
    pub max_scores: Option<u64>,
}

/// Bytes a tensor of `elems` elements occupies in a buffer (rounded up to 4).
pub(crate) fn buffer_bytes(elems: u64, elem_bytes: u64) -> u64 {
    (elems * elem_bytes).div_ceil(4) * 4
}

fn window(lo: u64, hi: u64, elem_bytes: u64, total_elems: u64, align: u64) -> BindWindow {
    let start = lo * elem_bytes;
    let offset = start - start % align;
    let end = buffer_bytes(hi, elem_bytes).min(buffer_bytes(total_elems, elem_bytes));
    BindWindow {
        offset,
        size: end - offset,
        base_elem: offset / elem_bytes,
    }
}

/// Flattened K/V head of flattened query head `bh`.
pub(crate) fn kv_head(p: &Problem, bh: usize) -> u64 {
    ((bh / p.heads_q) * p.heads_kv + (bh % p.heads_q) / p.group()) as u64
}

fn chunk_at(
    p: &Problem,
    lim: &PlanLimits,
    bh_start: usize,
    bh_count: usize,
    row_start: usize,
    row_count: usize,
) -> Chunk {
    let (lq, lk) = (p.len_q as u64, p.len_k as u64);
    let (d, dv) = (p.dim as u64, p.dim_v as u64);
    let a = lim.offset_alignment;
    let es = lim.input_elem_bytes;
    let bh_heads = (p.batch * p.heads_q) as u64;
    let kv_heads = (p.batch * p.heads_kv) as u64;
    let bh0 = bh_start as u64;
    let bh1 = (bh_start + bh_count) as u64; // exclusive
    let r0 = row_start as u64;
    let r1 = (row_start + row_count) as u64; // exclusive
    let row_lo = bh0 * lq + r0;
    let row_hi = (bh1 - 1) * lq + r1;
    let kv0 = kv_head(p, bh_start);
    let kv1 = kv_head(p, bh_start + bh_count - 1) + 1;
    let mask = p.mask.map(|m| {
        let [sb, sh, si, sj] = m.strides.map(|s| s as u64);
        let (b0, b1) = (bh0 / p.heads_q as u64, (bh1 - 1) / p.heads_q as u64);
        let (h0, h1) = if b0 == b1 {
            (bh0 % p.heads_q as u64, (bh1 - 1) % p.heads_q as u64)
        } else {
            (0, p.heads_q as u64 - 1)
        };
        let lo = b0 * sb + h0 * sh + r0 * si;
        let hi = b1 * sb + h1 * sh + (r1 - 1) * si + (lk - 1) * sj + 1;
        let es = match m.kind {
            MaskKind::Bool => 1,
            MaskKind::Additive => 4,
        };
        window(lo, hi, es, m.len as u64, a)
    });
    Chunk {
        bh_start,
        bh_count,
        row_start,
        row_count,
        q: window(row_lo * d, row_hi * d, es, bh_heads * lq * d, a),
        k: window(kv0 * lk * d, kv1 * lk * d, es, kv_heads * lk * d, a),
        v: window(kv0 * lk * dv, kv1 * lk * dv, es, kv_heads * lk * dv, a),
        out: window(row_lo * dv, row_hi * dv, 4, bh_heads * lq * dv, a),
        lse: window(row_lo, row_hi, 4, bh_heads * lq, a),
        mask,
    }
}

fn fits(c: &Chunk, p: &Problem, lim: &PlanLimits) -> bool {
    let windows = [
        Some(c.q),
        Some(c.k),
        Some(c.v),
        Some(c.out),
        Some(c.lse),
        c.mask,
    ];
    let bound_ok = windows.iter().flatten().all(|w| w.size <= lim.max_binding);
    let scores_ok = lim
        .max_scores
        .is_none_or(|m| c.score_elems(p) * 4 <= m.min(lim.max_binding));
    bound_ok && scores_ok
}

/// Largest `n` in `1..=max` with `ok(n)`, for a predicate that only turns false as `n` grows.
fn largest(max: usize, ok: impl Fn(usize) -> bool) -> Option<usize> {
    if !ok(1) {
        return None;
    }
    let (mut lo, mut hi) = (1, max);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if ok(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    Some(lo)
}

/// Splits `p` into chunks that fit `lim`, covering every (head, row) exactly once.
///
/// # Errors
/// [`AttentionError::TooLarge`] when even one row of one head does not fit (its keys or
/// values alone exceed the binding limit).
pub(crate) fn plan(p: &Problem, lim: &PlanLimits) -> Result<Vec<Chunk>> {
    let heads = p.batch * p.heads_q;
    let mut chunks = Vec::new();
    let mut bh = 0;
    while bh < heads {
        let whole = largest(heads - bh, |n| {
            fits(&chunk_at(p, lim, bh, n, 0, p.len_q), p, lim)
        });
        if let Some(n) = whole {
            chunks.push(chunk_at(p, lim, bh, n, 0, p.len_q));
            bh += n;
            continue;
        }
        let mut row = 0;
        while row < p.len_q {
            let rows = largest(p.len_q - row, |m| {
                fits(&chunk_at(p, lim, bh, 1, row, m), p, lim)
            })
            .ok_or_else(|| AttentionError::TooLarge {
                arg: "k",
                detail: format!(
                    "one head's keys and values (Lk {}, D {}, Dv {}) exceed the {}-byte binding limit",
                    p.len_k, p.dim, p.dim_v, lim.max_binding
                ),
            })?;
            chunks.push(chunk_at(p, lim, bh, 1, row, rows));
            row += rows;
        }
        bh += 1;
    }
    Ok(chunks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::AttentionOptions;
    use crate::problem::validate;

    fn limits(max_binding: u64) -> PlanLimits {
        PlanLimits {
            max_binding,
            offset_alignment: 256,
            input_elem_bytes: 4,
            max_scores: Some(max_binding),
        }
    }

    #[test]
    fn small_problem_is_one_chunk() {
        let p = validate(
            &[2, 4, 16, 8],
            &[2, 2, 16, 8],
            &[2, 2, 16, 8],
            &Default::default(),
        )
        .unwrap();
        let c = plan(&p, &limits(1 << 27)).unwrap();
        assert_eq!(c.len(), 1);
        assert_eq!((c[0].bh_count, c[0].row_count), (8, 16));
    }

    #[test]
    fn tight_limit_covers_every_row_once() {
        let opts = AttentionOptions::default();
        let p = validate(&[2, 3, 37, 16], &[2, 1, 50, 16], &[2, 1, 50, 16], &opts).unwrap();
        let c = plan(&p, &limits(4096)).unwrap();
        let mut seen = vec![0u32; 2 * 3 * 37];
        for ch in &c {
            for bh in ch.bh_start..ch.bh_start + ch.bh_count {
                for r in ch.row_start..ch.row_start + ch.row_count {
                    seen[bh * 37 + r] += 1;
                }
            }
            for w in [ch.q, ch.k, ch.v, ch.out, ch.lse] {
                assert!(w.size <= 4096 && w.offset % 256 == 0);
            }
        }
        assert!(seen.iter().all(|&n| n == 1));
        assert!(c.len() > 6);
    }

    #[test]
    fn too_large_head_is_an_error() {
        let p = validate(
            &[1, 1, 4, 64],
            &[1, 1, 100, 64],
            &[1, 1, 100, 64],
            &Default::default(),
        )
        .unwrap();
        assert!(matches!(
            plan(&p, &limits(1024)),
            Err(AttentionError::TooLarge { .. })
        ));
    }
}
