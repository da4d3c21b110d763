//! The model on the GPU (placeholder while the kernels land).

use crate::model::llama::LlamaModel;
use crate::model::{ForwardOutput, GenerateOptions, GenerateStats, ModelError};
use crate::GpuContext;

/// The model's weights on one device, ready to run.
pub struct LlamaGpu {
    _private: (),
}

impl LlamaGpu {
    pub(crate) fn upload(_ctx: &GpuContext, _m: &LlamaModel) -> Result<Self, ModelError> {
        Err(ModelError::Unsupported("pending".into()))
    }

    /// The forward pass on the GPU.
    pub async fn forward(
        &self,
        _ctx: &GpuContext,
        _ids: &[u32],
        _attention: bool,
    ) -> Result<ForwardOutput, ModelError> {
        Err(ModelError::Unsupported("pending".into()))
    }

    /// Greedy or sampled generation on the GPU.
    pub async fn generate(
        &self,
        _ctx: &GpuContext,
        _prompt: &[u32],
        _opts: &GenerateOptions,
        _on_token: &mut dyn FnMut(u32),
    ) -> Result<GenerateStats, ModelError> {
        Err(ModelError::Unsupported("pending".into()))
    }
}
