//! What a multi-head attention call returns on the host.

use ndarray::{Array3, Array4, ArrayD, Axis};

/// The result of one call.
#[derive(Debug, Clone, PartialEq)]
pub struct MhaOutput {
    /// `(B, L, E)`.
    pub y: Array3<f32>,
    /// `(B, L, S)` averaged over heads, or `(B, H, L, S)` per head, when requested.
    pub weights: Option<ArrayD<f32>>,
}

/// The mean over heads of `(B, H, L, S)` weights, accumulated in f64.
pub(crate) fn average_heads(w: &Array4<f32>) -> ArrayD<f32> {
    let h = w.shape()[1].max(1) as f64;
    w.mapv(f64::from)
        .sum_axis(Axis(1))
        .mapv(|x| (x / h) as f32)
        .into_dyn()
}
