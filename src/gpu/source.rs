//! WGSL sources. Each kernel is its own file, preceded by the shared prelude
//! (`common.wgsl`) and, for kernels that mask, the masking rule (`masking.wgsl`).

pub(crate) const QK: &str = concat!(
    include_str!("../../shaders/common.wgsl"),
    include_str!("../../shaders/qk.wgsl")
);

pub(crate) const SOFTMAX: &str = concat!(
    include_str!("../../shaders/common.wgsl"),
    include_str!("../../shaders/masking.wgsl"),
    include_str!("../../shaders/softmax.wgsl")
);

pub(crate) const PV: &str = concat!(
    include_str!("../../shaders/common.wgsl"),
    include_str!("../../shaders/pv.wgsl")
);

/// Every kernel's full source with its name, for validation without a GPU.
pub const ALL: &[(&str, &str)] = &[("qk", QK), ("softmax", SOFTMAX), ("pv", PV)];
