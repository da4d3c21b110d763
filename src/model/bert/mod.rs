//! A BERT encoder from a Hugging Face directory (config.json, model.safetensors, tokenizer.json).
//!
//! Interface placeholder: every call returns [`ModelError::Unsupported`] until the
//! family's loader and forward passes land.

use std::path::Path;

use crate::model::{ForwardOutput, GenerateOptions, GenerateStats, ModelError, ModelInfo, Token};
use crate::GpuContext;

/// The model's weights and tokenizer in host memory.
pub struct BertModel {
    _private: (),
}

/// The model's weights on one device, ready to run.
pub struct BertGpu {
    _private: (),
}

fn pending() -> ModelError {
    ModelError::Unsupported("the bert family is not implemented yet".into())
}

impl BertModel {
    /// Loads the model from `path`.
    pub fn load(_path: &Path) -> Result<Self, ModelError> {
        Err(pending())
    }

    /// Architecture, sizes, tokenizer and file hashes.
    pub fn info(&self) -> ModelInfo {
        unreachable!("no BertModel can be built yet")
    }

    /// The token ids and strings of `text`, special tokens included.
    pub fn tokenize(&self, _text: &str) -> Result<Vec<Token>, ModelError> {
        Err(pending())
    }

    /// The text of `ids` (for streaming generated tokens).
    pub fn decode(&self, _ids: &[u32]) -> Result<String, ModelError> {
        Err(pending())
    }

    /// The forward pass in float64 on the CPU (results rounded to f32).
    pub fn forward_cpu(&self, _ids: &[u32], _attention: bool) -> Result<ForwardOutput, ModelError> {
        Err(pending())
    }

    /// Greedy or sampled generation on the CPU; `on_token` sees each new token as it comes.
    pub fn generate_cpu(
        &self,
        _prompt: &[u32],
        _opts: &GenerateOptions,
        _on_token: &mut dyn FnMut(u32),
    ) -> Result<GenerateStats, ModelError> {
        Err(pending())
    }

    /// Uploads the weights to `ctx`'s device.
    pub fn upload(&self, _ctx: &GpuContext) -> Result<BertGpu, ModelError> {
        Err(pending())
    }
}

impl BertGpu {
    /// The forward pass on the GPU.
    pub async fn forward(
        &self,
        _ctx: &GpuContext,
        _ids: &[u32],
        _attention: bool,
    ) -> Result<ForwardOutput, ModelError> {
        Err(pending())
    }

    /// Greedy or sampled generation on the GPU; `on_token` sees each new token as it comes.
    pub async fn generate(
        &self,
        _ctx: &GpuContext,
        _prompt: &[u32],
        _opts: &GenerateOptions,
        _on_token: &mut dyn FnMut(u32),
    ) -> Result<GenerateStats, ModelError> {
        Err(pending())
    }
}
