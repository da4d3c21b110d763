//! Attention patterns without the weights matrix: selected heads, rows and columns of the
//! weights, a pooled map of any context, each row's entropy and each key's received
//! attention, recomputed from q and k on the device in memory linear in the sequence
//! (`patterns.wgsl`), and their float64 reference.

pub(crate) mod gpu;
pub(crate) mod output;
pub(crate) mod reference;
pub(crate) mod request;
