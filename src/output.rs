//! What a call returns on the host.

use ndarray::{Array3, Array4};

/// The result of one attention call.
#[derive(Debug, Clone, PartialEq)]
pub struct AttentionOutput {
    /// `(B, Hq, Lq, Dv)`.
    pub out: Array4<f32>,
    /// `(B, Hq, Lq, Lk)` softmax weights, when requested.
    pub weights: Option<Array4<f32>>,
    /// `(B, Hq, Lq)` natural-log log-sum-exp of the final logits, when requested.
    pub lse: Option<Array3<f32>>,
}
