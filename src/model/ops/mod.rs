//! GPU kernels the model forward passes add beside the attention kernels (embedding
//! gather, residual + LayerNorm, GELU), one launcher per WGSL file in `shaders/model/`.
//! Launchers record into an encoder and never submit; the forward passes submit.

mod add_norm;
mod embed;
mod gelu;
mod glue;
mod source;

pub(crate) use add_norm::{record_add_norm, AddNorm};
pub(crate) use embed::{record_embed, Embed};
pub(crate) use gelu::record_gelu;
pub(crate) use glue::{
    read_tensors, record_linear, submit, upload_ids, wait_idle, HeadLayout, Linear,
};
pub use source::MODEL_SHADER_SOURCES;
