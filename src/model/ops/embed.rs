//! Launcher for `shaders/model/embed.wgsl`: word + position + token-type embeddings.

use bytemuck::{Pod, Zeroable};

use super::glue::{dispatch, uniform, whole, Binding, KernelSpec};
use super::source;
use crate::error::{AttentionError, Result};
use crate::{GpuContext, GpuTensor};

/// Bindings: params, ids, word, position, token_type, out.
const SPEC: KernelSpec = KernelSpec {
    name: "model_embed",
    source: source::EMBED,
    bindings: &[
        Binding::Uniform,
        Binding::Read,
        Binding::Read,
        Binding::Read,
        Binding::Read,
        Binding::ReadWrite,
    ],
    trusted: false,
};

/// Must match the WGSL struct `Embed` in embed.wgsl.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
struct EmbedParams {
    rows: u32,
    hidden: u32,
    vocab: u32,
    first_position: u32,
}

/// Rows `0..rows` of `out` (`(rows, hidden)`) get the embeddings of `ids` at positions
/// `0..rows`: `word` `(vocab, hidden)`, `position` `(positions, hidden)`, type 0 of
/// `token_type` `(types, hidden)`.
pub(crate) struct Embed<'a> {
    pub ids: &'a wgpu::Buffer,
    pub rows: usize,
    pub word: &'a GpuTensor,
    pub position: &'a GpuTensor,
    pub token_type: &'a GpuTensor,
    pub out: &'a GpuTensor,
}

fn u32_of(arg: &'static str, n: usize) -> Result<u32> {
    u32::try_from(n).map_err(|_| AttentionError::TooLarge {
        arg,
        detail: format!("{n} exceeds the kernel's 32-bit index"),
    })
}

/// Records the gather.
///
/// # Errors
/// [`AttentionError::Shape`] when the tables disagree on the width, there are more rows
/// than positions, or `out` is too small; a device error building the pipeline.
pub(crate) async fn record_embed(
    ctx: &GpuContext,
    encoder: &mut wgpu::CommandEncoder,
    e: &Embed<'_>,
) -> Result<()> {
    let (&[vocab, hidden], &[positions, hp], &[_, ht]) =
        (e.word.shape(), e.position.shape(), e.token_type.shape())
    else {
        return Err(AttentionError::shape("embeddings", "tables must be rank 2"));
    };
    if hp != hidden || ht != hidden || e.rows > positions || e.out.len() < e.rows * hidden {
        return Err(AttentionError::shape(
            "embeddings",
            format!(
                "{} rows of word {:?}, position {:?}, token type {:?} into out {:?}",
                e.rows,
                e.word.shape(),
                e.position.shape(),
                e.token_type.shape(),
                e.out.shape()
            ),
        ));
    }
    let elements = e.rows as u64 * hidden as u64;
    let params = EmbedParams {
        rows: u32_of("ids", e.rows)?,
        hidden: u32_of("hidden", hidden)?,
        vocab: u32_of("vocab", vocab)?,
        first_position: 0,
    };
    u32_of("out", elements as usize)?;
    let params = uniform(ctx, "wgpu-attention embed params", &params)?;
    let resources = vec![
        params.as_entire_binding(),
        e.ids.as_entire_binding(),
        whole(e.word),
        whole(e.position),
        whole(e.token_type),
        whole(e.out),
    ];
    dispatch(ctx, encoder, &SPEC, resources, elements.div_ceil(256)).await
}
