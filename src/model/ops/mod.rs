//! GPU kernels the model forward passes add beside the attention kernels, every family's
//! in one place: BERT's embedding gather, residual + LayerNorm and GELU; the llama
//! family's RMSNorm, RoPE, SwiGLU and head merge; and the quantized matmul and embedding
//! gather that read GGUF blocks on the device. One launcher per WGSL file in
//! `shaders/model/`, one bridge into the crate's device layer (`glue.rs`), one error type
//! ([`crate::AttentionError`], which [`crate::model::ModelError`] wraps). As the crate's own
//! kernels do, each kernel is prepared (its pipeline built, async) before anything is
//! recorded, and its `record` only encodes: it never builds, submits or waits. The forward
//! passes submit.

mod add_norm;
mod embed;
mod gelu;
mod glue;
mod merge_heads;
mod probe;
mod quant_embed;
mod quant_matmul;
mod quant_matrix;
mod rms_norm;
mod silu_mul;
mod source;

pub(crate) use add_norm::{AddNorm, AddNormKernel};
pub(crate) use embed::{Embed, EmbedKernel};
pub(crate) use glue::{
    read_ranges, read_tensors, submit, upload_ids, vec4_reads, wait_idle, Elem, Epilogue,
    ErrorScopes, HeadLayout, Linear, LinearKernel, LinearNeed, WeightsRef,
};
pub(crate) use merge_heads::MergeHeadsKernel;
#[doc(hidden)]
pub use probe::{quant_embed_probe, quant_matmul_probe};
pub(crate) use quant_embed::QuantEmbedKernel;
pub(crate) use quant_matmul::{
    EpiKind, OutLayout, QkvSplit, QuantEpilogue, QuantMatmul, QuantMatmulKernel, QuantNorm,
    QuantVariant,
};
pub(crate) use quant_matrix::QuantMatrix;
pub(crate) use rms_norm::{RmsNorm, RmsNormKernel};
pub(crate) use silu_mul::SiluMulKernel;
pub use source::MODEL_SHADER_SOURCES;

use crate::error::AttentionError;
use crate::GpuTensor;

/// `n` as a kernel's 32-bit index.
fn u32_of(arg: &'static str, n: usize) -> crate::error::Result<u32> {
    u32::try_from(n).map_err(|_| AttentionError::TooLarge {
        arg,
        detail: format!("{n} exceeds the kernel's 32-bit index"),
    })
}

/// `t` (the kernel `what`'s argument `arg`) holds fewer than `need` values.
fn shape_error(what: &'static str, arg: &str, t: &GpuTensor, need: usize) -> AttentionError {
    AttentionError::shape(
        what,
        format!(
            "{arg} of shape {:?} holds fewer than {need} values",
            t.shape()
        ),
    )
}

/// Each model kernel's name, WGSL source, the size of its params struct in bytes, and its
/// bindings in order (`uniform`, `read` or `read_write`): what Rust and WGSL must agree
/// on, for the reflection test.
#[doc(hidden)]
pub fn model_kernel_layouts() -> Vec<(&'static str, &'static str, usize, Vec<&'static str>)> {
    use glue::{Binding, KernelSpec};
    use std::mem::size_of;
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
        describe(&embed::SPEC, size_of::<embed::EmbedParams>()),
        describe(&add_norm::SPEC, size_of::<add_norm::AddNormParams>()),
        describe(&gelu::SPEC, size_of::<gelu::GeluParams>()),
        describe(&rms_norm::SPEC, size_of::<rms_norm::RmsNormParams>()),
        describe(&silu_mul::SPEC, size_of::<silu_mul::SiluMulParams>()),
        describe(
            &merge_heads::SPEC,
            size_of::<merge_heads::MergeHeadsParams>(),
        ),
        describe(
            &quant_matmul::SPEC,
            size_of::<quant_matmul::QuantMatmulParams>(),
        ),
        describe(
            &quant_embed::SPEC,
            size_of::<quant_embed::QuantEmbedParams>(),
        ),
    ]
}
