//! Sentence embeddings: sentences tokenized and checked, batched longest first (as
//! sentence-transformers batches), each batch one padded forward pass on the GPU with key
//! lengths per sentence (on a CPU adapter a batch may be cut into passes of similar
//! lengths, see [`plan_passes`]), then pooled over each sentence's real tokens as the
//! model's [`SentenceConfig`] says. The CPU path runs the float64 forward on each sentence alone
//! (padding cannot change a sentence's result, so the two agree).

use ndarray::{s, Array2};

use super::batch::{longest_first, plan_passes, PaddedBatch};
use super::pooling::{Pooling, SentenceConfig};
use super::{check_ids, cpu, gpu, BertGpu, BertModel};
use crate::model::cpu_float::CpuFloat;
use crate::model::ModelError;
use crate::GpuContext;

/// sentence-transformers' `encode` default.
pub const DEFAULT_EMBED_BATCH: usize = 32;

/// What a forward pass costs on a CPU adapter beyond its rows, in rows: MiniLM on
/// lavapipe (`cargo bench --bench embed`) takes about 16 ms a pass and 0.7 ms a row,
/// padding included, at any batch. There the sentences of a batch are split into passes
/// of similar lengths where the padding saved outweighs the passes added
/// ([`plan_passes`]); a GPU runs a batch's padding rows in parallel, so elsewhere each
/// batch is one pass.
const CPU_PASS_ROWS: usize = 24;

fn pass_rows(ctx: &GpuContext) -> Option<usize> {
    (ctx.adapter_info().device_type == wgpu::DeviceType::Cpu).then_some(CPU_PASS_ROWS)
}

fn check_batch(batch: usize) -> Result<(), ModelError> {
    if batch == 0 {
        return Err(ModelError::input("batch", "must be at least 1 sentence"));
    }
    Ok(())
}

fn no_sentences() -> ModelError {
    ModelError::input("sentences", "no sentences to embed")
}

impl BertModel {
    /// The sentence-transformers configuration embeddings follow.
    pub fn sentence_config(&self) -> &SentenceConfig {
        &self.sentence
    }

    /// Replaces the sentence-transformers configuration (for a model built with
    /// [`BertModel::from_parts`]).
    pub fn set_sentence_config(&mut self, config: SentenceConfig) {
        self.sentence = config;
    }

    /// The most tokens a sentence may have: the model's positions, and
    /// `max_seq_length` where sentence-transformers sets one.
    pub fn max_sentence_tokens(&self) -> usize {
        let positions = self.config.max_position_embeddings;
        self.sentence
            .max_seq_length
            .map_or(positions, |m| m.min(positions))
    }

    /// The token ids of one sentence, special tokens included.
    ///
    /// # Errors
    /// [`ModelError::Input`] naming `sentences` for an empty sentence, one the tokenizer
    /// rejects, or one longer than [`BertModel::max_sentence_tokens`] (refused, not cut).
    pub fn sentence_ids(&self, text: &str) -> Result<Vec<u32>, ModelError> {
        let tokens = self.tokenizer.encode(text).map_err(|e| match e {
            ModelError::Input { detail, .. } => ModelError::input("sentences", detail),
            other => other,
        })?;
        let max = self.max_sentence_tokens();
        if tokens.len() > max {
            let why = match self.sentence.max_seq_length {
                Some(m) if m <= self.config.max_position_embeddings => {
                    "max_seq_length in sentence_bert_config.json"
                }
                _ => "the model's positions",
            };
            return Err(ModelError::input(
                "sentences",
                format!(
                    "{} tokens exceed the {max} this model embeds ({why}); shorten the sentence",
                    tokens.len()
                ),
            ));
        }
        Ok(tokens.into_iter().map(|t| t.id).collect())
    }

    /// [`BertModel::sentence_ids`] of every sentence.
    ///
    /// # Errors
    /// [`ModelError::Input`] naming `sentences` for an empty list, or naming the first
    /// sentence (from 0) that [`BertModel::sentence_ids`] refuses.
    pub fn tokenize_sentences(&self, sentences: &[&str]) -> Result<Vec<Vec<u32>>, ModelError> {
        if sentences.is_empty() {
            return Err(no_sentences());
        }
        sentences
            .iter()
            .enumerate()
            .map(|(i, text)| {
                self.sentence_ids(text).map_err(|e| match e {
                    ModelError::Input { arg, detail } => {
                        ModelError::input(arg, format!("sentence {i}: {detail}"))
                    }
                    other => other,
                })
            })
            .collect()
    }

    /// The embeddings `(sentences, hidden)` of `sentences` on the GPU, at most `batch`
    /// sentences per forward pass (longest first; [`DEFAULT_EMBED_BATCH`] is
    /// sentence-transformers' default), row i for sentence i. `weights` is this model uploaded
    /// ([`BertModel::upload`]).
    ///
    /// # Errors
    /// As [`BertModel::tokenize_sentences`]; [`ModelError::Input`] naming `batch` for a
    /// batch of 0; [`ModelError::Attention`] when the device fails.
    pub async fn embed(
        &self,
        ctx: &GpuContext,
        weights: &BertGpu,
        sentences: &[&str],
        batch: usize,
    ) -> Result<Array2<f32>, ModelError> {
        check_batch(batch)?;
        let ids = self.tokenize_sentences(sentences)?;
        weights
            .embed_ids(ctx, &ids, self.sentence.pooling, batch)
            .await
    }

    /// The embeddings of `sentences` from the fast f32 CPU forward pass (`--backend cpu`),
    /// each sentence alone, pooled in float64.
    ///
    /// # Errors
    /// As [`BertModel::tokenize_sentences`]; [`ModelError::Attention`] when a forward
    /// pass's outputs do not fit in memory.
    pub fn embed_cpu(&self, sentences: &[&str]) -> Result<Array2<f64>, ModelError> {
        let ids = self.tokenize_sentences(sentences)?;
        self.embed_ids_cpu(&ids)
    }

    /// [`BertModel::embed_cpu`] from token ids.
    ///
    /// # Errors
    /// [`ModelError::Input`] for an empty list or a sentence that is empty, longer than the
    /// model's positions or holds an id outside its vocabulary.
    pub fn embed_ids_cpu(&self, sentences: &[Vec<u32>]) -> Result<Array2<f64>, ModelError> {
        self.embed_ids_on::<f32>(sentences)
    }

    /// The embeddings from the float64 CPU forward pass, pooled in float64: the reference
    /// [`BertModel::embed`] and [`BertModel::embed_ids_cpu`] are checked against.
    ///
    /// # Errors
    /// As [`BertModel::embed_ids_cpu`].
    pub fn embed_ids_reference(&self, sentences: &[Vec<u32>]) -> Result<Array2<f64>, ModelError> {
        self.embed_ids_on::<f64>(sentences)
    }

    fn embed_ids_on<T: CpuFloat + Into<f64>>(
        &self,
        sentences: &[Vec<u32>],
    ) -> Result<Array2<f64>, ModelError> {
        if sentences.is_empty() {
            return Err(no_sentences());
        }
        let hidden = self.config.hidden_size;
        let mut out = Array2::zeros((sentences.len(), hidden));
        for (i, ids) in sentences.iter().enumerate() {
            check_ids(&self.config, ids)?;
            let f = cpu::forward::<T>(&self.weights, &self.config, ids, (false, None), None)?;
            let e = self.sentence.pooling.apply(f.hidden.view());
            out.row_mut(i).assign(&ndarray::Array1::from(e));
        }
        Ok(out)
    }
}

impl BertGpu {
    /// The embeddings `(sentences, hidden)` of sentences given as token ids, pooled with
    /// `pooling`, at most `batch` per forward pass, longest first. Each forward pass pads
    /// its sentences to its longest and gives attention each sentence's length as its key
    /// length, so a sentence's embedding does not depend on its batch. On a CPU adapter,
    /// where padding rows cost as much as real ones, a batch is cut where lengths drop
    /// enough that the padding saved outweighs the extra passes.
    ///
    /// # Errors
    /// [`ModelError::Input`] for an empty list, a batch of 0, or a sentence that is empty,
    /// longer than the model's positions or holds an id outside its vocabulary; [`ModelError::Attention`] when the device fails.
    pub async fn embed_ids(
        &self,
        ctx: &GpuContext,
        sentences: &[Vec<u32>],
        pooling: Pooling,
        batch: usize,
    ) -> Result<Array2<f32>, ModelError> {
        self.embed_ids_planned(ctx, sentences, pooling, batch, pass_rows(ctx))
            .await
    }

    /// [`BertGpu::embed_ids`] with the cost of a pass, in rows, given: `None` makes each
    /// run of `batch` sentences one pass whatever the adapter. For
    /// tests, which must run padded passes on every adapter.
    ///
    /// # Errors
    /// As [`BertGpu::embed_ids`].
    #[doc(hidden)]
    pub async fn embed_ids_planned(
        &self,
        ctx: &GpuContext,
        sentences: &[Vec<u32>],
        pooling: Pooling,
        batch: usize,
        pass_rows: Option<usize>,
    ) -> Result<Array2<f32>, ModelError> {
        check_batch(batch)?;
        if sentences.is_empty() {
            return Err(no_sentences());
        }
        for ids in sentences {
            check_ids(&self.config, ids)?;
        }
        let hidden = self.config.hidden_size;
        let lens: Vec<usize> = sentences.iter().map(Vec::len).collect();
        let mut out = Array2::zeros((sentences.len(), hidden));
        let order = longest_first(&lens);
        let sorted: Vec<usize> = order.iter().map(|&i| lens[i]).collect();
        for pass in plan_passes(&sorted, batch, pass_rows) {
            let chunk = &order[pass];
            let members: Vec<&[u32]> = chunk.iter().map(|&i| sentences[i].as_slice()).collect();
            let tokens = PaddedBatch::new(&members);
            let want = gpu::Want::default();
            let rows = gpu::forward(ctx, &self.config, &self.weights, &tokens, want, None)
                .await?
                .hidden;
            for (b, &i) in chunk.iter().enumerate() {
                let first = b * tokens.len;
                let real = rows.slice(s![first..first + lens[i], ..]);
                let e = pooling.apply(real);
                out.row_mut(i).assign(
                    &e.into_iter()
                        .map(|v| v as f32)
                        .collect::<ndarray::Array1<_>>(),
                );
            }
        }
        Ok(out)
    }
}
