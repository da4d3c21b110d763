//! The class of a dense-layer problem that a tuned shape is remembered under
//! (`linear_tune.rs` decides, `linear.rs` looks the decision up when recording).

use crate::gpu::kernels::elem::Elem;

/// What a shape decision is remembered under: rows by the lanes tiles' heights (8, 16,
/// 32) and two classes beyond, N and K exactly (a model has few of each), W's storage
/// and whether x and W are read four elements at a time.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct LinearClass {
    rows: u8,
    cols: u32,
    inner: u32,
    elem: Elem,
    vec4: bool,
}

/// The row class of `rows` and the rows its proxy runs: the class's most, so that what a
/// class times never depends on which of its problems came first (256 for the last,
/// open class, a few milliseconds a launch on a CPU adapter at the models' widths).
pub(crate) fn row_class(rows: u32) -> (u8, u32) {
    match rows {
        0..=8 => (0, 8),
        9..=16 => (1, 16),
        17..=32 => (2, 32),
        33..=128 => (3, 128),
        _ => (4, 256),
    }
}

impl LinearClass {
    pub(crate) fn new(rows: u32, cols: u32, inner: u32, elem: Elem, vec4: bool) -> Self {
        Self {
            rows: row_class(rows).0,
            cols,
            inner,
            elem,
            vec4,
        }
    }
}
