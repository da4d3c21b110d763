//! WGSL sources of the model kernels, every family's, made by the crate's one kernel
//! recipe (`kernel_wgsl!`: the files under `shaders/` in order). Each is listed in
//! [`crate::kernel_table`].

use super::glue::kernel_wgsl;

pub(crate) const EMBED: &str = kernel_wgsl!("model/embed.wgsl");
pub(crate) const ADD_NORM: &str = kernel_wgsl!("model/add_norm.wgsl");
pub(crate) const GELU: &str = kernel_wgsl!("model/gelu.wgsl");
pub(crate) const RMS_NORM: &str = kernel_wgsl!("model/rms_norm.wgsl");
pub(crate) const SILU_MUL: &str = kernel_wgsl!("model/silu_mul.wgsl");
pub(crate) const MERGE_HEADS: &str = kernel_wgsl!("model/merge_heads.wgsl");
/// The block decoders (one row and four rows at once) followed by the kernel that uses them
/// and its entry point.
pub(crate) const QUANT_MATMUL: &str = kernel_wgsl!(
    "model/quant_blocks.wgsl",
    "model/quant_blocks4.wgsl",
    "model/quant_matmul.wgsl",
    "model/quant_matmul_plain.wgsl",
    "model/quant_matmul_main.wgsl"
);
/// The same kernel with the entry point that shares x across a subgroup's lanes.
pub(crate) const QUANT_MATMUL_SUBGROUPS: &str = kernel_wgsl!(subgroups;
    "model/quant_blocks.wgsl",
    "model/quant_blocks4.wgsl",
    "model/quant_matmul.wgsl",
    "model/quant_matmul_sg.wgsl",
    "model/quant_matmul_sg_main.wgsl"
);
/// The subgroup kernel with the entry point that reads W from uniform pages.
pub(crate) const QUANT_MATMUL_PAGED: &str = kernel_wgsl!(subgroups;
    "model/quant_blocks.wgsl",
    "model/quant_blocks4.wgsl",
    "model/quant_matmul.wgsl",
    "model/quant_matmul_sg.wgsl",
    "model/quant_matmul_paged.wgsl"
);
/// The same kernel with the entry point that splits K across lanes (GPUs, few rows).
pub(crate) const QUANT_MATMUL_SPLIT: &str = kernel_wgsl!(
    "model/quant_blocks.wgsl",
    "model/quant_blocks4.wgsl",
    "model/quant_matmul.wgsl",
    "model/quant_matmul_plain.wgsl",
    "model/quant_matmul_split.wgsl"
);
pub(crate) const QUANT_EMBED: &str =
    kernel_wgsl!("model/quant_blocks.wgsl", "model/quant_embed.wgsl");
