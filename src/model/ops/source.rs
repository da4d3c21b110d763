//! WGSL sources of the model kernels, every family's.

pub(crate) const EMBED: &str = include_str!("../../../shaders/model/embed.wgsl");
pub(crate) const ADD_NORM: &str = include_str!("../../../shaders/model/add_norm.wgsl");
pub(crate) const GELU: &str = include_str!("../../../shaders/model/gelu.wgsl");
pub(crate) const RMS_NORM: &str = include_str!("../../../shaders/model/rms_norm.wgsl");
pub(crate) const SILU_MUL: &str = include_str!("../../../shaders/model/silu_mul.wgsl");
pub(crate) const MERGE_HEADS: &str = include_str!("../../../shaders/model/merge_heads.wgsl");
/// The block decoders (one row and four rows at once) followed by the kernel that uses them.
pub(crate) const QUANT_MATMUL: &str = concat!(
    include_str!("../../../shaders/model/quant_blocks.wgsl"),
    include_str!("../../../shaders/model/quant_blocks4.wgsl"),
    include_str!("../../../shaders/model/quant_matmul.wgsl")
);
pub(crate) const QUANT_EMBED: &str = concat!(
    include_str!("../../../shaders/model/quant_blocks.wgsl"),
    include_str!("../../../shaders/model/quant_embed.wgsl")
);

/// Every model kernel's source with its name, for validation without a GPU.
pub const MODEL_SHADER_SOURCES: &[(&str, &str)] = &[
    ("embed", EMBED),
    ("add_norm", ADD_NORM),
    ("gelu", GELU),
    ("rms_norm", RMS_NORM),
    ("silu_mul", SILU_MUL),
    ("merge_heads", MERGE_HEADS),
    ("quant_matmul", QUANT_MATMUL),
    ("quant_embed", QUANT_EMBED),
];
