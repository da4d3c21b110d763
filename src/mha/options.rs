//! What a multi-head attention call computes beyond the weights.

use ndarray::ArrayView2;

/// Which attention weights a call returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HeadWeights {
    /// None. The default.
    #[default]
    None,
    /// `(B, L, S)`, the mean over heads (PyTorch's `average_attn_weights=True`).
    Averaged,
    /// `(B, H, L, S)`, one matrix per query head.
    PerHead,
}

/// Options of [`mha`](crate::mha()) and friends, with PyTorch's defaults.
#[derive(Debug, Clone, Default)]
pub struct MhaOptions<'a> {
    /// Top-left causal over `(L, S)`: query `i` sees keys `j <= i` (PyTorch's
    /// `is_causal`). Default `false`.
    pub causal: bool,
    /// `(B, S)`, PyTorch's polarity: `true` = this key is padding and is ignored. (The
    /// opposite of [`Mask::Bool`](crate::Mask::Bool), where `true` = may attend.)
    pub key_padding_mask: Option<ArrayView2<'a, bool>>,
    /// Which attention weights to return. Default none.
    pub weights: HeadWeights,
}
