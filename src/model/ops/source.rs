//! WGSL sources of the model kernels.

pub(crate) const EMBED: &str = include_str!("../../../shaders/model/embed.wgsl");
pub(crate) const ADD_NORM: &str = include_str!("../../../shaders/model/add_norm.wgsl");
pub(crate) const GELU: &str = include_str!("../../../shaders/model/gelu.wgsl");

/// Every model kernel's source with its name, for validation without a GPU.
pub const MODEL_SHADER_SOURCES: &[(&str, &str)] =
    &[("embed", EMBED), ("add_norm", ADD_NORM), ("gelu", GELU)];
