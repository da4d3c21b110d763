//! The input the whole-model views share: a model's self-attention as its forward passes
//! return it, `(layers, heads, L, L)`, checked once for every view that reads it.

use ndarray::{ArrayView4, ArrayViewD, Ix4};

use crate::error::{AttentionError, Result};

/// `attention` as `(layers, heads, L, L)`, checked: rank 4, no empty axis, as many keys as
/// queries, every weight finite. `needs` names the view in the messages ("rollout needs").
///
/// # Errors
/// [`AttentionError::Shape`] naming `attention` for the wrong rank, an empty axis or
/// queries and keys that differ; [`AttentionError::InvalidOption`] naming `attention` and
/// the first cell that holds NaN or ±inf.
pub(crate) fn self_attention<'a>(
    attention: ArrayViewD<'a, f32>,
    needs: &str,
) -> Result<ArrayView4<'a, f32>> {
    let shape = attention.shape().to_vec();
    let a = attention.into_dimensionality::<Ix4>().map_err(|_| {
        AttentionError::shape(
            "attention",
            format!("expected rank 4 (layers, heads, L, L), got shape {shape:?}"),
        )
    })?;
    let (layers, heads, lq, lk) = a.dim();
    if layers == 0 || heads == 0 || lq == 0 || lk == 0 {
        return Err(AttentionError::shape(
            "attention",
            format!("shape {shape:?} is empty: {needs} a layer, a head and a token"),
        ));
    }
    if lq != lk {
        return Err(AttentionError::shape(
            "attention",
            format!("{lq} queries and {lk} keys (shape {shape:?}): {needs} self-attention, (L, L)"),
        ));
    }
    if let Some((index, w)) = a.indexed_iter().find(|(_, w)| !w.is_finite()) {
        return Err(AttentionError::option(
            "attention",
            format!("holds {w} at {index:?}: the weights must be finite"),
        ));
    }
    Ok(a)
}
