//! GPU kernels the model forward passes add beside the attention kernels (embedding
//! gather, residual + LayerNorm, GELU), one launcher per WGSL file in `shaders/model/`.
//! As the crate's own kernels do, each kernel is prepared (its pipeline built, async)
//! before anything is recorded, and its `record` only encodes: it never builds, submits or
//! waits. The forward passes submit.

mod add_norm;
mod embed;
mod gelu;
mod glue;
mod source;

pub(crate) use add_norm::{AddNorm, AddNormKernel};
pub(crate) use embed::{Embed, EmbedKernel};
pub(crate) use glue::{
    read_tensors, submit, upload_ids, vec4_reads, wait_idle, Elem, Epilogue, HeadLayout, Linear,
    LinearKernel, LinearNeed, WeightsRef,
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
