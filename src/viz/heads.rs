//! Heads at a glance: a few numbers per layer × head that say what kind of head it is.
//!
//! For head `h` of layer `l` with attention `w` (rows are queries `i`, columns keys `j`):
//!
//! - **entropy**: the mean over rows of `−Σ_j w[i, j]·ln w[i, j]`, in nats (natural log;
//!   `0·ln 0 = 0`). 0 for a head that puts all of each row on one key; `ln L` for rows
//!   uniform over `L` keys (a causal row `i` uniform over its `i + 1` keys has `ln(i + 1)`).
//! - **previous token**: the mean of `w[i, i − 1]` over rows `i ≥ 1` (1 for a head that
//!   always looks one token back). With one token there is no such row: it is 0.
//! - **first token**: the mean of `w[i, 0]` over every row (`[CLS]` or `<s>` heads, and
//!   the attention sinks of causal models).
//! - **nearest**: the other head, in any layer, whose rows are closest to this one's by
//!   the mean over rows of the Jensen-Shannon distance `sqrt(JS(p, q))`, with
//!   `JS(p, q) = ½·KL(p ‖ m) + ½·KL(q ‖ m)`, `m = (p + q)/2`, natural log (so the distance
//!   is in [0, sqrt(ln 2)] for probability rows), and that distance. 0 means identical
//!   rows; ties go to the first head in (layer, head) order. With a single head there is
//!   none.

use ndarray::{ArrayView2, ArrayViewD, Axis};

use super::layers::self_attention;
use crate::error::{AttentionError, Result};

/// The other head nearest to one head: see [`HeadStat::nearest`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NearestHead {
    pub layer: usize,
    pub head: usize,
    /// The mean over rows of the Jensen-Shannon distance (natural log) to it.
    pub distance: f64,
}

/// The numbers of one layer × head (see the module docs for their definitions).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HeadStat {
    pub layer: usize,
    pub head: usize,
    /// Mean row entropy, in nats.
    pub entropy: f64,
    /// Mean attention of row `i` to token `i − 1` over rows `i ≥ 1`; 0 with one token.
    pub previous_token: f64,
    /// Mean attention to token 0 over every row.
    pub first_token: f64,
    /// The nearest other head (any layer) by mean Jensen-Shannon distance; `None` when
    /// the attention has a single head in all.
    pub nearest: Option<NearestHead>,
}

/// [`head_stats`]'s result: one [`HeadStat`] per layer × head, layer-major.
#[derive(Debug, Clone, PartialEq)]
pub struct HeadStats {
    pub layers: usize,
    pub heads: usize,
    /// The number of tokens `L`.
    pub tokens: usize,
    /// `layers · heads` entries, head `h` of layer `l` at `l · heads + h`.
    pub stats: Vec<HeadStat>,
    /// The symmetric matrix of the heads' mean Jensen-Shannon distances, `count × count`
    /// for `count = layers · heads`, in the order of `stats`: see [`HeadStats::distance`].
    distances: Vec<f64>,
}

impl HeadStats {
    /// Head `head` of layer `layer`, if there is one.
    pub fn get(&self, layer: usize, head: usize) -> Option<&HeadStat> {
        if layer < self.layers && head < self.heads {
            self.stats.get(layer * self.heads + head)
        } else {
            None
        }
    }

    /// The mean over rows of the Jensen-Shannon distance between head `a` and head `b`,
    /// each given as `(layer, head)`: the distance [`HeadStat::nearest`] minimises (see
    /// the module docs), 0 from a head to itself. Symmetric, in [0, sqrt(ln 2)] for
    /// probability rows. `None` when either head is out of range.
    pub fn distance(&self, a: (usize, usize), b: (usize, usize)) -> Option<f64> {
        let index = |(layer, head): (usize, usize)| {
            (layer < self.layers && head < self.heads).then_some(layer * self.heads + head)
        };
        let (x, y) = (index(a)?, index(b)?);
        self.distances.get(x * self.stats.len() + y).copied()
    }
}

/// `w·ln w` with `0·ln 0 = 0`.
fn xlogx(w: f64) -> f64 {
    if w > 0.0 {
        w * w.ln()
    } else {
        0.0
    }
}

/// Entropy, previous-token and first-token attention of one (L, L) head, and each row's
/// `Σ_j w ln w` (for the Jensen-Shannon divergences).
fn one_head(m: ArrayView2<f32>) -> (f64, f64, f64, Vec<f64>) {
    let n = m.nrows();
    let plogp: Vec<f64> = m
        .outer_iter()
        .map(|row| row.iter().map(|&w| xlogx(f64::from(w))).sum())
        .collect();
    // 0 − x rather than −x: a head of one-hot rows has entropy 0, not −0.
    let entropy = 0.0 - plogp.iter().sum::<f64>() / n as f64;
    let previous = if n > 1 {
        (1..n).map(|i| f64::from(m[[i, i - 1]])).sum::<f64>() / (n - 1) as f64
    } else {
        0.0
    };
    let first = m.column(0).iter().map(|&w| f64::from(w)).sum::<f64>() / n as f64;
    (entropy, previous, first, plogp)
}

/// The mean over rows of `sqrt(JS(p_i, q_i))`, with each row's `Σ p ln p` given:
/// `JS = ½·Σ p ln p + ½·Σ q ln q − Σ m ln m`, one logarithm per cell.
fn mean_js_distance(
    p: ArrayView2<f32>,
    q: ArrayView2<f32>,
    p_plogp: &[f64],
    q_plogp: &[f64],
) -> f64 {
    let n = p.nrows();
    let mut total = 0.0;
    for (i, (pr, qr)) in p.outer_iter().zip(q.outer_iter()).enumerate() {
        let mlogm: f64 = pr
            .iter()
            .zip(qr.iter())
            .map(|(&a, &b)| xlogx(0.5 * (f64::from(a) + f64::from(b))))
            .sum();
        let js = 0.5 * (p_plogp[i] + q_plogp[i]) - mlogm;
        // Rounding can leave identical rows a hair below 0.
        total += js.max(0.0).sqrt();
    }
    total / n as f64
}

/// Per-head summary numbers of `attention`, shaped `(layers, heads, L, L)` as the models'
/// forward passes return it (and `model attention` writes it): entropy (nats),
/// previous-token and first-token attention, and the nearest other head by mean
/// Jensen-Shannon distance, all computed in float64 (see the module docs).
///
/// The weights are used as they are (rows are not renormalised); they are meant to be
/// probability rows, and a row that sums to 0 (padding, all keys masked) adds 0 entropy.
/// The nearest heads compare every pair of heads, `(layers·heads)² / 2` pairs of
/// `L × L` matrices.
///
/// # Errors
/// [`AttentionError::Shape`] naming `attention` when it is not of rank 4, is empty (no
/// layer, head or token), or is not square in its last two axes (queries and keys
/// differ: "previous token" needs self-attention);
/// [`AttentionError::InvalidOption`] naming `attention` when it holds NaN, ±inf or a
/// negative weight (the first such cell is named: entropy takes the logarithm of every
/// weight). No input panics.
pub fn head_stats(attention: ArrayViewD<'_, f32>) -> Result<HeadStats> {
    let a = self_attention(attention, "head statistics need")?;
    let (layers, heads, lq, _) = a.dim();
    if let Some((index, w)) = a.indexed_iter().find(|(_, w)| **w < 0.0) {
        return Err(AttentionError::option(
            "attention",
            format!(
                "holds {w} at {index:?}: the weights must be >= 0 (entropy takes their logarithm)"
            ),
        ));
    }
    let all: Vec<(usize, usize, ArrayView2<f32>)> = a
        .outer_iter()
        .enumerate()
        .flat_map(|(l, layer)| (0..heads).map(move |h| (l, h, layer.index_axis_move(Axis(0), h))))
        .collect();
    let singles: Vec<(f64, f64, f64, Vec<f64>)> =
        all.iter().map(|(_, _, m)| one_head(*m)).collect();
    let count = all.len();
    // The symmetric distance matrix, each pair computed once.
    let mut dist = vec![0.0f64; count * count];
    for x in 0..count {
        for y in x + 1..count {
            let d = mean_js_distance(all[x].2, all[y].2, &singles[x].3, &singles[y].3);
            dist[x * count + y] = d;
            dist[y * count + x] = d;
        }
    }
    let stats = all
        .iter()
        .zip(&singles)
        .enumerate()
        .map(|(x, ((layer, head, _), (entropy, previous, first, _)))| {
            let nearest = (0..count)
                .filter(|&y| y != x)
                .fold(None::<usize>, |best, y| match best {
                    Some(b) if dist[x * count + b] <= dist[x * count + y] => Some(b),
                    _ => Some(y),
                })
                .map(|y| NearestHead {
                    layer: all[y].0,
                    head: all[y].1,
                    distance: dist[x * count + y],
                });
            HeadStat {
                layer: *layer,
                head: *head,
                entropy: *entropy,
                previous_token: *previous,
                first_token: *first,
                nearest,
            }
        })
        .collect();
    Ok(HeadStats {
        layers,
        heads,
        tokens: lq,
        stats,
        distances: dist,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{array, s, Array2, Array4};

    fn stats(a: &Array4<f32>) -> HeadStats {
        head_stats(a.view().into_dyn()).unwrap()
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    /// Row 0 on itself, every other row on the token before it.
    fn previous_head(n: usize) -> Array2<f32> {
        let mut m = Array2::<f32>::zeros((n, n));
        m[[0, 0]] = 1.0;
        for i in 1..n {
            m[[i, i - 1]] = 1.0;
        }
        m
    }

    #[test]
    fn a_previous_token_head_has_prev_one_and_entropy_zero() {
        let mut a = Array4::<f32>::zeros((1, 1, 5, 5));
        a.slice_mut(s![0, 0, .., ..]).assign(&previous_head(5));
        let st = stats(&a);
        assert_eq!((st.layers, st.heads, st.tokens), (1, 1, 5));
        let h = st.get(0, 0).unwrap();
        assert_eq!(h.entropy, 0.0);
        assert!(h.entropy.is_sign_positive());
        assert_eq!(h.previous_token, 1.0);
        // Rows 0 and 1 put everything on token 0.
        assert!(close(h.first_token, 2.0 / 5.0), "{h:?}");
        // The only head has no other.
        assert_eq!(h.nearest, None);
        assert!(st.get(0, 1).is_none() && st.get(1, 0).is_none());
    }

    #[test]
    fn uniform_rows_have_entropy_ln_of_their_keys() {
        let n = 6;
        let mut a = Array4::<f32>::zeros((1, 2, n, n));
        // Head 0: every row uniform over all n keys.
        a.slice_mut(s![0, 0, .., ..]).fill(1.0 / n as f32);
        // Head 1: causal, row i uniform over its i + 1 keys.
        for i in 0..n {
            a.slice_mut(s![0, 1, i, ..=i]).fill(1.0 / (i + 1) as f32);
        }
        let st = stats(&a);
        let full = st.get(0, 0).unwrap();
        assert!((full.entropy - (n as f64).ln()).abs() < 1e-6, "{full:?}");
        assert!((full.previous_token - 1.0 / n as f64).abs() < 1e-7);
        assert!((full.first_token - 1.0 / n as f64).abs() < 1e-7);
        let causal = st.get(0, 1).unwrap();
        let want = (1..=n).map(|k| (k as f64).ln()).sum::<f64>() / n as f64;
        assert!((causal.entropy - want).abs() < 1e-6, "{causal:?} vs {want}");
        let first = (1..=n).map(|k| 1.0 / k as f64).sum::<f64>() / n as f64;
        assert!((causal.first_token - first).abs() < 1e-7);
        let prev = (2..=n).map(|k| 1.0 / k as f64).sum::<f64>() / (n - 1) as f64;
        assert!((causal.previous_token - prev).abs() < 1e-7);
        // Two heads: each is the other's nearest, at the same distance.
        let (a0, a1) = (full.nearest.unwrap(), causal.nearest.unwrap());
        assert_eq!((a0.layer, a0.head, a1.layer, a1.head), (0, 1, 0, 0));
        assert_eq!(a0.distance, a1.distance);
        assert!(a0.distance > 0.0 && a0.distance <= 2f64.ln().sqrt());
    }

    #[test]
    fn identical_heads_are_each_others_nearest_at_distance_zero() {
        let n = 4;
        let mut a = Array4::<f32>::zeros((2, 2, n, n));
        let skewed = array![
            [0.7f32, 0.1, 0.1, 0.1],
            [0.2, 0.5, 0.2, 0.1],
            [0.25, 0.25, 0.25, 0.25],
            [0.1, 0.2, 0.3, 0.4]
        ];
        a.slice_mut(s![0, 0, .., ..]).assign(&previous_head(n));
        a.slice_mut(s![0, 1, .., ..]).assign(&skewed);
        a.slice_mut(s![1, 0, .., ..]).fill(0.25);
        // Layer 1 head 1 repeats layer 0 head 1, in another layer.
        a.slice_mut(s![1, 1, .., ..]).assign(&skewed);
        let st = stats(&a);
        let (x, y) = (st.get(0, 1).unwrap(), st.get(1, 1).unwrap());
        assert_eq!(
            x.nearest,
            Some(NearestHead {
                layer: 1,
                head: 1,
                distance: 0.0
            })
        );
        assert_eq!(
            y.nearest,
            Some(NearestHead {
                layer: 0,
                head: 1,
                distance: 0.0
            })
        );
        assert_eq!(x.entropy, y.entropy);
        // One-hot rows against uniform rows of 4: in every row JS = ½·(0 − ln 4) − Σ m ln m
        // with m = (5/8, 1/8, 1/8, 1/8) in some order.
        let m = [0.625f64, 0.125, 0.125, 0.125];
        let js = 0.5 * -(4f64.ln()) - m.iter().map(|&v| v * v.ln()).sum::<f64>();
        let want = js.sqrt();
        let d = mean_js_distance(
            a.slice(s![0, 0, .., ..]),
            a.slice(s![1, 0, .., ..]),
            &one_head(a.slice(s![0, 0, .., ..])).3,
            &one_head(a.slice(s![1, 0, .., ..])).3,
        );
        assert!(close(d, want), "{d} vs {want}");
        // The pairwise distance is the one the nearest heads minimise.
        assert_eq!(st.distance((0, 0), (1, 0)), Some(d));
        assert_eq!(st.distance((1, 0), (0, 0)), Some(d));
        assert_eq!(st.distance((0, 1), (1, 1)), Some(0.0));
        assert_eq!(st.distance((0, 2), (0, 0)), None);
        for h in &st.stats {
            let near = h.nearest.unwrap();
            assert!((near.layer, near.head) != (h.layer, h.head));
            assert!(near.distance.is_finite() && near.distance >= 0.0);
        }
    }

    #[test]
    fn one_token_and_zero_rows_are_finite() {
        let a = Array4::<f32>::ones((2, 1, 1, 1));
        let st = stats(&a);
        for h in &st.stats {
            assert_eq!(
                (h.entropy, h.previous_token, h.first_token),
                (0.0, 0.0, 1.0)
            );
            assert_eq!(h.nearest.unwrap().distance, 0.0);
        }
        // A padding row (all 0) next to a one-hot row.
        let a = array![[[[1.0f32, 0.0], [0.0, 0.0]]], [[[0.0f32, 1.0], [0.0, 0.0]]]];
        let st = stats(&a);
        for h in &st.stats {
            assert!(
                h.entropy == 0.0 && h.nearest.unwrap().distance.is_finite(),
                "{h:?}"
            );
        }
        // Disjoint one-hot rows are as far apart as rows get: sqrt(ln 2), over 2 rows.
        let d = st.stats[0].nearest.unwrap().distance;
        assert!(close(d, 2f64.ln().sqrt() / 2.0), "{d}");
    }

    #[test]
    fn bad_inputs_are_typed_errors_naming_the_argument() {
        let err = |a: ArrayViewD<f32>| head_stats(a).unwrap_err();
        let shape = |e: AttentionError, needle: &str| match e {
            AttentionError::Shape { arg, detail } => {
                assert_eq!(arg, "attention");
                assert!(detail.contains(needle), "{detail}");
            }
            other => panic!("{other:?}"),
        };
        shape(
            err(ndarray::Array3::<f32>::zeros((1, 2, 2)).view().into_dyn()),
            "rank 4",
        );
        shape(
            err(ndarray::Array::<f32, _>::zeros(ndarray::IxDyn(&[])).view()),
            "rank 4",
        );
        for empty in [(0, 1, 2, 2), (1, 0, 2, 2), (1, 1, 0, 0)] {
            shape(err(Array4::<f32>::zeros(empty).view().into_dyn()), "empty");
        }
        shape(
            err(Array4::<f32>::zeros((1, 1, 2, 3)).view().into_dyn()),
            "2 queries and 3 keys",
        );
        let ok = Array4::<f32>::from_elem((1, 2, 2, 2), 0.5);
        for (bad, needle) in [
            (f32::NAN, "finite"),
            (f32::INFINITY, "finite"),
            (f32::NEG_INFINITY, "finite"),
            (-0.25, ">= 0"),
        ] {
            let mut a = ok.clone();
            a[[0, 1, 1, 0]] = bad;
            match err(a.view().into_dyn()) {
                AttentionError::InvalidOption { arg, detail } => {
                    assert_eq!(arg, "attention");
                    assert!(detail.contains("(0, 1, 1, 0)"), "{detail}");
                    assert!(detail.contains(needle), "{detail}");
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn huge_weights_stay_finite() {
        let a = Array4::<f32>::from_elem((1, 2, 3, 3), f32::MAX);
        for h in &stats(&a).stats {
            assert!(h.entropy.is_finite() && h.nearest.unwrap().distance.is_finite());
        }
    }
}
