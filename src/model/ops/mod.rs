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

/// Each model kernel's name, WGSL source, the size of its params struct in bytes, and its
/// bindings in order (`uniform`, `read` or `read_write`): what Rust and WGSL must agree
/// on, for the reflection test.
#[doc(hidden)]
pub fn model_kernel_layouts() -> Vec<(&'static str, &'static str, usize, Vec<&'static str>)> {
    use glue::{Binding, KernelSpec};
    let describe = |spec: &KernelSpec, bytes: usize| {
        let bindings = spec
            .bindings
            .iter()
            .map(|b| match b {
                Binding::Uniform => "uniform",
                Binding::Read => "read",
                Binding::ReadWrite => "read_write",
            })
            .collect();
        (spec.name, spec.source, bytes, bindings)
    };
    vec![
        describe(&embed::SPEC, std::mem::size_of::<embed::EmbedParams>()),
        describe(
            &add_norm::SPEC,
            std::mem::size_of::<add_norm::AddNormParams>(),
        ),
        describe(&gelu::SPEC, std::mem::size_of::<gelu::GeluParams>()),
    ]
}
