//! What a patterns call asks for, and the same request checked against a problem.

use std::ops::Range;

use crate::error::{AttentionError, Result};
use crate::options::{AttentionOptions, KernelPath, Precision};
use crate::problem::Problem;

/// The largest side of a pooled map.
pub const MAX_POOL: usize = 1024;

/// Which patterns of the attention weights to compute, without the `(B, Hq, Lq, Lk)`
/// matrix ever existing: each is recomputed from q and k on the device, in memory
/// O(B·Hq·Lq) beyond q, k and what is asked for.
///
/// A *window* of query rows × key columns restricts the outputs (the whole matrix by
/// default); a row's distribution is always over all of its keys, so a window's weights
/// are the full matrix's weights there.
///
/// ```
/// use wgpu_attention::PatternOptions;
/// let ask = PatternOptions { heads: Some(&[0]), pool: Some(512), entropy: true, ..Default::default() };
/// assert!(!ask.weights);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PatternOptions<'a> {
    /// Query heads (`0..Hq`, of every batch) whose weights and pooled map are returned;
    /// `None` (the default) means every head. Entropy and column sums cover every head.
    pub heads: Option<&'a [usize]>,
    /// Query rows of the window; default all (`0..Lq`).
    pub rows: Option<Range<usize>>,
    /// Key columns of the window; default all (`0..Lk`).
    pub cols: Option<Range<usize>>,
    /// The weights of the window, `(B, heads, rows, cols)`. Default `false`.
    pub weights: bool,
    /// The window pooled into at most `P × P` cells (`P` from 1 to [`MAX_POOL`]): the
    /// exact max and mean of the weights in each cell, `(B, heads, Pr, Pc)` with
    /// `Pr = min(P, rows)`, `Pc = min(P, cols)`. Default none.
    pub pool: Option<usize>,
    /// Each window row's entropy `-Σ w ln w` over all its keys (nats), `(B, Hq, rows)`;
    /// 0 for a row with no allowed key. Default `false`.
    pub entropy: bool,
    /// The attention each window column receives from the window's rows, `Σ_i w_ij`,
    /// `(B, Hq, cols)`. Default `false`.
    pub column_sums: bool,
}

/// A request checked against its problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PatternPlan {
    /// The selected query heads, in the order asked.
    pub heads: Vec<usize>,
    pub rows: Range<usize>,
    pub cols: Range<usize>,
    pub weights: bool,
    /// (Pr, Pc) when pooling.
    pub pool: Option<(usize, usize)>,
    pub entropy: bool,
    pub column_sums: bool,
}

impl PatternPlan {
    /// Checks `ask` against `p` and the call's options.
    ///
    /// # Errors
    /// [`AttentionError::InvalidOption`] naming the field: nothing asked for, a head,
    /// row or column out of range, an empty or repeated selection, a pool size outside
    /// `1..=MAX_POOL`, or an attention option patterns do not take (`return_weights`,
    /// `return_lse`, f16 `precision`, a kernel `path`).
    pub(crate) fn new(
        p: &Problem,
        opts: &AttentionOptions<'_>,
        ask: &PatternOptions<'_>,
    ) -> Result<Self> {
        if opts.return_weights || opts.return_lse {
            let arg = if opts.return_weights {
                "return_weights"
            } else {
                "return_lse"
            };
            return Err(AttentionError::option(
                arg,
                "patterns return no attention output; ask PatternOptions for weights instead",
            ));
        }
        if opts.precision != Precision::F32 {
            return Err(AttentionError::option(
                "precision",
                "patterns read q and k as f32",
            ));
        }
        if opts.path != KernelPath::Auto {
            return Err(AttentionError::option(
                "path",
                "patterns run their own kernel; leave it Auto",
            ));
        }
        if !(ask.weights || ask.pool.is_some() || ask.entropy || ask.column_sums) {
            return Err(AttentionError::option(
                "patterns",
                "asks for nothing: set weights, pool, entropy or column_sums",
            ));
        }
        let heads: Vec<usize> = match ask.heads {
            None => (0..p.heads_q).collect(),
            Some(list) => list.to_vec(),
        };
        if heads.is_empty() {
            return Err(AttentionError::option(
                "heads",
                "is empty; None means every head",
            ));
        }
        for (n, &h) in heads.iter().enumerate() {
            if h >= p.heads_q {
                return Err(AttentionError::option(
                    "heads",
                    format!("head {h} is out of range: q has {} heads", p.heads_q),
                ));
            }
            if heads[..n].contains(&h) {
                return Err(AttentionError::option(
                    "heads",
                    format!("head {h} is listed twice"),
                ));
            }
        }
        let rows = range("rows", ask.rows.clone(), p.len_q, "Lq")?;
        let cols = range("cols", ask.cols.clone(), p.len_k, "Lk")?;
        let pool = match ask.pool {
            None => None,
            Some(n) if (1..=MAX_POOL).contains(&n) => Some((n.min(rows.len()), n.min(cols.len()))),
            Some(n) => {
                return Err(AttentionError::option(
                    "pool",
                    format!("{n} cells a side; from 1 to {MAX_POOL}"),
                ))
            }
        };
        // Cell edges n * len / cells are computed in 32 bits on the device.
        if let Some((pr, pc)) = pool {
            for (arg, cells, len) in [("rows", pr, rows.len()), ("cols", pc, cols.len())] {
                if (cells as u64) * (len as u64) >= 1 << 32 {
                    return Err(AttentionError::TooLarge {
                        arg,
                        detail: format!(
                            "{len} pooled into {cells} cells overflows 32-bit cell edges"
                        ),
                    });
                }
            }
        }
        Ok(Self {
            heads,
            rows,
            cols,
            weights: ask.weights,
            pool,
            entropy: ask.entropy,
            column_sums: ask.column_sums,
        })
    }

    /// Whether row stats are needed for every head (entropy and column sums cover all).
    pub(crate) fn stats_for_all(&self) -> bool {
        self.entropy || self.column_sums
    }

    /// The selected flattened heads `b * Hq + h`, batch-major.
    pub(crate) fn selected(&self, p: &Problem) -> Vec<usize> {
        (0..p.batch)
            .flat_map(|b| self.heads.iter().map(move |&h| b * p.heads_q + h))
            .collect()
    }

    /// Row edges of the pooled map (Pr + 1 absolute rows) and column edges (Pc + 1).
    pub(crate) fn edges(&self) -> Option<(Vec<usize>, Vec<usize>)> {
        let (pr, pc) = self.pool?;
        let edges = |cells: usize, r: &Range<usize>| -> Vec<usize> {
            (0..=cells).map(|n| r.start + n * r.len() / cells).collect()
        };
        Some((edges(pr, &self.rows), edges(pc, &self.cols)))
    }
}

fn range(
    arg: &'static str,
    r: Option<Range<usize>>,
    len: usize,
    name: &str,
) -> Result<Range<usize>> {
    let r = r.unwrap_or(0..len);
    if r.start >= r.end || r.end > len {
        return Err(AttentionError::option(
            arg,
            format!(
                "{}..{} is not a non-empty range within 0..{len} ({name})",
                r.start, r.end
            ),
        ));
    }
    Ok(r)
}
