//! Launcher for `shaders/model/embed.wgsl`: word + position + token-type embeddings.

use std::sync::Arc;

use bytemuck::{Pod, Zeroable};

use super::glue::{
    pipeline, record_pass, uniform, uniform_layout, whole, Binding, KernelPipeline, KernelSpec,
    Recorder, UniformLayout,
};
use super::source;
use crate::error::{AttentionError, Result};
use crate::{GpuContext, GpuTensor};

/// Bindings: params, ids, word, position, token_type, out.
pub(crate) const SPEC: KernelSpec = KernelSpec {
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
    uniforms: &[params_uniform],
};

/// Must match the WGSL struct `Embed` in embed.wgsl.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
pub(crate) struct EmbedParams {
    rows: u32,
    hidden: u32,
    vocab: u32,
    per_sequence: u32,
}

/// [`EmbedParams`] as the WGSL declares it.
fn params_uniform() -> UniformLayout {
    uniform_layout!(EmbedParams as "Embed" { rows, hidden, vocab, per_sequence })
}

/// Rows `0..rows` of `out` (`(rows, hidden)`) get the embeddings of `ids`, a batch of
/// sequences of `rows_per_sequence` rows each (`rows` for one sequence), row r at position
/// `r % rows_per_sequence`: `word` `(vocab, hidden)`, `position` `(positions, hidden)`,
/// type 0 of `token_type` `(types, hidden)`.
pub(crate) struct Embed<'a> {
    pub ids: &'a wgpu::Buffer,
    pub rows: usize,
    pub rows_per_sequence: usize,
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

/// The gather kernel, built.
pub(crate) struct EmbedKernel {
    pipe: Arc<KernelPipeline>,
}

impl EmbedKernel {
    /// Builds (or finds cached) the pipeline.
    ///
    /// # Errors
    /// A device error building the pipeline.
    pub(crate) async fn prepare(ctx: &GpuContext) -> Result<Self> {
        Ok(Self {
            pipe: pipeline(ctx, &SPEC).await?,
        })
    }

    /// Records the gather.
    ///
    /// # Errors
    /// [`AttentionError::Shape`] when the tables disagree on the width, a sequence has
    /// no rows or more rows than positions, or `out` is too small; a device error allocating the params.
    pub(crate) fn record(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder<'_>,
        e: &Embed<'_>,
    ) -> Result<()> {
        let (&[vocab, hidden], &[positions, hp], &[_, ht]) =
            (e.word.shape(), e.position.shape(), e.token_type.shape())
        else {
            return Err(AttentionError::shape("embeddings", "tables must be rank 2"));
        };
        if hp != hidden
            || ht != hidden
            || e.rows_per_sequence == 0
            || e.rows_per_sequence > positions
            || e.out.len() < e.rows.saturating_mul(hidden)
        {
            return Err(AttentionError::shape(
                "embeddings",
                format!(
                    "{} rows ({} per sequence) of word {:?}, position {:?}, token type {:?} into out {:?}",
                    e.rows,
                    e.rows_per_sequence,
                    e.word.shape(),
                    e.position.shape(),
                    e.token_type.shape(),
                    e.out.shape()
                ),
            ));
        }
        // The kernel's element index is 32-bit.
        let elements = u64::from(u32_of("out", e.rows.saturating_mul(hidden))?);
        let params = EmbedParams {
            rows: u32_of("ids", e.rows)?,
            hidden: u32_of("hidden", hidden)?,
            vocab: u32_of("vocab", vocab)?,
            per_sequence: u32_of("ids", e.rows_per_sequence)?,
        };
        let params = uniform(ctx, "wgpu-attention embed params", &params)?;
        let resources = vec![
            params.as_entire_binding(),
            e.ids.as_entire_binding(),
            whole(e.word),
            whole(e.position),
            whole(e.token_type),
            whole(e.out),
        ];
        let pipe = (SPEC.name, &*self.pipe);
        record_pass(ctx, rec, pipe, resources, elements.div_ceil(256))
    }
}
