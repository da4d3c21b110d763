//! GPU kernels the model forward passes add beside the attention kernels, every family's
//! in one place: BERT's embedding gather, residual + LayerNorm and GELU; the llama
//! family's RMSNorm, RoPE, SwiGLU and head merge; and the quantized matmul and embedding
//! gather that read GGUF blocks on the device. One launcher per WGSL file in
//! `shaders/model/`, one bridge into the crate's device layer (`glue.rs`), one list of their specs for the
//! crate's kernel table ([`kernel_specs`]), one error type
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
    read_ranges, read_tensors, submit, upload_ids, vec4_reads, wait_idle, BindCache, Elem,
    Epilogue, ErrorScopes, HeadLayout, Linear, LinearKernel, LinearNeed, LinearProblem, Recorder,
    StageMarks, WeightsRef,
};
pub(crate) use merge_heads::MergeHeadsKernel;
#[doc(hidden)]
pub use probe::{
    force_pages_for_tests, force_split_products_for_tests, quant_embed_planes_probe,
    quant_embed_probe, quant_matmul_paged_probe, quant_matmul_planes_probe, quant_matmul_probe,
    QuantEntry,
};
pub(crate) use quant_embed::QuantEmbedKernel;
pub(crate) use quant_matmul::{
    x_tensor, EpiKind, NormRows, OutLayout, ProductShape, QkvSplit, QuantEpilogue, QuantMatmul,
    QuantMatmulKernel, QuantNorm, QuantVariant,
};
pub(crate) use quant_matrix::QuantMatrix;
pub(crate) use rms_norm::{RmsNorm, RmsNormKernel};
pub(crate) use silu_mul::SiluMulKernel;

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

/// Constants a model kernel's WGSL and its launcher both declare: (kernel, source, WGSL
/// name, the launcher's value), for the kernel table's reflection test.
#[cfg(test)]
pub(crate) fn shared_constants() -> [(&'static str, &'static str, &'static str, u64); 3] {
    let planes = u64::from(quant_matrix::KIND_Q8_0_PLANES);
    [
        (
            "model_quant_matmul_paged",
            source::QUANT_MATMUL_PAGED,
            "PAGES",
            quant_matrix::PAGES as u64,
        ),
        (
            "model_quant_matmul_subgroups",
            source::QUANT_MATMUL_SUBGROUPS,
            "Q8_0_PLANES",
            planes,
        ),
        (
            "model_quant_embed",
            source::QUANT_EMBED,
            "Q8_0_PLANES",
            planes,
        ),
    ]
}

/// Every model kernel's spec, for the crate's kernel table.
pub(crate) fn kernel_specs() -> [&'static glue::KernelSpec; 11] {
    [
        &embed::SPEC,
        &add_norm::SPEC,
        &gelu::SPEC,
        &rms_norm::SPEC,
        &silu_mul::SPEC,
        &merge_heads::SPEC,
        &quant_matmul::SPEC,
        &quant_matmul::SPEC_SUBGROUPS,
        &quant_matmul::SPEC_SPLIT,
        &quant_matmul::SPEC_PAGED,
        &quant_embed::SPEC,
    ]
}
