//! A BERT encoder from a Hugging Face directory (config.json, model.safetensors,
//! tokenizer.json), as all-MiniLM-L6-v2 ships it.
//!
//! The forward pass: embeddings (word + position + token type 0), LayerNorm, then per
//! layer bidirectional self-attention (scale 1/sqrt(head_dim)), output projection,
//! residual + LayerNorm, intermediate dense with erf GELU, output dense, residual +
//! LayerNorm. [`sentence_embedding`] adds sentence-transformers' mean pooling and L2
//! normalisation on top of the last hidden state; [`BertModel::embed`] embeds a list of
//! sentences in batches, with the pooling the model directory's sentence-transformers
//! files name ([`SentenceConfig`]).

mod batch;
mod config;
mod cpu;
mod embed;
mod gpu;
mod pooling;
mod tokenizer;
mod weights;

use std::path::Path;

use ndarray::{Array1, ArrayView2};

use batch::PaddedBatch;
pub use config::BertConfig;
pub use embed::DEFAULT_EMBED_BATCH;
pub use pooling::{Pooling, PoolingMode, SentenceConfig};
use tokenizer::BertTokenizer;
use weights::BertWeights;

use crate::model::cpu_float::CpuFloat;
use crate::model::files::{read_bounded, read_safetensors, sha256_hex};
use crate::model::stages::Clock;
#[cfg(not(target_arch = "wasm32"))]
use crate::model::StageTimes;
use crate::model::{
    ForwardOutput, GenerateOptions, GenerateStats, HeadPatch, LayerInputs, ModelError, ModelInfo,
    Token,
};
use crate::GpuContext;

/// File size bounds: far above any real file of the kind, far below what would exhaust
/// memory by accident.
const CONFIG_LIMIT: u64 = 1 << 20;
const TOKENIZER_LIMIT: u64 = 64 << 20;
const WEIGHTS_LIMIT: u64 = 4 << 30;

/// The model's weights and tokenizer in host memory.
pub struct BertModel {
    config: BertConfig,
    weights: BertWeights,
    tokenizer: BertTokenizer,
    sentence: SentenceConfig,
    files: Vec<(String, String)>,
}

/// The model's weights on one device, ready to run.
pub struct BertGpu {
    config: BertConfig,
    weights: gpu::DeviceWeights,
}

fn encoder_only() -> ModelError {
    ModelError::input(
        "--model",
        "BERT is an encoder: it has no next-token head to generate with",
    )
}

/// Checks a token sequence against the model's sizes.
fn check_ids(c: &BertConfig, ids: &[u32]) -> Result<(), ModelError> {
    if ids.is_empty() {
        return Err(ModelError::input("ids", "no tokens"));
    }
    if ids.len() > c.max_position_embeddings {
        return Err(ModelError::input(
            "--text",
            format!(
                "{} tokens exceed the model's {} positions",
                ids.len(),
                c.max_position_embeddings
            ),
        ));
    }
    if let Some(bad) = ids.iter().find(|&&id| id as usize >= c.vocab_size) {
        return Err(ModelError::input(
            "ids",
            format!(
                "token id {bad} is outside the vocabulary of {}",
                c.vocab_size
            ),
        ));
    }
    Ok(())
}

impl BertModel {
    /// Loads the model from a directory holding `config.json`, `model.safetensors` and
    /// `tokenizer.json`, and the sentence-transformers files `modules.json`, the Pooling
    /// module's `config.json` and `sentence_bert_config.json` where it has them (else
    /// [`SentenceConfig::plain`]).
    ///
    /// # Errors
    /// [`ModelError::Io`] for a missing or unreadable file, [`ModelError::Format`] naming
    /// the file or tensor that is malformed, [`ModelError::Unsupported`] for a config
    /// this crate does not run.
    pub fn load(path: &Path) -> Result<Self, ModelError> {
        if !path.is_dir() {
            return Err(ModelError::Io {
                path: path.display().to_string(),
                detail: "not a model directory (config.json, model.safetensors, tokenizer.json)"
                    .into(),
            });
        }
        let config = read_bounded(&path.join("config.json"), CONFIG_LIMIT)?;
        let tokenizer = read_bounded(&path.join("tokenizer.json"), TOKENIZER_LIMIT)?;
        let weights = read_safetensors(&path.join("model.safetensors"), WEIGHTS_LIMIT)?;
        let mut model = Self::from_parts(&config, &weights, &tokenizer)?;
        model.sentence = SentenceConfig::read_dir(path, model.config.hidden_size)?;
        Ok(model)
    }

    /// Builds the model from the three files' contents (for tests, and for the browser,
    /// which has no file system), with [`SentenceConfig::plain`] pooling
    /// ([`BertModel::set_sentence_config`] changes it).
    ///
    /// # Errors
    /// As [`BertModel::load`].
    pub fn from_parts(
        config_json: &[u8],
        safetensors: &[u8],
        tokenizer_json: &[u8],
    ) -> Result<Self, ModelError> {
        let text = std::str::from_utf8(config_json)
            .map_err(|e| ModelError::format("config.json", e.to_string()))?;
        let config = BertConfig::from_json(text)?;
        let tokenizer = BertTokenizer::from_json(tokenizer_json)?;
        let weights = BertWeights::from_safetensors(safetensors, &config)?;
        let files = vec![
            ("config.json".to_string(), sha256_hex(config_json)),
            ("model.safetensors".to_string(), sha256_hex(safetensors)),
            ("tokenizer.json".to_string(), sha256_hex(tokenizer_json)),
        ];
        Ok(Self {
            config,
            weights,
            tokenizer,
            sentence: SentenceConfig::plain(),
            files,
        })
    }

    /// The parsed `config.json`.
    pub fn config(&self) -> &BertConfig {
        &self.config
    }

    /// Architecture, sizes, tokenizer and file hashes.
    pub fn info(&self) -> ModelInfo {
        let c = &self.config;
        ModelInfo {
            architecture: "bert".into(),
            layers: c.num_hidden_layers,
            heads: c.num_attention_heads,
            kv_heads: c.num_attention_heads,
            hidden: c.hidden_size,
            head_dim: c.head_dim(),
            intermediate: c.intermediate_size,
            vocab: c.vocab_size,
            max_positions: c.max_position_embeddings,
            causal: false,
            tokenizer: format!(
                "{} from tokenizer.json, {} tokens, no padding or truncation",
                self.tokenizer.kind(),
                self.tokenizer.vocab_size()
            ),
            files: self.files.clone(),
        }
    }

    /// The token ids and strings of `text`, special tokens included.
    ///
    /// # Errors
    /// [`ModelError::Input`] naming `--text` for an empty text.
    pub fn tokenize(&self, text: &str) -> Result<Vec<Token>, ModelError> {
        self.tokenizer.encode(text)
    }

    /// The text of `ids` (for streaming generated tokens).
    ///
    /// # Errors
    /// [`ModelError::Input`] when the tokenizer cannot decode them.
    pub fn decode(&self, ids: &[u32]) -> Result<String, ModelError> {
        self.tokenizer.decode(ids)
    }

    /// The forward pass on the CPU in f32, the fast path (`--backend cpu`): blocked
    /// matrix products over threads and the crate's CPU flash attention.
    ///
    /// # Errors
    /// [`ModelError::Input`] for no ids, more ids than positions, or an id outside the
    /// vocabulary; [`ModelError::Attention`] when the attention outputs do not fit in
    /// memory.
    pub fn forward_cpu(&self, ids: &[u32], attention: bool) -> Result<ForwardOutput, ModelError> {
        self.forward_on::<f32>(ids, (attention, None), None)
    }

    /// The forward pass in float64 on the CPU (results rounded to f32): the reference
    /// every other path is checked against. Plain loops, one thread: slow on purpose.
    ///
    /// # Errors
    /// As [`BertModel::forward_cpu`].
    pub fn forward_reference(
        &self,
        ids: &[u32],
        attention: bool,
    ) -> Result<ForwardOutput, ModelError> {
        self.forward_on::<f64>(ids, (attention, None), None)
    }

    /// [`BertModel::forward_reference`] with one head's attention output replaced (see
    /// [`HeadPatch`]): what the rest of the encoder makes of a changed head, in float64.
    ///
    /// # Errors
    /// As [`BertModel::forward_cpu`]; [`ModelError::Input`] naming `patch` for a layer or
    /// head out of range, an output of the wrong shape or a non-finite value.
    pub fn forward_reference_patched(
        &self,
        ids: &[u32],
        patch: &HeadPatch,
    ) -> Result<ForwardOutput, ModelError> {
        self.check_patch(ids, patch)?;
        self.forward_on::<f64>(ids, (false, Some(patch)), None)
    }

    fn check_patch(&self, ids: &[u32], patch: &HeadPatch) -> Result<(), ModelError> {
        let c = &self.config;
        let shape = (c.num_hidden_layers, c.num_attention_heads, c.head_dim());
        patch.check(shape, ids.len())
    }

    /// [`BertModel::forward_cpu`] with the time of each stage, summed over layers.
    /// Native only.
    ///
    /// # Errors
    /// As [`BertModel::forward_cpu`].
    #[cfg(not(target_arch = "wasm32"))]
    pub fn forward_cpu_timed(
        &self,
        ids: &[u32],
        attention: bool,
    ) -> Result<(ForwardOutput, StageTimes), ModelError> {
        let mut clock = Clock::start();
        let output = self.forward_on::<f32>(ids, (attention, None), Some(&mut clock))?;
        Ok((output, clock.times))
    }

    fn forward_on<T: CpuFloat>(
        &self,
        ids: &[u32],
        asked: (bool, Option<&HeadPatch>),
        clock: Option<&mut Clock>,
    ) -> Result<ForwardOutput, ModelError> {
        check_ids(&self.config, ids)?;
        let out = cpu::forward::<T>(&self.weights, &self.config, ids, asked, clock)?;
        Ok(ForwardOutput {
            attention: out.attention,
            hidden: out.hidden.mapv(|v| v.to64() as f32),
            logits: None,
        })
    }

    /// An encoder does not generate: always [`ModelError::Input`] naming `--model`.
    ///
    /// # Errors
    /// Always.
    pub fn generate_cpu(
        &self,
        _prompt: &[u32],
        _opts: &GenerateOptions,
        _on_token: &mut dyn FnMut(u32),
    ) -> Result<GenerateStats, ModelError> {
        Err(encoder_only())
    }

    /// Uploads the weights to `ctx`'s device.
    ///
    /// # Errors
    /// [`ModelError::Attention`] when a tensor does not fit the device or the upload fails.
    pub fn upload(&self, ctx: &GpuContext) -> Result<BertGpu, ModelError> {
        Ok(BertGpu {
            config: self.config.clone(),
            weights: gpu::DeviceWeights::upload(ctx, &self.weights)?,
        })
    }
}

impl BertGpu {
    /// The forward pass on the GPU.
    ///
    /// # Errors
    /// As [`BertModel::forward_cpu`] for the ids; [`ModelError::Attention`] when the device
    /// fails.
    pub async fn forward(
        &self,
        ctx: &GpuContext,
        ids: &[u32],
        attention: bool,
    ) -> Result<ForwardOutput, ModelError> {
        check_ids(&self.config, ids)?;
        let tokens = PaddedBatch::single(ids);
        let want = gpu::Want {
            attention,
            ..Default::default()
        };
        let pass = gpu::forward(ctx, &self.config, &self.weights, &tokens, want, None).await?;
        Ok(ForwardOutput {
            attention: pass.attention,
            hidden: pass.hidden,
            logits: None,
        })
    }

    /// [`BertGpu::forward`] with one head's attention output replaced (see [`HeadPatch`]).
    ///
    /// # Errors
    /// As [`BertModel::forward_reference_patched`]; device failures.
    pub async fn forward_patched(
        &self,
        ctx: &GpuContext,
        ids: &[u32],
        patch: &HeadPatch,
    ) -> Result<ForwardOutput, ModelError> {
        check_ids(&self.config, ids)?;
        let c = &self.config;
        patch.check(
            (c.num_hidden_layers, c.num_attention_heads, c.head_dim()),
            ids.len(),
        )?;
        let tokens = PaddedBatch::single(ids);
        let want = gpu::Want {
            patch: Some(patch),
            ..Default::default()
        };
        let pass = gpu::forward(ctx, &self.config, &self.weights, &tokens, want, None).await?;
        Ok(ForwardOutput {
            attention: None,
            hidden: pass.hidden,
            logits: None,
        })
    }

    /// Every layer's attention inputs (q, k, v as the attention call reads them) for one
    /// sentence, from one GPU pass; the attention is bidirectional, at scale `1/√D`.
    ///
    /// # Errors
    /// As [`BertGpu::forward`].
    pub async fn attention_inputs(
        &self,
        ctx: &GpuContext,
        ids: &[u32],
    ) -> Result<Vec<LayerInputs>, ModelError> {
        check_ids(&self.config, ids)?;
        let tokens = PaddedBatch::single(ids);
        let want = gpu::Want {
            inputs: true,
            ..Default::default()
        };
        let pass = gpu::forward(ctx, &self.config, &self.weights, &tokens, want, None).await?;
        Ok(pass.inputs)
    }

    /// [`BertGpu::forward`] with the time of each stage, summed over layers: each stage
    /// is submitted and waited for on its own. Native only (the browser cannot wait).
    ///
    /// # Errors
    /// As [`BertGpu::forward`].
    #[cfg(not(target_arch = "wasm32"))]
    pub async fn forward_timed(
        &self,
        ctx: &GpuContext,
        ids: &[u32],
        attention: bool,
    ) -> Result<(ForwardOutput, StageTimes), ModelError> {
        check_ids(&self.config, ids)?;
        let mut clock = Clock::start();
        let want = gpu::Want {
            attention,
            ..Default::default()
        };
        let pass = gpu::forward(
            ctx,
            &self.config,
            &self.weights,
            &PaddedBatch::single(ids),
            want,
            Some(&mut clock),
        )
        .await?;
        let output = ForwardOutput {
            attention: pass.attention,
            hidden: pass.hidden,
            logits: None,
        };
        Ok((output, clock.times))
    }

    /// An encoder does not generate: always [`ModelError::Input`] naming `--model`.
    ///
    /// # Errors
    /// Always.
    pub async fn generate(
        &self,
        _ctx: &GpuContext,
        _prompt: &[u32],
        _opts: &GenerateOptions,
        _on_token: &mut dyn FnMut(u32),
    ) -> Result<GenerateStats, ModelError> {
        Err(encoder_only())
    }
}

/// The sentence embedding of all-MiniLM-L6-v2 (sentence-transformers' mean pooling and
/// `Normalize` modules): the mean of the rows of the last hidden state `(L, hidden)`,
/// every token counted (one unpadded sequence: the attention mask is all ones), divided
/// by its L2 norm. Computed in f64.
pub fn sentence_embedding(hidden: ArrayView2<'_, f32>) -> Array1<f32> {
    let mask = Array1::<f32>::ones(hidden.nrows());
    sentence_embedding_masked(hidden, mask.view())
}

/// As [`sentence_embedding`] for a padded sequence: rows where `mask` is 0 are left out
/// of the mean (the mask is a weight per row, as sentence-transformers applies it).
pub fn sentence_embedding_masked(
    hidden: ArrayView2<'_, f32>,
    mask: ndarray::ArrayView1<'_, f32>,
) -> Array1<f32> {
    cpu::pool_normalize(hidden, mask)
        .into_iter()
        .map(|v| v as f32)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::cpu::erf;

    #[test]
    fn erf_matches_tabulated_values() {
        let table = [
            (0.0, 0.0),
            (0.1, 0.112_462_916_018_284_9),
            (0.5, 0.520_499_877_813_046_5),
            (1.0, 0.842_700_792_949_714_9),
            (2.0, 0.995_322_265_018_952_7),
            (2.5, 0.999_593_047_982_555),
            (3.0, 0.999_977_909_503_001_4),
            (4.5, 0.999_999_999_803_383),
        ];
        for (x, want) in table {
            assert!(
                (erf(x) - want).abs() < 1e-14,
                "erf({x}) = {} not {want}",
                erf(x)
            );
            assert!((erf(-x) + want).abs() < 1e-14, "erf(-{x})");
        }
    }
}
