//! A llama-family causal decoder from a GGUF file (SmolLM2-135M-Instruct and its kin):
//! RMSNorm, grouped-query attention with RoPE, SwiGLU, optionally tied embeddings.
//!
//! [`LlamaModel`] holds the tensors as the file stores them and the tokenizer it
//! describes; [`LlamaModel::forward_cpu`] and [`LlamaModel::generate_cpu`] run in
//! float64 on weights dequantized to f32 when first needed, [`LlamaGpu`] runs the same
//! model on the crate's kernels with the weights kept in their GGUF blocks on the device. A model can also be
//! built from in-memory parts ([`LlamaModel::from_parts`]) or GGUF bytes
//! ([`LlamaModel::from_gguf_bytes`]), which is how the tests make tiny random ones.

mod chat;
mod cpu;
pub mod gguf;
mod gpu;
pub mod quant;
mod rope;
mod sample;
pub mod tokenizer;
pub mod weights;

use std::path::Path;
use std::sync::OnceLock;

use ndarray::{Array1, Array2, Array4};

use crate::model::{
    ForwardOutput, GenerateOptions, GenerateStats, HeadPatch, ModelError, ModelInfo, Token,
};
use crate::GpuContext;

pub use chat::{ChatMessage, ChatTemplate};
pub use gpu::LlamaGpu;
pub use tokenizer::{LlamaTokenizer, TokenizerSpec};
pub use weights::{LayerTensors, LayerWeights, LlamaConfig, LlamaTensors, LlamaWeights, RawTensor};

use crate::model::cpu_float::CpuFloat;
use crate::model::files::{read_bounded, sha256_hex};
use crate::model::stages::Clock;
use cpu::CpuCache;
use sample::Sampler;

/// The largest GGUF file [`LlamaModel::load`] reads (16 GiB): the file is read whole
/// into memory, and a larger one is far past what this crate's 32-bit device offsets run.
pub const GGUF_LIMIT: u64 = 16 << 30;

/// The model's tensors and tokenizer in host memory.
#[derive(Debug, Clone)]
pub struct LlamaModel {
    config: LlamaConfig,
    tensors: LlamaTensors,
    /// The tensors dequantized, made on the first CPU pass (the GPU path never needs them).
    weights: OnceLock<LlamaWeights>,
    tokenizer: LlamaTokenizer,
    /// `tokenizer.chat_template`, and `tokenizer.ggml.eot_token_id`, when the file has them.
    chat: Option<ChatTemplate>,
    eot: Option<u32>,
    files: Vec<(String, String)>,
}

impl LlamaModel {
    /// Loads the model from a `.gguf` file.
    ///
    /// # Errors
    /// [`ModelError::Io`] when the file cannot be read, is not a regular file or is larger
    /// than [`GGUF_LIMIT`]; as [`LlamaModel::from_gguf_bytes`].
    pub fn load(path: &Path) -> Result<Self, ModelError> {
        let bytes = read_bounded(path, GGUF_LIMIT)?;
        Self::parse(&bytes, path.display().to_string())
    }

    /// Builds the model from the bytes of a GGUF file.
    ///
    /// # Errors
    /// [`ModelError::Format`] for a malformed file, a missing key or tensor, or a tensor
    /// of the wrong shape; [`ModelError::Unsupported`] for another architecture or
    /// tokenizer, or a tensor type other than those of [`quant::SUPPORTED`] (naming the
    /// tensor).
    pub fn from_gguf_bytes(bytes: &[u8]) -> Result<Self, ModelError> {
        Self::parse(bytes, "<memory>".into())
    }

    /// [`LlamaModel::from_gguf_bytes`], the bytes hashed once for [`LlamaModel::info`]
    /// under `name` (hashing SmolLM2's 98 MB takes about 0.09 s).
    fn parse(bytes: &[u8], name: String) -> Result<Self, ModelError> {
        let g = gguf::parse(bytes)?;
        let config = LlamaConfig::from_gguf(&g)?;
        let spec = TokenizerSpec::from_gguf(&g)?;
        let tokenizer = LlamaTokenizer::new(&spec)?;
        let tensors = LlamaTensors::from_gguf(&g, &config)?;
        let chat = ChatTemplate::from_gguf(&g, &spec.tokens, spec.bos, spec.eos)?;
        let mut model = Self::assemble(config, tensors, OnceLock::new(), tokenizer)?;
        model.chat = chat;
        model.eot = chat::eot_id(&g).filter(|&id| (id as usize) < spec.tokens.len());
        model.files = vec![(name, sha256_hex(bytes))];
        Ok(model)
    }

    /// Builds the model from its parts.
    ///
    /// # Errors
    /// [`ModelError::Format`] when the config is unusable, a weight has the wrong size,
    /// or the tokenizer's vocabulary differs from the config's.
    pub fn from_parts(
        config: LlamaConfig,
        weights: LlamaWeights,
        tokenizer: LlamaTokenizer,
    ) -> Result<Self, ModelError> {
        config.check()?;
        weights.check(&config)?;
        let tensors = LlamaTensors::from_weights(&weights);
        Self::assemble(config, tensors, OnceLock::from(weights), tokenizer)
    }

    fn assemble(
        config: LlamaConfig,
        tensors: LlamaTensors,
        weights: OnceLock<LlamaWeights>,
        tokenizer: LlamaTokenizer,
    ) -> Result<Self, ModelError> {
        config.check()?;
        if tokenizer.vocab_size() != config.vocab {
            return Err(ModelError::format(
                "llama tokenizer",
                format!(
                    "{} tokens, the model has a vocabulary of {}",
                    tokenizer.vocab_size(),
                    config.vocab
                ),
            ));
        }
        Ok(Self {
            config,
            tensors,
            weights,
            tokenizer,
            chat: None,
            eot: None,
            files: Vec::new(),
        })
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    /// The weights dequantized to f32 (made on the first call).
    pub fn weights(&self) -> &LlamaWeights {
        self.weights.get_or_init(|| self.tensors.dequantize())
    }

    /// The tensors as the file stores them.
    pub fn tensors(&self) -> &LlamaTensors {
        &self.tensors
    }

    /// The end-of-sequence token, when the file names one.
    pub fn eos(&self) -> Option<u32> {
        self.tokenizer.eos
    }

    /// The chat template the file carries, if any.
    pub fn chat_template(&self) -> Option<&ChatTemplate> {
        self.chat.as_ref()
    }

    /// Replaces the chat template (for a model built with [`LlamaModel::from_parts`]).
    pub fn set_chat_template(&mut self, template: Option<ChatTemplate>) {
        self.chat = template;
    }

    /// The token that ends a chat turn: `tokenizer.ggml.eot_token_id` where the file
    /// names one, else the control token the chat template writes after a message's
    /// content, else end-of-sequence.
    pub fn end_of_turn(&self) -> Option<u32> {
        let control = self.tokenizer.control_tokens();
        let control: Vec<(u32, &str)> = control.iter().map(|(i, t)| (*i, t.as_str())).collect();
        self.eot
            .or_else(|| self.chat.as_ref().and_then(|t| t.turn_end(&control)))
            .or(self.tokenizer.eos)
    }

    /// From now on generation stops at [`LlamaModel::end_of_turn`] instead of at
    /// end-of-sequence (on the CPU, and on devices the model is uploaded to afterwards):
    /// a chat reply ends with its turn. For SmolLM2 the two are the same token.
    pub fn stop_at_end_of_turn(&mut self) {
        self.tokenizer.eos = self.end_of_turn();
    }

    /// The prompt ids of a conversation through the chat template, the assistant's turn
    /// opened. BOS is the template's to write; a second BOS the tokenizer would add in
    /// front of it is dropped.
    ///
    /// # Errors
    /// [`ModelError::Input`] naming `--chat` when the model has no chat template; as
    /// [`ChatTemplate::render`].
    pub fn chat_prompt(&self, messages: &[ChatMessage]) -> Result<Vec<u32>, ModelError> {
        let template = self.chat.as_ref().ok_or_else(|| {
            ModelError::input("--chat", "the model file has no tokenizer.chat_template")
        })?;
        let text = template.render(messages, true)?;
        let mut ids: Vec<u32> = self.tokenize(&text)?.into_iter().map(|t| t.id).collect();
        if let (Some(bos), [a, b, ..]) = (self.tokenizer.bos, ids.as_slice()) {
            if *a == bos && *b == bos {
                ids.remove(0);
            }
        }
        Ok(ids)
    }

    /// Architecture, sizes, tokenizer and file hashes.
    pub fn info(&self) -> ModelInfo {
        let c = &self.config;
        ModelInfo {
            architecture: "llama".into(),
            layers: c.layers,
            heads: c.heads,
            kv_heads: c.kv_heads,
            hidden: c.hidden,
            head_dim: c.head_dim,
            intermediate: c.intermediate,
            vocab: c.vocab,
            max_positions: c.context,
            causal: true,
            tokenizer: match (&self.chat, self.end_of_turn()) {
                (Some(_), Some(eot)) => format!(
                    "{}, chat template (a turn ends with {})",
                    self.tokenizer.describe(),
                    self.decode(&[eot]).unwrap_or_default()
                ),
                _ => self.tokenizer.describe().to_string(),
            },
            files: self.files.clone(),
        }
    }

    /// The token ids and strings of `text`, special tokens included.
    ///
    /// # Errors
    /// [`ModelError::Input`] naming `--text` when the text is empty.
    pub fn tokenize(&self, text: &str) -> Result<Vec<Token>, ModelError> {
        if text.is_empty() {
            return Err(ModelError::input("--text", "is empty"));
        }
        self.tokenizer.tokenize(text)
    }

    /// The text of `ids` (for streaming generated tokens).
    ///
    /// # Errors
    /// [`ModelError::Input`] naming `ids` for an id outside the vocabulary.
    pub fn decode(&self, ids: &[u32]) -> Result<String, ModelError> {
        self.tokenizer.decode(ids)
    }

    /// The forward pass on the CPU in f32, the fast path (`--backend cpu`): blocked
    /// matrix products over threads and the crate's CPU flash attention.
    ///
    /// # Errors
    /// [`ModelError::Input`] for ids that are empty, outside the vocabulary or longer than
    /// the context; [`ModelError::Attention`] when the attention outputs
    /// do not fit in memory.
    pub fn forward_cpu(&self, ids: &[u32], attention: bool) -> Result<ForwardOutput, ModelError> {
        self.forward_on::<f32>(ids, (attention, None))
    }

    /// The forward pass in float64 on the CPU (results rounded to f32): the reference
    /// every other path is checked against. Plain loops, one thread: slow on purpose.
    ///
    /// # Errors
    /// As [`LlamaModel::forward_cpu`].
    pub fn forward_reference(
        &self,
        ids: &[u32],
        attention: bool,
    ) -> Result<ForwardOutput, ModelError> {
        self.forward_on::<f64>(ids, (attention, None))
    }

    /// [`LlamaModel::forward_reference`] with one head's attention output replaced (see
    /// [`HeadPatch`]): what the rest of the decoder makes of a changed head, in float64.
    ///
    /// # Errors
    /// As [`LlamaModel::forward_cpu`]; [`ModelError::Input`] naming `patch` for a layer or
    /// head out of range, an output of the wrong shape or a non-finite value.
    pub fn forward_reference_patched(
        &self,
        ids: &[u32],
        patch: &HeadPatch,
    ) -> Result<ForwardOutput, ModelError> {
        let c = &self.config;
        check_ids(c, ids)?;
        patch.check((c.layers, c.heads, c.head_dim), ids.len())?;
        self.forward_on::<f64>(ids, (false, Some(patch)))
    }

    fn forward_on<T: CpuFloat>(
        &self,
        ids: &[u32],
        asked: (bool, Option<&HeadPatch>),
    ) -> Result<ForwardOutput, ModelError> {
        let c = &self.config;
        check_ids(c, ids)?;
        let l = ids.len();
        let out = cpu::pass::<T>(c, self.weights(), ids, &mut CpuCache::new(c.layers), asked)?;
        let f32s = |v: Vec<T>| v.into_iter().map(|x| x.to64() as f32).collect::<Vec<f32>>();
        let shape_bug = |e: ndarray::ShapeError| ModelError::format("llama forward", e.to_string());
        Ok(ForwardOutput {
            attention: out
                .attention
                .map(|a| Array4::from_shape_vec((c.layers, c.heads, l, l), f32s(a)))
                .transpose()
                .map_err(shape_bug)?,
            hidden: Array2::from_shape_vec((l, c.hidden), f32s(out.hidden)).map_err(shape_bug)?,
            logits: Some(Array1::from(f32s(out.logits))),
        })
    }

    /// Greedy or sampled generation on the CPU in f32 (the fast path); `on_token` sees
    /// each new token as it comes. With `use_cache` each token after the prompt costs one
    /// step; without, the whole sequence is recomputed for every token. Generation stops
    /// after `max_new_tokens`, or before emitting the end-of-sequence token when
    /// `stop_at_eos` (which is then neither passed on nor listed).
    ///
    /// # Errors
    /// [`ModelError::Input`] naming `--text` for an empty or too long prompt,
    /// `--max-new-tokens` when the prompt and the new tokens exceed the context,
    /// `--temperature` for a temperature that is not positive.
    pub fn generate_cpu(
        &self,
        prompt: &[u32],
        opts: &GenerateOptions,
        on_token: &mut dyn FnMut(u32),
    ) -> Result<GenerateStats, ModelError> {
        self.generate_on::<f32>(prompt, opts, on_token)
    }

    /// [`LlamaModel::generate_cpu`] in float64: the reference generation.
    ///
    /// # Errors
    /// As [`LlamaModel::generate_cpu`].
    pub fn generate_reference(
        &self,
        prompt: &[u32],
        opts: &GenerateOptions,
        on_token: &mut dyn FnMut(u32),
    ) -> Result<GenerateStats, ModelError> {
        self.generate_on::<f64>(prompt, opts, on_token)
    }

    fn generate_on<T: CpuFloat>(
        &self,
        prompt: &[u32],
        opts: &GenerateOptions,
        on_token: &mut dyn FnMut(u32),
    ) -> Result<GenerateStats, ModelError> {
        let c = &self.config;
        check_generate(c, prompt, opts)?;
        let mut run = Generation::new(self.eos(), prompt, opts);
        let mut cache = CpuCache::<T>::new(c.layers);
        let mut next_input: Vec<u32> = prompt.to_vec();
        while !run.done() {
            let logits = if opts.use_cache {
                cpu::pass(c, self.weights(), &next_input, &mut cache, (false, None))?.logits
            } else {
                let seq = run.sequence();
                cpu::pass(
                    c,
                    self.weights(),
                    &seq,
                    &mut CpuCache::<T>::new(c.layers),
                    (false, None),
                )?
                .logits
            };
            let logits: Vec<f32> = logits.into_iter().map(|x| x.to64() as f32).collect();
            match run.accept(&logits, on_token) {
                Some(t) => next_input = vec![t],
                None => break,
            }
        }
        Ok(run.finish())
    }

    /// Uploads the weights to `ctx`'s device.
    ///
    /// # Errors
    /// [`ModelError::Attention`] when the device cannot hold a tensor or fails.
    pub fn upload(&self, ctx: &GpuContext) -> Result<LlamaGpu, ModelError> {
        LlamaGpu::upload(ctx, self)
    }
}

/// Checks a token sequence the model is to read: non-empty, every id in the vocabulary,
/// at most `context` tokens.
pub(crate) fn check_ids(c: &LlamaConfig, ids: &[u32]) -> Result<(), ModelError> {
    if ids.is_empty() {
        return Err(ModelError::input("--text", "gives no tokens"));
    }
    if ids.len() > c.context {
        return Err(ModelError::input(
            "--text",
            format!(
                "{} tokens exceed the model's {} positions",
                ids.len(),
                c.context
            ),
        ));
    }
    if let Some(bad) = ids.iter().find(|&&i| i as usize >= c.vocab) {
        return Err(ModelError::input(
            "ids",
            format!("id {bad} is outside the vocabulary of {}", c.vocab),
        ));
    }
    Ok(())
}

/// Checks a generation request: the prompt as [`check_ids`], the sampling options, and
/// room for every new token within the context.
pub(crate) fn check_generate(
    c: &LlamaConfig,
    prompt: &[u32],
    opts: &GenerateOptions,
) -> Result<(), ModelError> {
    check_ids(c, prompt)?;
    sample::check(&opts.sampling)?;
    let total = prompt.len().saturating_add(opts.max_new_tokens);
    if total > c.context {
        return Err(ModelError::input(
            "--max-new-tokens",
            format!(
                "{} prompt tokens + {} new ones exceed the model's {} positions",
                prompt.len(),
                opts.max_new_tokens,
                c.context
            ),
        ));
    }
    Ok(())
}

/// The bookkeeping of one generation run, shared by the CPU and GPU loops: sampling,
/// the stop rules and the clock.
pub(crate) struct Generation {
    prompt: Vec<u32>,
    generated: Vec<u32>,
    sampler: Sampler,
    opts: GenerateOptions,
    eos: Option<u32>,
    clock: Clock,
    prompt_seconds: Option<f64>,
    stopped: bool,
}

impl Generation {
    pub(crate) fn new(eos: Option<u32>, prompt: &[u32], opts: &GenerateOptions) -> Self {
        Self {
            prompt: prompt.to_vec(),
            generated: Vec::new(),
            sampler: Sampler::new(opts.sampling),
            opts: *opts,
            eos,
            clock: Clock::start(),
            prompt_seconds: None,
            stopped: opts.max_new_tokens == 0,
        }
    }

    pub(crate) fn done(&self) -> bool {
        self.stopped
    }

    /// The prompt and every token so far.
    pub(crate) fn sequence(&self) -> Vec<u32> {
        [&self.prompt[..], &self.generated[..]].concat()
    }

    /// Picks the next token from `logits`; returns it, or `None` when the run stops
    /// (end of sequence, or the token budget reached).
    pub(crate) fn accept(&mut self, logits: &[f32], on_token: &mut dyn FnMut(u32)) -> Option<u32> {
        let t = self.sampler.pick(logits);
        if self.prompt_seconds.is_none() {
            self.prompt_seconds = Some(self.clock.seconds());
        }
        if self.opts.stop_at_eos && Some(t) == self.eos {
            self.stopped = true;
            return None;
        }
        self.generated.push(t);
        on_token(t);
        if self.generated.len() >= self.opts.max_new_tokens {
            self.stopped = true;
            return None;
        }
        Some(t)
    }

    pub(crate) fn finish(self) -> GenerateStats {
        let prompt_seconds = self.prompt_seconds.unwrap_or(0.0);
        GenerateStats {
            prompt_tokens: self.prompt.len(),
            generated: self.generated,
            prompt_seconds,
            generate_seconds: (self.clock.seconds() - prompt_seconds).max(0.0),
        }
    }
}
