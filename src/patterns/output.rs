//! What a patterns call returns.

use ndarray::{Array3, Array4};

/// A window of the weights pooled into cells: row cell `r` covers window rows
/// `row_edges[r]..row_edges[r + 1]` (absolute query rows), column cell `c` keys
/// `col_edges[c]..col_edges[c + 1]`.
#[derive(Debug, Clone, PartialEq)]
pub struct PooledWeights {
    /// `(B, heads, Pr, Pc)`: the largest weight in each cell.
    pub max: Array4<f32>,
    /// `(B, heads, Pr, Pc)`: the mean weight of each cell (masked pairs count as 0).
    pub mean: Array4<f32>,
    /// `Pr + 1` query-row edges.
    pub row_edges: Vec<usize>,
    /// `Pc + 1` key-column edges.
    pub col_edges: Vec<usize>,
}

/// The patterns a [`crate::PatternOptions`] asked for; `None` for the others.
#[derive(Debug, Clone, PartialEq)]
pub struct AttentionPatterns {
    /// `(B, heads, rows, cols)` weights of the window.
    pub weights: Option<Array4<f32>>,
    /// The pooled window.
    pub pooled: Option<PooledWeights>,
    /// `(B, Hq, rows)` entropy of each window row, in nats.
    pub entropy: Option<Array3<f32>>,
    /// `(B, Hq, cols)` attention received by each window column from the window's rows.
    pub column_sums: Option<Array3<f32>>,
    /// Device bytes the call used beyond q, k, the mask and the outputs (row stats,
    /// parameters); 0 on the CPU.
    pub scratch_bytes: u64,
}
