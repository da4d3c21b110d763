//! The float64 oracle of [`crate::attention_patterns`]: each row's weights from the
//! reference softmax, one row at a time (never the Lq × Lk matrix), then reduced.

use ndarray::{Array3, Array4, ArrayView4};

use crate::error::Result;
use crate::options::{AttentionOptions, Mask};
use crate::patterns::output::{AttentionPatterns, PooledWeights};
use crate::patterns::request::{PatternOptions, PatternPlan};
use crate::problem::{validate, Problem};
use crate::reference::{broadcast, softmax_row};

/// Rows whose weights are held at once (per batch of rows shared among threads).
const ROW_BATCH: usize = 64;

/// Computes the patterns [`crate::attention_patterns`] computes, in float64 from the
/// reference formula (slow on purpose: it is what the GPU is tested against). Same
/// options, same outputs, same errors.
///
/// # Errors
/// As [`crate::attention_patterns`]'s input checks.
pub fn patterns_reference(
    q: ArrayView4<'_, f32>,
    k: ArrayView4<'_, f32>,
    opts: &AttentionOptions<'_>,
    ask: &PatternOptions<'_>,
) -> Result<AttentionPatterns> {
    let v_shape = [k.shape()[0], k.shape()[1], k.shape()[2], k.shape()[3]];
    let p = validate(q.shape(), k.shape(), &v_shape, opts)?;
    let plan = PatternPlan::new(&p, opts, ask)?;
    let q = q.as_standard_layout();
    let k = k.as_standard_layout();
    let rows = Rows {
        p: &p,
        q: q.as_slice().unwrap_or(&[]),
        k: k.as_slice().unwrap_or(&[]),
        opts,
    };
    let (nb, hq) = (p.batch, p.heads_q);
    let (nr, nc, ns) = (plan.rows.len(), plan.cols.len(), plan.heads.len());
    let mut weights = plan.weights.then(|| Array4::<f32>::zeros((nb, ns, nr, nc)));
    let (pr, pc) = plan.pool.unwrap_or((0, 0));
    let mut pool_max = Array4::<f64>::zeros((nb, ns, pr, pc));
    let mut pool_sum = Array4::<f64>::zeros((nb, ns, pr, pc));
    let mut pool_nan = Array4::<bool>::from_elem((nb, ns, pr, pc), false);
    let mut entropy = plan.entropy.then(|| Array3::<f32>::zeros((nb, hq, nr)));
    let mut colsum = plan.column_sums.then(|| Array3::<f64>::zeros((nb, hq, nc)));
    let edges = plan.edges();
    let cell_of = |edges: &[usize], x: usize| edges.partition_point(|&e| e <= x) - 1;

    for b in 0..nb {
        for h in 0..hq {
            let sel = plan.heads.iter().position(|&s| s == h);
            if sel.is_none() && !plan.stats_for_all() {
                continue;
            }
            for start in plan.rows.clone().step_by(ROW_BATCH) {
                let end = (start + ROW_BATCH).min(plan.rows.end);
                let batch = rows.weights_of(b, h, start..end);
                for (n, w) in batch.iter().enumerate() {
                    let i = start + n;
                    let r = i - plan.rows.start;
                    if let Some(e) = &mut entropy {
                        let ent: f64 = w.iter().filter(|&&x| x != 0.0).map(|&x| -x * x.ln()).sum();
                        e[[b, h, r]] = ent as f32;
                    }
                    if let Some(cs) = &mut colsum {
                        for c in 0..nc {
                            cs[[b, h, c]] += w[plan.cols.start + c];
                        }
                    }
                    let Some(s) = sel else { continue };
                    if let Some(wo) = &mut weights {
                        for c in 0..nc {
                            wo[[b, s, r, c]] = w[plan.cols.start + c] as f32;
                        }
                    }
                    if let Some((re, ce)) = &edges {
                        let cr = cell_of(re, i);
                        for j in plan.cols.clone() {
                            let cc = cell_of(ce, j);
                            let x = w[j];
                            let at = [b, s, cr, cc];
                            pool_nan[at] |= x.is_nan();
                            pool_max[at] = pool_max[at].max(x);
                            pool_sum[at] += x;
                        }
                    }
                }
            }
        }
    }
    let pooled = edges.map(|(re, ce)| {
        let mut max = Array4::<f32>::zeros((nb, ns, pr, pc));
        let mut mean = Array4::<f32>::zeros((nb, ns, pr, pc));
        for ((at, m), nan) in max.indexed_iter_mut().zip(pool_nan.iter()) {
            let count = ((re[at.2 + 1] - re[at.2]) * (ce[at.3 + 1] - ce[at.3])) as f64;
            *m = if *nan { f32::NAN } else { pool_max[at] as f32 };
            mean[at] = if *nan {
                f32::NAN
            } else {
                (pool_sum[at] / count) as f32
            };
        }
        PooledWeights {
            max,
            mean,
            row_edges: re,
            col_edges: ce,
        }
    });
    Ok(AttentionPatterns {
        weights,
        pooled,
        entropy,
        column_sums: colsum.map(|c| c.mapv(|x| x as f32)),
        scratch_bytes: 0,
    })
}

/// Reference softmax rows of one problem.
struct Rows<'a, 'o, 'm> {
    p: &'a Problem,
    q: &'a [f32],
    k: &'a [f32],
    opts: &'o AttentionOptions<'m>,
}

impl Rows<'_, '_, '_> {
    /// The f64 weights over all keys of query rows `rows` of head `h` in batch `b`,
    /// rows spread over the machine's threads.
    fn weights_of(&self, b: usize, h: usize, rows: std::ops::Range<usize>) -> Vec<Vec<f64>> {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let all: Vec<usize> = rows.collect();
        if threads == 1 {
            // No thread is spawned where there is one (and none can be, as on the web).
            return all.iter().map(|&i| self.row(b, h, i)).collect();
        }
        let per = all.len().div_ceil(threads).max(1);
        std::thread::scope(|scope| {
            let jobs: Vec<_> = all
                .chunks(per)
                .map(|part| {
                    scope.spawn(move || part.iter().map(|&i| self.row(b, h, i)).collect::<Vec<_>>())
                })
                .collect();
            jobs.into_iter()
                .flat_map(|j| j.join().unwrap_or_default())
                .collect()
        })
    }

    fn row(&self, b: usize, h: usize, i: usize) -> Vec<f64> {
        let p = self.p;
        let (lk, d) = (p.len_k, p.dim);
        let target = (p.batch, p.heads_q, p.len_q, lk);
        let bool_mask = match &self.opts.mask {
            Some(Mask::Bool(m)) => broadcast(m, target),
            _ => None,
        };
        let bias = match &self.opts.mask {
            Some(Mask::Additive(m)) => broadcast(m, target),
            _ => None,
        };
        let kv_len = self.opts.kv_lens.map_or(lk, |l| l[b] as usize);
        let g = h / p.group();
        let qrow = &self.q[((b * p.heads_q + h) * p.len_q + i) * d..][..d];
        let mut logits = vec![0f64; lk];
        let mut allowed = vec![false; lk];
        for j in 0..lk {
            let mut ok = j < kv_len && p.structurally_allowed(i, j);
            if let Some(m) = &bool_mask {
                ok &= m[[b, h, i, j]];
            }
            if !ok {
                continue;
            }
            let krow = &self.k[((b * p.heads_kv + g) * lk + j) * d..][..d];
            let dot: f64 = qrow
                .iter()
                .zip(krow)
                .map(|(&x, &y)| x as f64 * y as f64)
                .sum();
            let mut x = p.scale as f64 * dot;
            if let Some(bias) = &bias {
                let bias = bias[[b, h, i, j]];
                ok &= bias != f32::NEG_INFINITY;
                x += bias as f64;
            }
            allowed[j] = ok && x != f64::NEG_INFINITY;
            logits[j] = x;
        }
        let mut w = vec![0f64; lk];
        softmax_row(&logits, &allowed, &mut w);
        w
    }
}
