//! [`Model`]: either family behind one type, chosen from the path (a directory is a
//! Hugging Face BERT, a `.gguf` file a llama-family decoder).

use std::path::Path;

use super::bert::{BertGpu, BertModel};
use super::llama::{LlamaGpu, LlamaModel};
use super::{
    ForwardOutput, GenerateOptions, GenerateStats, HeadPatch, LayerInputs, ModelError, ModelInfo,
    StageTimes, Token,
};
use crate::GpuContext;

/// A loaded model of either family.
/// Boxed: a model's struct is large and the two families' sizes differ.
pub enum Model {
    Bert(Box<BertModel>),
    Llama(Box<LlamaModel>),
}

/// A model's weights on one device.
pub enum ModelGpu {
    Bert(Box<BertGpu>),
    Llama(Box<LlamaGpu>),
}

impl Model {
    /// Loads `path`: a directory as a BERT, a `.gguf` file as a llama-family model.
    ///
    /// # Errors
    /// [`ModelError::Io`] when the path is neither, and every error of the family's loader.
    pub fn load(path: &Path) -> Result<Self, ModelError> {
        if path.is_dir() {
            return Ok(Self::Bert(Box::new(BertModel::load(path)?)));
        }
        let gguf = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("gguf"));
        if gguf {
            return Ok(Self::Llama(Box::new(LlamaModel::load(path)?)));
        }
        let detail = if path.exists() {
            "neither a model directory (BERT) nor a .gguf file (llama)"
        } else {
            "no such file or directory"
        };
        Err(ModelError::Io {
            path: path.display().to_string(),
            detail: detail.into(),
        })
    }

    /// Architecture, sizes, tokenizer and file hashes.
    pub fn info(&self) -> ModelInfo {
        match self {
            Self::Bert(m) => m.info(),
            Self::Llama(m) => m.info(),
        }
    }

    /// The token ids and strings of `text`, special tokens included.
    ///
    /// # Errors
    /// The family's tokenizer errors (an empty text names `--text`).
    pub fn tokenize(&self, text: &str) -> Result<Vec<Token>, ModelError> {
        match self {
            Self::Bert(m) => m.tokenize(text),
            Self::Llama(m) => m.tokenize(text),
        }
    }

    /// The text of `ids`.
    ///
    /// # Errors
    /// The family's decoding errors.
    pub fn decode(&self, ids: &[u32]) -> Result<String, ModelError> {
        match self {
            Self::Bert(m) => m.decode(ids),
            Self::Llama(m) => m.decode(ids),
        }
    }

    /// The fast f32 CPU forward pass (`--backend cpu`).
    ///
    /// # Errors
    /// The family's input errors.
    pub fn forward_cpu(&self, ids: &[u32], attention: bool) -> Result<ForwardOutput, ModelError> {
        match self {
            Self::Bert(m) => m.forward_cpu(ids, attention),
            Self::Llama(m) => m.forward_cpu(ids, attention),
        }
    }

    /// The float64 CPU forward pass: the reference the other paths are checked against.
    ///
    /// # Errors
    /// The family's input errors.
    pub fn forward_reference(
        &self,
        ids: &[u32],
        attention: bool,
    ) -> Result<ForwardOutput, ModelError> {
        match self {
            Self::Bert(m) => m.forward_reference(ids, attention),
            Self::Llama(m) => m.forward_reference(ids, attention),
        }
    }

    /// Generation on the CPU (causal models only).
    ///
    /// # Errors
    /// [`ModelError::Input`] naming `--model` for an encoder; the family's errors.
    pub fn generate_cpu(
        &self,
        prompt: &[u32],
        opts: &GenerateOptions,
        on_token: &mut dyn FnMut(u32),
    ) -> Result<GenerateStats, ModelError> {
        match self {
            Self::Bert(m) => m.generate_cpu(prompt, opts, on_token),
            Self::Llama(m) => m.generate_cpu(prompt, opts, on_token),
        }
    }

    /// The float64 forward pass with one head's attention output replaced (see
    /// [`HeadPatch`]): the reference for [`ModelGpu::forward_patched`].
    ///
    /// # Errors
    /// The family's input errors; [`ModelError::Input`] naming `patch` for a bad patch.
    pub fn forward_reference_patched(
        &self,
        ids: &[u32],
        patch: &HeadPatch,
    ) -> Result<ForwardOutput, ModelError> {
        match self {
            Self::Bert(m) => m.forward_reference_patched(ids, patch),
            Self::Llama(m) => m.forward_reference_patched(ids, patch),
        }
    }

    /// Uploads the weights to `ctx`'s device.
    ///
    /// # Errors
    /// The family's upload errors.
    pub fn upload(&self, ctx: &GpuContext) -> Result<ModelGpu, ModelError> {
        Ok(match self {
            Self::Bert(m) => ModelGpu::Bert(Box::new(m.upload(ctx)?)),
            Self::Llama(m) => ModelGpu::Llama(Box::new(m.upload(ctx)?)),
        })
    }
}

impl ModelGpu {
    /// The GPU forward pass.
    ///
    /// # Errors
    /// The family's input and device errors.
    pub async fn forward(
        &self,
        ctx: &GpuContext,
        ids: &[u32],
        attention: bool,
    ) -> Result<ForwardOutput, ModelError> {
        match self {
            Self::Bert(m) => m.forward(ctx, ids, attention).await,
            Self::Llama(m) => m.forward(ctx, ids, attention).await,
        }
    }

    /// The GPU forward pass with one head's attention output replaced (see [`HeadPatch`]):
    /// the last hidden state (and a causal model's last logits) with that head changed.
    ///
    /// # Errors
    /// The family's input and device errors; [`ModelError::Input`] naming `patch`.
    pub async fn forward_patched(
        &self,
        ctx: &GpuContext,
        ids: &[u32],
        patch: &HeadPatch,
    ) -> Result<ForwardOutput, ModelError> {
        match self {
            Self::Bert(m) => m.forward_patched(ctx, ids, patch).await,
            Self::Llama(m) => m.forward_patched(ctx, ids, patch).await,
        }
    }

    /// Every layer's attention inputs (q, k, v as its attention call reads them) for one
    /// sequence, from one GPU pass: with [`ModelInfo::causal`] they give the layer's
    /// attention patterns of any window or pooling through [`crate::attention_patterns`],
    /// without the `(L, L)` matrices.
    ///
    /// # Errors
    /// The family's input and device errors.
    pub async fn attention_inputs(
        &self,
        ctx: &GpuContext,
        ids: &[u32],
    ) -> Result<Vec<LayerInputs>, ModelError> {
        match self {
            Self::Bert(m) => m.attention_inputs(ctx, ids).await,
            Self::Llama(m) => m.attention_inputs(ctx, ids).await,
        }
    }

    /// Generation on the GPU (causal models only).
    ///
    /// # Errors
    /// [`ModelError::Input`] naming `--model` for an encoder; the family's errors.
    pub async fn generate(
        &self,
        ctx: &GpuContext,
        prompt: &[u32],
        opts: &GenerateOptions,
        on_token: &mut dyn FnMut(u32),
    ) -> Result<GenerateStats, ModelError> {
        match self {
            Self::Bert(m) => m.generate(ctx, prompt, opts, on_token).await,
            Self::Llama(m) => m.generate(ctx, prompt, opts, on_token).await,
        }
    }

    /// [`ModelGpu::generate`], with the device time of each generated token's pass per
    /// stage (see [`LlamaGpu::generate_with_stages`]).
    ///
    /// # Errors
    /// As [`ModelGpu::generate`]; [`ModelError::Unsupported`] when the device has no
    /// timestamp queries.
    pub async fn generate_with_stages(
        &self,
        ctx: &GpuContext,
        prompt: &[u32],
        opts: &GenerateOptions,
        on_token: &mut dyn FnMut(u32),
    ) -> Result<(GenerateStats, StageTimes), ModelError> {
        match self {
            Self::Bert(m) => m
                .generate(ctx, prompt, opts, on_token)
                .await
                .map(|stats| (stats, StageTimes::default())),
            Self::Llama(m) => m.generate_with_stages(ctx, prompt, opts, on_token).await,
        }
    }
}
