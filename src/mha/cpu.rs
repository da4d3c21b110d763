//! The CPU reference of the layer: every step in f64 with ndarray, slow on purpose.
//! The GPU path is tested against it.

use ndarray::{s, Array1, Array2, Array3, Array4, ArrayView3, Axis, Ix3, Ix4};

use crate::error::Result;
use crate::host_memory::try_zeros;
use crate::mha::options::{HeadWeights, MhaOptions};
use crate::mha::output::MhaOutput;
use crate::mha::problem::validate;
use crate::mha::weights::MhaWeights;

/// `x Wᵀ + b` over the last axis, in f64.
fn linear(x: &Array3<f64>, w: &Array2<f32>, b: &Array1<f32>) -> Array3<f64> {
    let (bs, l, e) = x.dim();
    // A standard-layout array of bs * l * e elements always reshapes to (bs * l, e).
    let flat = x
        .to_shape((bs * l, e))
        .map(|v| v.to_owned())
        .unwrap_or_default();
    let y = flat.dot(&w.mapv(f64::from).t()) + &b.mapv(f64::from);
    let n = w.nrows();
    y.into_shape_with_order((bs, l, n)).unwrap_or_default()
}

/// Multi-head attention on the CPU, in f64: same weights, options, outputs and errors
/// as the GPU path.
///
/// # Errors
/// [`AttentionError::Shape`](crate::AttentionError::Shape) naming `x`, `kv` or
/// `key_padding_mask`.
pub fn mha_cpu(
    w: &MhaWeights,
    x: ArrayView3<'_, f32>,
    kv: Option<ArrayView3<'_, f32>>,
    opts: &MhaOptions<'_>,
) -> Result<MhaOutput> {
    let p = validate(w.dims, x.shape(), kv.as_ref().map(|a| a.shape()), opts)?;
    let d = p.dims;
    let x = x.mapv(f64::from);
    let kv = kv.map_or_else(|| x.clone(), |a| a.mapv(f64::from));
    let q = linear(&x, &w.wq, &w.bq);
    let k = linear(&kv, &w.wk, &w.bk);
    let v = linear(&kv, &w.wv, &w.bv);
    let (hd, group) = (d.head_dim, d.heads / d.kv_heads);
    let scale = 1.0 / (hd as f64).sqrt();
    // The (B, H, L, S) weights are held only when asked for; otherwise one row of
    // logits at a time. Allocations are fallible and checked against free memory.
    let mut weights = match opts.weights {
        HeadWeights::None => None,
        _ => Some(try_zeros::<f64, _>(
            "attn_weights",
            Ix4(p.batch, d.heads, p.len_q, p.len_k),
        )?),
    };
    let mut heads = try_zeros::<f64, _>("y", Ix3(p.batch, p.len_q, d.embed))?;
    for b in 0..p.batch {
        for h in 0..d.heads {
            let (qc, kc) = (h * hd, (h / group) * hd);
            for i in 0..p.len_q {
                let qi = q.slice(s![b, i, qc..qc + hd]);
                let allowed = |j: usize| {
                    let padded = opts.key_padding_mask.as_ref().is_some_and(|m| m[[b, j]]);
                    !padded && (!opts.causal || j <= i)
                };
                let logits: Vec<Option<f64>> = (0..p.len_k)
                    .map(|j| allowed(j).then(|| scale * qi.dot(&k.slice(s![b, j, kc..kc + hd]))))
                    .collect();
                let m = logits.iter().flatten().fold(f64::NEG_INFINITY, |a, &x| {
                    if a.is_nan() || x.is_nan() {
                        f64::NAN
                    } else {
                        a.max(x)
                    }
                });
                let sum: f64 = logits.iter().flatten().map(|x| (x - m).exp()).sum();
                for (j, logit) in logits.iter().enumerate() {
                    // A row with no allowed key keeps its zeros.
                    let Some(logit) = logit else { continue };
                    let wj = (logit - m).exp() / sum;
                    if let Some(weights) = &mut weights {
                        weights[[b, h, i, j]] = wj;
                    }
                    if wj != 0.0 {
                        let vj = v.slice(s![b, j, kc..kc + hd]);
                        heads.slice_mut(s![b, i, qc..qc + hd]).scaled_add(wj, &vj);
                    }
                }
            }
        }
    }
    let y = linear(&heads, &w.wo, &w.bo).mapv(|x| x as f32);
    let weights = match (opts.weights, weights) {
        (HeadWeights::Averaged, Some(w)) => Some(average_heads_f64(&w)),
        (HeadWeights::PerHead, Some(w)) => Some(w.mapv(|x| x as f32).into_dyn()),
        _ => None,
    };
    Ok(MhaOutput { y, weights })
}

fn average_heads_f64(w: &Array4<f64>) -> ndarray::ArrayD<f32> {
    let h = w.len_of(Axis(1)).max(1) as f64;
    w.sum_axis(Axis(1)).mapv(|x| (x / h) as f32).into_dyn()
}
